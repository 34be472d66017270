//! A misbehaving registry on 127.0.0.1 for the registry-fault tests: it serves one OCI image
//! layout (the distribution API's GETs of manifests and blobs, with `Range`) and misbehaves
//! as told: a connection cut in the middle of a blob, 503 or 429 with Retry-After for the
//! first requests, a blob whose bytes do not match its digest, or no answer at all. It counts
//! the requests it got, per path.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// How the registry misbehaves.
#[derive(Debug, Clone, Default)]
pub struct Faults {
    /// The first GET of each blob larger than this sends only this many bytes of its body,
    /// then the connection is reset.
    pub cut_blobs_after: Option<usize>,
    /// Ignore `Range` (answer 200 with the whole blob), as some registries do.
    pub ignore_range: bool,
    /// The first this-many requests (of any kind but `/v2/`) get this status with this
    /// Retry-After (seconds).
    pub busy_first: usize,
    pub busy_status: u16,
    pub busy_retry_after: Option<u64>,
    /// Every request gets this status with Retry-After 1 (a registry that stays down).
    pub always_status: Option<u16>,
    /// Blobs (by digest) whose bytes are changed on the way.
    pub corrupt: Vec<String>,
    /// Accept connections, read the request, never answer.
    pub never_answer: bool,
}

pub struct FaultRegistry {
    pub port: u16,
    requests: Arc<Mutex<HashMap<String, usize>>>,
    task: tokio::task::JoinHandle<()>,
}

struct Shared {
    layout: PathBuf,
    faults: Mutex<Faults>,
    requests: Arc<Mutex<HashMap<String, usize>>>,
    cut_done: Mutex<std::collections::HashSet<String>>,
    busy_left: Mutex<usize>,
}

impl FaultRegistry {
    /// Serves the OCI layout at `layout` (its index.json's manifests, by tag `t` and digest).
    pub async fn start(layout: &Path, faults: Faults) -> FaultRegistry {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().unwrap().port();
        let requests = Arc::new(Mutex::new(HashMap::new()));
        let shared = Arc::new(Shared {
            layout: layout.to_path_buf(),
            busy_left: Mutex::new(faults.busy_first),
            faults: Mutex::new(faults),
            requests: requests.clone(),
            cut_done: Mutex::new(Default::default()),
        });
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let shared = shared.clone();
                tokio::spawn(async move {
                    let _ = serve(stream, &shared).await;
                });
            }
        });
        FaultRegistry {
            port,
            requests,
            task,
        }
    }

    /// `127.0.0.1:PORT/NAME:t`.
    pub fn reference(&self, name: &str) -> String {
        format!("127.0.0.1:{}/{name}:t", self.port)
    }

    /// GETs of paths containing `needle`.
    pub fn requests_to(&self, needle: &str) -> usize {
        self.requests
            .lock()
            .unwrap()
            .iter()
            .filter(|(p, _)| p.contains(needle))
            .map(|(_, n)| n)
            .sum()
    }
}

