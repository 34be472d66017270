//! peapod's pod supervisor: the kubelet's pod logic as a CRI client.
pub mod admission;
pub mod cgroup;
pub mod cri;
pub mod cri_config;
pub mod defaults;
pub mod env;
pub mod grpc_health;
pub mod manifest;
pub mod probe;
pub mod quantity;
pub mod record;
pub mod resources;
pub mod settings;
pub mod status;
pub mod store;
pub mod validate;
pub mod volumes;
