//! Interoperability with the real Go implementation: kubectl (client-go, spdystream, gorilla
//! websocket) runs exec, attach and port-forward against our server.
//!
//! kubectl talks to an API server, so the test puts a tiny fake one in front: it answers the
//! discovery and pod GETs kubectl makes first, and for `pods/NAME/{exec,attach,portforward}`
//! it asks our [`Server`] for a URL and splices the client's connection onto it, with the
//! request line rewritten — what the kubelet does when it proxies to a CRI streaming server.
//!
//! The kubectl is the one the project builds with the Kubernetes tools (`k8s/build.sh`), named
//! by `PEAPOD_KUBECTL`; each case runs twice, over WebSocket (kubectl's default since 1.31)
//! and over SPDY (`KUBECTL_*_WEBSOCKETS=false`: what older kubectls and the kubelet's own
//! proxy still speak). These tests are `#[ignore]`d so that `cargo test` never reports them
//! as passing without kubectl; `scripts/test` runs them (`--ignored`), and there an unset
//! `PEAPOD_KUBECTL` or a missing binary fails the test.

mod common;

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use common::*;
use peapod_streaming::{AttachRequest, ExecRequest, PortForwardRequest, Server};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::process::Command;

const POD: &str = "p1";

fn kubectl() -> PathBuf {
    let p = PathBuf::from(
        std::env::var_os("PEAPOD_KUBECTL")
            .expect("PEAPOD_KUBECTL must name a kubectl (scripts/test sets it from k8s/build.sh)"),
    );
    assert!(p.is_file(), "PEAPOD_KUBECTL: {} is not a file", p.display());
    p
}

fn json_response(code: u16, body: &str) -> String {
    let reason = if code == 200 { "OK" } else { "Not Found" };
    format!(
        "HTTP/1.1 {code} {reason}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
}

fn pod_json() -> String {
    format!(
        r#"{{"kind":"Pod","apiVersion":"v1","metadata":{{"name":"{POD}","namespace":"default","uid":"u1"}},"spec":{{"containers":[{{"name":"c","image":"busybox","stdin":true}}]}},"status":{{"phase":"Running","containerStatuses":[{{"name":"c","ready":true,"restartCount":0,"image":"busybox","imageID":"","state":{{"running":{{}}}}}}]}}}}"#
    )
}

const API_RESOURCES: &str = r#"{"kind":"APIResourceList","groupVersion":"v1","resources":[
{"name":"pods","singularName":"pod","namespaced":true,"kind":"Pod","verbs":["get","list"],"shortNames":["po"]},
{"name":"pods/exec","singularName":"","namespaced":true,"kind":"PodExecOptions","verbs":["create","get"]},
{"name":"pods/attach","singularName":"","namespaced":true,"kind":"PodAttachOptions","verbs":["create","get"]},
{"name":"pods/portforward","singularName":"","namespaced":true,"kind":"PodPortForwardOptions","verbs":["create","get"]}]}"#;

fn truthy(v: &str) -> bool {
    v == "true" || v == "1"
}

/// Serves one client connection of the fake API server.
async fn api_conn(server: Arc<Server>, mut client: TcpStream) {
    let mut buf = Vec::new();
    loop {
        // Read one request head.
        let head_end = loop {
            if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break i + 4;
            }
            let mut chunk = [0u8; 4096];
            let n = match client.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            buf.extend_from_slice(&chunk[..n]);
            assert!(buf.len() < 64 * 1024, "request head too large");
        };
        let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
        let rest = buf[head_end..].to_vec();
        let mut lines = head.split("\r\n");
        let request_line = lines.next().unwrap_or_default().to_string();
        let mut parts = request_line.split(' ');
        let method = parts.next().unwrap_or_default().to_string();
        let target = parts.next().unwrap_or_default().to_string();
        let (path, query) = target.split_once('?').unwrap_or((&target, ""));
        let pod_path = format!("/api/v1/namespaces/default/pods/{POD}");
        let sub = path.strip_prefix(&format!("{pod_path}/"));
        if let Some(sub @ ("exec" | "attach" | "portforward")) = sub {
            let q: Vec<(String, String)> = form_urlencoded::parse(query.as_bytes())
                .into_owned()
                .collect();
            let get = |k: &str| q.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
            let flag = |k: &str| get(k).is_some_and(truthy);
            let url = match sub {
                "exec" => server.exec_url(ExecRequest {
                    container_id: "c".into(),
                    cmd: q
                        .iter()
                        .filter(|(n, _)| n == "command")
                        .map(|(_, v)| v.clone())
                        .collect(),
                    tty: flag("tty"),
                    stdin: flag("stdin"),
                    stdout: flag("stdout"),
                    stderr: flag("stderr") && !flag("tty"),
                }),
                "attach" => server.attach_url(AttachRequest {
                    container_id: "c".into(),
                    tty: flag("tty"),
                    stdin: flag("stdin"),
                    stdout: flag("stdout"),
                    stderr: flag("stderr") && !flag("tty"),
                }),
                _ => server.port_forward_url(PortForwardRequest {
                    sandbox_id: POD.into(),
                    ports: vec![],
                }),
            }
            .expect("issuing a URL");
            let new_path = url.trim_start_matches(&server.base_url()).to_string();
            let new_target = if query.is_empty() {
                new_path
            } else {
                format!("{new_path}?{query}")
            };
            let mut upstream = TcpStream::connect(server.local_addr()).await.unwrap();
            let mut rewritten = format!("{method} {new_target} HTTP/1.1\r\n");
            for l in lines {
                if !l.is_empty() {
                    rewritten.push_str(l);
                    rewritten.push_str("\r\n");
                }
            }
            rewritten.push_str("\r\n");
            upstream.write_all(rewritten.as_bytes()).await.unwrap();
            upstream.write_all(&rest).await.unwrap();
            let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
            return;
        }
        let resp = match path {
            "/api" => json_response(
                200,
                r#"{"kind":"APIVersions","versions":["v1"],"serverAddressByClientCIDRs":[{"clientCIDR":"0.0.0.0/0","serverAddress":"127.0.0.1"}]}"#,
            ),
            "/apis" => json_response(
                200,
                r#"{"kind":"APIGroupList","apiVersion":"v1","groups":[]}"#,
            ),
            "/api/v1" => json_response(200, API_RESOURCES),
            p if p == pod_path => json_response(200, &pod_json()),
            _ => json_response(
                404,
                r#"{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404}"#,
            ),
        };
        if client.write_all(resp.as_bytes()).await.is_err() {
            return;
        }
        buf = rest;
    }
}

