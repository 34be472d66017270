//! The client's deadline (the `grpc-timeout` header) answered with DEADLINE_EXCEEDED.
//!
//! tonic's server enforces `grpc-timeout` itself, but when its timer wins it answers CANCELLED
//! ("Timeout expired": tonic maps its `TimeoutExpired` to `Code::Cancelled`). gRPC says a call
//! past its deadline ends with DEADLINE_EXCEEDED, as grpc-go servers (containerd, CRI-O) answer,
//! and critest's "public image should timeout if requested" (cri-tools v1.37) checks for it: a
//! PullImage with a 1 ms deadline whose CANCELLED reached the client before its own timer
//! fired.
//!
//! [`DeadlineLayer`] goes into `tonic::transport::Server::layer`, that is inside tonic's timeout.
//! tonic calls the inner service (starting this layer's timer) before it starts its own timer
//! for the same header, and polls the inner future first, so this layer's answer always comes
//! first. What the call was doing is dropped at the deadline either way, as tonic does:
//! lifecycle calls that must finish run detached from the request (daemon/src/detached.rs).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

/// Adds [`Deadline`] to a service.
#[derive(Debug, Clone, Copy, Default)]
pub struct DeadlineLayer;

impl<S> tower::Layer<S> for DeadlineLayer {
    type Service = Deadline<S>;

    fn layer(&self, inner: S) -> Deadline<S> {
        Deadline { inner }
    }
}

/// Ends a call at its `grpc-timeout` with a DEADLINE_EXCEEDED status (trailers only).
#[derive(Debug, Clone)]
pub struct Deadline<S> {
    inner: S,
}

impl<S, ReqBody, ResBody> tower::Service<http::Request<ReqBody>> for Deadline<S>
where
    S: tower::Service<http::Request<ReqBody>, Response = http::Response<ResBody>>,
    S::Future: Send + 'static,
    ResBody: Default,
{
    type Response = http::Response<ResBody>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<ReqBody>) -> Self::Future {
        let timeout = req
            .headers()
            .get("grpc-timeout")
            .and_then(|v| parse_grpc_timeout(v.as_bytes()));
        let call = self.inner.call(req);
        let Some(timeout) = timeout else {
            return Box::pin(call);
        };
        // The timer starts here, before the call's future is first polled: tonic starts its
        // own only after this returns.
        let timed = tokio::time::timeout(timeout, call);
        Box::pin(async move {
            match timed.await {
                Ok(answer) => answer,
                Err(_) => Ok(tonic::Status::deadline_exceeded(format!(
                    "deadline exceeded: the client's deadline of {timeout:?} passed"
                ))
                .into_http()),
            }
        })
    }
}

