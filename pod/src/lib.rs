//! peapod's pod supervisor: the kubelet's pod logic as a CRI client.
pub mod admission;
pub mod defaults;
pub mod manifest;
pub mod quantity;
pub mod resources;
pub mod validate;
