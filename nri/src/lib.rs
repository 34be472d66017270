//! NRI (Node Resource Interface, containerd/nri) for peapod.
//!
//! - `api`: the NRI messages (our `proto/nri.proto`, wire-compatible with containerd/nri);
//! - `wire`: ttrpc calls both ways over the multiplexed plugin connection;
//! - `runtime`: the runtime side (socket, registration, synchronisation, ordered events);
//! - `adjust`: merging the plugins' container adjustments, with conflicts refused;
//! - `stub`: the plugin side, for tests and small plugins.

pub mod api {
    include!(concat!(env!("OUT_DIR"), "/nri.pkg.api.v1alpha1.rs"));
}
mod ttrpc_pb {
    include!(concat!(env!("OUT_DIR"), "/ttrpc.rs"));
}
pub mod adjust;
pub mod runtime;
#[cfg(test)]
mod runtime_tests;
pub mod stub;
pub mod wire;

pub use runtime::{Error, Runtime, Settings, Updater};
