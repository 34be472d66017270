//! Probes (startup, liveness, readiness) with the kubelet's handlers and thresholds: exec
//! through CRI ExecSync, httpGet (200–399 is success) and tcpSocket to the pod IP, and gRPC
//! health checks. One worker task per probe per container reports transitions to the pod's
//! supervisor.

use crate::cri::CriApi;
use k8s_openapi::api::core::v1::{Container, HTTPGetAction, Probe};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProbeKind {
    Startup,
    Liveness,
    Readiness,
}

impl ProbeKind {
    pub fn label(self) -> &'static str {
        match self {
            ProbeKind::Startup => "Startup",
            ProbeKind::Liveness => "Liveness",
            ProbeKind::Readiness => "Readiness",
        }
    }
}

/// What a worker tells the supervisor.
#[derive(Debug, Clone)]
pub struct ProbeReport {
    pub container: String,
    pub container_id: String,
    pub kind: ProbeKind,
    pub event: ProbeEvent,
}

#[derive(Debug, Clone)]
pub enum ProbeEvent {
    /// One failed attempt (an `Unhealthy` event), with the handler's output.
    Failed(String),
    /// The result crossed its threshold: true = success.
    Result(bool),
}

/// Resolves a probe port, which may name one of the container's ports.
pub fn resolve_port(port: &IntOrString, c: &Container) -> Result<u16, String> {
    match port {
        IntOrString::Int(n) => u16::try_from(*n).map_err(|_| format!("invalid port {n}")),
        IntOrString::String(name) => {
            if let Ok(n) = name.parse::<u16>() {
                return Ok(n);
            }
            c.ports
                .iter()
                .flatten()
                .find(|p| p.name.as_deref() == Some(name.as_str()))
                .and_then(|p| u16::try_from(p.container_port).ok())
                .ok_or_else(|| format!("port {name:?} is not a named port of the container"))
        }
    }
}

/// Runs one attempt of `probe`. Ok(()) is success; Err holds the failure message.
pub async fn run_once(
    cri: &dyn CriApi,
    probe: &Probe,
    c: &Container,
    container_id: &str,
    pod_ip: &str,
) -> Result<(), String> {
    let timeout = Duration::from_secs(probe.timeout_seconds.unwrap_or(1).max(1) as u64);
    let host = if pod_ip.is_empty() {
        "127.0.0.1"
    } else {
        pod_ip
    };
    if let Some(e) = &probe.exec {
        let cmd = e.command.clone().unwrap_or_default();
        // ExecSync enforces the timeout itself; the outer bound guards a stuck call.
        let r = tokio::time::timeout(
            timeout + Duration::from_secs(2),
            cri.exec_sync(container_id, cmd, timeout),
        )
        .await
        .map_err(|_| format!("command timed out after {}s", timeout.as_secs()))?
        .map_err(|s| s.message().to_string())?;
        if r.exit_code == 0 {
            return Ok(());
        }
        let mut out = String::from_utf8_lossy(&r.stdout).into_owned();
        out.push_str(&String::from_utf8_lossy(&r.stderr));
        let out = out.trim();
        return Err(if out.is_empty() {
            format!(
                "command {:?} exited with {}",
                e.command.clone().unwrap_or_default(),
                r.exit_code
            )
        } else {
            out.to_string()
        });
    }
    if let Some(h) = &probe.http_get {
        let port = resolve_port(&h.port, c)?;
        let host = h.host.as_deref().filter(|s| !s.is_empty()).unwrap_or(host);
        return tokio::time::timeout(timeout, http_get(h, host, port))
            .await
            .unwrap_or_else(|_| {
                Err(format!(
                    "Get \"http://{host}:{port}{}\": context deadline exceeded (Client.Timeout exceeded while awaiting headers)",
                    h.path.as_deref().unwrap_or("/")
                ))
            });
    }
    if let Some(t) = &probe.tcp_socket {
        let port = resolve_port(&t.port, c)?;
        let host = t.host.as_deref().filter(|s| !s.is_empty()).unwrap_or(host);
        return match tokio::time::timeout(timeout, tokio::net::TcpStream::connect((host, port)))
            .await
        {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err(format!(
                "dial tcp {host}:{port}: connect: {}",
                dial_error(&e)
            )),
            Err(_) => Err(format!("dial tcp {host}:{port}: i/o timeout")),
        };
    }
    if let Some(g) = &probe.grpc {
        let port = u16::try_from(g.port).map_err(|_| format!("invalid port {}", g.port))?;
        return tokio::time::timeout(
            timeout,
            crate::grpc_health::check(host, port, g.service.as_deref().unwrap_or("")),
        )
        .await
        .unwrap_or_else(|_| {
            Err(format!(
                "timeout: health rpc did not complete within {}s",
                timeout.as_secs()
            ))
        });
    }
    Err("probe has no handler".into())
}

