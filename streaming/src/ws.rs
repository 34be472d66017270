//! The Kubernetes WebSocket channel protocols (`*.channel.k8s.io`) and the SPDY tunnel.
//!
//! A channel protocol multiplexes numbered byte channels over one WebSocket: each message
//! carries one channel's data, prefixed by the channel number — a raw byte in the binary
//! protocols, an ASCII digit followed by standard base64 in the `base64.` ones (text
//! messages). Version 5 adds `[255, n]`: "channel n is closed", used by clients to end
//! stdin. [`encode`] / [`decode`] are that codec; [`ChannelConn`] runs a connection of
//! channels for either side; [`WsByteStream`] turns a WebSocket into a plain byte stream for
//! the SPDY-over-WebSocket tunnel of newer kubectl port-forward.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use base64::Engine;
use bytes::{Buf, Bytes};
use futures_util::{Sink, SinkExt, Stream, StreamExt};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::{mpsc, watch};
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, WebSocketConfig};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;
use tokio_util::sync::PollSender;
use tracing::{debug, trace, warn};

use crate::conn_tasks::{Activity, Tasks};
use crate::mux::{self, Budget, InboundReader, InboundSender};
use crate::protocol::{channel::CLOSE, WsEncoding};

/// Largest message accepted from a peer (and so buffered whole by tungstenite). Go clients
/// send one message per `Write`, which `io.Copy` keeps at 32 KiB.
pub const MAX_MESSAGE: usize = 4 * 1024 * 1024;
/// Largest payload we put in one message.
const MAX_WRITE_CHUNK: usize = 32 * 1024;
/// Messages queued for the socket before writers wait.
const SEND_QUEUE: usize = 64;

/// tungstenite settings with our bounds.
pub fn websocket_config() -> WebSocketConfig {
    WebSocketConfig::default()
        .max_message_size(Some(MAX_MESSAGE))
        .max_frame_size(Some(MAX_MESSAGE))
        .max_write_buffer_size(4 * MAX_MESSAGE)
}

/// Encodes `data` for `channel`.
pub fn encode(encoding: WsEncoding, channel: u8, data: &[u8]) -> Message {
    match encoding {
        WsEncoding::Binary => {
            let mut v = Vec::with_capacity(1 + data.len());
            v.push(channel);
            v.extend_from_slice(data);
            Message::binary(v)
        }
        WsEncoding::Base64 => {
            let mut s = String::with_capacity(1 + data.len().div_ceil(3) * 4);
            s.push(char::from(b'0'.wrapping_add(channel)));
            base64::engine::general_purpose::STANDARD.encode_string(data, &mut s);
            Message::text(s)
        }
    }
}

/// The v5 close signal for `channel`.
pub fn close_signal(channel: u8) -> Message {
    Message::binary(vec![CLOSE, channel])
}

/// A decoded channel message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decoded {
    /// Payload for a channel (possibly empty).
    Data {
        /// Channel number.
        channel: u8,
        /// Payload.
        data: Bytes,
    },
    /// v5: the peer closed `channel`.
    Close(u8),
}

/// A message that breaks the channel protocol.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// Bad base64 after the channel digit (the message is dropped, as wsstream does).
    #[error("invalid base64 in channel message: {0}")]
    Base64(String),
    /// A close signal not of the form `[255, n]` (the connection is closed, as wsstream does).
    #[error("malformed stream close signal of {0} bytes")]
    CloseSignal(usize),
}

/// Decodes one non-empty message payload.
pub fn decode(
    encoding: WsEncoding,
    payload: &[u8],
    close_signals: bool,
) -> Result<Decoded, DecodeError> {
    let Some((&first, rest)) = payload.split_first() else {
        return Ok(Decoded::Data {
            channel: 0,
            data: Bytes::new(),
        });
    };
    if close_signals && first == CLOSE {
        return match rest {
            [ch] => Ok(Decoded::Close(*ch)),
            _ => Err(DecodeError::CloseSignal(rest.len())),
        };
    }
    match encoding {
        WsEncoding::Binary => Ok(Decoded::Data {
            channel: first,
            data: Bytes::copy_from_slice(rest),
        }),
        WsEncoding::Base64 => {
            let data = base64::engine::general_purpose::STANDARD
                .decode(rest)
                .map_err(|e| DecodeError::Base64(e.to_string()))?;
            Ok(Decoded::Data {
                channel: first.wrapping_sub(b'0'),
                data: Bytes::from(data),
            })
        }
    }
}

