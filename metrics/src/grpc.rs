//! A tower layer on the gRPC server: counts every call by service, method and status code and
//! times it, from its arrival to the end of its response body (so a streaming call is timed
//! to its end, and a call whose client went away counts as Canceled).

use crate::Metrics;
use http::{HeaderMap, Request, Response};
use http_body::{Body, Frame, SizeHint};
use peapod_host::sync::LockUnpoisoned;
use std::collections::HashSet;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Instant;

/// How many distinct service/method pairs get their own labels; past that (a client sending
/// made-up paths) they are counted as `unknown`, so a client cannot grow the label set.
const MAX_METHODS: usize = 256;

/// The gRPC status code names as go-grpc-prometheus writes them.
fn code_name(code: u32) -> &'static str {
    match code {
        0 => "OK",
        1 => "Canceled",
        2 => "Unknown",
        3 => "InvalidArgument",
        4 => "DeadlineExceeded",
        5 => "NotFound",
        6 => "AlreadyExists",
        7 => "PermissionDenied",
        8 => "ResourceExhausted",
        9 => "FailedPrecondition",
        10 => "Aborted",
        11 => "OutOfRange",
        12 => "Unimplemented",
        13 => "Internal",
        14 => "Unavailable",
        15 => "DataLoss",
        16 => "Unauthenticated",
        _ => "Unknown",
    }
}

fn grpc_status(headers: &HeaderMap) -> Option<u32> {
    headers.get("grpc-status")?.to_str().ok()?.parse().ok()
}

/// Bounded set of method labels seen so far.
#[derive(Default)]
struct MethodNames {
    seen: Mutex<HashSet<String>>,
}

impl MethodNames {
    /// ("runtime.v1.RuntimeService", "Version") from "/runtime.v1.RuntimeService/Version".
    fn labels(&self, path: &str) -> (String, String) {
        let unknown = || ("unknown".to_string(), "unknown".to_string());
        let Some((service, method)) = path.trim_start_matches('/').split_once('/') else {
            return unknown();
        };
        let ok = |s: &str| {
            !s.is_empty()
                && s.len() <= 128
                && s.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_')
        };
        if !ok(service) || !ok(method) {
            return unknown();
        }
        let mut seen = self.seen.lock_unpoisoned();
        if !seen.contains(path) {
            if seen.len() >= MAX_METHODS {
                return unknown();
            }
            seen.insert(path.to_string());
        }
        (service.to_string(), method.to_string())
    }
}

#[derive(Clone)]
pub struct GrpcMetricsLayer {
    metrics: Arc<Metrics>,
    names: Arc<MethodNames>,
}

impl GrpcMetricsLayer {
    pub fn new(metrics: Arc<Metrics>) -> Self {
        GrpcMetricsLayer {
            metrics,
            names: Arc::default(),
        }
    }
}

impl<S> tower::Layer<S> for GrpcMetricsLayer {
    type Service = GrpcMetricsService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        GrpcMetricsService {
            inner,
            metrics: self.metrics.clone(),
            names: self.names.clone(),
        }
    }
}

#[derive(Clone)]
pub struct GrpcMetricsService<S> {
    inner: S,
    metrics: Arc<Metrics>,
    names: Arc<MethodNames>,
}

/// Records one call exactly once: with the code seen, or as Canceled when dropped first.
struct Recorder {
    metrics: Arc<Metrics>,
    service: String,
    method: String,
    start: Instant,
    done: bool,
}

impl Recorder {
    fn finish(&mut self, code: u32) {
        if self.done {
            return;
        }
        self.done = true;
        let seconds = self.start.elapsed().as_secs_f64();
        let labels = [self.service.as_str(), self.method.as_str()];
        self.metrics
            .grpc_handled
            .with_label_values(&[labels[0], labels[1], code_name(code)])
            .inc();
        self.metrics
            .grpc_seconds
            .with_label_values(&labels)
            .observe(seconds);
        if code == 0
            && self.service == "runtime.v1.RuntimeService"
            && self.method == "RunPodSandbox"
        {
            self.metrics.pod_startup_seconds.observe(seconds);
        }
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        self.finish(1);
    }
}

impl<S, ReqBody, ResBody> tower::Service<Request<ReqBody>> for GrpcMetricsService<S>
where
    S: tower::Service<Request<ReqBody>, Response = Response<ResBody>>,
    S::Future: Send + 'static,
    ResBody: Body + Unpin,
{
    type Response = Response<MetricsBody<ResBody>>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<ReqBody>) -> Self::Future {
        let (service, method) = self.names.labels(req.uri().path());
        let mut recorder = Recorder {
            metrics: self.metrics.clone(),
            service,
            method,
            start: Instant::now(),
            done: false,
        };
        let fut = self.inner.call(req);
        Box::pin(async move {
            match fut.await {
                Ok(resp) => {
                    // A "trailers-only" response (an error before any message) carries its
                    // status in the headers and has an empty body.
                    if let Some(code) = grpc_status(resp.headers()) {
                        recorder.finish(code);
                    }
                    let (parts, body) = resp.into_parts();
                    Ok(Response::from_parts(
                        parts,
                        MetricsBody {
                            inner: body,
                            recorder: Some(recorder),
                        },
                    ))
                }
                Err(e) => {
                    recorder.finish(13);
                    Err(e)
                }
            }
        })
    }
}

