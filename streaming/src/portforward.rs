//! Port-forward sessions (the kubelet's `portforward` server), over SPDY, WebSocket channels,
//! or SPDY tunnelled through a WebSocket.

use std::collections::HashMap;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_tungstenite::WebSocketStream;
use tracing::{debug, info, warn, Instrument};

use crate::protocol::{
    stream_type, WsEncoding, HEADER_PORT, HEADER_REQUEST_ID, HEADER_STREAM_TYPE,
};
use crate::remotecommand::{SessionCtx, LINGER};
use crate::request::PortForwardRequest;
use crate::spdy::{self, Role, Stream};
use crate::ws::ChannelConn;
use crate::AsyncReadWrite;

/// Ports one WebSocket may forward: two channels each, and channel numbers are bytes.
pub(crate) const MAX_WS_PORTS: usize = 127;

/// Whether `port` may be forwarded under `req` (an empty list allows any port, as the
/// kubelet does: kubectl's ports travel in stream headers, not in the CRI request).
fn allowed(req: &PortForwardRequest, port: u16) -> bool {
    req.ports.is_empty() || req.ports.contains(&i32::from(port))
}

/// Connects one forwarded stream through the runtime; reports failure on `err`.
async fn forward(
    ctx: SessionCtx,
    req: PortForwardRequest,
    port: u16,
    data: Box<dyn AsyncReadWrite>,
    mut err: Box<dyn AsyncWrite + Send + Unpin>,
) {
    let result = if allowed(&req, port) {
        debug!(port, "forwarding");
        ctx.runtime
            .port_forward(&req.sandbox_id, port, data)
            .await
            .map_err(|e| e.to_string())
    } else {
        drop(data);
        Err(format!(
            "port {port} is not among the ports this request may forward"
        ))
    };
    if let Err(e) = result {
        let msg = format!(
            "error forwarding port {port} to pod {}: {e}",
            req.sandbox_id
        );
        warn!("{msg}");
        let _ = err.write_all(msg.as_bytes()).await;
    } else {
        debug!(port, "forwarded connection ended");
    }
    let _ = err.shutdown().await;
}

/// A data stream and an error stream sharing a request id.
struct Pair {
    created: Instant,
    data: Option<Stream>,
    error: Option<Stream>,
}

/// Serves an upgraded SPDY connection (direct, or tunnelled through a WebSocket).
pub(crate) async fn serve_spdy<T>(ctx: SessionCtx, io: T, req: PortForwardRequest)
where
    T: AsyncRead + AsyncWrite + Send + 'static,
{
    let (conn, mut incoming) = spdy::Connection::new(io, Role::Server, ctx.spdy_limits());
    let mut pairs: HashMap<String, Pair> = HashMap::new();
    let mut forwards = JoinSet::new();
    let mut sweep = tokio::time::interval(Duration::from_secs(1).min(ctx.creation_timeout));
    loop {
        tokio::select! {
            s = incoming.accept() => {
                let Some(s) = s else { break };
                if let Some((port, pair)) = add_stream(&mut pairs, s) {
                    let (Some(data), Some(error)) = (pair.data, pair.error) else { continue };
                    // The client writes nothing on the error stream; its reading half is
                    // not needed.
                    let (_, err_w) = error.split();
                    let span = tracing::info_span!("forward", port, data_stream = data.id());
                    forwards.spawn(
                        forward(ctx.clone(), req.clone(), port, Box::new(data), Box::new(err_w))
                            .instrument(span),
                    );
                }
            }
            _ = sweep.tick() => {
                let now = Instant::now();
                let expired: Vec<String> = pairs
                    .iter()
                    .filter(|(_, p)| now.duration_since(p.created) >= ctx.creation_timeout)
                    .map(|(id, _)| id.clone())
                    .collect();
                for id in expired {
                    if let Some(p) = pairs.remove(&id) {
                        warn!(request_id = %id, "timed out waiting for the stream pair");
                        if let Some(e) = p.error {
                            let (_, mut w) = e.split();
                            let _ = w
                                .write_all(format!("timed out waiting for streams of request {id}").as_bytes())
                                .await;
                        }
                    }
                }
            }
            Some(_) = forwards.join_next(), if !forwards.is_empty() => {}
        }
    }
    // The client is gone: abandon what is still being forwarded.
    info!("port-forward connection closed");
    forwards.shutdown().await;
    conn.close(Duration::from_secs(1)).await;
}