/// The words Go's dialer uses ("connection refused"), which is what kubelet messages show.
fn dial_error(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::ConnectionRefused => "connection refused".into(),
        std::io::ErrorKind::HostUnreachable => "no route to host".into(),
        std::io::ErrorKind::NetworkUnreachable => "network is unreachable".into(),
        _ => e.to_string(),
    }
}

/// A minimal HTTP/1.1 GET: the status line decides (200–399 success), as the kubelet's prober.
async fn http_get(h: &HTTPGetAction, host: &str, port: u16) -> Result<(), String> {
    let path = h.path.as_deref().unwrap_or("/");
    let url = format!("http://{host}:{port}{path}");
    if h.scheme.as_deref().unwrap_or("HTTP") != "HTTP" {
        return Err(format!(
            "Get {url:?}: only the HTTP scheme is supported by peapod's prober"
        ));
    }
    let mut s = tokio::net::TcpStream::connect((host, port))
        .await
        .map_err(|e| {
            format!(
                "Get {url:?}: dial tcp {host}:{port}: connect: {}",
                dial_error(&e)
            )
        })?;
    let mut req = format!(
        "GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nUser-Agent: kube-probe/1.33\r\nAccept: */*\r\nConnection: close\r\n"
    );
    for hd in h.http_headers.iter().flatten() {
        req.push_str(&format!("{}: {}\r\n", hd.name, hd.value));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes())
        .await
        .map_err(|e| format!("Get {url:?}: {e}"))?;
    let mut buf = vec![0u8; 1024];
    let mut n = 0;
    while n < buf.len() {
        let r = s
            .read(&mut buf[n..])
            .await
            .map_err(|e| format!("Get {url:?}: {e}"))?;
        if r == 0 {
            break;
        }
        n += r;
        if buf[..n].windows(2).any(|w| w == b"\r\n") {
            break;
        }
    }
    let line = String::from_utf8_lossy(&buf[..n]);
    let code: u16 = line
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| format!("Get {url:?}: malformed HTTP response"))?;
    if (200..400).contains(&code) {
        Ok(())
    } else {
        Err(format!("HTTP probe failed with statuscode: {code}"))
    }
}

