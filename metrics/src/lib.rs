//! peapod's Prometheus metrics: what the daemon counts, the tower layer that times every gRPC
//! call, and the HTTP listener that serves `/metrics` on `metrics.address`.
//!
//! The names follow what dashboards already know: `grpc_server_handled_total` and
//! `grpc_server_handling_seconds` as go-grpc-prometheus (containerd, CRI-O) exports them, and
//! `peapod_*` for the runtime's own figures. The exposition is Prometheus' text format 0.0.4,
//! written by the `prometheus` crate's encoder.
//!
//! Counters and histograms are updated where things happen (the gRPC layer, image pulls);
//! gauges of what exists now (pods, containers by state, shims) are read at scrape time from a
//! [`StateSource`], so they can never drift from the daemon's tables.

mod grpc;
mod http;

pub use grpc::{GrpcMetricsLayer, GrpcMetricsService};
pub use http::serve;

use prometheus::{
    Encoder, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGaugeVec, Opts,
    Registry, TextEncoder,
};
use std::collections::BTreeMap;
use std::sync::Arc;

/// What exists right now, read at each scrape.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct StateSnapshot {
    /// Pod sandboxes by CRI state name (SANDBOX_READY, SANDBOX_NOTREADY).
    pub pods: BTreeMap<String, i64>,
    /// Containers by CRI state name (CONTAINER_CREATED, CONTAINER_RUNNING, …).
    pub containers: BTreeMap<String, i64>,
    /// Live per-pod shims.
    pub shims: i64,
}

/// Whatever can tell the current pods, containers and shims (the daemon's tables).
pub trait StateSource: Send + Sync {
    fn snapshot(&self) -> StateSnapshot;
}

/// Latency buckets for gRPC calls: 1 ms to about 2 min (a pull or a slow CNI).
const RPC_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0,
];
/// Pod start-up: tens of milliseconds (peapod) to tens of seconds (a slow network plugin).
const POD_STARTUP_BUCKETS: &[f64] = &[
    0.025, 0.05, 0.075, 0.1, 0.15, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];
const PULL_BUCKETS: &[f64] = &[
    0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
];

/// Every metric the daemon exports.
pub struct Metrics {
    registry: Registry,
    pub(crate) grpc_handled: IntCounterVec,
    pub(crate) grpc_seconds: HistogramVec,
    pub(crate) pod_startup_seconds: Histogram,
    image_pull_bytes: IntCounter,
    image_pull_seconds: Histogram,
    pods: IntGaugeVec,
    containers: IntGaugeVec,
    shims: prometheus::IntGauge,
}