/// How a [`ChannelConn`] behaves.
#[derive(Debug, Clone)]
pub struct ChannelOptions {
    /// Message framing.
    pub encoding: WsEncoding,
    /// For each channel, whether we read it (payload for other channels is dropped, as for
    /// wsstream's write-only and ignored channels).
    pub readable: Vec<bool>,
    /// Honour `[255, n]` from the peer (v5).
    pub accept_close_signals: bool,
    /// Send `[255, n]` when a channel writer is shut down (v5 clients).
    pub send_close_signals: bool,
    /// Bytes queued for readers at once.
    pub receive_budget: usize,
    /// Close after this long without a message either way.
    pub idle_timeout: Option<Duration>,
}

impl ChannelOptions {
    /// Channels with `encoding`, `readable` as given: no close signals either way, the
    /// default receive budget, no idle timeout.
    pub fn new(encoding: WsEncoding, readable: Vec<bool>) -> ChannelOptions {
        ChannelOptions {
            encoding,
            readable,
            accept_close_signals: false,
            send_close_signals: false,
            receive_budget: crate::spdy::Limits::default().receive_budget,
            idle_timeout: None,
        }
    }
}

enum Out {
    Msg(Message),
    Close,
}

struct Shared {
    out: mpsc::Sender<Out>,
    closed: watch::Sender<bool>,
    activity: Activity,
    encoding: WsEncoding,
    send_close_signals: bool,
}

/// A WebSocket carrying numbered channels. Its tasks stop when the last handle is dropped.
#[derive(Clone)]
pub struct ChannelConn {
    shared: Arc<Shared>,
    tasks: Arc<Tasks>,
}

impl std::fmt::Debug for ChannelConn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChannelConn")
            .field("encoding", &self.shared.encoding)
            .finish_non_exhaustive()
    }
}

impl ChannelConn {
    /// Starts reading and writing `ws`. Returns the connection and, per channel, its reader
    /// (`None` for channels not readable).
    pub fn start<S>(
        ws: WebSocketStream<S>,
        opts: ChannelOptions,
    ) -> (ChannelConn, Vec<Option<InboundReader>>)
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let (sink, stream) = ws.split();
        let (out_tx, out_rx) = mpsc::channel(SEND_QUEUE);
        let shared = Arc::new(Shared {
            out: out_tx,
            closed: watch::channel(false).0,
            activity: Activity::new(),
            encoding: opts.encoding,
            send_close_signals: opts.send_close_signals,
        });
        let mut senders = Vec::with_capacity(opts.readable.len());
        let mut readers = Vec::with_capacity(opts.readable.len());
        for &readable in &opts.readable {
            if readable {
                let (tx, rx) = mux::channel();
                senders.push(Some(tx));
                readers.push(Some(rx));
            } else {
                senders.push(None);
                readers.push(None);
            }
        }
        let reader = tokio::spawn(read_loop(
            shared.clone(),
            stream,
            senders,
            Budget::new(opts.receive_budget),
            opts.accept_close_signals,
        ));
        let writer = tokio::spawn(write_loop(shared.clone(), sink, out_rx));
        let watchdog = opts.idle_timeout.map(|idle| {
            let shared = shared.clone();
            tokio::spawn(async move {
                let quiet = shared.activity.quiet_for(idle).await;
                warn!("WebSocket idle for {quiet:?}; closing it");
                let _ = shared.out.try_send(Out::Close);
                shared.closed.send_replace(true);
            })
        });
        let conn = ChannelConn {
            shared,
            tasks: Arc::new(Tasks::new(reader, writer, watchdog)),
        };
        (conn, readers)
    }

    /// A writer for `channel`: each write becomes one message (at most 32 KiB of payload).
    pub fn writer(&self, channel: u8) -> ChannelWriter {
        ChannelWriter {
            channel,
            tx: PollSender::new(self.shared.out.clone()),
            encoding: self.shared.encoding,
            close_signal: self.shared.send_close_signals,
            closed: false,
        }
    }

    /// Sends one message on `channel`, even an empty one (the kubelet's "connection is
    /// ready" message and port-forward's port announcements are such writes).
    pub async fn send(&self, channel: u8, data: &[u8]) -> io::Result<()> {
        self.shared
            .out
            .send(Out::Msg(encode(self.shared.encoding, channel, data)))
            .await
            .map_err(|_| io::Error::new(io::ErrorKind::BrokenPipe, "WebSocket closed"))
    }

    /// Resolves when the connection is over (peer closed, failed, idled out, or closed by us).
    pub async fn closed(&self) {
        let mut rx = self.shared.closed.subscribe();
        let _ = rx.wait_for(|c| *c).await;
    }

    /// Sends a normal Close after everything queued, then waits up to `linger` for the
    /// peer's Close (so the peer reads all our messages before the socket goes away).
    pub async fn close(&self, linger: Duration) {
        let goodbye = async {
            let _ = self.shared.out.send(Out::Close).await;
        };
        if !self.tasks.close(goodbye, linger).await {
            debug!("WebSocket peer did not close within {linger:?}");
        }
        self.shared.closed.send_replace(true);
    }
}