/// Runs `probe` for one container until it is cancelled (the task is aborted) or, for
/// startup and liveness probes, until it reports its final result.
pub async fn worker(
    cri: Arc<dyn CriApi>,
    kind: ProbeKind,
    probe: Probe,
    container: Container,
    container_id: String,
    pod_ip: String,
    tx: mpsc::UnboundedSender<ProbeReport>,
) {
    let period = Duration::from_secs(probe.period_seconds.unwrap_or(10).max(1) as u64);
    let success_threshold = probe.success_threshold.unwrap_or(1).max(1);
    let failure_threshold = probe.failure_threshold.unwrap_or(3).max(1);
    tokio::time::sleep(Duration::from_secs(
        probe.initial_delay_seconds.unwrap_or(0).max(0) as u64,
    ))
    .await;
    let send = |event: ProbeEvent| {
        tx.send(ProbeReport {
            container: container.name.clone(),
            container_id: container_id.clone(),
            kind,
            event,
        })
        .is_ok()
    };
    let (mut successes, mut failures) = (0, 0);
    let mut last: Option<bool> = None;
    loop {
        match run_once(cri.as_ref(), &probe, &container, &container_id, &pod_ip).await {
            Ok(()) => {
                failures = 0;
                successes += 1;
                if successes >= success_threshold && last != Some(true) {
                    last = Some(true);
                    if !send(ProbeEvent::Result(true)) || kind == ProbeKind::Startup {
                        return;
                    }
                }
            }
            Err(msg) => {
                successes = 0;
                failures += 1;
                tracing::debug!(container = %container.name, kind = kind.label(), %msg, "probe failed");
                if !send(ProbeEvent::Failed(msg)) {
                    return;
                }
                if failures >= failure_threshold && last != Some(false) {
                    last = Some(false);
                    if !send(ProbeEvent::Result(false)) {
                        return;
                    }
                    // The container is about to be killed; a new worker comes with its successor.
                    if kind != ProbeKind::Readiness {
                        return;
                    }
                }
            }
        }
        tokio::time::sleep(period).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake_cri::FakeCri;
    use tokio::net::TcpListener;

    /// A one-shot HTTP server answering every request with `status`.
    async fn server(status: u16) -> u16 {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = l.local_addr().unwrap().port();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = l.accept().await {
                let mut buf = [0u8; 1024];
                let _ = s.read(&mut buf).await;
                let _ = s
                    .write_all(
                        format!("HTTP/1.1 {status} X\r\nContent-Length: 0\r\n\r\n").as_bytes(),
                    )
                    .await;
            }
        });
        port
    }

    fn probe(json: serde_json::Value) -> Probe {
        serde_json::from_value(json).unwrap()
    }

    fn container() -> Container {
        serde_json::from_value(
            serde_json::json!({"name": "c", "ports": [{"name": "web", "containerPort": 8080}]}),
        )
        .unwrap()
    }

    #[tokio::test]
    async fn http_status_decides() {
        let cri = FakeCri::default();
        for (status, ok) in [
            (200, true),
            (301, true),
            (399, true),
            (404, false),
            (500, false),
        ] {
            let port = server(status).await;
            let p = probe(
                serde_json::json!({"httpGet": {"path": "/healthz", "port": port}, "timeoutSeconds": 2}),
            );
            let r = run_once(&cri, &p, &container(), "id", "127.0.0.1").await;
            assert_eq!(r.is_ok(), ok, "{status}: {r:?}");
            if !ok {
                assert_eq!(
                    r.unwrap_err(),
                    format!("HTTP probe failed with statuscode: {status}")
                );
            }
        }
    }

    #[tokio::test]
    async fn tcp_and_refused_connections() {
        let cri = FakeCri::default();
        let port = server(200).await;
        let p = probe(serde_json::json!({"tcpSocket": {"port": port}}));
        assert!(run_once(&cri, &p, &container(), "id", "127.0.0.1")
            .await
            .is_ok());
        // A port nobody listens on: bind one, learn it, close it.
        let closed = TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let p = probe(serde_json::json!({"tcpSocket": {"port": closed}}));
        let e = run_once(&cri, &p, &container(), "id", "127.0.0.1")
            .await
            .unwrap_err();
        assert!(
            e.starts_with(&format!("dial tcp 127.0.0.1:{closed}: connect:")),
            "{e}"
        );
        let p = probe(serde_json::json!({"httpGet": {"port": closed}}));
        assert!(run_once(&cri, &p, &container(), "id", "127.0.0.1")
            .await
            .is_err());
    }

    #[test]
    fn named_ports_resolve() {
        let c = container();
        assert_eq!(
            resolve_port(&IntOrString::String("web".into()), &c),
            Ok(8080)
        );
        assert_eq!(resolve_port(&IntOrString::Int(81), &c), Ok(81));
        assert!(resolve_port(&IntOrString::String("nope".into()), &c).is_err());
    }
}