async fn fake_apiserver(server: Arc<Server>) -> String {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((c, _)) = l.accept().await {
            tokio::spawn(api_conn(server.clone(), c));
        }
    });
    format!("http://{addr}")
}

struct Env {
    /// The fake API server's URL (it holds the streaming server).
    apiserver: String,
    cache: PathBuf,
    /// Holds kubectl's cache directory; removed when the test ends.
    _dir: tempfile::TempDir,
}

async fn env(fake: Fake) -> Env {
    let (server, _fake) = start(fake).await;
    let server = Arc::new(server);
    let apiserver = fake_apiserver(server).await;
    let dir = tempfile::Builder::new()
        .prefix("peapod-kubectl-cache-")
        .tempdir()
        .expect("temp dir");
    let cache = dir.path().join("cache");
    Env {
        apiserver,
        cache,
        _dir: dir,
    }
}

fn cmd(bin: &PathBuf, env: &Env, spdy_only: bool) -> Command {
    let mut c = Command::new(bin);
    c.arg(format!("--server={}", env.apiserver))
        .arg(format!("--cache-dir={}", env.cache.display()))
        .arg("--request-timeout=30s")
        .env("KUBECONFIG", "/nonexistent-kubeconfig")
        .env("HOME", &env.cache)
        .kill_on_drop(true);
    if spdy_only {
        c.env("KUBECTL_REMOTE_COMMAND_WEBSOCKETS", "false")
            .env("KUBECTL_PORT_FORWARD_WEBSOCKETS", "false");
    }
    c
}