/// The response body, watched for the trailers that carry the call's status.
pub struct MetricsBody<B> {
    inner: B,
    recorder: Option<Recorder>,
}

impl<B: Body + Unpin> Body for MetricsBody<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let this = &mut *self;
        let polled = Pin::new(&mut this.inner).poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(code) = frame.trailers_ref().and_then(grpc_status) {
                    if let Some(mut r) = this.recorder.take() {
                        r.finish(code);
                    }
                }
            }
            Poll::Ready(Some(Err(_))) => {
                if let Some(mut r) = this.recorder.take() {
                    r.finish(13);
                }
            }
            Poll::Ready(None) => {
                // Ended without trailers: not a well-formed gRPC response.
                if let Some(mut r) = this.recorder.take() {
                    r.finish(2);
                }
            }
            Poll::Pending => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use http_body_util::{BodyExt, Full, StreamBody};
    use tower::{Layer, Service, ServiceExt};

    type TestBody = Pin<Box<dyn Body<Data = Bytes, Error = std::convert::Infallible> + Send>>;

    fn ok_with_trailers(code: &str) -> Response<TestBody> {
        let mut trailers = HeaderMap::new();
        trailers.insert("grpc-status", code.parse().unwrap());
        let frames: Vec<Result<Frame<Bytes>, std::convert::Infallible>> = vec![
            Ok(Frame::data(Bytes::from_static(b"\0\0\0\0\0"))),
            Ok(Frame::trailers(trailers)),
        ];
        Response::new(Box::pin(StreamBody::new(tokio_stream::iter(frames))))
    }

    fn trailers_only(code: &str) -> Response<TestBody> {
        let mut resp: Response<TestBody> = Response::new(Box::pin(Full::new(Bytes::new())));
        resp.headers_mut()
            .insert("grpc-status", code.parse().unwrap());
        resp
    }

    async fn call(
        layer: &GrpcMetricsLayer,
        path: &'static str,
        resp: Response<TestBody>,
    ) -> Response<MetricsBody<TestBody>> {
        let cell = Mutex::new(Some(resp));
        let inner = tower::service_fn(move |_req: Request<()>| {
            let r = cell.lock().unwrap().take().unwrap();
            async move { Ok::<_, std::convert::Infallible>(r) }
        });
        let mut svc = layer.layer(inner);
        let req = Request::builder().uri(path).body(()).unwrap();
        svc.ready().await.unwrap().call(req).await.unwrap()
    }

    fn count(m: &Metrics, service: &str, method: &str, code: &str) -> u64 {
        m.grpc_handled
            .with_label_values(&[service, method, code])
            .get()
    }

    #[tokio::test]
    async fn counts_by_code_from_trailers_headers_and_cancellation() {
        let m = Metrics::new().unwrap();
        let layer = GrpcMetricsLayer::new(m.clone());
        let svc = "runtime.v1.RuntimeService";

        let resp = call(
            &layer,
            "/runtime.v1.RuntimeService/Version",
            ok_with_trailers("0"),
        )
        .await;
        // Nothing is counted until the body (and its trailers) has been sent.
        assert_eq!(count(&m, svc, "Version", "OK"), 0);
        resp.into_body().collect().await.unwrap();
        assert_eq!(count(&m, svc, "Version", "OK"), 1);

        let resp = call(
            &layer,
            "/runtime.v1.RuntimeService/ContainerStatus",
            trailers_only("5"),
        )
        .await;
        drop(resp);
        assert_eq!(count(&m, svc, "ContainerStatus", "NotFound"), 1);

        // The client went away before the trailers.
        let resp = call(
            &layer,
            "/runtime.v1.RuntimeService/RunPodSandbox",
            ok_with_trailers("0"),
        )
        .await;
        drop(resp);
        assert_eq!(count(&m, svc, "RunPodSandbox", "Canceled"), 1);
        assert_eq!(m.pod_startup_seconds.get_sample_count(), 0);

        let resp = call(
            &layer,
            "/runtime.v1.RuntimeService/RunPodSandbox",
            ok_with_trailers("0"),
        )
        .await;
        resp.into_body().collect().await.unwrap();
        assert_eq!(m.pod_startup_seconds.get_sample_count(), 1);
        assert_eq!(
            m.grpc_seconds
                .with_label_values(&[svc, "RunPodSandbox"])
                .get_sample_count(),
            2
        );
    }

    #[test]
    fn labels_are_bounded() {
        let names = MethodNames::default();
        assert_eq!(
            names.labels("/runtime.v1.ImageService/PullImage"),
            ("runtime.v1.ImageService".into(), "PullImage".into())
        );
        assert_eq!(
            names.labels("/no-method"),
            ("unknown".into(), "unknown".into())
        );
        assert_eq!(names.labels("/a b/c"), ("unknown".into(), "unknown".into()));
        for i in 0..MAX_METHODS + 10 {
            let _ = names.labels(&format!("/svc/M{i}"));
        }
        assert_eq!(
            names.labels("/svc/Fresh"),
            ("unknown".into(), "unknown".into())
        );
        // Seen before the limit: still labelled.
        assert_eq!(names.labels("/svc/M3"), ("svc".into(), "M3".into()));
    }
}