/// `grpc-timeout`: at most 8 ASCII digits and a unit (H, M, S, m, u, n), per the gRPC HTTP/2
/// protocol; anything else is no deadline (as tonic treats it).
pub fn parse_grpc_timeout(value: &[u8]) -> Option<Duration> {
    let (unit, digits) = value.split_last()?;
    if digits.is_empty() || digits.len() > 8 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let n: u64 = std::str::from_utf8(digits).ok()?.parse().ok()?;
    Some(match unit {
        b'H' => Duration::from_secs(n * 3600),
        b'M' => Duration::from_secs(n * 60),
        b'S' => Duration::from_secs(n),
        b'm' => Duration::from_millis(n),
        b'u' => Duration::from_micros(n),
        b'n' => Duration::from_nanos(n),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::convert::Infallible;

    /// A RuntimeService whose every call takes a minute.
    #[derive(Clone)]
    struct Slow;

    impl tonic::server::NamedService for Slow {
        const NAME: &'static str = "runtime.v1.RuntimeService";
    }

    impl tower::Service<http::Request<tonic::body::Body>> for Slow {
        type Response = http::Response<tonic::body::Body>;
        type Error = Infallible;
        type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, _: http::Request<tonic::body::Body>) -> Self::Future {
            Box::pin(async {
                tokio::time::sleep(Duration::from_secs(60)).await;
                Ok(tonic::Status::unavailable("too late").into_http())
            })
        }
    }

    /// The grpc-status a call with a 1 ms deadline gets from a tonic server on a unix socket,
    /// with or without the layer. The call is made with bare HTTP/2 (hyper): a tonic client
    /// would enforce the deadline itself and answer CANCELLED before the server does.
    async fn code_at_deadline(with_layer: bool) -> String {
        use http_body_util::BodyExt;
        let dir = std::env::temp_dir().join(format!(
            "peapod-uds-deadline-{}-{with_layer}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let socket = dir.join("s.sock");
        let incoming = crate::incoming(tokio::net::UnixListener::bind(&socket).unwrap());
        let server = if with_layer {
            tokio::spawn(
                tonic::transport::Server::builder()
                    .layer(DeadlineLayer)
                    .add_service(Slow)
                    .serve_with_incoming(incoming),
            )
        } else {
            tokio::spawn(
                tonic::transport::Server::builder()
                    .add_service(Slow)
                    .serve_with_incoming(incoming),
            )
        };
        let stream = tokio::net::UnixStream::connect(&socket).await.unwrap();
        let (mut sender, conn) = hyper::client::conn::http2::handshake(
            hyper_util::rt::TokioExecutor::new(),
            hyper_util::rt::TokioIo::new(stream),
        )
        .await
        .unwrap();
        tokio::spawn(conn);
        // An empty VersionRequest: no compression flag, length 0.
        let req = http::Request::post("http://localhost/runtime.v1.RuntimeService/Version")
            .header("content-type", "application/grpc")
            .header("te", "trailers")
            .header("grpc-timeout", "1m")
            .body(http_body_util::Full::new(bytes::Bytes::from_static(
                &[0; 5],
            )))
            .unwrap();
        let started = std::time::Instant::now();
        let resp = sender.send_request(req).await.unwrap();
        // Trailers-only (an error before any message): the status is in the headers.
        let code = match resp.headers().get("grpc-status") {
            Some(code) => code.to_str().unwrap().to_string(),
            None => {
                let body = resp.into_body().collect().await.unwrap();
                let trailers = body.trailers().cloned().unwrap_or_default();
                trailers["grpc-status"].to_str().unwrap().to_string()
            }
        };
        assert!(started.elapsed() < Duration::from_secs(10));
        server.abort();
        let _ = std::fs::remove_dir_all(&dir);
        code
    }

    #[tokio::test]
    async fn a_call_past_its_deadline_ends_deadline_exceeded() {
        assert_eq!(code_at_deadline(true).await, "4"); // DEADLINE_EXCEEDED
    }

    /// Why the layer is there: without it tonic's own timer answers, with CANCELLED. (Should
    /// a tonic release answer DEADLINE_EXCEEDED itself, this fails and the layer can go.)
    #[tokio::test]
    async fn tonic_alone_answers_cancelled() {
        assert_eq!(code_at_deadline(false).await, "1"); // CANCELLED
    }

    /// A call that ends in time is the service's answer, untouched.
    #[tokio::test]
    async fn a_call_in_time_passes_through() {
        use tower::{Layer, Service, ServiceExt};
        let inner = tower::service_fn(|_: http::Request<()>| async {
            Ok::<_, Infallible>(http::Response::new(String::from("answer")))
        });
        let mut svc = DeadlineLayer.layer(inner);
        let req = http::Request::builder()
            .header("grpc-timeout", "10S")
            .body(())
            .unwrap();
        let resp = svc.ready().await.unwrap().call(req).await.unwrap();
        assert_eq!(resp.body(), "answer");
        assert!(resp.headers().get("grpc-status").is_none());
    }

    #[test]
    fn grpc_timeout_values() {
        assert_eq!(parse_grpc_timeout(b"1m"), Some(Duration::from_millis(1)));
        assert_eq!(
            parse_grpc_timeout(b"99999999n"),
            Some(Duration::from_nanos(99_999_999))
        );
        assert_eq!(parse_grpc_timeout(b"2H"), Some(Duration::from_secs(7200)));
        assert_eq!(parse_grpc_timeout(b"3M"), Some(Duration::from_secs(180)));
        assert_eq!(parse_grpc_timeout(b"4S"), Some(Duration::from_secs(4)));
        assert_eq!(parse_grpc_timeout(b"5u"), Some(Duration::from_micros(5)));
        for bad in [
            &b""[..],
            b"m",
            b"123456789m",
            b"1x",
            b"-1S",
            b"1.5S",
            b" 1S",
        ] {
            assert_eq!(
                parse_grpc_timeout(bad),
                None,
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }
}
