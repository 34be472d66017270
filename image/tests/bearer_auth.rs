//! The bearer-token flows (username/password at the token realm, OAuth2
//! refresh token for `identity_token`, a ready `registry_token`) against a
//! small registry written here: Debian's docker-registry only does token auth
//! with a separate JWT-signing token server, which this machine does not have.

mod common;

use common::*;
use peapod_image::testsupport::*;
use peapod_image::{Credentials, ErrorKind};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const GOOD: &str = "good-token";

struct Mock {
    port: u16,
    token_gets: Arc<AtomicUsize>,
    token_posts: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Mock {
    fn drop(&mut self) {
        self.task.abort();
    }
}

struct Req {
    method: String,
    path: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Req {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

async fn read_req(s: &mut tokio::net::TcpStream) -> Option<Req> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        let n = s.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i;
        }
        if buf.len() > 64 * 1024 {
            return None;
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut lines = head.lines();
    let mut first = lines.next()?.split(' ');
    let method = first.next()?.to_string();
    let path = first.next()?.to_string();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let len: usize = headers
        .iter()
        .find(|(k, _)| k == "content-length")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    let mut body = buf[head_end + 4..].to_vec();
    while body.len() < len {
        let n = s.read(&mut chunk).await.ok()?;
        if n == 0 {
            break;
        }
        body.extend_from_slice(&chunk[..n]);
    }
    Some(Req {
        method,
        path,
        headers,
        body,
    })
}

async fn respond(
    s: &mut tokio::net::TcpStream,
    status: u16,
    headers: &[(&str, String)],
    body: &[u8],
) {
    let mut head = format!(
        "HTTP/1.1 {status} X\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    let _ = s.write_all(head.as_bytes()).await;
    let _ = s.write_all(body).await;
    let _ = s.shutdown().await;
}

/// Serves `layout` as repository `repo`, demanding `Bearer good-token`.
async fn start_mock(layout: PathBuf, repo: &'static str) -> Mock {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let token_gets = Arc::new(AtomicUsize::new(0));
    let token_posts = Arc::new(AtomicUsize::new(0));
    let (tg, tp) = (token_gets.clone(), token_posts.clone());
    let task = tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = listener.accept().await else {
                return;
            };
            let layout = layout.clone();
            let (tg, tp) = (tg.clone(), tp.clone());
            tokio::spawn(async move {
                let Some(req) = read_req(&mut s).await else {
                    return;
                };
                let json = |v: serde_json::Value| serde_json::to_vec(&v).unwrap();
                if req.path.starts_with("/token") {
                    let (status, body) = if req.method == "POST" {
                        tp.fetch_add(1, Ordering::SeqCst);
                        let form = String::from_utf8_lossy(&req.body).into_owned();
                        let ok = form.contains("grant_type=refresh_token")
                            && form.contains("refresh_token=the-refresh-token")
                            && form.contains(&format!(
                                "scope=repository%3A{}%3Apull",
                                repo.replace('/', "%2F")
                            ));
                        if ok {
                            (200, json(serde_json::json!({"access_token": GOOD})))
                        } else {
                            (401, b"bad refresh token".to_vec())
                        }
                    } else {
                        tg.fetch_add(1, Ordering::SeqCst);
                        match req.header("authorization") {
                            // alice:pw
                            Some("Basic YWxpY2U6cHc=") => {
                                (200, json(serde_json::json!({"token": GOOD})))
                            }
                            Some(_) => (401, b"bad credentials".to_vec()),
                            None => (200, json(serde_json::json!({"token": "anonymous"}))),
                        }
                    };
                    respond(
                        &mut s,
                        status,
                        &[("Content-Type", "application/json".into())],
                        &body,
                    )
                    .await;
                    return;
                }
                if req.header("authorization") != Some(&format!("Bearer {GOOD}")) {
                    let challenge = format!(
                        "Bearer realm=\"http://127.0.0.1:{port}/token\",service=\"mock\",scope=\"repository:{repo}:pull\""
                    );
                    let body = json(
                        serde_json::json!({"errors": [{"code": "UNAUTHORIZED", "message": "authentication required"}]}),
                    );
                    respond(&mut s, 401, &[("WWW-Authenticate", challenge)], &body).await;
                    return;
                }
                let prefix = format!("/v2/{repo}/");
                let Some(rest) = req.path.strip_prefix(&prefix) else {
                    respond(&mut s, 404, &[], b"").await;
                    return;
                };
                let blob = |d: &str| {
                    std::fs::read(
                        layout
                            .join("blobs/sha256")
                            .join(d.trim_start_matches("sha256:")),
                    )
                };
                if let Some(r) = rest.strip_prefix("manifests/") {
                    let digest =
                        if r.starts_with("sha256:") {
                            r.to_string()
                        } else {
                            let idx: serde_json::Value = serde_json::from_slice(
                                &std::fs::read(layout.join("index.json")).unwrap(),
                            )
                            .unwrap();
                            match idx["manifests"].as_array().unwrap().iter().find(|d| {
                                d["annotations"]["org.opencontainers.image.ref.name"] == r
                            }) {
                                Some(d) => d["digest"].as_str().unwrap().to_string(),
                                None => {
                                    respond(&mut s, 404, &[], b"").await;
                                    return;
                                }
                            }
                        };
                    match blob(&digest) {
                        Ok(b) => {
                            let mt: serde_json::Value = serde_json::from_slice(&b).unwrap();
                            let ct = mt["mediaType"]
                                .as_str()
                                .unwrap_or("application/vnd.oci.image.manifest.v1+json")
                                .to_string();
                            respond(&mut s, 200, &[("Content-Type", ct)], &b).await;
                        }
                        Err(_) => respond(&mut s, 404, &[], b"").await,
                    }
                } else if let Some(d) = rest.strip_prefix("blobs/") {
                    match blob(d) {
                        Ok(b) => {
                            respond(
                                &mut s,
                                200,
                                &[("Content-Type", "application/octet-stream".into())],
                                &b,
                            )
                            .await
                        }
                        Err(_) => respond(&mut s, 404, &[], b"").await,
                    }
                } else {
                    respond(&mut s, 404, &[], b"").await;
                }
            });
        }
    });
    Mock {
        port,
        token_gets,
        token_posts,
        task,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bearer_token_flows() {
    let tmp = tempfile::tempdir().unwrap();
    let mut layout = OciLayout::create(&tmp.path().join("layout")).unwrap();
    let spec =
        ImageSpec::empty().layer(Layer::new(Compression::Gzip).file("hello", "world", 0o644));
    let built = layout.add_image("v1", &spec).unwrap();
    let mock = start_mock(layout.dir().to_path_buf(), "team/app").await;
    let store = open_store(tmp.path()).await;
    let r = format!("127.0.0.1:{}/team/app:v1", mock.port);

    // Anonymous token: refused by the registry.
    let e = store.pull(&r, None).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Unauthenticated, "{e}");
    // Wrong password: the token realm says no.
    let bad = Credentials {
        username: "alice".into(),
        password: "wrong".into(),
        ..Default::default()
    };
    let e = store.pull(&r, Some(&bad)).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Unauthenticated, "{e}");
    assert!(e.to_string().contains("token request"), "{e}");
    assert!(store.list().is_empty());