/// Building a metric fails only on an invalid name or a duplicate registration, both
/// programming errors caught by the unit tests; never on anything a client sends.
#[derive(Debug, thiserror::Error)]
#[error("register metric: {0}")]
pub struct RegisterError(#[from] prometheus::Error);

impl Metrics {
    pub fn new() -> Result<Arc<Metrics>, RegisterError> {
        let registry = Registry::new();
        let grpc_handled = IntCounterVec::new(
            Opts::new(
                "grpc_server_handled_total",
                "gRPC calls completed on the server, by service, method and status code.",
            ),
            &["grpc_service", "grpc_method", "grpc_code"],
        )?;
        let grpc_seconds = HistogramVec::new(
            HistogramOpts::new(
                "grpc_server_handling_seconds",
                "Time from a gRPC call's arrival to the end of its response, by method.",
            )
            .buckets(RPC_BUCKETS.to_vec()),
            &["grpc_service", "grpc_method"],
        )?;
        let pod_startup_seconds = Histogram::with_opts(
            HistogramOpts::new(
                "peapod_pod_startup_seconds",
                "Duration of successful RunPodSandbox calls (network, shim and pause ready).",
            )
            .buckets(POD_STARTUP_BUCKETS.to_vec()),
        )?;
        let image_pull_bytes = IntCounter::new(
            "peapod_image_pull_bytes_total",
            "Size of the images pulled: config and layers as their manifests declare them, \
             layers already present included.",
        )?;
        let image_pull_seconds = Histogram::with_opts(
            HistogramOpts::new(
                "peapod_image_pull_seconds",
                "Duration of successful image pulls.",
            )
            .buckets(PULL_BUCKETS.to_vec()),
        )?;
        let pods = IntGaugeVec::new(
            Opts::new("peapod_pod_sandboxes", "Pod sandboxes by state."),
            &["state"],
        )?;
        let containers = IntGaugeVec::new(
            Opts::new("peapod_containers", "Containers by state."),
            &["state"],
        )?;
        let shims = prometheus::IntGauge::new("peapod_shims", "Live per-pod shims.")?;
        registry.register(Box::new(grpc_handled.clone()))?;
        registry.register(Box::new(grpc_seconds.clone()))?;
        registry.register(Box::new(pod_startup_seconds.clone()))?;
        registry.register(Box::new(image_pull_bytes.clone()))?;
        registry.register(Box::new(image_pull_seconds.clone()))?;
        registry.register(Box::new(pods.clone()))?;
        registry.register(Box::new(containers.clone()))?;
        registry.register(Box::new(shims.clone()))?;
        Ok(Arc::new(Metrics {
            registry,
            grpc_handled,
            grpc_seconds,
            pod_startup_seconds,
            image_pull_bytes,
            image_pull_seconds,
            pods,
            containers,
            shims,
        }))
    }

    /// A finished image pull of `bytes` that took `seconds`.
    pub fn record_image_pull(&self, bytes: u64, seconds: f64) {
        self.image_pull_bytes.inc_by(bytes);
        self.image_pull_seconds.observe(seconds);
    }

    /// The text exposition, with the state gauges read from `state` first.
    pub fn render(&self, state: Option<&dyn StateSource>) -> String {
        if let Some(state) = state {
            let snap = state.snapshot();
            self.pods.reset();
            for (s, n) in &snap.pods {
                self.pods.with_label_values(&[s.as_str()]).set(*n);
            }
            self.containers.reset();
            for (s, n) in &snap.containers {
                self.containers.with_label_values(&[s.as_str()]).set(*n);
            }
            self.shims.set(snap.shims);
        }
        let mut out = Vec::new();
        // Encoding into a Vec fails only on a metric family the registry itself built
        // inconsistently; an empty page is the honest answer then.
        if let Err(e) = TextEncoder::new().encode(&self.registry.gather(), &mut out) {
            tracing::warn!(error = %e, "encode metrics");
        }
        String::from_utf8_lossy(&out).into_owned()
    }
}

/// The content type of [`Metrics::render`]'s output.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

#[cfg(test)]
mod tests {
    use super::*;

    struct Fixed(StateSnapshot);
    impl StateSource for Fixed {
        fn snapshot(&self) -> StateSnapshot {
            self.0.clone()
        }
    }

    #[test]
    fn render_has_every_family_and_state_gauges_follow_the_source() {
        let m = Metrics::new().unwrap();
        m.record_image_pull(1234, 0.5);
        m.pod_startup_seconds.observe(0.07);
        let mut snap = StateSnapshot::default();
        snap.pods.insert("SANDBOX_READY".into(), 2);
        snap.containers.insert("CONTAINER_RUNNING".into(), 3);
        snap.shims = 2;
        let text = m.render(Some(&Fixed(snap.clone())));
        for line in [
            "peapod_image_pull_bytes_total 1234",
            "peapod_image_pull_seconds_count 1",
            "peapod_pod_startup_seconds_bucket{le=\"0.075\"} 1",
            "peapod_pod_sandboxes{state=\"SANDBOX_READY\"} 2",
            "peapod_containers{state=\"CONTAINER_RUNNING\"} 3",
            "peapod_shims 2",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} missing in\n{text}");
        }
        // A state that disappears is no longer reported.
        snap.pods.clear();
        let text = m.render(Some(&Fixed(snap)));
        assert!(!text.contains("SANDBOX_READY"), "{text}");
    }
}
