//! Support for peapod's integration tests: a real daemon per test, with its own directories,
//! socket, CNI bridge, subnet and cgroup parent, driven over its CRI socket.

pub mod cluster;
pub mod containerd;
pub mod daemon;
pub mod fault_registry;
pub mod fixtures;
pub mod host;
pub mod kube;
pub mod pods;
pub mod slot;

pub use daemon::{DaemonOptions, TestDaemon};
pub use peapod_uds::client::Cri;
