//! The daemon's side of `/metrics`: the state gauges read from the record tables at each
//! scrape (the counters and histograms live in `peapod-metrics` and its gRPC layer).

use crate::daemon::Daemon;
use crate::store::to_cri::{container_state, sandbox_state};
use peapod_metrics::{StateSnapshot, StateSource};
use std::sync::Arc;

pub struct DaemonState(pub Arc<Daemon>);

impl StateSource for DaemonState {
    fn snapshot(&self) -> StateSnapshot {
        let mut snap = StateSnapshot::default();
        for rec in self.0.sandboxes.list(None) {
            let state = sandbox_state(rec.state).as_str_name().to_string();
            *snap.pods.entry(state).or_default() += 1;
        }
        for rec in self.0.containers.list(None) {
            let state = container_state(rec.state).as_str_name().to_string();
            *snap.containers.entry(state).or_default() += 1;
        }
        // Every running shim serves one socket in <state>/s; it removes it when it exits.
        snap.shims = std::fs::read_dir(self.0.config.state.join("s"))
            .map(|d| d.flatten().count() as i64)
            .unwrap_or(0);
        snap
    }
}
