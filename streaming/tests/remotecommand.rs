//! Exec and attach through a real server, driven by the SPDY and WebSocket clients.

mod common;

use std::sync::atomic::Ordering;
use std::time::Duration;

use common::*;
use peapod_streaming::client::{
    self, remote_command_spdy, remote_command_websocket, ClientOptions, CommandIo, Outcome,
};
use peapod_streaming::protocol::*;
use peapod_streaming::{AttachRequest, ExecRequest, TerminalSize};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;

fn opts() -> ClientOptions {
    ClientOptions::default()
}

/// Reads both output pipes to their end, concurrently with the session (a session that
/// writes more than a pipe holds would otherwise wait for us forever).
fn drain_both(
    mut out_r: tokio::io::DuplexStream,
    mut err_r: tokio::io::DuplexStream,
) -> (
    tokio::task::JoinHandle<Vec<u8>>,
    tokio::task::JoinHandle<Vec<u8>>,
) {
    let out = tokio::spawn(async move {
        let mut v = Vec::new();
        out_r.read_to_end(&mut v).await.unwrap();
        v
    });
    let err = tokio::spawn(async move {
        let mut v = Vec::new();
        err_r.read_to_end(&mut v).await.unwrap();
        v
    });
    (out, err)
}

/// stdin, stdout, stderr: a buffer in, two pipes out; returns the result and both outputs.
async fn run_spdy(
    url: &str,
    protocols: &[&str],
    stdin: &[u8],
) -> (client::CommandResult, Vec<u8>, Vec<u8>) {
    let (out_w, out_r) = pipe();
    let (err_w, err_r) = pipe();
    let io = CommandIo {
        stdin: Some(Box::new(std::io::Cursor::new(stdin.to_vec()))),
        stdout: Some(Box::new(out_w)),
        stderr: Some(Box::new(err_w)),
        ..Default::default()
    };
    let (out, err) = drain_both(out_r, err_r);
    let res = remote_command_spdy(url, protocols, io, &opts())
        .await
        .unwrap();
    (res, out.await.unwrap(), err.await.unwrap())
}

#[tokio::test]
async fn spdy_v4_exec_with_stdin_stdout_stderr_and_exit_code() {
    let (server, fake) = start(Fake::default()).await;
    let url = server.exec_url(exec_req(&["echo-exit", "3"])).unwrap();
    assert!(url.starts_with(&format!("{}/exec/", server.base_url())));
    let (res, out, err) =
        run_spdy(&url, &[STREAM_PROTOCOL_V4, STREAM_PROTOCOL_V3], b"hello\n").await;
    assert_eq!(res.protocol, STREAM_PROTOCOL_V4);
    assert_eq!(res.outcome, Outcome::ExitCode(3));
    assert_eq!(out, b"hello\n");
    assert_eq!(err, b"bye\n");
    assert_eq!(fake.log(), vec!["exec ctr1 echo-exit 3 tty=false"]);

    let url = server.exec_url(exec_req(&["echo"])).unwrap();
    let (res, out, _) = run_spdy(&url, &[STREAM_PROTOCOL_V4], b"x").await;
    assert_eq!(res.outcome, Outcome::Success);
    assert_eq!(out, b"x");
    server.shutdown().await;
}

#[tokio::test]
async fn spdy_older_protocols_report_errors_as_text() {
    let (server, _fake) = start(Fake::default()).await;
    for proto in [STREAM_PROTOCOL_V3, STREAM_PROTOCOL_V2, STREAM_PROTOCOL_V1] {
        let url = server
            .exec_url(exec_req(&["print", "out", "err", "7"]))
            .unwrap();
        let (res, out, err) = run_spdy(&url, &[proto], b"").await;
        assert_eq!(res.protocol, proto);
        assert_eq!(out, b"out");
        assert_eq!(err, b"err");
        match res.outcome {
            Outcome::Failure(msg) => assert!(msg.contains("non-zero exit code"), "{msg}"),
            other => panic!("{proto}: {other:?}"),
        }
        let url = server.exec_url(exec_req(&["print", "", "", "0"])).unwrap();
        let (res, _, _) = run_spdy(&url, &[proto], b"").await;
        assert_eq!(res.outcome, Outcome::Success, "{proto}");
    }
    // A client that offers no protocol at all is served as v1.
    let url = server.exec_url(exec_req(&["print", "o", "", "0"])).unwrap();
    let (res, out, _) = run_spdy(&url, &[], b"").await;
    assert_eq!((res.protocol.as_str(), out.as_slice()), ("", &b"o"[..]));
    server.shutdown().await;
}

