//! ExecSync and the streaming server (exec, attach, port-forward) against real containers,
//! driven by SPDY and WebSocket clients written from the protocols.

use e2e::pods::{busybox, container, sh, Images, Pod};
use e2e::TestDaemon;
use peapod_proto::v1 as cri;
use peapod_streaming::client::{
    remote_command_spdy, remote_command_websocket, ClientOptions, CommandIo, ForwardedStream,
    Outcome, SpdyPortForwarder, WsPortForward,
};
use peapod_streaming::protocol::{STREAM_PROTOCOL_V4, STREAM_PROTOCOL_V5};
use peapod_streaming::TerminalSize;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tonic::Code;

const WAIT: Duration = Duration::from_secs(20);

async fn setup(name: &str) -> (TestDaemon, Images, String, Pod) {
    let mut d = TestDaemon::start(name).await;
    let images = Images::start();
    let image = images.push(&format!("busybox:{name}"), &busybox());
    d.pull(&image).await;
    let pod = d.run_pod(&format!("{name}-pod")).await;
    (d, images, image, pod)
}

async fn exec_sync(
    d: &mut TestDaemon,
    id: &str,
    cmd: &[&str],
    timeout: i64,
) -> Result<cri::ExecSyncResponse, tonic::Status> {
    d.cri
        .runtime
        .exec_sync(cri::ExecSyncRequest {
            container_id: id.to_string(),
            cmd: cmd.iter().map(|s| s.to_string()).collect(),
            timeout,
        })
        .await
        .map(|r| r.into_inner())
}

/// A pipe whose read end goes to a client and whose write end stays with the test.
fn collector() -> (
    Box<dyn tokio::io::AsyncWrite + Send + Unpin>,
    tokio::io::DuplexStream,
) {
    let (a, b) = tokio::io::duplex(1 << 20);
    (Box::new(a), b)
}

