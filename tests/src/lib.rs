//! Support for peapod's integration tests: a real daemon per test, with its own directories,
//! socket, CNI bridge, subnet and cgroup parent, driven over its CRI socket.

pub mod cluster;
pub mod containerd;
pub mod daemon;
pub mod fault_registry;
pub mod fixtures;
pub mod host;
pub mod installed;
pub mod jaeger;
pub mod kube;
pub mod pods;
pub mod registry_clients;
pub mod slot;

pub use daemon::{DaemonOptions, TestDaemon};

/// How many times slower than this machine the tests run where they run now:
/// `PEAPOD_E2E_TIME_SCALE` (the emulated guest of `scripts/vm test` sets it), else 1. The
/// harness's own waits are multiplied by it, so that a bound set for a real CPU still holds
/// where every process start costs tens of milliseconds; no test asserts a duration.
pub fn time_scale() -> u32 {
    std::env::var("PEAPOD_E2E_TIME_SCALE")
        .ok()
        .and_then(|v| v.parse::<u32>().ok())
        .filter(|&n| n >= 1)
        .unwrap_or(1)
}

/// `d` stretched by [`time_scale`].
pub fn scaled(d: std::time::Duration) -> std::time::Duration {
    d * time_scale()
}
pub use peapod_uds::client::Cri;