async fn read_loop<S>(
    shared: Arc<Shared>,
    mut stream: futures_util::stream::SplitStream<WebSocketStream<S>>,
    mut senders: Vec<Option<InboundSender>>,
    budget: Budget,
    close_signals: bool,
) where
    S: AsyncRead + AsyncWrite + Unpin,
{
    while let Some(msg) = stream.next().await {
        let msg = match msg {
            Ok(m) => m,
            Err(e) => {
                debug!("WebSocket read failed: {e}");
                break;
            }
        };
        shared.activity.touch();
        let payload: &[u8] = match &msg {
            Message::Binary(b) => b,
            Message::Text(t) => t.as_bytes(),
            Message::Close(_) => break,
            Message::Ping(_) | Message::Pong(_) | Message::Frame(_) => continue,
        };
        if payload.is_empty() {
            continue;
        }
        match decode(shared.encoding, payload, close_signals) {
            Ok(Decoded::Data { channel, data }) => {
                match senders.get(usize::from(channel)) {
                    Some(Some(tx)) => {
                        // Waiting for budget stops us reading: backpressure on the peer.
                        if !tx.data(&budget, data).await {
                            trace!(channel, "reader of channel gone; payload dropped");
                        }
                    }
                    Some(None) => trace!(channel, "payload for a write-only channel dropped"),
                    None => trace!(channel, "payload for an unknown channel dropped"),
                }
            }
            Ok(Decoded::Close(channel)) => match senders.get_mut(usize::from(channel)) {
                Some(slot) => {
                    if let Some(tx) = slot.take() {
                        tx.fin();
                    }
                }
                None => {
                    warn!(channel, "close signal for an unknown channel; closing");
                    break;
                }
            },
            Err(e @ DecodeError::CloseSignal(_)) => {
                warn!("{e}; closing");
                break;
            }
            Err(e) => debug!("dropping message: {e}"),
        }
    }
    // Like wsstream, the end of the connection is the end of every channel.
    for tx in senders.into_iter().flatten() {
        tx.fin();
    }
    shared.closed.send_replace(true);
}

async fn write_loop<S>(
    shared: Arc<Shared>,
    mut sink: futures_util::stream::SplitSink<WebSocketStream<S>, Message>,
    mut rx: mpsc::Receiver<Out>,
) where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let result: Result<(), tokio_tungstenite::tungstenite::Error> = async {
        while let Some(first) = rx.recv().await {
            let mut next = Some(first);
            let mut close = false;
            while let Some(item) = next.take() {
                match item {
                    Out::Msg(m) => sink.feed(m).await?,
                    Out::Close => {
                        close = true;
                        break;
                    }
                }
                next = rx.try_recv().ok();
            }
            if close {
                sink.send(Message::Close(Some(CloseFrame {
                    code: CloseCode::Normal,
                    reason: "".into(),
                })))
                .await?;
                return Ok(());
            }
            sink.flush().await?;
            shared.activity.touch();
        }
        Ok(())
    }
    .await;
    if let Err(e) = result {
        debug!("WebSocket write failed: {e}");
        shared.closed.send_replace(true);
    }
}

