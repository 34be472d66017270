//! The NRI connection: ttrpc calls in both directions over one unix socket, multiplexed.
//!
//! Framing, as containerd/nri's `pkg/net/multiplex` and containerd/ttrpc define it:
//! - the socket carries frames `[conn id: u32 BE][length: u32 BE][bytes]`; conn id 1 carries
//!   the plugin's service (the runtime calls the plugin), conn id 2 the runtime's service (the
//!   plugin calls the runtime). Each conn id is a byte stream of its own: a frame may hold part
//!   of a ttrpc message or several.
//! - on each logical stream, ttrpc messages `[length: u32 BE][stream id: u32 BE][type: u8]
//!   [flags: u8][payload]`, type 1 a request (`ttrpc.Request`), type 2 a response
//!   (`ttrpc.Response`). A client numbers its calls with odd stream ids.
//!
//! [`Peer`] is one end: it calls the other side's service on `out_conn` and serves its own on
//! the other conn id with a [`Handler`].

use crate::ttrpc_pb::{Response, Status};
use prost::Message;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::unix::OwnedWriteHalf;
use tokio::net::UnixStream;
use tokio::sync::{oneshot, watch};

/// Conn id of the plugin's service (requests from the runtime).
pub const PLUGIN_SERVICE_CONN: u32 = 1;
/// Conn id of the runtime's service (requests from the plugin).
pub const RUNTIME_SERVICE_CONN: u32 = 2;

const MUX_HEADER: usize = 8;
const TTRPC_HEADER: usize = 10;
/// ttrpc's own limit on a message (4 MiB); a peer sending more is broken or hostile.
const MAX_MESSAGE: usize = 4 << 20;
const TYPE_REQUEST: u8 = 1;
const TYPE_RESPONSE: u8 = 2;

/// gRPC status codes used here.
pub mod code {
    pub const CANCELLED: i32 = 1;
    pub const INVALID_ARGUMENT: i32 = 3;
    pub const DEADLINE_EXCEEDED: i32 = 4;
    pub const UNIMPLEMENTED: i32 = 12;
    pub const INTERNAL: i32 = 13;
}

/// Why a call failed.
#[derive(Debug, thiserror::Error, Clone)]
pub enum CallError {
    /// The other side answered with an error status.
    #[error("{message} (code {code})")]
    Status { code: i32, message: String },
    /// No answer in time.
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    /// The connection is gone.
    #[error("connection closed")]
    Closed,
    /// The answer did not decode.
    #[error("bad message: {0}")]
    Decode(String),
}

impl CallError {
    /// The peer cannot be trusted with more calls (containerd/nri closes the plugin then).
    pub fn is_fatal(&self) -> bool {
        matches!(
            self,
            CallError::Timeout(_) | CallError::Closed | CallError::Decode(_)
        )
    }
    pub fn is_unimplemented(&self) -> bool {
        matches!(self, CallError::Status { code, .. } if *code == code::UNIMPLEMENTED)
    }
}

/// A call as it arrives: ttrpc's request envelope (service, method, encoded payload).
pub use crate::ttrpc_pb::Request;

/// Serves the calls that arrive on a peer's incoming conn id.
#[async_trait::async_trait]
pub trait Handler: Send + Sync + 'static {
    /// Answers `call.service`/`call.method` with an encoded response, or a gRPC status code
    /// and message.
    async fn handle(&self, call: &Request) -> Result<Vec<u8>, (i32, String)>;
}

type Pending = Arc<Mutex<HashMap<u32, oneshot::Sender<Response>>>>;

/// One end of an NRI connection.
pub struct Peer {
    writer: Arc<tokio::sync::Mutex<OwnedWriteHalf>>,
    out_conn: u32,
    next_stream: AtomicU32,
    pending: Pending,
    closed: Arc<AtomicBool>,
    closed_rx: watch::Receiver<bool>,
    reader: tokio::task::JoinHandle<()>,
}