impl Drop for FaultRegistry {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn serve(mut stream: TcpStream, shared: &Shared) -> std::io::Result<()> {
    loop {
        let mut buf = Vec::new();
        let mut byte = [0u8; 1];
        while !buf.ends_with(b"\r\n\r\n") {
            if stream.read(&mut byte).await? == 0 {
                return Ok(());
            }
            buf.push(byte[0]);
            if buf.len() > 64 << 10 {
                return Ok(());
            }
        }
        let text = String::from_utf8_lossy(&buf).into_owned();
        let mut lines = text.split("\r\n");
        let request_line = lines.next().unwrap_or_default();
        let mut parts = request_line.split(' ');
        let method = parts.next().unwrap_or_default().to_string();
        let path = parts.next().unwrap_or_default().to_string();
        let range_from: Option<usize> = lines
            .find_map(|l| {
                let (k, v) = l.split_once(':')?;
                k.eq_ignore_ascii_case("range")
                    .then(|| v.trim().to_string())
            })
            .and_then(|v| v.strip_prefix("bytes=")?.strip_suffix('-')?.parse().ok());
        *shared
            .requests
            .lock()
            .unwrap()
            .entry(path.clone())
            .or_default() += 1;
        let faults = shared.faults.lock().unwrap().clone();
        if faults.never_answer {
            std::future::pending::<()>().await;
        }
        if path != "/v2/" {
            if let Some(status) = faults.always_status {
                respond(&mut stream, status, &[("Retry-After", "1".into())], b"").await?;
                continue;
            }
            let busy = {
                let mut left = shared.busy_left.lock().unwrap();
                let busy = *left > 0;
                *left = left.saturating_sub(1);
                busy
            };
            if busy {
                let mut h = Vec::new();
                if let Some(s) = faults.busy_retry_after {
                    h.push(("Retry-After", s.to_string()));
                }
                respond(&mut stream, faults.busy_status, &h, b"busy").await?;
                continue;
            }
        }
        if method != "GET" && method != "HEAD" {
            respond(&mut stream, 405, &[], b"").await?;
            continue;
        }
        if path == "/v2/" {
            respond(&mut stream, 200, &[], b"{}").await?;
            continue;
        }
        let Some((kind, reference)) = route(&path) else {
            respond(&mut stream, 404, &[], b"").await?;
            continue;
        };
        let Some((digest, media_type, mut body)) = lookup(&shared.layout, kind, &reference) else {
            respond(
                &mut stream,
                404,
                &[],
                br#"{"errors":[{"code":"MANIFEST_UNKNOWN"}]}"#,
            )
            .await?;
            continue;
        };
        if faults.corrupt.contains(&digest) {
            if let Some(b) = body.last_mut() {
                *b ^= 0xff;
            }
        }
        let mut headers = vec![
            ("Content-Type", media_type),
            ("Docker-Content-Digest", digest.clone()),
        ];
        if kind == "blobs" {
            if let Some(limit) = faults.cut_blobs_after {
                let first = shared.cut_done.lock().unwrap().insert(digest.clone());
                if first && body.len() > limit {
                    // The whole length announced, part of it sent, then a reset.
                    let head = format!(
                        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nContent-Type: application/octet-stream\r\n\r\n",
                        body.len()
                    );
                    stream.write_all(head.as_bytes()).await?;
                    stream.write_all(&body[..limit]).await?;
                    stream.flush().await?;
                    // SO_LINGER 0: the close sends a reset, as a dropped connection does.
                    nix::sys::socket::setsockopt(
                        &stream,
                        nix::sys::socket::sockopt::Linger,
                        &libc::linger {
                            l_onoff: 1,
                            l_linger: 0,
                        },
                    )
                    .map_err(std::io::Error::from)?;
                    drop(stream);
                    return Ok(());
                }
            }
            if let (Some(from), false) = (range_from, faults.ignore_range) {
                let total = body.len();
                let rest = body.split_off(from.min(total));
                headers.push((
                    "Content-Range",
                    format!("bytes {from}-{}/{total}", total.saturating_sub(1)),
                ));
                respond(&mut stream, 206, &headers, &rest).await?;
                continue;
            }
        }
        if method == "HEAD" {
            body.clear();
        }
        respond(&mut stream, 200, &headers, &body).await?;
    }
}

/// `/v2/<name>/manifests/<ref>` or `/v2/<name>/blobs/<digest>`.
fn route(path: &str) -> Option<(&'static str, String)> {
    let rest = path.strip_prefix("/v2/")?;
    if let Some(i) = rest.rfind("/manifests/") {
        return Some(("manifests", rest[i + "/manifests/".len()..].to_string()));
    }
    if let Some(i) = rest.rfind("/blobs/") {
        return Some(("blobs", rest[i + "/blobs/".len()..].to_string()));
    }
    None
}

/// (digest, media type, bytes) of what `reference` names in the layout.
fn lookup(layout: &Path, kind: &str, reference: &str) -> Option<(String, String, Vec<u8>)> {
    let index: serde_json::Value =
        serde_json::from_slice(&std::fs::read(layout.join("index.json")).ok()?).ok()?;
    let digest = if kind == "manifests" && !reference.starts_with("sha256:") {
        index["manifests"].as_array()?.first()?["digest"]
            .as_str()?
            .to_string()
    } else {
        reference.to_string()
    };
    let body = std::fs::read(
        layout
            .join("blobs/sha256")
            .join(digest.strip_prefix("sha256:")?),
    )
    .ok()?;
    let media_type = if kind == "manifests" {
        serde_json::from_slice::<serde_json::Value>(&body)
            .ok()
            .and_then(|v| v["mediaType"].as_str().map(str::to_string))
            .unwrap_or_else(|| "application/vnd.oci.image.manifest.v1+json".into())
    } else {
        "application/octet-stream".into()
    };
    Some((digest, media_type, body))
}

async fn respond(
    stream: &mut TcpStream,
    status: u16,
    headers: &[(&str, String)],
    body: &[u8],
) -> std::io::Result<()> {
    let mut head = format!("HTTP/1.1 {status} X\r\nContent-Length: {}\r\n", body.len());
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).await?;
    stream.write_all(body).await?;
    stream.flush().await
}