/// Writes to one channel of a [`ChannelConn`].
pub struct ChannelWriter {
    channel: u8,
    tx: PollSender<Out>,
    encoding: WsEncoding,
    close_signal: bool,
    closed: bool,
}

fn broken() -> io::Error {
    io::Error::new(io::ErrorKind::BrokenPipe, "WebSocket closed")
}

impl AsyncWrite for ChannelWriter {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        if self.closed {
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::BrokenPipe,
                "write after the channel was closed",
            )));
        }
        if buf.is_empty() {
            return Poll::Ready(Ok(0));
        }
        if ready!(self.tx.poll_reserve(cx)).is_err() {
            return Poll::Ready(Err(broken()));
        }
        let n = buf.len().min(MAX_WRITE_CHUNK);
        let msg = encode(self.encoding, self.channel, &buf[..n]);
        if self.tx.send_item(Out::Msg(msg)).is_err() {
            return Poll::Ready(Err(broken()));
        }
        Poll::Ready(Ok(n))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.closed {
            return Poll::Ready(Ok(()));
        }
        if self.close_signal {
            if ready!(self.tx.poll_reserve(cx)).is_err() {
                self.closed = true;
                return Poll::Ready(Ok(()));
            }
            let msg = close_signal(self.channel);
            let _ = self.tx.send_item(Out::Msg(msg));
        }
        // Without close signals (v4 and older, and the server side) a channel cannot be
        // half-closed; the end of the connection ends it.
        self.closed = true;
        Poll::Ready(Ok(()))
    }
}

/// A WebSocket as a byte stream: binary messages in, one binary message per write out, Close
/// as EOF. This is how kubectl tunnels SPDY through WebSocket (`SPDY/3.1+...` subprotocols).
pub struct WsByteStream<S> {
    ws: WebSocketStream<S>,
    pending: Bytes,
    eof: bool,
}

impl<S> WsByteStream<S> {
    /// Wraps an established WebSocket.
    pub fn new(ws: WebSocketStream<S>) -> Self {
        WsByteStream {
            ws,
            pending: Bytes::new(),
            eof: false,
        }
    }
}

fn ws_io(e: tokio_tungstenite::tungstenite::Error) -> io::Error {
    io::Error::other(e)
}

impl<S> AsyncRead for WsByteStream<S>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        loop {
            if !self.pending.is_empty() {
                let n = self.pending.len().min(buf.remaining());
                buf.put_slice(&self.pending[..n]);
                self.pending.advance(n);
                return Poll::Ready(Ok(()));
            }
            if self.eof {
                return Poll::Ready(Ok(()));
            }
            match ready!(Pin::new(&mut self.ws).poll_next(cx)) {
                Some(Ok(Message::Binary(b))) => self.pending = b,
                Some(Ok(Message::Close(_))) | None => self.eof = true,
                Some(Ok(Message::Text(_))) => {
                    return Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        "text message in a binary tunnel",
                    )))
                }
                Some(Ok(_)) => {}
                Some(Err(e)) => return Poll::Ready(Err(ws_io(e))),
            }
        }
    }
}

