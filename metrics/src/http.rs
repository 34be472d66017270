//! The `/metrics` listener: plain HTTP/1.1 on `metrics.address`, GET /metrics only.

use crate::{Metrics, StateSource, CONTENT_TYPE};
use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::Full;
use hyper_util::rt::TokioIo;
use std::net::SocketAddr;
use std::sync::Arc;

/// Binds `address` and serves scrapes until the returned task is aborted. Returns the bound
/// address (port 0 picks a free one). A port in use is retried for up to `bind_wait` (logged
/// once): a predecessor killed a moment ago may still hold it.
pub async fn serve(
    address: &str,
    bind_wait: std::time::Duration,
    metrics: Arc<Metrics>,
    state: Option<Arc<dyn StateSource>>,
) -> std::io::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    let listener = bind_waiting(address, bind_wait).await?;
    let local = listener.local_addr()?;
    let task = tokio::spawn(async move {
        loop {
            let stream = match listener.accept().await {
                Ok((stream, _)) => stream,
                Err(e) => {
                    // EMFILE and the like: wait a little rather than spin.
                    tracing::warn!(error = %e, "metrics: accept");
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                    continue;
                }
            };
            let metrics = metrics.clone();
            let state = state.clone();
            tokio::spawn(async move {
                let service =
                    hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
                        let reply = respond(&req, &metrics, state.as_deref());
                        async move { Ok::<_, std::convert::Infallible>(reply) }
                    });
                let conn = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service);
                // A scrape has no reason to take long; a stuck client is dropped.
                let _ = tokio::time::timeout(std::time::Duration::from_secs(30), conn).await;
            });
        }
    });
    Ok((local, task))
}

fn respond<B>(
    req: &Request<B>,
    metrics: &Metrics,
    state: Option<&dyn StateSource>,
) -> Response<Full<Bytes>> {
    let mut resp = Response::new(Full::new(Bytes::new()));
    if req.uri().path() != "/metrics" {
        *resp.status_mut() = StatusCode::NOT_FOUND;
        return resp;
    }
    if req.method() != Method::GET && req.method() != Method::HEAD {
        *resp.status_mut() = StatusCode::METHOD_NOT_ALLOWED;
        return resp;
    }
    let body = metrics.render(state);
    resp.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static(CONTENT_TYPE),
    );
    *resp.body_mut() = Full::new(Bytes::from(body));
    resp
}

async fn bind_waiting(
    address: &str,
    wait: std::time::Duration,
) -> std::io::Result<tokio::net::TcpListener> {
    let start = std::time::Instant::now();
    let mut logged = false;
    loop {
        match tokio::net::TcpListener::bind(address).await {
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse && start.elapsed() < wait => {
                if !logged {
                    tracing::warn!(%address, error = %e, wait_s = wait.as_secs_f64(), "the metrics port is held by another process (a peapod still exiting?); waiting for it");
                    logged = true;
                }
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
            other => return other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    async fn get(addr: SocketAddr, path: &str) -> String {
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        let req = format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        s.write_all(req.as_bytes()).await.unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        out
    }

    #[tokio::test]
    async fn serves_metrics_and_nothing_else() {
        let m = Metrics::new().unwrap();
        m.record_image_pull(10, 1.0);
        let (addr, task) = serve("127.0.0.1:0", std::time::Duration::ZERO, m, None)
            .await
            .unwrap();
        let page = get(addr, "/metrics").await;
        assert!(page.starts_with("HTTP/1.1 200"), "{page}");
        assert!(page.contains("text/plain; version=0.0.4"), "{page}");
        assert!(
            page.contains("\npeapod_image_pull_bytes_total 10\n"),
            "{page}"
        );
        assert!(get(addr, "/other").await.starts_with("HTTP/1.1 404"));
        task.abort();
    }
}
