//! URL tokens, routing, negotiation failures and request validation at the HTTP level.

mod common;

use std::time::Duration;

use common::*;
use peapod_streaming::client::{
    remote_command_spdy, remote_command_websocket, upgrade_spdy, ClientError, ClientOptions,
    CommandIo, Outcome,
};
use peapod_streaming::protocol::*;
use peapod_streaming::{Config, Error, ExecRequest, PortForwardRequest};

fn opts() -> ClientOptions {
    ClientOptions::default()
}

fn status_of(e: ClientError) -> u16 {
    match e {
        ClientError::Http { status, .. } => status.as_u16(),
        other => panic!("expected an HTTP refusal, got {other}"),
    }
}

async fn quick_exec(url: &str) -> Result<Outcome, ClientError> {
    let io = CommandIo {
        stdout: Some(Box::new(tokio::io::sink())),
        ..Default::default()
    };
    remote_command_spdy(url, &[STREAM_PROTOCOL_V4], io, &opts())
        .await
        .map(|r| r.outcome)
}

fn print_req() -> ExecRequest {
    ExecRequest {
        stdin: false,
        stderr: false,
        ..exec_req(&["print", "", "", "0"])
    }
}

#[tokio::test]
async fn a_token_works_once() {
    let (server, fake) = start(Fake::default()).await;
    let url = server.exec_url(print_req()).unwrap();
    assert_eq!(quick_exec(&url).await.unwrap(), Outcome::Success);
    assert_eq!(status_of(quick_exec(&url).await.unwrap_err()), 404);
    // Also over WebSocket.
    let err = remote_command_websocket(&url, &[STREAM_PROTOCOL_V5], CommandIo::default(), &opts())
        .await
        .unwrap_err();
    assert_eq!(status_of(err), 404);
    assert_eq!(fake.log().len(), 1);
    server.shutdown().await;
}

#[tokio::test]
async fn a_token_expires() {
    let cfg = Config {
        token_ttl: Duration::from_millis(200),
        ..Default::default()
    };
    let (server, fake) = start_with(Fake::default(), cfg).await;
    let fresh = server.exec_url(print_req()).unwrap();
    let stale = server.exec_url(print_req()).unwrap();
    assert_eq!(quick_exec(&fresh).await.unwrap(), Outcome::Success);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(status_of(quick_exec(&stale).await.unwrap_err()), 404);
    assert_eq!(fake.log().len(), 1);
    server.shutdown().await;
}

#[tokio::test]
async fn tokens_are_bound_to_their_verb_and_consumed_by_misuse() {
    let (server, fake) = start(Fake::default()).await;
    let url = server.exec_url(print_req()).unwrap();
    let wrong = url.replace("/exec/", "/attach/");
    assert_eq!(status_of(quick_exec(&wrong).await.unwrap_err()), 404);
    // The kubelet consumes a token on any use; so do we.
    assert_eq!(status_of(quick_exec(&url).await.unwrap_err()), 404);
    let pf = server
        .port_forward_url(PortForwardRequest {
            sandbox_id: "s".into(),
            ports: vec![],
        })
        .unwrap();
    assert_eq!(
        status_of(
            quick_exec(&pf.replace("/portforward/", "/exec/"))
                .await
                .unwrap_err()
        ),
        404
    );
    let unknown = format!("{}/exec/not-a-token", server.base_url());
    assert_eq!(status_of(quick_exec(&unknown).await.unwrap_err()), 404);
    assert!(fake.log().is_empty());
    server.shutdown().await;
}

