//! Port-forward through a real server to real TCP listeners on loopback.

mod common;

use std::collections::HashMap;
use std::time::Duration;

use common::*;
use peapod_streaming::client::{ClientOptions, ForwardedStream, SpdyPortForwarder, WsPortForward};
use peapod_streaming::protocol::*;
use peapod_streaming::spdy::Headers;
use peapod_streaming::PortForwardRequest;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

fn opts() -> ClientOptions {
    ClientOptions::default()
}

async fn fake_with_two_ports() -> Fake {
    let a = echo_server("alpha").await;
    let b = echo_server("beta").await;
    Fake {
        ports: HashMap::from([(80, a), (8080, b)]),
        ..Default::default()
    }
}

fn pf_req(ports: &[i32]) -> PortForwardRequest {
    PortForwardRequest {
        sandbox_id: "pod1".into(),
        ports: ports.to_vec(),
    }
}

/// Greeting, then an echo of `payload`, then our half-close and the server's.
async fn converse(s: &mut (impl AsyncRead + AsyncWrite + Unpin), name: &str, payload: &[u8]) {
    assert_eq!(read_line(s).await, format!("hello from {name}"));
    let (mut r, mut w) = tokio::io::split(s);
    let sent = payload.to_vec();
    let writer = async move {
        w.write_all(&sent).await.unwrap();
        w.shutdown().await.unwrap();
    };
    let reader = async move {
        let mut got = Vec::new();
        r.read_to_end(&mut got).await.unwrap();
        got
    };
    let ((), got) = tokio::join!(writer, reader);
    assert_eq!(got.len(), payload.len());
    assert!(got == payload, "echo differs");
}

async fn spdy_two_ports_two_streams_each(pf: SpdyPortForwarder) {
    let pf = std::sync::Arc::new(pf);
    let mut tasks = Vec::new();
    for (port, name) in [
        (80u16, "alpha"),
        (8080, "beta"),
        (80, "alpha"),
        (8080, "beta"),
    ] {
        let pf = pf.clone();
        tasks.push(tokio::spawn(async move {
            let mut fwd: ForwardedStream = pf.open(port).await.unwrap();
            let payload = pattern(200_000 + usize::from(port));
            converse(&mut fwd.data, name, &payload).await;
            assert_eq!(fwd.error_message().await.unwrap(), "");
        }));
    }
    for t in tasks {
        tokio::time::timeout(Duration::from_secs(20), t)
            .await
            .expect("forward timed out")
            .unwrap();
    }
}

#[tokio::test]
async fn spdy_two_ports_two_concurrent_streams() {
    let (server, fake) = start(fake_with_two_ports().await).await;
    let url = server.port_forward_url(pf_req(&[80, 8080])).unwrap();
    assert!(url.contains("/portforward/"));
    let pf = SpdyPortForwarder::connect(&url, &opts()).await.unwrap();
    assert_eq!(pf.protocol(), PORT_FORWARD_PROTOCOL_V1);
    spdy_two_ports_two_streams_each(pf).await;
    let mut log = fake.log();
    log.sort();
    assert_eq!(
        log,
        vec![
            "portforward pod1 80",
            "portforward pod1 80",
            "portforward pod1 8080",
            "portforward pod1 8080"
        ]
    );
    server.shutdown().await;
}

#[tokio::test]
async fn spdy_tunnelled_through_websocket() {
    let (server, _fake) = start(fake_with_two_ports().await).await;
    let url = server.port_forward_url(pf_req(&[])).unwrap();
    let pf = SpdyPortForwarder::connect_tunneled(&url, &opts())
        .await
        .unwrap();
    spdy_two_ports_two_streams_each(pf).await;
    server.shutdown().await;
}

#[tokio::test]
async fn spdy_errors_go_to_the_error_stream() {
    let (server, _fake) = start(fake_with_two_ports().await).await;
    let url = server.port_forward_url(pf_req(&[80, 9999])).unwrap();
    let pf = SpdyPortForwarder::connect(&url, &opts()).await.unwrap();
    // Nothing listens on 9999: the runtime fails, the message comes back.
    let mut fwd = pf.open(9999).await.unwrap();
    let msg = fwd.error_message().await.unwrap();
    assert!(
        msg.contains("error forwarding port 9999 to pod pod1")
            && msg.contains("connection refused"),
        "{msg}"
    );
    let mut rest = Vec::new();
    fwd.data.read_to_end(&mut rest).await.unwrap();
    // 8080 is served by the fake, but this request only allows 80 and 9999.
    let mut fwd = pf.open(8080).await.unwrap();
    let msg = fwd.error_message().await.unwrap();
    assert!(msg.contains("not among the ports"), "{msg}");
    // The connection still works for allowed ports.
    let mut fwd = pf.open(80).await.unwrap();
    converse(&mut fwd.data, "alpha", b"still fine").await;
    server.shutdown().await;
}