async fn read_all(mut r: tokio::io::DuplexStream) -> String {
    let mut s = String::new();
    let _ = r.read_to_string(&mut s).await;
    s
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_sync_output_exit_code_timeout_and_cap() {
    let (mut d, _images, image, pod) = setup("execsync").await;
    let id = d.run_container(&pod, sh("app", &image, "sleep 300")).await;

    let r = exec_sync(
        &mut d,
        &id,
        &["sh", "-c", "echo out; echo err >&2; exit 5"],
        0,
    )
    .await
    .unwrap();
    assert_eq!(
        (r.stdout.as_slice(), r.stderr.as_slice(), r.exit_code),
        (&b"out\n"[..], &b"err\n"[..], 5)
    );

    // Past the timeout: DeadlineExceeded, and the process is gone.
    let t = Instant::now();
    let err = exec_sync(
        &mut d,
        &id,
        &["sh", "-c", "echo $$ > /tmp/timed.pid; exec sleep 600"],
        1,
    )
    .await
    .unwrap_err();
    assert_eq!(err.code(), Code::DeadlineExceeded, "{err}");
    assert!(t.elapsed() < Duration::from_secs(15), "{:?}", t.elapsed());
    let r = exec_sync(
        &mut d,
        &id,
        &[
            "sh",
            "-c",
            "kill -0 $(cat /tmp/timed.pid) 2>/dev/null && echo alive || echo gone",
        ],
        5,
    )
    .await
    .unwrap();
    assert_eq!(String::from_utf8_lossy(&r.stdout), "gone\n");

    // Output past the cap is cut, with a message saying so.
    let r = exec_sync(&mut d, &id, &["sh", "-c", "head -c 17000000 /dev/zero"], 30)
        .await
        .unwrap();
    assert_eq!(r.exit_code, 0);
    assert_eq!(r.stdout.len(), 16 << 20);
    assert!(
        String::from_utf8_lossy(&r.stderr).contains("stdout truncated"),
        "{:?}",
        String::from_utf8_lossy(&r.stderr)
    );

    // Bad requests.
    assert_eq!(
        exec_sync(&mut d, &id, &[], 0).await.unwrap_err().code(),
        Code::InvalidArgument
    );
    assert_eq!(
        exec_sync(&mut d, &"9".repeat(64), &["true"], 0)
            .await
            .unwrap_err()
            .code(),
        Code::NotFound
    );
    let done = d.run_container(&pod, sh("done", &image, "true")).await;
    d.wait_exited(&done, WAIT).await;
    assert_eq!(
        exec_sync(&mut d, &done, &["true"], 0)
            .await
            .unwrap_err()
            .code(),
        Code::FailedPrecondition
    );

    d.remove_pod(&pod).await;
    assert!(d.leftovers().is_empty(), "{:#?}", d.leftovers());
}

async fn exec_url(
    d: &mut TestDaemon,
    id: &str,
    cmd: &[&str],
    tty: bool,
    stdin: bool,
    stderr: bool,
) -> Result<String, tonic::Status> {
    d.cri
        .runtime
        .exec(cri::ExecRequest {
            container_id: id.to_string(),
            cmd: cmd.iter().map(|s| s.to_string()).collect(),
            tty,
            stdin,
            stdout: true,
            stderr,
        })
        .await
        .map(|r| r.into_inner().url)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_streams_over_spdy_and_websocket_with_tty_and_resize() {
    let (mut d, _images, image, pod) = setup("exec").await;
    let id = d.run_container(&pod, sh("app", &image, "sleep 300")).await;
    let opts = ClientOptions::default();
    let script = ["sh", "-c", "cat; echo to-err >&2; exit 7"];

    for transport in ["spdy", "websocket"] {
        let url = exec_url(&mut d, &id, &script, false, true, true)
            .await
            .unwrap();
        let (out_w, out_r) = collector();
        let (err_w, err_r) = collector();
        let io = CommandIo {
            stdin: Some(Box::new(std::io::Cursor::new(
                b"hello from stdin\n".to_vec(),
            ))),
            stdout: Some(out_w),
            stderr: Some(err_w),
            tty: false,
            resize: None,
        };
        let result = match transport {
            "spdy" => remote_command_spdy(&url, &[STREAM_PROTOCOL_V4], io, &opts).await,
            _ => remote_command_websocket(&url, &[STREAM_PROTOCOL_V5], io, &opts).await,
        }
        .unwrap_or_else(|e| panic!("{transport}: {e}\n{}", d.log()));
        assert_eq!(result.outcome, Outcome::ExitCode(7), "{transport}");
        assert_eq!(read_all(out_r).await, "hello from stdin\n", "{transport}");
        assert_eq!(read_all(err_r).await, "to-err\n", "{transport}");
        // The URL is single use.
        let again = remote_command_spdy(
            &url,
            &[STREAM_PROTOCOL_V4],
            CommandIo {
                stdout: Some(collector().0),
                ..Default::default()
            },
            &opts,
        )
        .await;
        assert!(again.is_err(), "{transport}: a used token worked again");
    }

    // A terminal, resized by the client.
    let url = exec_url(
        &mut d,
        &id,
        &["sh", "-c", "for i in $(seq 1 100); do s=$(stty size); [ \"$s\" = '40 100' ] && { echo \"size $s\"; exit 0; }; sleep 0.05; done; echo \"stuck at $s\"; exit 1"],
        true,
        true,
        false,
    )
    .await
    .unwrap();
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    tx.send(TerminalSize {
        width: 100,
        height: 40,
    })
    .await
    .unwrap();
    let (out_w, out_r) = collector();
    let (_stdin_keep, stdin_r) = tokio::io::duplex(64);
    let io = CommandIo {
        stdin: Some(Box::new(stdin_r)),
        stdout: Some(out_w),
        stderr: None,
        tty: true,
        resize: Some(rx),
    };
    let result = remote_command_websocket(&url, &[STREAM_PROTOCOL_V5], io, &opts)
        .await
        .unwrap();
    let out = read_all(out_r).await;
    assert_eq!(result.outcome, Outcome::Success, "{out}");
    assert!(out.contains("size 40 100"), "{out:?}");
    drop(tx);

    // A client that goes away mid-exec leaves no process behind.
    let url = exec_url(&mut d, &id, &["sleep", "601"], false, false, true)
        .await
        .unwrap();
    let client = tokio::spawn(async move {
        let io = CommandIo {
            stdout: Some(collector().0),
            stderr: Some(collector().0),
            ..Default::default()
        };
        remote_command_spdy(&url, &[STREAM_PROTOCOL_V4], io, &ClientOptions::default()).await
    });
    let count = "ps -o args | grep -c '^sleep 601' || true";
    let mut started = false;
    for _ in 0..200 {
        let r = exec_sync(&mut d, &id, &["sh", "-c", count], 5)
            .await
            .unwrap();
        if String::from_utf8_lossy(&r.stdout).trim() == "1" {
            started = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert!(started, "the exec'd process never showed up");
    client.abort();
    let deadline = Instant::now() + WAIT;
    loop {
        let r = exec_sync(&mut d, &id, &["sh", "-c", count], 5)
            .await
            .unwrap();
        if String::from_utf8_lossy(&r.stdout).trim() == "0" {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the exec'd process outlived its client"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // Validation at the CRI: tty with stderr, no streams, a stopped container.
    let err = exec_url(&mut d, &id, &["true"], true, false, true)
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "{err}");
    assert!(err.message().contains("stderr"), "{err}");
    let err = d
        .cri
        .runtime
        .exec(cri::ExecRequest {
            container_id: id.clone(),
            cmd: vec!["true".into()],
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "{err}");
    d.cri
        .runtime
        .stop_container(cri::StopContainerRequest {
            container_id: id.clone(),
            timeout: 0,
        })
        .await
        .unwrap();
    let err = exec_url(&mut d, &id, &["true"], false, false, true)
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition, "{err}");

    d.remove_pod(&pod).await;
    assert!(d.leftovers().is_empty(), "{:#?}", d.leftovers());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attach_to_the_main_process() {
    let (mut d, _images, image, pod) = setup("attach").await;
    let mut c = sh("echoer", &image, "echo started; while read line; do echo \"got $line\"; echo \"err $line\" >&2; done; echo bye");
    c.stdin = true;
    c.stdin_once = true;
    let id = d.run_container(&pod, c).await;
    d.wait_log(&id, "started", WAIT).await;
    let url = d
        .cri
        .runtime
        .attach(cri::AttachRequest {
            container_id: id.clone(),
            stdin: true,
            tty: false,
            stdout: true,
            stderr: true,
        })
        .await
        .unwrap()
        .into_inner()
        .url;
    let (out_w, out_r) = collector();
    let (err_w, err_r) = collector();
    let io = CommandIo {
        stdin: Some(Box::new(std::io::Cursor::new(b"one\ntwo\n".to_vec()))),
        stdout: Some(out_w),
        stderr: Some(err_w),
        tty: false,
        resize: None,
    };
    // stdin_once: when our stdin ends, the container's stdin closes, the loop ends, it exits.
    let result = tokio::time::timeout(
        WAIT,
        remote_command_spdy(&url, &[STREAM_PROTOCOL_V4], io, &ClientOptions::default()),
    )
    .await
    .expect("attach ended")
    .unwrap_or_else(|e| panic!("{e}\n{}", d.log()));
    assert_eq!(result.outcome, Outcome::Success);
    assert_eq!(read_all(out_r).await, "got one\ngot two\nbye\n");
    assert_eq!(read_all(err_r).await, "err one\nerr two\n");
    let st = d.wait_exited(&id, WAIT).await;
    assert_eq!(st.exit_code, 0);
    // Attach refuses stdin for a container created without it.
    let other = d
        .run_container(&pod, sh("nostdin", &image, "sleep 300"))
        .await;
    let err = d
        .cri
        .runtime
        .attach(cri::AttachRequest {
            container_id: other,
            stdin: true,
            tty: false,
            stdout: true,
            stderr: false,
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "{err}");
    d.remove_pod(&pod).await;
    assert!(d.leftovers().is_empty(), "{:#?}", d.leftovers());
}

async fn http_get(
    stream: &mut (impl tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin),
    path: &str,
) -> String {
    stream
        .write_all(format!("GET {path} HTTP/1.0\r\nHost: x\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut buf = Vec::new();
    let _ = stream.read_to_end(&mut buf).await;
    String::from_utf8_lossy(&buf).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn port_forward_to_httpd_in_the_pod() {
    let (mut d, _images, image, pod) = setup("portfwd").await;
    let www = d.dir.join("www");
    std::fs::create_dir_all(&www).unwrap();
    std::fs::write(www.join("index.html"), "hello through the tunnel\n").unwrap();
    std::fs::write(www.join("other.html"), "second port\n").unwrap();
    for (name, port) in [("web", "8080"), ("web2", "9090")] {
        let mut c = container(
            name,
            &image,
            &["httpd", "-f", "-p", port, "-h", "/www"],
            &[],
        );
        c.mounts.push(cri::Mount {
            container_path: "/www".into(),
            host_path: www.display().to_string(),
            readonly: true,
            ..Default::default()
        });
        d.run_container(&pod, c).await;
    }
    // Wait until both listen (httpd starts asynchronously).
    let probe = d.run_container(&pod, sh("probe", &image, "until wget -q -O - http://127.0.0.1:8080/ && wget -q -O - http://127.0.0.1:9090/other.html; do sleep 0.1; done")).await;
    d.wait_exited(&probe, WAIT).await;

    let url = d
        .cri
        .runtime
        .port_forward(cri::PortForwardRequest {
            pod_sandbox_id: pod.id.clone(),
            port: vec![8080, 9090],
        })
        .await
        .unwrap()
        .into_inner()
        .url;
    let fwd = SpdyPortForwarder::connect(&url, &ClientOptions::default())
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", d.log()));
    // Two streams at once, on two ports.
    let (mut a, mut b) = (fwd.open(8080).await.unwrap(), fwd.open(9090).await.unwrap());
    let (ra, rb) = tokio::join!(
        http_get(&mut a.data, "/index.html"),
        http_get(&mut b.data, "/other.html")
    );
    assert!(
        ra.contains("200") && ra.ends_with("hello through the tunnel\n"),
        "{ra}"
    );
    assert!(rb.ends_with("second port\n"), "{rb}");
    // client-go (kubectl, critest) ends each connection with a reset of its data stream once
    // the pod's side is done, then reads the error stream: a reset is no failure to report
    // (reported, client-go drops the whole session: "lost connection to pod").
    for done in [a, b] {
        let ForwardedStream { data, mut error } = done;
        data.reset();
        let mut msg = String::new();
        tokio::time::timeout(WAIT, error.read_to_string(&mut msg))
            .await
            .expect("the error stream ends")
            .unwrap();
        assert_eq!(msg, "", "a client's reset reported as an error");
    }
    // The session goes on.
    let mut again = fwd.open(8080).await.unwrap();
    let page = http_get(&mut again.data, "/index.html").await;
    assert!(page.ends_with("hello through the tunnel\n"), "{page}");
    // A port nobody listens on: the error stream says so.
    let mut c = fwd.open(7070).await.unwrap();
    let msg = tokio::time::timeout(WAIT, c.error_message())
        .await
        .expect("the error stream ends")
        .unwrap();
    assert!(
        msg.contains("7070") || msg.to_lowercase().contains("refused"),
        "{msg}"
    );

    // The WebSocket port-forward protocol.
    let url = d
        .cri
        .runtime
        .port_forward(cri::PortForwardRequest {
            pod_sandbox_id: pod.id.clone(),
            port: vec![8080],
        })
        .await
        .unwrap()
        .into_inner()
        .url;
    let mut ws = WsPortForward::connect(
        &url,
        &[8080],
        "v4.channel.k8s.io",
        &ClientOptions::default(),
    )
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", d.log()));
    // The WebSocket protocol has no half-close, so read until the body is there.
    let data = &mut ws.ports[0].data;
    data.write_all(b"GET /index.html HTTP/1.0\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut page = Vec::new();
    let got = tokio::time::timeout(WAIT, async {
        let mut buf = [0u8; 4096];
        while !String::from_utf8_lossy(&page).ends_with("hello through the tunnel\n") {
            match data.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => page.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await;
    assert!(
        got.is_ok(),
        "no page over WebSocket: {:?}",
        String::from_utf8_lossy(&page)
    );
    assert!(
        String::from_utf8_lossy(&page).contains("200"),
        "{:?}",
        String::from_utf8_lossy(&page)
    );
    drop(ws);

    d.remove_pod(&pod).await;
    assert!(d.leftovers().is_empty(), "{:#?}", d.leftovers());
}