    // username/password -> GET token with basic auth.
    let creds = Credentials {
        username: "alice".into(),
        password: "pw".into(),
        ..Default::default()
    };
    let img = store.pull(&r, Some(&creds)).await.unwrap();
    assert_eq!(img.id, built.config_digest);
    assert_eq!(
        img.repo_digests,
        vec![format!(
            "127.0.0.1:{}/team/app@{}",
            mock.port, built.manifest_digest
        )]
    );
    store.remove(&img.id).await.unwrap();

    // identity_token -> POST refresh_token grant.
    let posts_before = mock.token_posts.load(Ordering::SeqCst);
    let idt = Credentials {
        identity_token: "the-refresh-token".into(),
        ..Default::default()
    };
    assert_eq!(store.pull(&r, Some(&idt)).await.unwrap().id, img.id);
    assert!(mock.token_posts.load(Ordering::SeqCst) > posts_before);
    store.remove(&img.id).await.unwrap();
    let bad_idt = Credentials {
        identity_token: "stale".into(),
        ..Default::default()
    };
    assert_eq!(
        store.pull(&r, Some(&bad_idt)).await.unwrap_err().kind(),
        ErrorKind::Unauthenticated
    );

    // registry_token -> sent as is, no token request at all.
    let gets = mock.token_gets.load(Ordering::SeqCst);
    let posts = mock.token_posts.load(Ordering::SeqCst);
    let rt = Credentials {
        registry_token: GOOD.into(),
        ..Default::default()
    };
    assert_eq!(store.pull(&r, Some(&rt)).await.unwrap().id, img.id);
    assert_eq!(mock.token_gets.load(Ordering::SeqCst), gets);
    assert_eq!(mock.token_posts.load(Ordering::SeqCst), posts);

    // The rootfs of the pulled image is usable.
    let _mounts = MountGuard(tmp.path().to_path_buf());
    let target = tmp.path().join("rootfs");
    store
        .create_rootfs(&img.id, "c", &target, false)
        .await
        .unwrap();
    assert_eq!(std::fs::read(target.join("hello")).unwrap(), b"world");
    store.remove_rootfs("c", &target).await.unwrap();
}