#[tokio::test]
async fn plain_http_gets_plain_errors() {
    let (server, _fake) = start(Fake::default()).await;
    let addr = server.local_addr();
    let url = server.exec_url(print_req()).unwrap();
    let path = url.trim_start_matches(&server.base_url()).to_string();
    // No upgrade headers: 400, and the token is gone.
    let (code, text) = raw_http(
        addr,
        &format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"),
    )
    .await;
    assert_eq!(code, 400, "{text}");
    assert!(text.contains("missing upgrade headers"));
    let (code, _) = raw_http(
        addr,
        &format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"),
    )
    .await;
    assert_eq!(code, 404);
    let (code, _) = raw_http(
        addr,
        "DELETE /exec/x HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert_eq!(code, 405);
    for path in ["/", "/exec", "/exec/", "/exec/a/b", "/other/tok"] {
        let (code, _) = raw_http(
            addr,
            &format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"),
        )
        .await;
        assert_eq!(code, 404, "{path}");
    }
    server.shutdown().await;
}

#[tokio::test]
async fn unknown_protocols_are_refused_with_the_accepted_list() {
    let (server, _fake) = start(Fake::default()).await;
    let url = server.exec_url(print_req()).unwrap();
    match upgrade_spdy(&url, &["v9.channel.k8s.io"], &opts()).await {
        Err(ClientError::Http { status, body }) => {
            assert_eq!(status, 403);
            assert!(body.contains("unable to negotiate protocol"), "{body}");
        }
        other => panic!("{other:?}"),
    }
    // Raw, to see the header.
    let url = server.exec_url(print_req()).unwrap();
    let path = url.trim_start_matches(&server.base_url()).to_string();
    let (code, text) = raw_http(
        server.local_addr(),
        &format!(
            "POST {path} HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\nX-Stream-Protocol-Version: nope\r\nContent-Length: 0\r\n\r\n"
        ),
    )
    .await;
    assert_eq!(code, 403);
    assert!(
        text.to_ascii_lowercase()
            .contains("x-accepted-stream-protocol-versions: v4.channel.k8s.io"),
        "{text}"
    );
    let url = server.exec_url(print_req()).unwrap();
    let err = remote_command_websocket(&url, &["v9.channel.k8s.io"], CommandIo::default(), &opts())
        .await
        .unwrap_err();
    assert_eq!(status_of(err), 403);
    server.shutdown().await;
}

#[tokio::test]
async fn requests_are_validated_when_urls_are_issued() {
    let (server, _fake) = start(Fake::default()).await;
    let bad = ExecRequest {
        tty: true,
        stderr: true,
        ..exec_req(&["echo"])
    };
    match server.exec_url(bad) {
        Err(Error::InvalidRequest(v)) => assert_eq!(v.field, "stderr"),
        other => panic!("{other:?}"),
    }
    let none = ExecRequest {
        stdin: false,
        stdout: false,
        stderr: false,
        ..exec_req(&["echo"])
    };
    assert!(matches!(
        server.exec_url(none),
        Err(Error::InvalidRequest(_))
    ));
    assert!(matches!(
        server.port_forward_url(PortForwardRequest {
            sandbox_id: "s".into(),
            ports: vec![-1]
        }),
        Err(Error::InvalidRequest(v)) if v.field == "port"
    ));
    server.shutdown().await;
}

#[tokio::test]
async fn in_flight_urls_are_capped() {
    let cfg = Config {
        max_in_flight: 2,
        ..Default::default()
    };
    let (server, _fake) = start_with(Fake::default(), cfg).await;
    let a = server.exec_url(print_req()).unwrap();
    server.exec_url(print_req()).unwrap();
    assert!(matches!(
        server.exec_url(print_req()),
        Err(Error::TooManyInFlight { limit: 2 })
    ));
    quick_exec(&a).await.unwrap();
    server.exec_url(print_req()).unwrap();
    server.shutdown().await;
}

#[tokio::test]
async fn base_url_with_a_path_prefix() {
    init_tracing();
    // Bind first to learn a free port, then advertise it under a prefix.
    let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = probe.local_addr().unwrap().port();
    drop(probe);
    let cfg = Config {
        address: format!("127.0.0.1:{port}"),
        base_url: Some(format!("http://127.0.0.1:{port}/cri/streaming/")),
        ..Default::default()
    };
    let (server, _fake) = start_with(Fake::default(), cfg).await;
    assert_eq!(
        server.base_url(),
        format!("http://127.0.0.1:{port}/cri/streaming")
    );
    let url = server.exec_url(print_req()).unwrap();
    assert!(url.starts_with(&format!("http://127.0.0.1:{port}/cri/streaming/exec/")));
    assert_eq!(quick_exec(&url).await.unwrap(), Outcome::Success);
    let url = server.exec_url(print_req()).unwrap();
    let unprefixed = url.replace("/cri/streaming", "");
    assert_eq!(status_of(quick_exec(&unprefixed).await.unwrap_err()), 404);
    server.shutdown().await;
}

#[tokio::test]
async fn bad_configuration_is_reported() {
    init_tracing();
    let fake = std::sync::Arc::new(Fake::default());
    let err = peapod_streaming::Server::start(
        Config {
            address: "not an address".into(),
            ..Default::default()
        },
        fake.clone(),
    )
    .await
    .unwrap_err();
    assert!(matches!(err, Error::Bind { .. }), "{err}");
    let err = peapod_streaming::Server::start(
        Config {
            tls: Some(peapod_streaming::TlsConfig {
                cert_file: "/nonexistent/cert.pem".into(),
                key_file: "/nonexistent/key.pem".into(),
            }),
            ..Default::default()
        },
        fake.clone(),
    )
    .await
    .unwrap_err();
    assert!(err.to_string().contains("/nonexistent/cert.pem"), "{err}");
    let err = peapod_streaming::Server::start(
        Config {
            base_url: Some("ftp://x".into()),
            ..Default::default()
        },
        fake,
    )
    .await
    .unwrap_err();
    assert!(matches!(err, Error::BaseUrl(_)), "{err}");
}