/// Files `s` under its request id. Returns the completed pair (and the port) once both
/// streams are there. Invalid streams are reset, as the kubelet's stream handler rejects
/// them.
fn add_stream(pairs: &mut HashMap<String, Pair>, s: Stream) -> Option<(u16, Pair)> {
    let headers = s.headers();
    let port = match headers.get(HEADER_PORT).map(str::parse::<u16>) {
        Some(Ok(p)) if p > 0 => p,
        Some(_) => {
            warn!(port = ?headers.get(HEADER_PORT), "invalid port header; stream reset");
            s.reset();
            return None;
        }
        None => {
            warn!("stream without a port header reset");
            s.reset();
            return None;
        }
    };
    let ty = headers.get(HEADER_STREAM_TYPE).unwrap_or("").to_string();
    if ty != stream_type::DATA && ty != stream_type::ERROR {
        warn!(stream_type = %ty, "invalid port-forward stream type; stream reset");
        s.reset();
        return None;
    }
    let request_id = match headers.get(HEADER_REQUEST_ID) {
        Some(id) if !id.is_empty() => id.to_string(),
        // Clients older than Kubernetes 1.4 send no request id: they open the error stream
        // then the data stream, so (without concurrent connections) the data stream's id is
        // the error stream's plus 2. The kubelet makes the same best-effort guess.
        _ if ty == stream_type::ERROR => s.id().to_string(),
        _ => s.id().saturating_sub(2).to_string(),
    };
    let pair = pairs.entry(request_id.clone()).or_insert_with(|| Pair {
        created: Instant::now(),
        data: None,
        error: None,
    });
    let slot = if ty == stream_type::DATA {
        &mut pair.data
    } else {
        &mut pair.error
    };
    if slot.is_some() {
        warn!(request_id = %request_id, stream_type = %ty, "stream already assigned; reset");
        s.reset();
        return None;
    }
    *slot = Some(s);
    if pair.data.is_some() && pair.error.is_some() {
        let pair = pairs.remove(&request_id)?;
        let port = pair
            .data
            .as_ref()
            .and_then(|d| d.headers().get(HEADER_PORT))
            .and_then(|p| p.parse().ok())
            .unwrap_or(port);
        return Some((port, pair));
    }
    None
}

/// Serves an upgraded WebSocket speaking the channel port-forward protocol for `ports`.
pub(crate) async fn serve_ws<S>(
    ctx: SessionCtx,
    ws: WebSocketStream<S>,
    req: PortForwardRequest,
    ports: Vec<u16>,
    encoding: WsEncoding,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    // Per port i: channel 2i data (both ways), 2i+1 errors (to the client).
    let readable = ports.iter().flat_map(|_| [true, false]).collect();
    let (conn, mut readers) = ChannelConn::start(ws, ctx.channel_options(encoding, readable));
    // Each channel's first message is its port, little endian.
    for (i, port) in ports.iter().enumerate() {
        let le = port.to_le_bytes();
        let data_ch = (2 * i) as u8;
        if conn.send(data_ch, &le).await.is_err() || conn.send(data_ch + 1, &le).await.is_err() {
            return;
        }
    }
    let mut forwards = JoinSet::new();
    for (i, port) in ports.iter().copied().enumerate() {
        let data_ch = (2 * i) as u8;
        let Some(reader) = readers[2 * i].take() else {
            continue;
        };
        let data = tokio::io::join(reader, conn.writer(data_ch));
        let err = conn.writer(data_ch + 1);
        let span = tracing::info_span!("forward", port);
        forwards.spawn(
            forward(
                ctx.clone(),
                req.clone(),
                port,
                Box::new(data),
                Box::new(err),
            )
            .instrument(span),
        );
    }
    tokio::select! {
        _ = async { while forwards.join_next().await.is_some() {} } => {}
        _ = conn.closed() => forwards.shutdown().await,
    }
    info!("websocket port-forward finished");
    conn.close(LINGER).await;
}