impl<S> AsyncWrite for WsByteStream<S>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        ready!(Pin::new(&mut self.ws).poll_ready(cx)).map_err(ws_io)?;
        let n = buf.len().min(MAX_MESSAGE);
        Pin::new(&mut self.ws)
            .start_send(Message::binary(Bytes::copy_from_slice(&buf[..n])))
            .map_err(ws_io)?;
        Poll::Ready(Ok(n))
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.ws).poll_flush(cx).map_err(ws_io)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match ready!(Pin::new(&mut self.ws).poll_close(cx)) {
            Ok(()) | Err(tokio_tungstenite::tungstenite::Error::ConnectionClosed) => {
                Poll::Ready(Ok(()))
            }
            Err(e) => Poll::Ready(Err(ws_io(e))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio_tungstenite::tungstenite::protocol::Role;

    #[test]
    fn binary_codec() {
        let m = encode(WsEncoding::Binary, 1, b"hi");
        assert_eq!(m, Message::binary(vec![1u8, b'h', b'i']));
        let Message::Binary(b) = m else { panic!() };
        assert_eq!(
            decode(WsEncoding::Binary, &b, false).unwrap(),
            Decoded::Data {
                channel: 1,
                data: Bytes::from_static(b"hi")
            }
        );
        // An empty write is a lone channel byte.
        assert_eq!(
            encode(WsEncoding::Binary, 3, b""),
            Message::binary(vec![3u8])
        );
    }

    /// The example session from wsstream's documentation.
    #[test]
    fn base64_codec_matches_the_documented_example() {
        assert_eq!(encode(WsEncoding::Base64, 1, b"\n"), Message::text("1Cg=="));
        assert_eq!(
            decode(WsEncoding::Base64, b"0Zm9vCg==", false).unwrap(),
            Decoded::Data {
                channel: 0,
                data: Bytes::from_static(b"foo\n")
            }
        );
        assert!(matches!(
            decode(WsEncoding::Base64, b"0!!!", false),
            Err(DecodeError::Base64(_))
        ));
    }

    #[test]
    fn close_signals_only_in_v5() {
        assert_eq!(
            decode(WsEncoding::Binary, &[255, 0], true).unwrap(),
            Decoded::Close(0)
        );
        assert_eq!(
            decode(WsEncoding::Binary, &[255, 0], false).unwrap(),
            Decoded::Data {
                channel: 255,
                data: Bytes::from_static(&[0])
            }
        );
        assert_eq!(
            decode(WsEncoding::Binary, &[255, 0, 1], true),
            Err(DecodeError::CloseSignal(2))
        );
        assert_eq!(close_signal(4), Message::binary(vec![255u8, 4]));
    }

    async fn ws_pair() -> (
        WebSocketStream<tokio::io::DuplexStream>,
        WebSocketStream<tokio::io::DuplexStream>,
    ) {
        let (a, b) = tokio::io::duplex(256 * 1024);
        let client = WebSocketStream::from_raw_socket(a, Role::Client, None);
        let server = WebSocketStream::from_raw_socket(b, Role::Server, Some(websocket_config()));
        tokio::join!(client, server)
    }

    #[tokio::test]
    async fn channel_conn_routes_and_closes() {
        let (client, server) = ws_pair().await;
        let opts = |send_close| ChannelOptions {
            encoding: WsEncoding::Binary,
            readable: vec![true, true],
            accept_close_signals: true,
            send_close_signals: send_close,
            receive_budget: 1024 * 1024,
            idle_timeout: None,
        };
        let (c, _creaders) = ChannelConn::start(client, opts(true));
        let (s, mut sreaders) = ChannelConn::start(server, opts(false));
        let mut w0 = c.writer(0);
        w0.write_all(b"stdin data").await.unwrap();
        w0.shutdown().await.unwrap(); // v5 close signal
        let mut r0 = sreaders[0].take().unwrap();
        let mut got = Vec::new();
        r0.read_to_end(&mut got).await.unwrap();
        assert_eq!(got, b"stdin data");
        // Channel 1 is still open until the connection closes.
        let mut w1 = c.writer(1);
        w1.write_all(b"more").await.unwrap();
        let mut r1 = sreaders[1].take().unwrap();
        let mut buf = [0u8; 4];
        r1.read_exact(&mut buf).await.unwrap();
        let closer = tokio::spawn({
            let c = c.clone();
            async move { c.close(Duration::from_secs(5)).await }
        });
        assert_eq!(r1.read(&mut buf).await.unwrap(), 0);
        s.closed().await;
        s.close(Duration::from_secs(1)).await;
        closer.await.unwrap();
    }

    #[tokio::test]
    async fn byte_stream_tunnels_bytes() {
        let (client, server) = ws_pair().await;
        let mut c = WsByteStream::new(client);
        let mut s = WsByteStream::new(server);
        let payload: Vec<u8> = (0..200_000u32).map(|i| i as u8).collect();
        let p2 = payload.clone();
        let writer = tokio::spawn(async move {
            c.write_all(&p2).await.unwrap();
            c.flush().await.unwrap();
            c.shutdown().await.unwrap();
            c
        });
        let mut got = Vec::new();
        s.read_to_end(&mut got).await.unwrap();
        assert_eq!(got, payload);
        s.shutdown().await.unwrap();
        drop(writer.await.unwrap());
    }
}