#[tokio::test]
async fn runtime_errors_reach_the_client() {
    let (server, _fake) = start(Fake::default()).await;
    let url = server.exec_url(exec_req(&["fail"])).unwrap();
    let (res, _, _) = run_spdy(&url, &[STREAM_PROTOCOL_V4], b"").await;
    match res.outcome {
        Outcome::Failure(msg) => {
            assert!(msg.contains("container ctr1 is not running"), "{msg}")
        }
        other => panic!("{other:?}"),
    }
    server.shutdown().await;
}

#[tokio::test]
async fn spdy_large_output_and_input_arrive_whole() {
    let (server, _fake) = start(Fake::default()).await;
    let url = server.exec_url(exec_req(&["big", "3000000"])).unwrap();
    let (res, out, _) = run_spdy(&url, &[STREAM_PROTOCOL_V4], b"").await;
    assert_eq!(res.outcome, Outcome::Success);
    assert_eq!(out, pattern(3_000_000));

    let input = pattern(2_000_000);
    let url = server.exec_url(exec_req(&["echo"])).unwrap();
    let (res, out, _) = run_spdy(&url, &[STREAM_PROTOCOL_V4], &input).await;
    assert_eq!(res.outcome, Outcome::Success);
    assert_eq!(out.len(), input.len());
    assert!(out == input);
    server.shutdown().await;
}

/// With a tty: the client sends sizes, the runtime prints them as it gets them.
async fn tty_resize(websocket: bool, protocol: &str) {
    let (server, fake) = start(Fake::default()).await;
    let url = server
        .exec_url(ExecRequest {
            tty: true,
            stderr: false,
            stdin: false,
            ..exec_req(&["resizes", "2"])
        })
        .unwrap();
    let (out_w, mut out_r) = pipe();
    let (tx, rx) = mpsc::channel(4);
    let io = CommandIo {
        stdout: Some(Box::new(out_w)),
        tty: true,
        resize: Some(rx),
        ..Default::default()
    };
    let url2 = url.clone();
    let proto = protocol.to_string();
    let session = tokio::spawn(async move {
        if websocket {
            remote_command_websocket(&url2, &[&proto], io, &opts()).await
        } else {
            remote_command_spdy(&url2, &[&proto], io, &opts()).await
        }
    });
    tx.send(TerminalSize {
        width: 80,
        height: 24,
    })
    .await
    .unwrap();
    assert_eq!(read_line(&mut out_r).await, "80x24");
    tx.send(TerminalSize {
        width: 120,
        height: 40,
    })
    .await
    .unwrap();
    assert_eq!(read_line(&mut out_r).await, "120x40");
    let res = session.await.unwrap().unwrap();
    assert_eq!(res.outcome, Outcome::Success);
    assert_eq!(fake.log(), vec!["exec ctr1 resizes 2 tty=true"]);
    server.shutdown().await;
}

#[tokio::test]
async fn spdy_tty_with_resize() {
    tty_resize(false, STREAM_PROTOCOL_V4).await;
}

#[tokio::test]
async fn spdy_v3_tty_with_resize() {
    tty_resize(false, STREAM_PROTOCOL_V3).await;
}

#[tokio::test]
async fn websocket_v5_tty_with_resize() {
    tty_resize(true, STREAM_PROTOCOL_V5).await;
}

#[tokio::test]
async fn websocket_v4_base64_tty_with_resize() {
    tty_resize(true, BASE64_STREAM_PROTOCOL_V4).await;
}

