//! OpenTelemetry traces (`[tracing]`): with an endpoint configured, the daemon's spans (a
//! span per CRI call, `crate::server`'s `rpc`, and its steps under it) exported by OTLP/gRPC,
//! each call's span the child of the W3C trace context in its gRPC metadata (`traceparent`,
//! `tracestate`: what the kubelet's otelgrpc sends with KubeletTracing). Off (the default)
//! there is no exporter and no layer, and a call pays one atomic load: [`adopt_caller`] and
//! [`record_failure`] return at once.

use crate::config::{ConfigError, TracingConfig, SAMPLING_RATE_MAX};
use opentelemetry::propagation::{Extractor, TextMapPropagator};
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{Sampler, SdkTracerProvider};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tracing_subscriber::registry::LookupSpan;

/// Set once the layer is installed; read by every call.
static ON: AtomicBool = AtomicBool::new(false);

/// How long the exporter waits for the collector per batch, and shutdown for the last batch.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, thiserror::Error)]
pub enum OtelError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("tracing: the OTLP exporter for {endpoint}: {source}")]
    Exporter {
        endpoint: String,
        source: opentelemetry_otlp::ExporterBuildError,
    },
}

/// The exporting side, kept by `serve` until the daemon stops: [`Exporting::shutdown`] sends
/// what is still queued.
pub struct Exporting {
    provider: SdkTracerProvider,
}

impl Exporting {
    /// Exports the spans still queued (at most [`EXPORT_TIMEOUT`]) and stops the exporter.
    pub async fn shutdown(self) {
        ON.store(false, Ordering::Relaxed);
        let provider = self.provider;
        // The SDK's shutdown blocks on its exporting thread, whose gRPC channel runs on this
        // runtime: off the async workers.
        let done = tokio::task::spawn_blocking(move || provider.shutdown());
        match tokio::time::timeout(EXPORT_TIMEOUT + Duration::from_secs(1), done).await {
            Ok(Ok(Ok(()))) => {}
            Ok(Ok(Err(e))) => tracing::warn!(error = %e, "tracing: exporting the last spans"),
            Ok(Err(e)) => tracing::warn!(error = %e, "tracing: exporting the last spans"),
            Err(_) => tracing::warn!("tracing: the last spans were not exported in time"),
        }
    }
}

/// The layer that exports the daemon's spans, when `cfg` turns tracing on (inside the async
/// runtime: the gRPC channel is made on it, connecting at the first export). Which spans: the
/// daemon's and the image store's (every level but trace), and their warnings and errors as
/// span events; not the log's other events.
#[allow(clippy::type_complexity)]
pub fn layer<S>(
    cfg: &TracingConfig,
) -> Result<Option<(impl tracing_subscriber::Layer<S> + Send + Sync, Exporting)>, OtelError>
where
    S: tracing::Subscriber + for<'a> LookupSpan<'a> + Send + Sync,
{
    use opentelemetry_otlp::WithExportConfig;
    use tracing_subscriber::Layer;
    if !cfg.enabled() {
        return Ok(None);
    }
    cfg.validate()?;
    let endpoint = cfg.collector_uri()?;
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_tonic()
        .with_endpoint(endpoint.clone())
        .with_timeout(EXPORT_TIMEOUT)
        .build()
        .map_err(|source| OtelError::Exporter {
            endpoint: endpoint.clone(),
            source,
        })?;
    let ratio = cfg.sampling_rate_per_million as f64 / SAMPLING_RATE_MAX as f64;
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        // As the kubelet and containerd sample: the caller's decision where there is one.
        .with_sampler(Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(
            ratio,
        ))))
        .with_resource(
            opentelemetry_sdk::Resource::builder()
                .with_service_name(cfg.service_name.clone())
                .with_attribute(opentelemetry::KeyValue::new(
                    "service.version",
                    env!("CARGO_PKG_VERSION"),
                ))
                .build(),
        )
        .build();
    let tracer = provider.tracer("peapod");
    let ours =
        |target: &str| target.starts_with("peapod_daemon") || target.starts_with("peapod_image");
    let filter = tracing_subscriber::filter::filter_fn(move |m| {
        ours(m.target())
            && if m.is_span() {
                *m.level() <= tracing::Level::DEBUG
            } else {
                *m.level() <= tracing::Level::WARN
            }
    });
    let layer = tracing_opentelemetry::layer()
        .with_tracer(tracer)
        .with_location(false)
        .with_threads(false)
        .with_tracked_inactivity(false)
        .with_filter(filter);
    ON.store(true, Ordering::Relaxed);
    Ok(Some((layer, Exporting { provider })))
}