async fn kubectl_exec(
    bin: &PathBuf,
    env: &Env,
    spdy_only: bool,
    args: &[&str],
    stdin: &[u8],
) -> (i32, String, String) {
    let mut c = cmd(bin, env, spdy_only);
    c.args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = c.spawn().expect("running kubectl");
    let mut input = child.stdin.take().unwrap();
    let data = stdin.to_vec();
    tokio::spawn(async move {
        let _ = input.write_all(&data).await;
        drop(input);
    });
    let out = tokio::time::timeout(Duration::from_secs(60), child.wait_with_output())
        .await
        .expect("kubectl hung")
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

async fn exec_round(spdy_only: bool) {
    let bin = kubectl();
    let env = env(Fake::default()).await;
    // stdin in, stdout and stderr out, and the exit code comes back as kubectl's own.
    let (code, out, err) = kubectl_exec(
        &bin,
        &env,
        spdy_only,
        &["exec", "-i", POD, "--", "echo-exit", "3"],
        b"hello from kubectl\n",
    )
    .await;
    assert_eq!(out, "hello from kubectl\n", "stderr: {err}");
    assert!(err.contains("bye"), "{err}");
    assert_eq!(code, 3, "stderr: {err}");
    let (code, out, err) = kubectl_exec(
        &bin,
        &env,
        spdy_only,
        &["exec", POD, "--", "print", "only stdout", "", "0"],
        b"",
    )
    .await;
    assert_eq!((code, out.as_str()), (0, "only stdout"), "stderr: {err}");
    // A runtime failure is reported, and kubectl fails.
    let (code, _out, err) =
        kubectl_exec(&bin, &env, spdy_only, &["exec", POD, "--", "fail"], b"").await;
    assert_ne!(code, 0);
    assert!(err.contains("is not running"), "{err}");
    // Attach.
    let (code, out, err) = kubectl_exec(
        &bin,
        &env,
        spdy_only,
        &["attach", "-i", POD],
        b"typed into attach\n",
    )
    .await;
    assert_eq!(out, "typed into attach\n", "stderr: {err}");
    assert_eq!(code, 0, "stderr: {err}");
    let _ = std::fs::remove_dir_all(&env.cache);
}

#[tokio::test]
#[ignore = "needs PEAPOD_KUBECTL; scripts/test runs it"]
async fn kubectl_exec_and_attach_over_websocket() {
    exec_round(false).await;
}

#[tokio::test]
#[ignore = "needs PEAPOD_KUBECTL; scripts/test runs it"]
async fn kubectl_exec_and_attach_over_spdy() {
    exec_round(true).await;
}

async fn port_forward_round(spdy_only: bool) {
    let bin = kubectl();
    let alpha = echo_server("alpha").await;
    let beta = echo_server("beta").await;
    let env = env(Fake {
        ports: std::collections::HashMap::from([(80, alpha), (8080, beta)]),
        ..Default::default()
    })
    .await;
    let mut c = cmd(&bin, &env, spdy_only);
    c.args(["port-forward", POD, ":80", ":8080"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = c.spawn().expect("running kubectl");
    let mut stdout = BufReader::new(child.stdout.take().unwrap()).lines();
    // "Forwarding from 127.0.0.1:LOCAL -> 80" (and the [::1] lines).
    let mut local = std::collections::HashMap::new();
    while local.len() < 2 {
        let line = tokio::time::timeout(Duration::from_secs(30), stdout.next_line())
            .await
            .expect("kubectl did not start forwarding")
            .unwrap()
            .expect("kubectl exited");
        if let Some(rest) = line.strip_prefix("Forwarding from 127.0.0.1:") {
            let (lport, rport) = rest.split_once(" -> ").unwrap();
            local.insert(
                rport.trim().parse::<u16>().unwrap(),
                lport.parse::<u16>().unwrap(),
            );
        }
    }
    // Two connections per port, concurrently.
    let mut tasks = Vec::new();
    for (remote, name) in [
        (80u16, "alpha"),
        (8080, "beta"),
        (80, "alpha"),
        (8080, "beta"),
    ] {
        let lport = local[&remote];
        tasks.push(tokio::spawn(async move {
            let mut s = TcpStream::connect(("127.0.0.1", lport)).await.unwrap();
            assert_eq!(read_line(&mut s).await, format!("hello from {name}"));
            let payload = pattern(150_000);
            let (mut r, mut w) = s.into_split();
            let sent = payload.clone();
            let writer = tokio::spawn(async move {
                w.write_all(&sent).await.unwrap();
                w.shutdown().await.unwrap();
            });
            let mut got = Vec::new();
            r.read_to_end(&mut got).await.unwrap();
            writer.await.unwrap();
            assert!(got == payload, "echo through kubectl differs");
        }));
    }
    for t in tasks {
        tokio::time::timeout(Duration::from_secs(30), t)
            .await
            .expect("forwarded connection hung")
            .unwrap();
    }
    let _ = child.kill().await;
    let _ = std::fs::remove_dir_all(&env.cache);
}

#[tokio::test]
#[ignore = "needs PEAPOD_KUBECTL; scripts/test runs it"]
async fn kubectl_port_forward_tunnelled_through_websocket() {
    port_forward_round(false).await;
}

#[tokio::test]
#[ignore = "needs PEAPOD_KUBECTL; scripts/test runs it"]
async fn kubectl_port_forward_over_spdy() {
    port_forward_round(true).await;
}

/// `kubectl exec -it` needs a terminal: run it under `script`, which gives it a pty sized by
/// `stty`. kubectl sends that size on the resize stream/channel; the fake prints it.
async fn tty_round(spdy_only: bool) {
    let bin = kubectl();
    assert!(
        std::path::Path::new("/usr/bin/script").exists(),
        "/usr/bin/script (util-linux) is needed to give kubectl a terminal"
    );
    let env = env(Fake::default()).await;
    let mut inner = format!(
        "stty cols 123 rows 45; {} --server={} --cache-dir={} exec -it {POD} -- resizes 1",
        bin.display(),
        env.apiserver,
        env.cache.display()
    );
    if spdy_only {
        inner = format!("KUBECTL_REMOTE_COMMAND_WEBSOCKETS=false {inner}");
    }
    let mut c = Command::new("/usr/bin/script");
    c.args(["-qec", &inner, "/dev/null"])
        .env("KUBECONFIG", "/nonexistent-kubeconfig")
        .env("HOME", &env.cache)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let out = tokio::time::timeout(Duration::from_secs(60), c.output())
        .await
        .expect("kubectl under script hung")
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("123x45"),
        "stdout: {stdout:?} stderr: {:?}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{:?}", out.status);
    let _ = std::fs::remove_dir_all(&env.cache);
}

#[tokio::test]
#[ignore = "needs PEAPOD_KUBECTL; scripts/test runs it"]
async fn kubectl_exec_tty_sends_its_terminal_size_over_websocket() {
    tty_round(false).await;
}

#[tokio::test]
#[ignore = "needs PEAPOD_KUBECTL; scripts/test runs it"]
async fn kubectl_exec_tty_sends_its_terminal_size_over_spdy() {
    tty_round(true).await;
}