impl Drop for Peer {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

async fn write_frame(
    writer: &tokio::sync::Mutex<OwnedWriteHalf>,
    conn: u32,
    stream: u32,
    kind: u8,
    payload: &[u8],
) -> std::io::Result<()> {
    let mut buf = Vec::with_capacity(MUX_HEADER + TTRPC_HEADER + payload.len());
    buf.extend_from_slice(&conn.to_be_bytes());
    buf.extend_from_slice(&((TTRPC_HEADER + payload.len()) as u32).to_be_bytes());
    buf.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    buf.extend_from_slice(&stream.to_be_bytes());
    buf.push(kind);
    buf.push(0);
    buf.extend_from_slice(payload);
    writer.lock().await.write_all(&buf).await
}

/// Takes every complete ttrpc message off the front of a conn's byte stream.
fn split_messages(buf: &mut Vec<u8>) -> Result<Vec<(u32, u8, Vec<u8>)>, String> {
    let mut out = Vec::new();
    loop {
        if buf.len() < TTRPC_HEADER {
            return Ok(out);
        }
        let len = u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize;
        if len > MAX_MESSAGE {
            return Err(format!("ttrpc message of {len} bytes is over the limit"));
        }
        if buf.len() < TTRPC_HEADER + len {
            return Ok(out);
        }
        let stream = u32::from_be_bytes([buf[4], buf[5], buf[6], buf[7]]);
        let kind = buf[8];
        let payload = buf[TTRPC_HEADER..TTRPC_HEADER + len].to_vec();
        buf.drain(..TTRPC_HEADER + len);
        out.push((stream, kind, payload));
    }
}

impl Peer {
    /// Starts reading `stream`: calls go out on `out_conn`, requests on the other conn id go
    /// to `handler`.
    pub fn start(stream: UnixStream, out_conn: u32, handler: Arc<dyn Handler>) -> Arc<Peer> {
        let in_conn = if out_conn == PLUGIN_SERVICE_CONN {
            RUNTIME_SERVICE_CONN
        } else {
            PLUGIN_SERVICE_CONN
        };
        let (mut rd, wr) = stream.into_split();
        let writer = Arc::new(tokio::sync::Mutex::new(wr));
        let pending: Pending = Arc::default();
        let closed = Arc::new(AtomicBool::new(false));
        let (closed_tx, closed_rx) = watch::channel(false);
        let reader = {
            let writer = writer.clone();
            let pending = pending.clone();
            let closed = closed.clone();
            tokio::spawn(async move {
                let mut bufs: HashMap<u32, Vec<u8>> = HashMap::new();
                let why = loop {
                    let mut hdr = [0u8; MUX_HEADER];
                    if let Err(e) = rd.read_exact(&mut hdr).await {
                        break e.to_string();
                    }
                    let conn = u32::from_be_bytes([hdr[0], hdr[1], hdr[2], hdr[3]]);
                    let len = u32::from_be_bytes([hdr[4], hdr[5], hdr[6], hdr[7]]) as usize;
                    if len > MAX_MESSAGE + TTRPC_HEADER {
                        break format!("frame of {len} bytes is over the limit");
                    }
                    let mut chunk = vec![0u8; len];
                    if let Err(e) = rd.read_exact(&mut chunk).await {
                        break e.to_string();
                    }
                    if conn != out_conn && conn != in_conn {
                        continue; // a conn id nobody opened: dropped, as the Go mux does
                    }
                    let buf = bufs.entry(conn).or_default();
                    buf.extend_from_slice(&chunk);
                    let messages = match split_messages(buf) {
                        Ok(m) => m,
                        Err(e) => break e,
                    };
                    for (stream, kind, payload) in messages {
                        if conn == out_conn && kind == TYPE_RESPONSE {
                            let waiter = pending.lock().ok().and_then(|mut p| p.remove(&stream));
                            if let (Some(tx), Ok(resp)) = (waiter, Response::decode(&*payload)) {
                                let _ = tx.send(resp);
                            }
                        } else if conn == in_conn && kind == TYPE_REQUEST {
                            let handler = handler.clone();
                            let writer = writer.clone();
                            tokio::spawn(async move {
                                serve_one(handler, writer, in_conn, stream, &payload).await;
                            });
                        }
                    }
                };
                tracing::debug!(reason = %why, "NRI connection closed");
                closed.store(true, Ordering::SeqCst);
                // Dropping the waiters fails their calls with Closed.
                if let Ok(mut p) = pending.lock() {
                    p.clear();
                }
                let _ = closed_tx.send(true);
            })
        };
        Arc::new(Peer {
            writer,
            out_conn,
            next_stream: AtomicU32::new(1),
            pending,
            closed,
            closed_rx,
            reader,
        })
    }

    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }

    /// Resolves when the connection is gone.
    pub async fn closed(&self) {
        let mut rx = self.closed_rx.clone();
        let _ = rx.wait_for(|c| *c).await;
    }

    /// Shuts the socket down; the reader then ends and pending calls fail.
    pub async fn close(&self) {
        let _ = self.writer.lock().await.shutdown().await;
        self.reader.abort();
        self.closed.store(true, Ordering::SeqCst);
        if let Ok(mut p) = self.pending.lock() {
            p.clear();
        }
    }

    /// Calls `service`/`method` on the other side and decodes its answer.
    pub async fn call<Req: Message, Resp: Message + Default>(
        &self,
        service: &str,
        method: &str,
        req: &Req,
        timeout: Duration,
    ) -> Result<Resp, CallError> {
        if self.is_closed() {
            return Err(CallError::Closed);
        }
        let stream = self.next_stream.fetch_add(2, Ordering::SeqCst);
        let request = Request {
            service: service.to_string(),
            method: method.to_string(),
            payload: req.encode_to_vec(),
            timeout_nano: timeout.as_nanos().min(i64::MAX as u128) as i64,
            metadata: Vec::new(),
        };
        let (tx, rx) = oneshot::channel();
        self.pending
            .lock()
            .map_err(|_| CallError::Closed)?
            .insert(stream, tx);
        let sent = write_frame(
            &self.writer,
            self.out_conn,
            stream,
            TYPE_REQUEST,
            &request.encode_to_vec(),
        )
        .await;
        if sent.is_err() {
            self.forget(stream);
            return Err(CallError::Closed);
        }
        let resp = match tokio::time::timeout(timeout, rx).await {
            Ok(Ok(resp)) => resp,
            Ok(Err(_)) => return Err(CallError::Closed),
            Err(_) => {
                self.forget(stream);
                return Err(CallError::Timeout(timeout));
            }
        };
        if let Some(Status { code, message }) = resp.status {
            if code != 0 {
                return Err(CallError::Status { code, message });
            }
        }
        Resp::decode(&*resp.payload).map_err(|e| CallError::Decode(e.to_string()))
    }

    fn forget(&self, stream: u32) {
        if let Ok(mut p) = self.pending.lock() {
            p.remove(&stream);
        }
    }
}

async fn serve_one(
    handler: Arc<dyn Handler>,
    writer: Arc<tokio::sync::Mutex<OwnedWriteHalf>>,
    conn: u32,
    stream: u32,
    payload: &[u8],
) {
    let response = match Request::decode(payload) {
        Ok(req) => match handler.handle(&req).await {
            Ok(payload) => Response {
                status: Some(Status {
                    code: 0,
                    message: String::new(),
                }),
                payload,
            },
            Err((code, message)) => Response {
                status: Some(Status { code, message }),
                payload: Vec::new(),
            },
        },
        Err(e) => Response {
            status: Some(Status {
                code: code::INVALID_ARGUMENT,
                message: format!("bad ttrpc request: {e}"),
            }),
            payload: Vec::new(),
        },
    };
    if let Err(e) = write_frame(
        &writer,
        conn,
        stream,
        TYPE_RESPONSE,
        &response.encode_to_vec(),
    )
    .await
    {
        tracing::debug!(error = %e, "writing an NRI response");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_keeps_partial_messages_for_later() {
        let mut buf = Vec::new();
        for (stream, body) in [(1u32, b"ab".as_slice()), (3, b"cde")] {
            buf.extend_from_slice(&(body.len() as u32).to_be_bytes());
            buf.extend_from_slice(&stream.to_be_bytes());
            buf.extend_from_slice(&[TYPE_REQUEST, 0]);
            buf.extend_from_slice(body);
        }
        let mut partial = buf[..buf.len() - 1].to_vec();
        let first = split_messages(&mut partial).unwrap();
        assert_eq!(first, vec![(1, TYPE_REQUEST, b"ab".to_vec())]);
        partial.push(*buf.last().unwrap());
        let second = split_messages(&mut partial).unwrap();
        assert_eq!(second, vec![(3, TYPE_REQUEST, b"cde".to_vec())]);
        assert!(partial.is_empty());
    }

    #[test]
    fn split_refuses_oversized_messages() {
        let mut buf = ((MAX_MESSAGE + 1) as u32).to_be_bytes().to_vec();
        buf.extend_from_slice(&[0; 6]);
        assert!(split_messages(&mut buf).is_err());
    }
}