#[tokio::test]
async fn spdy_invalid_streams_are_reset() {
    let (server, _fake) = start(fake_with_two_ports().await).await;
    let url = server.port_forward_url(pf_req(&[])).unwrap();
    let pf = SpdyPortForwarder::connect(&url, &opts()).await.unwrap();
    for headers in [
        Headers::new().with("streamType", "data"),
        Headers::new().with("streamType", "data").with("port", "0"),
        Headers::new()
            .with("streamType", "data")
            .with("port", "http"),
        Headers::new()
            .with("streamType", "stdin")
            .with("port", "80"),
    ] {
        let mut s = pf.open_raw(headers).await.unwrap();
        let err = s.read_to_end(&mut Vec::new()).await.unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::ConnectionReset);
    }
    // Old clients without request ids: error stream first, then data, ids two apart.
    let mut err = pf
        .open_raw(
            Headers::new()
                .with("streamType", "error")
                .with("port", "80"),
        )
        .await
        .unwrap();
    let mut data = pf
        .open_raw(Headers::new().with("streamType", "data").with("port", "80"))
        .await
        .unwrap();
    assert_eq!(data.id(), err.id() + 2);
    converse(&mut data, "alpha", b"legacy").await;
    let mut msg = Vec::new();
    err.read_to_end(&mut msg).await.unwrap();
    assert!(msg.is_empty());
    server.shutdown().await;
}

#[tokio::test]
async fn spdy_incomplete_pairs_time_out() {
    let cfg = peapod_streaming::Config {
        stream_creation_timeout: Duration::from_millis(300),
        ..Default::default()
    };
    let (server, fake) = start_with(fake_with_two_ports().await, cfg).await;
    let url = server.port_forward_url(pf_req(&[])).unwrap();
    let pf = SpdyPortForwarder::connect(&url, &opts()).await.unwrap();
    let mut err = pf
        .open_raw(
            Headers::new()
                .with("streamType", "error")
                .with("port", "80")
                .with("requestID", "lonely"),
        )
        .await
        .unwrap();
    let mut msg = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), err.read_to_end(&mut msg)).await;
    assert!(
        String::from_utf8_lossy(&msg).contains("timed out waiting for streams"),
        "{msg:?}"
    );
    assert!(fake.log().is_empty());
    server.shutdown().await;
}

/// Channels cannot be half-closed before v5, so no EOF: echo a known amount and read it back.
async fn talk(p: &mut peapod_streaming::client::WsForwardedPort, name: &'static str) {
    let payload = pattern(100_000);
    assert_eq!(read_line(&mut p.data).await, format!("hello from {name}"));
    let (mut r, mut w) = tokio::io::split(&mut p.data);
    let sent = payload.clone();
    let writer = async move { w.write_all(&sent).await.unwrap() };
    let reader = async move {
        let mut got = vec![0u8; payload.len()];
        r.read_exact(&mut got).await.unwrap();
        assert!(got == payload);
    };
    tokio::join!(writer, reader);
}

#[tokio::test]
async fn websocket_two_ports_in_one_connection() {
    let (server, fake) = start(fake_with_two_ports().await).await;
    for protocol in [STREAM_PROTOCOL_V4, BASE64_STREAM_PROTOCOL_V4, ""] {
        let url = server.port_forward_url(pf_req(&[80, 8080])).unwrap();
        let mut pf = WsPortForward::connect(&url, &[80, 8080], protocol, &opts())
            .await
            .unwrap();
        assert_eq!(pf.protocol, protocol);
        let mut ports = std::mem::take(&mut pf.ports);
        let (a, b) = ports.split_at_mut(1);
        let (a, b) = (&mut a[0], &mut b[0]);
        assert_eq!((a.port, b.port), (80, 8080));
        // Both ports at once.
        tokio::join!(talk(a, "alpha"), talk(b, "beta"));
        pf.close().await;
    }
    assert_eq!(fake.log().len(), 6);
    server.shutdown().await;
}

#[tokio::test]
async fn websocket_port_errors_and_port_selection() {
    let (server, _fake) = start(fake_with_two_ports().await).await;
    // The request's ports are used when the query names none; 9999 fails.
    let url = server.port_forward_url(pf_req(&[9999])).unwrap();
    let (socket, proto) =
        peapod_streaming::client::upgrade_websocket(&url, &[STREAM_PROTOCOL_V4], &opts())
            .await
            .unwrap();
    assert_eq!(proto, STREAM_PROTOCOL_V4);
    drop(socket);
    let url = server.port_forward_url(pf_req(&[9999])).unwrap();
    let mut pf = WsPortForward::connect(&url, &[9999], STREAM_PROTOCOL_V4, &opts())
        .await
        .unwrap();
    let mut msg = vec![0u8; 200];
    let n = pf.ports[0].error.read(&mut msg).await.unwrap();
    let msg = String::from_utf8_lossy(&msg[..n]);
    assert!(msg.contains("error forwarding port 9999"), "{msg}");
    pf.close().await;
    // A port outside the request's list is refused before the upgrade.
    let url = server.port_forward_url(pf_req(&[80])).unwrap();
    match WsPortForward::connect(&url, &[8080], STREAM_PROTOCOL_V4, &opts()).await {
        Err(peapod_streaming::client::ClientError::Http { status, body }) => {
            assert_eq!(status, 400);
            assert!(body.contains("8080"), "{body}");
        }
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("upgraded"),
    }
    server.shutdown().await;
}
