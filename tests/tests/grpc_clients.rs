//! Any gRPC client can call the daemon: clients that send the unix socket's path as the HTTP/2
//! `:authority` (grpcio since 1.57, grpc-java, grpcurl), percent-encoded or not, are served.
//!
//! One test runs Python's `grpcio` with its default options (the venv `scripts/setup` makes);
//! the other writes HTTP/2 by hand, so that the exact bytes on the wire are known.

use e2e::TestDaemon;
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The Python with grpcio that scripts/setup installs: $PEAPOD_GRPCIO_PYTHON, else
/// target/grpcio-venv/bin/python of this workspace.
fn grpcio_python() -> PathBuf {
    if let Ok(p) = std::env::var("PEAPOD_GRPCIO_PYTHON") {
        return p.into();
    }
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/grpcio-venv/bin/python")
}

const PYTHON_CLIENT: &str = r#"
import sys, grpc
sock = sys.argv[1]
# Default options: grpcio sends the percent-encoded socket path as :authority.
channel = grpc.insecure_channel("unix:" + sock)
version = channel.unary_unary("/runtime.v1.RuntimeService/Version")
for _ in range(3):
    reply = version(b"\x0a\x02v1", timeout=10)
    assert b"peapod" in reply, reply
pods = channel.unary_unary("/runtime.v1.RuntimeService/ListPodSandbox")(b"", timeout=10)
print("ok", grpc.__version__, len(reply), len(pods))
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_grpcio_with_default_options_is_served() {
    let d = TestDaemon::start("grpcio").await;
    let python = grpcio_python();
    assert!(
        python.exists(),
        "{} is missing: scripts/setup makes the grpcio venv this test needs",
        python.display()
    );
    let socket = d.socket.clone();
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new(&python)
            .arg("-c")
            .arg(PYTHON_CLIENT)
            .arg(&socket)
            .output()
            .expect("run python")
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.starts_with("ok "),
        "grpcio client failed: {stdout}\n{stderr}"
    );
}

// --- HTTP/2 by hand ---------------------------------------------------------------------------

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let mut out = (payload.len() as u32).to_be_bytes()[1..].to_vec();
    out.push(kind);
    out.push(flags);
    out.extend_from_slice(&stream.to_be_bytes());
    out.extend_from_slice(payload);
    out
}

struct Frame {
    kind: u8,
    flags: u8,
    stream: u32,
    payload: Vec<u8>,
}

fn read_frame(s: &mut UnixStream) -> Frame {
    let mut h = [0u8; 9];
    s.read_exact(&mut h).expect("read frame header");
    let len = u32::from_be_bytes([0, h[0], h[1], h[2]]) as usize;
    let mut payload = vec![0u8; len];
    s.read_exact(&mut payload).expect("read frame payload");
    Frame {
        kind: h[3],
        flags: h[4],
        stream: u32::from_be_bytes([h[5], h[6], h[7], h[8]]) & 0x7fff_ffff,
        payload,
    }
}

/// What the server answered on one stream: response headers, the gRPC message, trailers.
#[derive(Default)]
struct Answer {
    headers: Vec<(String, String)>,
    data: Vec<u8>,
    trailers: Vec<(String, String)>,
    reset: Option<u32>,
}

/// Sends Version on `streams` over one connection, with `authority` and HPACK indexing (as
/// grpcio does: later requests refer to the dynamic table), and collects the answers.
fn version_by_hand(socket: &Path, authority: &str, streams: &[u32]) -> Vec<Answer> {
    let mut s = UnixStream::connect(socket).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut out = PREFACE.to_vec();
    out.extend(frame(0x4, 0, 0, &[]));
    let mut enc = loona_hpack::Encoder::new();
    for &id in streams {
        let block = enc.encode(vec![
            (&b":method"[..], &b"POST"[..]),
            (b":scheme", b"http"),
            (b":path", b"/runtime.v1.RuntimeService/Version"),
            (b":authority", authority.as_bytes()),
            (b"content-type", b"application/grpc"),
            (b"te", b"trailers"),
        ]);
        out.extend(frame(0x1, 0x4, id, &block));
        // A gRPC message: uncompressed, length 4, VersionRequest{version: "v1"}.
        out.extend(frame(0x0, 0x1, id, b"\0\0\0\0\x04\x0a\x02v1"));
    }
    s.write_all(&out).expect("send requests");

    let mut dec = loona_hpack::Decoder::new();
    let mut answers: Vec<Answer> = streams.iter().map(|_| Answer::default()).collect();
    let mut done = 0;
    while done < streams.len() {
        let f = read_frame(&mut s);
        let slot = streams.iter().position(|&id| id == f.stream);
        match (f.kind, slot) {
            (0x4, _) if f.flags & 0x1 == 0 => s.write_all(&frame(0x4, 0x1, 0, &[])).unwrap(),
            (0x1, Some(i)) => {
                let list: Vec<(String, String)> = dec
                    .decode(&f.payload)
                    .expect("decode response headers")
                    .into_iter()
                    .map(|(n, v)| {
                        (
                            String::from_utf8_lossy(&n).into_owned(),
                            String::from_utf8_lossy(&v).into_owned(),
                        )
                    })
                    .collect();
                if answers[i].headers.is_empty() {
                    answers[i].headers = list;
                } else {
                    answers[i].trailers = list;
                }
                if f.flags & 0x1 != 0 {
                    done += 1;
                }
            }
            (0x0, Some(i)) => {
                answers[i].data.extend_from_slice(&f.payload);
                if f.flags & 0x1 != 0 {
                    done += 1;
                }
            }
            (0x3, Some(i)) => {
                answers[i].reset = Some(u32::from_be_bytes(f.payload[..4].try_into().unwrap()));
                done += 1;
            }
            (0x7, _) => panic!("server sent GOAWAY: {:?}", f.payload),
            _ => {}
        }
    }
    answers
}

fn header<'a>(list: &'a [(String, String)], name: &str) -> Option<&'a str> {
    list.iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.as_str())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hand_made_http2_with_socket_path_authority_is_served() {
    let d = TestDaemon::start("h2authority").await;
    let socket = d.socket.clone();
    let encoded: String = socket
        .display()
        .to_string()
        .replace('%', "%25")
        .replace('/', "%2F");
    let cases = [
        encoded,                      // grpcio, grpc-java
        socket.display().to_string(), // grpcurl and others: the raw path
        "localhost".to_string(),      // grpc-go: unchanged path through
    ];
    for authority in cases {
        let socket = socket.clone();
        let auth = authority.clone();
        let answers =
            tokio::task::spawn_blocking(move || version_by_hand(&socket, &auth, &[1, 3, 5]))
                .await
                .unwrap();
        for (i, a) in answers.iter().enumerate() {
            assert_eq!(a.reset, None, "{authority}: stream {i} was reset");
            assert_eq!(header(&a.headers, ":status"), Some("200"), "{authority}");
            assert_eq!(header(&a.trailers, "grpc-status"), Some("0"), "{authority}");
            // The VersionResponse names the runtime.
            let body = String::from_utf8_lossy(&a.data);
            assert!(body.contains("peapod"), "{authority}: {body:?}");
        }
    }
}
