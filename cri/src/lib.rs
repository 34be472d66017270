//! peapod, the daemon: a Kubernetes CRI v1 runtime.
//!
//! `server/` is the gRPC surface (thin: validate, call the core, map errors to `Status`);
//! the core is [`runtime::Runtime`] with one module per concern: `sandbox/` (pods),
//! `network/` (netns pinning, CNI, resolv.conf/hosts), `store/` (persisted records),
//! `shim` (talking to the per-pod `peapod-shim`), `oci` (runtime-spec generation).

pub mod cgroups;
pub mod client;
pub mod config;
pub mod container;
pub mod daemon;
pub mod error;
pub mod events;
pub mod exec;
pub mod host_ops;
pub mod ids;
pub mod images;
pub mod network;
pub mod oci;
pub mod oom;
pub mod paths;
pub mod pause;
pub mod runtime;
pub mod sandbox;
pub mod server;
pub mod shim;
pub mod stats;
pub mod store;
#[cfg(test)]
pub mod testing;

pub use error::{Error, Result};