async fn run_ws(
    url: &str,
    protocols: &[&str],
    stdin: Option<&[u8]>,
) -> (client::CommandResult, Vec<u8>, Vec<u8>) {
    let (out_w, out_r) = pipe();
    let (err_w, err_r) = pipe();
    let io = CommandIo {
        stdin: stdin.map(|s| -> Box<dyn tokio::io::AsyncRead + Send + Unpin> {
            Box::new(std::io::Cursor::new(s.to_vec()))
        }),
        stdout: Some(Box::new(out_w)),
        stderr: Some(Box::new(err_w)),
        ..Default::default()
    };
    let (out, err) = drain_both(out_r, err_r);
    let res = remote_command_websocket(url, protocols, io, &opts())
        .await
        .unwrap();
    (res, out.await.unwrap(), err.await.unwrap())
}

#[tokio::test]
async fn websocket_v5_exec_closes_stdin_with_the_close_signal() {
    let (server, _fake) = start(Fake::default()).await;
    let url = server.exec_url(exec_req(&["echo-exit", "5"])).unwrap();
    let input = pattern(300_000);
    let (res, out, err) = run_ws(
        &url,
        &[STREAM_PROTOCOL_V5, STREAM_PROTOCOL_V4],
        Some(&input),
    )
    .await;
    assert_eq!(res.protocol, STREAM_PROTOCOL_V5);
    assert_eq!(res.outcome, Outcome::ExitCode(5));
    assert!(out == input);
    assert_eq!(err, b"bye\n");
    server.shutdown().await;
}

#[tokio::test]
async fn websocket_v4_binary_and_base64_and_v1() {
    let (server, _fake) = start(Fake::default()).await;
    for proto in [STREAM_PROTOCOL_V4, BASE64_STREAM_PROTOCOL_V4] {
        let req = ExecRequest {
            stdin: false,
            ..exec_req(&["print", "to stdout", "to stderr", "9"])
        };
        let url = server.exec_url(req).unwrap();
        let (res, out, err) = run_ws(&url, &[proto], None).await;
        assert_eq!(res.protocol, proto);
        assert_eq!(res.outcome, Outcome::ExitCode(9));
        assert_eq!(out, b"to stdout");
        assert_eq!(err, b"to stderr");
    }
    for proto in [
        STREAM_PROTOCOL_V1,
        BASE64_STREAM_PROTOCOL_V1,
        STREAM_PROTOCOL_V3,
    ] {
        let req = ExecRequest {
            stdin: false,
            ..exec_req(&["print", "o", "e", "2"])
        };
        let url = server.exec_url(req).unwrap();
        let (res, out, _) = run_ws(&url, &[proto], None).await;
        assert_eq!(out, b"o");
        assert!(
            matches!(res.outcome, Outcome::Failure(ref m) if m.contains("non-zero exit code")),
            "{proto}: {:?}",
            res.outcome
        );
    }
    server.shutdown().await;
}

#[tokio::test]
async fn attach_over_spdy_and_websocket() {
    let (server, fake) = start(Fake::default()).await;
    let req = AttachRequest {
        container_id: "main".into(),
        tty: false,
        stdin: true,
        stdout: true,
        stderr: true,
    };
    let url = server.attach_url(req.clone()).unwrap();
    assert!(url.contains("/attach/"));
    let (res, out, err) = run_spdy(&url, &[STREAM_PROTOCOL_V4], b"typed\n").await;
    assert_eq!(res.outcome, Outcome::Success);
    assert_eq!(out, b"typed\n");
    assert_eq!(err, b"attached\n");

    let url = server.attach_url(req).unwrap();
    let (res, out, err) = run_ws(&url, &[STREAM_PROTOCOL_V5], Some(b"more")).await;
    assert_eq!(res.outcome, Outcome::Success);
    assert_eq!(out, b"more");
    assert_eq!(err, b"attached\n");
    assert_eq!(
        fake.log(),
        vec!["attach main tty=false", "attach main tty=false"]
    );
    server.shutdown().await;
}