/// Whether spans are exported.
pub fn enabled() -> bool {
    ON.load(Ordering::Relaxed)
}

/// The gRPC metadata as the propagator reads it.
struct Metadata<'a>(&'a tonic::metadata::MetadataMap);

impl Extractor for Metadata<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0
            .keys()
            .filter_map(|k| match k {
                tonic::metadata::KeyRef::Ascii(k) => Some(k.as_str()),
                tonic::metadata::KeyRef::Binary(_) => None,
            })
            .collect()
    }
}

/// The CRI service of a method (as gRPC names its span: `runtime.v1.RuntimeService/Method`).
fn service_of(method: &str) -> &'static str {
    match method {
        "ListImages" | "StreamImages" | "ImageStatus" | "PullImage" | "RemoveImage"
        | "ImageFsInfo" => "runtime.v1.ImageService",
        _ => "runtime.v1.RuntimeService",
    }
}

/// When tracing is on: names the call's `span` as gRPC does, marks it a server span and makes
/// it the child of the caller's trace context in `metadata` (none, or a malformed one: the
/// span is a root, sampled at `sampling_rate_per_million`). `span` must not have been entered
/// yet, and must declare the fields `otel.name` and `otel.kind`. Off, returns at once.
pub fn adopt_caller(span: &tracing::Span, method: &str, metadata: &tonic::metadata::MetadataMap) {
    if !enabled() || span.is_disabled() {
        return;
    }
    use tracing_opentelemetry::OpenTelemetrySpanExt;
    let service = service_of(method);
    span.record("otel.name", format!("{service}/{method}"));
    span.record("otel.kind", "server");
    span.set_attribute("rpc.system", "grpc");
    span.set_attribute("rpc.service", service);
    span.set_attribute("rpc.method", method.to_string());
    let parent = TraceContextPropagator::new().extract(&Metadata(metadata));
    if let Err(e) = span.set_parent(parent) {
        tracing::debug!(error = %e, "tracing: the call's trace context not adopted");
    }
}

/// When tracing is on: marks the call's span failed, with the status's message.
pub fn record_failure(span: &tracing::Span, message: &str) {
    if !enabled() || span.is_disabled() {
        return;
    }
    use tracing_opentelemetry::OpenTelemetrySpanExt;
    span.set_status(opentelemetry::trace::Status::error(message.to_string()));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn methods_are_named_by_their_service() {
        assert_eq!(service_of("PullImage"), "runtime.v1.ImageService");
        assert_eq!(service_of("ImageFsInfo"), "runtime.v1.ImageService");
        assert_eq!(service_of("RunPodSandbox"), "runtime.v1.RuntimeService");
    }

    #[test]
    fn the_trace_context_is_read_from_grpc_metadata() {
        use opentelemetry::trace::TraceContextExt;
        let mut md = tonic::metadata::MetadataMap::new();
        md.insert(
            "traceparent",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
                .parse()
                .unwrap(),
        );
        md.insert("tracestate", "k8s=1".parse().unwrap());
        let cx = TraceContextPropagator::new().extract(&Metadata(&md));
        let sc = cx.span().span_context().clone();
        assert!(sc.is_remote() && sc.is_sampled());
        assert_eq!(
            sc.trace_id().to_string(),
            "4bf92f3577b34da6a3ce929d0e0e4736"
        );
        assert_eq!(sc.span_id().to_string(), "00f067aa0ba902b7");
        assert_eq!(sc.trace_state().header(), "k8s=1");
        // Malformed: no parent.
        md.insert("traceparent", "00-zz-00f067aa0ba902b7-01".parse().unwrap());
        let cx = TraceContextPropagator::new().extract(&Metadata(&md));
        assert!(!cx.span().span_context().is_valid());
    }

    #[tokio::test]
    async fn off_makes_no_layer() {
        let layer = layer::<tracing_subscriber::Registry>(&TracingConfig::default()).unwrap();
        assert!(layer.is_none());
        assert!(!enabled());
    }

    #[tokio::test]
    async fn a_bad_endpoint_is_refused_naming_the_field() {
        let cfg = TracingConfig {
            endpoint: "collector".into(),
            ..Default::default()
        };
        let err = match layer::<tracing_subscriber::Registry>(&cfg) {
            Err(e) => e.to_string(),
            Ok(_) => panic!("a layer for an endpoint without a port"),
        };
        assert!(
            err.contains("tracing.endpoint \"collector\": no port"),
            "{err}"
        );
        assert!(!enabled());
    }
}