#[tokio::test]
async fn a_client_that_goes_away_cancels_the_session() {
    let (server, fake) = start(Fake::default()).await;
    let url = server
        .exec_url(ExecRequest {
            stdin: false,
            stderr: false,
            ..exec_req(&["hang"])
        })
        .unwrap();
    let (out_w, _out_r) = pipe();
    let io = CommandIo {
        stdout: Some(Box::new(out_w)),
        ..Default::default()
    };
    let session =
        tokio::spawn(
            async move { remote_command_spdy(&url, &[STREAM_PROTOCOL_V4], io, &opts()).await },
        );
    // Wait until the runtime runs, then hang up.
    for _ in 0..200 {
        if !fake.log().is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(fake.dropped.load(Ordering::SeqCst), 0);
    session.abort();
    for _ in 0..500 {
        if fake.dropped.load(Ordering::SeqCst) == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(
        fake.dropped.load(Ordering::SeqCst),
        1,
        "runtime future not dropped"
    );
    server.shutdown().await;
}

#[tokio::test]
async fn shutdown_ends_sessions_in_progress() {
    let (server, fake) = start(Fake::default()).await;
    let url = server
        .exec_url(ExecRequest {
            stdin: false,
            stderr: false,
            ..exec_req(&["hang"])
        })
        .unwrap();
    let (out_w, _out_r) = pipe();
    let io = CommandIo {
        stdout: Some(Box::new(out_w)),
        ..Default::default()
    };
    let session = tokio::spawn(async move {
        remote_command_websocket(&url, &[STREAM_PROTOCOL_V5], io, &opts()).await
    });
    for _ in 0..200 {
        if !fake.log().is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tokio::time::timeout(Duration::from_secs(5), server.shutdown())
        .await
        .unwrap();
    assert_eq!(fake.dropped.load(Ordering::SeqCst), 1);
    // The client sees the connection end without a status.
    let res = tokio::time::timeout(Duration::from_secs(5), session)
        .await
        .unwrap()
        .unwrap();
    assert!(res.is_err(), "{res:?}");
}

#[tokio::test]
async fn streams_not_created_in_time_close_the_connection() {
    let cfg = peapod_streaming::Config {
        stream_creation_timeout: Duration::from_millis(200),
        ..Default::default()
    };
    let (server, fake) = start_with(Fake::default(), cfg).await;
    let url = server.exec_url(exec_req(&["echo"])).unwrap();
    let (conn, _incoming, proto) = client::upgrade_spdy(&url, &[STREAM_PROTOCOL_V4], &opts())
        .await
        .unwrap();
    assert_eq!(proto, STREAM_PROTOCOL_V4);
    // Only the error stream; stdin, stdout and stderr never come.
    let _err = conn
        .open_stream(peapod_streaming::spdy::Headers::new().with("streamType", "error"))
        .await
        .unwrap();
    tokio::time::timeout(Duration::from_secs(5), conn.closed())
        .await
        .expect("server did not close");
    assert!(fake.log().is_empty());
    server.shutdown().await;
}

#[tokio::test]
async fn unexpected_and_duplicate_streams_are_ignored() {
    let (server, _fake) = start(Fake::default()).await;
    let url = server
        .exec_url(ExecRequest {
            stdin: false,
            stderr: false,
            ..exec_req(&["print", "ok", "", "0"])
        })
        .unwrap();
    let (conn, _incoming, _) = client::upgrade_spdy(&url, &[STREAM_PROTOCOL_V4], &opts())
        .await
        .unwrap();
    let open = |t: &'static str| {
        let conn = conn.clone();
        async move {
            conn.open_stream(peapod_streaming::spdy::Headers::new().with("streamType", t))
                .await
                .unwrap()
        }
    };
    let mut err = open("error").await;
    let _bogus = open("bogus").await;
    let _dup = open("error").await;
    let _stdin = open("stdin").await; // not requested
    let mut out = open("stdout").await;
    let mut got = Vec::new();
    out.read_to_end(&mut got).await.unwrap();
    assert_eq!(got, b"ok");
    let mut status = Vec::new();
    err.read_to_end(&mut status).await.unwrap();
    assert_eq!(status, br#"{"metadata":{},"status":"Success"}"#);
    server.shutdown().await;
}

#[tokio::test]
async fn exec_over_tls() {
    init_tracing();
    let tmp = tempfile::Builder::new()
        .prefix("peapod-streaming-tls-")
        .tempdir()
        .unwrap();
    let dir = tmp.path().to_path_buf();
    let cert =
        rcgen::generate_simple_self_signed(vec!["127.0.0.1".into(), "localhost".into()]).unwrap();
    let cert_pem = cert.cert.pem();
    std::fs::write(dir.join("cert.pem"), &cert_pem).unwrap();
    std::fs::write(dir.join("key.pem"), cert.key_pair.serialize_pem()).unwrap();
    let cfg = peapod_streaming::Config {
        tls: Some(peapod_streaming::TlsConfig {
            cert_file: dir.join("cert.pem"),
            key_file: dir.join("key.pem"),
        }),
        ..Default::default()
    };
    let (server, _fake) = start_with(Fake::default(), cfg).await;
    assert!(server.base_url().starts_with("https://127.0.0.1:"));
    let tls = ClientOptions {
        tls: Some(client::tls_trusting(cert_pem.as_bytes()).unwrap()),
        ..Default::default()
    };
    let url = server
        .exec_url(ExecRequest {
            stderr: false,
            ..exec_req(&["echo-exit", "4"])
        })
        .unwrap();
    let (out_w, mut out_r) = pipe();
    let io = CommandIo {
        stdin: Some(Box::new(std::io::Cursor::new(b"secure".to_vec()))),
        stdout: Some(Box::new(out_w)),
        ..Default::default()
    };
    let res = remote_command_spdy(&url, &[STREAM_PROTOCOL_V4], io, &tls)
        .await
        .unwrap();
    assert_eq!(res.outcome, Outcome::ExitCode(4));
    let mut out = Vec::new();
    out_r.read_to_end(&mut out).await.unwrap();
    assert_eq!(out, b"secure");

    let url = server
        .exec_url(ExecRequest {
            stdin: false,
            ..exec_req(&["print", "ws", "", "0"])
        })
        .unwrap();
    let (out_w, mut out_r) = pipe();
    let io = CommandIo {
        stdout: Some(Box::new(out_w)),
        ..Default::default()
    };
    let res = remote_command_websocket(&url, &[STREAM_PROTOCOL_V5], io, &tls)
        .await
        .unwrap();
    assert_eq!(res.outcome, Outcome::Success);
    let mut out = Vec::new();
    out_r.read_to_end(&mut out).await.unwrap();
    assert_eq!(out, b"ws");

    // Plain HTTP against the TLS port fails cleanly.
    let plain = url.replacen("https://", "http://", 1);
    assert!(
        remote_command_spdy(&plain, &[STREAM_PROTOCOL_V4], CommandIo::default(), &opts())
            .await
            .is_err()
    );
    server.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn stdin_is_half_closed_by_spdy_fin() {
    // A command that only ends at stdin EOF: proves the FIN reaches the runtime as EOF.
    let (server, _fake) = start(Fake::default()).await;
    let url = server
        .exec_url(ExecRequest {
            stderr: false,
            ..exec_req(&["echo"])
        })
        .unwrap();
    let (mut stdin_w, stdin_r) = pipe();
    let (out_w, mut out_r) = pipe();
    let io = CommandIo {
        stdin: Some(Box::new(stdin_r)),
        stdout: Some(Box::new(out_w)),
        ..Default::default()
    };
    let session =
        tokio::spawn(
            async move { remote_command_spdy(&url, &[STREAM_PROTOCOL_V4], io, &opts()).await },
        );
    stdin_w.write_all(b"line one\n").await.unwrap();
    assert_eq!(read_line(&mut out_r).await, "line one");
    stdin_w.write_all(b"line two\n").await.unwrap();
    assert_eq!(read_line(&mut out_r).await, "line two");
    drop(stdin_w);
    let res = tokio::time::timeout(Duration::from_secs(10), session)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(res.outcome, Outcome::Success);
    server.shutdown().await;
}
