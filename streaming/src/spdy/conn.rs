//! An async SPDY/3.1 connection: stream multiplexing over one byte stream.
//!
//! Two tasks run per connection. The *reader* decodes frames in arrival order (it owns the
//! incoming zlib context), routes DATA into per-stream queues, replies to new streams and
//! echoes pings. The *writer* encodes frames in the order they were queued (it owns the
//! outgoing zlib context — compressing in any other order than the wire order would corrupt
//! every later header block) and batches them into socket writes.
//!
//! Everything sent goes through one bounded queue, so per-stream ordering holds (SYN_REPLY
//! before a stream's DATA, DATA before its FIN) and a peer that stops reading makes our
//! writers wait instead of making us buffer. Received payload is bounded by the `mux` budget.
//!
//! The tasks are aborted when the last [`Connection`] handle is dropped: keep the connection
//! alive for as long as its streams are in use.

use peapod_host::sync::LockUnpoisoned;
use std::collections::HashMap;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{ready, Context, Poll};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::sync::{mpsc, oneshot, watch};
use tokio_util::sync::PollSender;
use tracing::{debug, trace, warn};

use super::frame::{goaway, rst, Frame, FrameDecoder, FrameEncoder, FLAG_FIN, FLAG_UNIDIRECTIONAL};
use super::headers::Headers;
use super::SpdyError;
use crate::conn_tasks::{Activity, Tasks};
use crate::mux::{self, Budget, InboundReader, InboundSender};

/// Largest DATA frame we send: large enough to keep per-frame overhead negligible, small
/// enough that one stream cannot hog the shared send queue for long.
const MAX_WRITE_CHUNK: usize = 32 * 1024;
/// Frames the send queue holds before writers wait.
const SEND_QUEUE: usize = 64;
/// Bytes the writer batches into one socket write.
const WRITE_BATCH: usize = 256 * 1024;

/// Resource limits of one connection; every one of them bounds what a peer can make us hold.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Largest control frame payload accepted (header blocks arrive in these).
    pub max_control_payload: usize,
    /// Largest inflated header block accepted.
    pub max_header_block: usize,
    /// Streams open at once; further SYN_STREAMs are refused.
    pub max_streams: usize,
    /// Received bytes queued for readers at once (see `mux`).
    pub receive_budget: usize,
    /// Close the connection after this long without a frame either way.
    pub idle_timeout: Option<Duration>,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_control_payload: 64 * 1024,
            max_header_block: 256 * 1024,
            max_streams: 256,
            receive_budget: 8 * 1024 * 1024,
            idle_timeout: None,
        }
    }
}

/// Which end of the connection we are: clients open odd streams, servers even ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The side that sent the HTTP upgrade request.
    Client,
    /// The side that accepted it.
    Server,
}

enum Out {
    Frame(Frame),
    /// Flush, close our sending direction, stop the writer.
    Shutdown,
}

#[derive(Default)]
struct StreamState {
    reset: AtomicBool,
}

struct Entry {
    /// None once the peer has half-closed.
    inbound: Option<InboundSender>,
    state: Arc<StreamState>,
    local_fin: bool,
    reply: Option<oneshot::Sender<Result<(), SpdyError>>>,
}

struct Table {
    streams: HashMap<u32, Entry>,
    last_remote_id: u32,
    next_local_id: u32,
    goaway_sent: bool,
    goaway_received: bool,
    closed: bool,
}

struct Shared {
    role: Role,
    table: Mutex<Table>,
    out: mpsc::Sender<Out>,
    budget: Budget,
    closed: watch::Sender<bool>,
    activity: Activity,
    limits: Limits,
}

impl Shared {
    fn table(&self) -> MutexGuard<'_, Table> {
        // A panic while holding the lock cannot leave the table inconsistent in a way that
        // matters more than refusing service; keep going with its contents.
        self.table.lock_unpoisoned()
    }

    fn is_peer_ping(&self, id: u32) -> bool {
        match self.role {
            Role::Server => id & 1 == 1,
            Role::Client => id != 0 && id & 1 == 0,
        }
    }

    fn is_peer_stream(&self, id: u32) -> bool {
        match self.role {
            Role::Server => id & 1 == 1,
            Role::Client => id & 1 == 0,
        }
    }

    fn new_stream(self: &Arc<Self>, id: u32, headers: Headers) -> (Entry, Stream) {
        let (tx, rx) = mux::channel();
        let state = Arc::new(StreamState::default());
        let entry = Entry {
            inbound: Some(tx),
            state: state.clone(),
            local_fin: false,
            reply: None,
        };
        let stream = Stream {
            id,
            headers,
            reader: StreamReader { id, inner: rx },
            writer: StreamWriter {
                id,
                tx: PollSender::new(self.out.clone()),
                raw: self.out.clone(),
                state,
                fin_sent: false,
            },
        };
        (entry, stream)
    }

    /// The peer will send no more on `id`.
    fn remote_finished(&self, id: u32) {
        let mut t = self.table();
        let remove = match t.streams.get_mut(&id) {
            Some(e) => {
                if let Some(tx) = e.inbound.take() {
                    tx.fin();
                }
                e.local_fin
            }
            None => false,
        };
        if remove {
            t.streams.remove(&id);
        }
    }

    /// Bookkeeping once the writer has put `frame` on the wire.
    fn sent(&self, frame: &Frame) {
        match frame {
            Frame::Data {
                stream_id,
                fin: true,
                ..
            } => {
                let mut t = self.table();
                let remove = match t.streams.get_mut(stream_id) {
                    Some(e) => {
                        e.local_fin = true;
                        e.inbound.is_none()
                    }
                    None => false,
                };
                if remove {
                    t.streams.remove(stream_id);
                }
            }
            Frame::RstStream { stream_id, .. } => {
                if let Some(e) = self.table().streams.remove(stream_id) {
                    e.state.reset.store(true, Ordering::Release);
                }
            }
            _ => {}
        }
    }

    fn teardown(&self) {
        let entries = {
            let mut t = self.table();
            t.closed = true;
            std::mem::take(&mut t.streams)
        };
        for (_, e) in entries {
            if let Some(r) = e.reply {
                let _ = r.send(Err(SpdyError::Closed));
            }
            // Dropping `inbound` tells a reader the connection ended without a FIN.
        }
        self.closed.send_replace(true);
    }
}

/// Streams the peer opened, already replied to.
pub struct Incoming {
    rx: mpsc::Receiver<Stream>,
}

impl std::fmt::Debug for Incoming {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Incoming").finish_non_exhaustive()
    }
}

impl Incoming {
    /// The next stream the peer opened; `None` once the connection is gone.
    pub async fn accept(&mut self) -> Option<Stream> {
        self.rx.recv().await
    }
}

struct Inner {
    shared: Arc<Shared>,
    tasks: Tasks,
}

/// A SPDY/3.1 connection. Cloning gives another handle to the same connection.
#[derive(Clone)]
pub struct Connection {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("role", &self.inner.shared.role)
            .finish_non_exhaustive()
    }
}

impl Connection {
    /// Starts a connection over `io` (already upgraded) and its reader and writer tasks. Must
    /// be called within a Tokio runtime.
    pub fn new<T>(io: T, role: Role, limits: Limits) -> (Connection, Incoming)
    where
        T: AsyncRead + AsyncWrite + Send + 'static,
    {
        let (r, w) = tokio::io::split(io);
        let (out_tx, out_rx) = mpsc::channel(SEND_QUEUE);
        let (in_tx, in_rx) = mpsc::channel(16);
        let shared = Arc::new(Shared {
            role,
            table: Mutex::new(Table {
                streams: HashMap::new(),
                last_remote_id: 0,
                next_local_id: if role == Role::Client { 1 } else { 2 },
                goaway_sent: false,
                goaway_received: false,
                closed: false,
            }),
            out: out_tx,
            budget: Budget::new(limits.receive_budget),
            closed: watch::channel(false).0,
            activity: Activity::new(),
            limits: limits.clone(),
        });
        let reader = tokio::spawn(read_loop(shared.clone(), r, in_tx));
        let writer = tokio::spawn(write_loop(shared.clone(), w, out_rx));
        let watchdog = limits
            .idle_timeout
            .map(|idle| tokio::spawn(idle_watchdog(shared.clone(), idle)));
        let conn = Connection {
            inner: Arc::new(Inner {
                shared,
                tasks: Tasks::new(reader, writer, watchdog),
            }),
        };
        (conn, Incoming { rx: in_rx })
    }

    /// Opens a stream with `headers` and waits for the peer's SYN_REPLY.
    pub async fn open_stream(&self, headers: Headers) -> Result<Stream, SpdyError> {
        let shared = &self.inner.shared;
        let (reply_tx, reply_rx) = oneshot::channel();
        let (id, stream) = {
            let mut t = shared.table();
            if t.closed || t.goaway_sent || t.goaway_received {
                return Err(SpdyError::Closed);
            }
            if t.streams.len() >= shared.limits.max_streams {
                return Err(SpdyError::Refused(format!(
                    "{} streams already open",
                    t.streams.len()
                )));
            }
            let id = t.next_local_id;
            if id > 0x7fff_ffff {
                return Err(SpdyError::Refused("stream ids exhausted".into()));
            }
            t.next_local_id += 2;
            let (mut entry, stream) = shared.new_stream(id, headers.clone());
            entry.reply = Some(reply_tx);
            t.streams.insert(id, entry);
            (id, stream)
        };
        shared
            .out
            .send(Out::Frame(Frame::SynStream {
                stream_id: id,
                associated_to: 0,
                priority: 0,
                flags: 0,
                headers,
            }))
            .await
            .map_err(|_| SpdyError::Closed)?;
        match reply_rx.await {
            Ok(Ok(())) => Ok(stream),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(SpdyError::Closed),
        }
    }

    /// Resolves once the connection can no longer carry traffic: the peer closed it, it
    /// failed, it idled out, or we shut it down.
    pub async fn closed(&self) {
        let mut rx = self.inner.shared.closed.subscribe();
        let _ = rx.wait_for(|c| *c).await;
    }

    /// Whether [`Connection::closed`] would resolve now.
    pub fn is_closed(&self) -> bool {
        *self.inner.shared.closed.borrow()
    }

    /// Graceful close: GOAWAY, flush everything queued, close our sending direction, then wait
    /// up to `linger` for the peer to close its side. Waiting for the peer matters: closing a
    /// socket that still has unread input makes the kernel send RST, which can destroy the
    /// tail of our output before the peer reads it.
    pub async fn close(&self, linger: Duration) {
        let shared = &self.inner.shared;
        let last = {
            let mut t = shared.table();
            t.goaway_sent = true;
            t.last_remote_id
        };
        let goodbye = async {
            let _ = shared
                .out
                .send(Out::Frame(Frame::GoAway {
                    last_good_stream_id: last,
                    status: goaway::OK,
                }))
                .await;
            let _ = shared.out.send(Out::Shutdown).await;
        };
        if !self.inner.tasks.close(goodbye, linger).await {
            debug!("SPDY peer did not close within {linger:?}; dropping the connection");
        }
        shared.teardown();
    }
}

async fn idle_watchdog(shared: Arc<Shared>, idle: Duration) {
    let quiet = shared.activity.quiet_for(idle).await;
    warn!("SPDY connection idle for {quiet:?}; closing it");
    let _ = shared.out.try_send(Out::Shutdown);
    shared.teardown();
}

async fn read_loop<R>(shared: Arc<Shared>, mut r: R, incoming: mpsc::Sender<Stream>)
where
    R: AsyncRead + Unpin,
{
    let mut decoder = FrameDecoder::new(
        shared.limits.max_control_payload,
        shared.limits.max_header_block,
    );
    let mut buf = BytesMut::with_capacity(16 * 1024);
    let result: Result<(), SpdyError> = async {
        loop {
            while let Some(frame) = decoder.decode(&mut buf)? {
                shared.activity.touch();
                handle_frame(&shared, frame, &incoming).await?;
            }
            if buf.capacity() - buf.len() < 4096 {
                buf.reserve(16 * 1024);
            }
            if r.read_buf(&mut buf).await? == 0 {
                if !buf.is_empty() {
                    debug!("SPDY peer closed mid-frame ({} bytes pending)", buf.len());
                }
                return Ok(());
            }
        }
    }
    .await;
    match result {
        Ok(()) => trace!("SPDY peer closed the connection"),
        Err(SpdyError::Io(e)) => debug!("SPDY connection read failed: {e}"),
        Err(SpdyError::Closed) => {}
        Err(e) => {
            warn!("closing SPDY connection: {e}");
            let last = shared.table().last_remote_id;
            let _ = shared.out.try_send(Out::Frame(Frame::GoAway {
                last_good_stream_id: last,
                status: goaway::PROTOCOL_ERROR,
            }));
            let _ = shared.out.try_send(Out::Shutdown);
        }
    }
    shared.teardown();
}

async fn handle_frame(
    shared: &Arc<Shared>,
    frame: Frame,
    incoming: &mpsc::Sender<Stream>,
) -> Result<(), SpdyError> {
    match frame {
        Frame::SynStream {
            stream_id,
            flags,
            headers,
            ..
        } => on_syn_stream(shared, stream_id, flags, headers, incoming).await?,
        Frame::SynReply {
            stream_id, flags, ..
        } => {
            if let Some(r) = shared
                .table()
                .streams
                .get_mut(&stream_id)
                .and_then(|e| e.reply.take())
            {
                let _ = r.send(Ok(()));
            }
            if flags & FLAG_FIN != 0 {
                shared.remote_finished(stream_id);
            }
        }
        Frame::Data {
            stream_id,
            fin,
            data,
        } => {
            let tx = shared
                .table()
                .streams
                .get(&stream_id)
                .and_then(|e| e.inbound.clone());
            match tx {
                // Waiting for budget here is the backpressure: we stop reading the socket.
                Some(tx) => {
                    tx.data(&shared.budget, data).await;
                }
                None => trace!(stream_id, "DATA for a stream that is not open; ignored"),
            }
            if fin {
                shared.remote_finished(stream_id);
            }
        }
        Frame::RstStream { stream_id, status } => {
            let entry = shared.table().streams.remove(&stream_id);
            if let Some(e) = entry {
                debug!(stream_id, status, "stream reset by peer");
                e.state.reset.store(true, Ordering::Release);
                if let Some(tx) = e.inbound {
                    tx.reset();
                }
                if let Some(r) = e.reply {
                    let _ = r.send(Err(SpdyError::Reset { stream_id, status }));
                }
            }
        }
        Frame::Ping { id } => {
            if shared.is_peer_ping(id) {
                shared
                    .out
                    .send(Out::Frame(Frame::Ping { id }))
                    .await
                    .map_err(|_| SpdyError::Closed)?;
            }
        }
        Frame::GoAway {
            last_good_stream_id,
            status,
        } => {
            debug!(last_good_stream_id, status, "peer sent GOAWAY");
            shared.table().goaway_received = true;
        }
        Frame::Headers {
            stream_id, flags, ..
        } => {
            if flags & FLAG_FIN != 0 {
                shared.remote_finished(stream_id);
            }
        }
        Frame::Settings { .. } | Frame::WindowUpdate { .. } => {}
    }
    Ok(())
}

enum Verdict {
    Accept(Box<Stream>),
    Refuse(u32),
}

async fn on_syn_stream(
    shared: &Arc<Shared>,
    id: u32,
    flags: u8,
    headers: Headers,
    incoming: &mpsc::Sender<Stream>,
) -> Result<(), SpdyError> {
    let verdict = {
        let mut t = shared.table();
        if !shared.is_peer_stream(id) || id <= t.last_remote_id {
            // spdystream answers a stream id that is reused, out of order or of our parity
            // with a PROTOCOL_ERROR reset, and so do we.
            debug!(stream_id = id, "invalid stream id from peer");
            Verdict::Refuse(rst::PROTOCOL_ERROR)
        } else {
            t.last_remote_id = id;
            if t.closed || t.goaway_sent {
                Verdict::Refuse(rst::REFUSED_STREAM)
            } else if t.streams.len() >= shared.limits.max_streams {
                warn!(
                    stream_id = id,
                    "refusing stream: {} already open",
                    t.streams.len()
                );
                Verdict::Refuse(rst::REFUSED_STREAM)
            } else {
                let (mut entry, mut stream) = shared.new_stream(id, headers);
                if flags & FLAG_FIN != 0 {
                    if let Some(tx) = entry.inbound.take() {
                        tx.fin();
                    }
                }
                if flags & FLAG_UNIDIRECTIONAL != 0 {
                    // We may not send on it: behave as if we already half-closed.
                    entry.local_fin = true;
                    stream.writer.fin_sent = true;
                }
                t.streams.insert(id, entry);
                Verdict::Accept(Box::new(stream))
            }
        }
    };
    match verdict {
        Verdict::Refuse(status) => {
            shared
                .out
                .send(Out::Frame(Frame::RstStream {
                    stream_id: id,
                    status,
                }))
                .await
                .map_err(|_| SpdyError::Closed)?;
        }
        Verdict::Accept(stream) => {
            shared
                .out
                .send(Out::Frame(Frame::SynReply {
                    stream_id: id,
                    flags: 0,
                    headers: Headers::new(),
                }))
                .await
                .map_err(|_| SpdyError::Closed)?;
            if let Err(mpsc::error::SendError(stream)) = incoming.send(*stream).await {
                // Nobody accepts streams any more.
                stream.reset_with(rst::REFUSED_STREAM);
            }
        }
    }
    Ok(())
}

async fn write_loop<W>(shared: Arc<Shared>, mut w: W, mut rx: mpsc::Receiver<Out>)
where
    W: AsyncWrite + Unpin,
{
    let mut encoder = FrameEncoder::new();
    let mut buf = BytesMut::with_capacity(64 * 1024);
    let result: Result<(), SpdyError> = async {
        loop {
            let Some(first) = rx.recv().await else {
                return Ok(());
            };
            let mut shutdown = false;
            let mut next = Some(first);
            while let Some(item) = next.take() {
                match item {
                    Out::Frame(frame) => {
                        encoder.encode(&frame, &mut buf)?;
                        shared.sent(&frame);
                    }
                    Out::Shutdown => {
                        shutdown = true;
                        break;
                    }
                }
                if buf.len() < WRITE_BATCH {
                    next = rx.try_recv().ok();
                }
            }
            if !buf.is_empty() {
                w.write_all(&buf).await?;
                w.flush().await?;
                buf.clear();
                shared.activity.touch();
            }
            if shutdown {
                let _ = w.shutdown().await;
                return Ok(());
            }
        }
    }
    .await;
    if let Err(e) = result {
        debug!("SPDY connection write failed: {e}");
        shared.teardown();
    }
    // Our sending direction is finished either way.
    shared.closed.send_replace(true);
}

/// One SPDY stream: readable, writable, half-closable (shutdown sends FIN) and resettable.
///
/// Dropping the writable half without shutting it down sends FIN too, so a peer waiting for
/// the end of the stream is never left hanging.
pub struct Stream {
    id: u32,
    headers: Headers,
    reader: StreamReader,
    writer: StreamWriter,
}

impl std::fmt::Debug for Stream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stream")
            .field("id", &self.id)
            .field("headers", &self.headers)
            .finish_non_exhaustive()
    }
}

impl Stream {
    /// Stream id.
    pub fn id(&self) -> u32 {
        self.id
    }

    /// Headers of the SYN_STREAM that opened the stream.
    pub fn headers(&self) -> &Headers {
        &self.headers
    }

    /// Separates the readable and writable halves.
    pub fn split(self) -> (StreamReader, StreamWriter) {
        (self.reader, self.writer)
    }

    /// Aborts the stream in both directions (RST_STREAM CANCEL).
    pub fn reset(self) {
        self.reset_with(rst::CANCEL);
    }

    fn reset_with(mut self, status: u32) {
        self.writer.reset(status);
    }
}

impl AsyncRead for Stream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.reader).poll_read(cx, buf)
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.writer).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.writer).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.writer).poll_shutdown(cx)
    }
}

/// The readable half of a [`Stream`].
#[derive(Debug)]
pub struct StreamReader {
    id: u32,
    inner: InboundReader,
}

impl StreamReader {
    /// Stream id.
    pub fn id(&self) -> u32 {
        self.id
    }
}

impl AsyncRead for StreamReader {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

/// The writable half of a [`Stream`].
pub struct StreamWriter {
    id: u32,
    tx: PollSender<Out>,
    raw: mpsc::Sender<Out>,
    state: Arc<StreamState>,
    fin_sent: bool,
}

impl StreamWriter {
    /// Stream id.
    pub fn id(&self) -> u32 {
        self.id
    }

    fn reset(&mut self, status: u32) {
        self.fin_sent = true;
        if !self.state.reset.swap(true, Ordering::AcqRel) {
            send_detached(
                &self.raw,
                Out::Frame(Frame::RstStream {
                    stream_id: self.id,
                    status,
                }),
            );
        }
    }
}

/// Queues a frame from a context that cannot wait (Drop): directly if there is room, else
/// from a small task. Order with earlier frames holds either way, as they are queued already.
fn send_detached(tx: &mpsc::Sender<Out>, out: Out) {
    match tx.try_send(out) {
        Ok(()) | Err(mpsc::error::TrySendError::Closed(_)) => {}
        Err(mpsc::error::TrySendError::Full(out)) => {
            if let Ok(rt) = tokio::runtime::Handle::try_current() {
                let tx = tx.clone();
                rt.spawn(async move {
                    let _ = tx.send(out).await;
                });
            }
        }
    }
}

fn closed_err(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::BrokenPipe, what.to_string())
}

impl AsyncWrite for StreamWriter {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        if self.state.reset.load(Ordering::Acquire) {
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::ConnectionReset,
                "stream was reset",
            )));
        }
        if self.fin_sent {
            return Poll::Ready(Err(closed_err("write after the stream was closed")));
        }
        if buf.is_empty() {
            return Poll::Ready(Ok(0));
        }
        if ready!(self.tx.poll_reserve(cx)).is_err() {
            return Poll::Ready(Err(closed_err("SPDY connection is closed")));
        }
        let n = buf.len().min(MAX_WRITE_CHUNK);
        let frame = Frame::Data {
            stream_id: self.id,
            fin: false,
            data: Bytes::copy_from_slice(&buf[..n]),
        };
        if self.tx.send_item(Out::Frame(frame)).is_err() {
            return Poll::Ready(Err(closed_err("SPDY connection is closed")));
        }
        Poll::Ready(Ok(n))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        // Queued frames are written by the writer task as soon as it can; there is nothing
        // further to push here.
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.fin_sent || self.state.reset.load(Ordering::Acquire) {
            return Poll::Ready(Ok(()));
        }
        if ready!(self.tx.poll_reserve(cx)).is_err() {
            self.fin_sent = true;
            return Poll::Ready(Ok(()));
        }
        let fin = Frame::Data {
            stream_id: self.id,
            fin: true,
            data: Bytes::new(),
        };
        self.fin_sent = true;
        let _ = self.tx.send_item(Out::Frame(fin));
        Poll::Ready(Ok(()))
    }
}

impl Drop for StreamWriter {
    fn drop(&mut self) {
        if !self.fin_sent && !self.state.reset.load(Ordering::Acquire) {
            self.fin_sent = true;
            send_detached(
                &self.raw,
                Out::Frame(Frame::Data {
                    stream_id: self.id,
                    fin: true,
                    data: Bytes::new(),
                }),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{duplex, AsyncReadExt, AsyncWriteExt};

    fn pair(limits: Limits) -> ((Connection, Incoming), (Connection, Incoming)) {
        let (a, b) = duplex(64 * 1024);
        (
            Connection::new(a, Role::Client, limits.clone()),
            Connection::new(b, Role::Server, limits),
        )
    }

    #[tokio::test]
    async fn open_accept_exchange_and_half_close() {
        let ((client, _ci), (_server, mut si)) = pair(Limits::default());
        let opener = tokio::spawn(async move {
            let mut s = client
                .open_stream(Headers::new().with("streamType", "stdin"))
                .await
                .unwrap();
            assert_eq!(s.id(), 1);
            s.write_all(b"ping").await.unwrap();
            s.shutdown().await.unwrap();
            let mut back = Vec::new();
            s.read_to_end(&mut back).await.unwrap();
            (client, back)
        });
        let mut s = si.accept().await.unwrap();
        assert_eq!(s.headers().get("streamtype"), Some("stdin"));
        let mut got = Vec::new();
        s.read_to_end(&mut got).await.unwrap();
        assert_eq!(got, b"ping");
        s.write_all(b"pong").await.unwrap();
        drop(s); // FIN on drop
        let (_client, back) = opener.await.unwrap();
        assert_eq!(back, b"pong");
    }

    #[tokio::test]
    async fn many_streams_interleave_and_large_payloads_arrive_whole() {
        let ((client, _ci), (_server, mut si)) = pair(Limits::default());
        let server = tokio::spawn(async move {
            let mut tasks = Vec::new();
            while let Some(mut s) = si.accept().await {
                tasks.push(tokio::spawn(async move {
                    let mut buf = Vec::new();
                    s.read_to_end(&mut buf).await.unwrap();
                    s.write_all(&buf).await.unwrap();
                }));
                if tasks.len() == 4 {
                    break;
                }
            }
            for t in tasks {
                t.await.unwrap();
            }
        });
        let mut clients = Vec::new();
        for i in 0..4u8 {
            let c = client.clone();
            clients.push(tokio::spawn(async move {
                let s = c
                    .open_stream(Headers::new().with("n", i.to_string()))
                    .await
                    .unwrap();
                let (mut r, mut w) = s.split();
                let payload: Vec<u8> = (0..300_000u32).map(|x| (x as u8) ^ i).collect();
                let expect = payload.clone();
                let wr = tokio::spawn(async move {
                    w.write_all(&payload).await.unwrap();
                    w.shutdown().await.unwrap();
                    w
                });
                let mut got = Vec::new();
                r.read_to_end(&mut got).await.unwrap();
                let _w = wr.await.unwrap();
                assert_eq!(got, expect);
            }));
        }
        for c in clients {
            c.await.unwrap();
        }
        server.await.unwrap();
    }

    #[tokio::test]
    async fn reset_reaches_the_other_side() {
        let ((client, _ci), (_server, mut si)) = pair(Limits::default());
        let c = client.clone();
        let opener = tokio::spawn(async move { c.open_stream(Headers::new()).await.unwrap() });
        let s = si.accept().await.unwrap();
        let mut cs = opener.await.unwrap();
        s.reset();
        let err = cs.read_to_end(&mut Vec::new()).await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::ConnectionReset);
        let err = cs.write_all(b"x").await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::ConnectionReset);
    }

    #[tokio::test]
    async fn refused_when_over_the_stream_limit_or_unaccepted() {
        let limits = Limits {
            max_streams: 1,
            ..Limits::default()
        };
        let ((client, _ci), (_server, mut si)) = pair(limits);
        let c = client.clone();
        let first = tokio::spawn(async move { c.open_stream(Headers::new()).await });
        let _s1 = si.accept().await.unwrap();
        let _c1 = first.await.unwrap().unwrap();
        // The client's own limit of 1 stops it from opening a second stream.
        assert!(matches!(
            client.open_stream(Headers::new()).await,
            Err(SpdyError::Refused(_))
        ));
        drop(si);
    }

    #[tokio::test]
    async fn server_refuses_streams_past_its_limit() {
        let (a, b) = duplex(64 * 1024);
        let (client, _ci) = Connection::new(a, Role::Client, Limits::default());
        let (_server, mut si) = Connection::new(
            b,
            Role::Server,
            Limits {
                max_streams: 1,
                ..Limits::default()
            },
        );
        let c = client.clone();
        let first = tokio::spawn(async move { c.open_stream(Headers::new()).await });
        let _s1 = si.accept().await.unwrap();
        first.await.unwrap().unwrap();
        match client.open_stream(Headers::new()).await {
            Err(SpdyError::Reset { status, .. }) => assert_eq!(status, rst::REFUSED_STREAM),
            other => panic!("{other:?}"),
        }
    }

    #[tokio::test]
    async fn pings_are_echoed_and_garbage_closes_the_connection() {
        let (mut raw, b) = duplex(64 * 1024);
        let (server, _si) = Connection::new(b, Role::Server, Limits::default());
        let mut enc = FrameEncoder::new();
        let mut buf = BytesMut::new();
        enc.encode(&Frame::Ping { id: 1 }, &mut buf).unwrap();
        raw.write_all(&buf).await.unwrap();
        let mut echo = [0u8; 12];
        raw.read_exact(&mut echo).await.unwrap();
        assert_eq!(&echo[..], &buf[..]);
        // A SPDY/2 frame is a protocol error: GOAWAY(PROTOCOL_ERROR), then close.
        raw.write_all(&[0x80, 0x02, 0, 6, 0, 0, 0, 4, 0, 0, 0, 1])
            .await
            .unwrap();
        let mut rest = Vec::new();
        raw.read_to_end(&mut rest).await.unwrap();
        assert_eq!(
            &rest[..],
            &[0x80, 0x03, 0x00, 0x07, 0, 0, 0, 8, 0, 0, 0, 0, 0, 0, 0, 1]
        );
        server.closed().await;
    }

    #[tokio::test]
    async fn a_stalled_reader_applies_backpressure_not_memory() {
        let limits = Limits {
            receive_budget: 64 * 1024,
            ..Limits::default()
        };
        let ((client, _ci), (_server, mut si)) = pair(limits);
        let c = client.clone();
        let opener = tokio::spawn(async move { c.open_stream(Headers::new()).await.unwrap() });
        let mut s = si.accept().await.unwrap();
        let mut cs = opener.await.unwrap();
        // Nobody reads `s`: the writer can push the budget, the socket buffers and the send
        // queue, and then must wait.
        let wrote = tokio::time::timeout(Duration::from_millis(300), async {
            let chunk = vec![0u8; 32 * 1024];
            let mut total = 0usize;
            loop {
                cs.write_all(&chunk).await.unwrap();
                total += chunk.len();
                if total > 64 * 1024 * 1024 {
                    return total;
                }
            }
        })
        .await;
        assert!(wrote.is_err(), "the writer was never held back");
        // Reading drains it again.
        let mut buf = vec![0u8; 1024 * 1024];
        s.read_exact(&mut buf).await.unwrap();
    }

    #[tokio::test]
    async fn graceful_close_delivers_everything_then_eof() {
        let ((client, mut ci), (server, mut si)) = pair(Limits::default());
        let c = client.clone();
        let opener = tokio::spawn(async move { c.open_stream(Headers::new()).await.unwrap() });
        let mut s = si.accept().await.unwrap();
        let mut cs = opener.await.unwrap();
        let payload = vec![42u8; 500_000];
        s.write_all(&payload).await.unwrap();
        drop(s);
        let closer = tokio::spawn(async move {
            server.close(Duration::from_secs(5)).await;
        });
        let mut got = Vec::new();
        cs.read_to_end(&mut got).await.unwrap();
        assert_eq!(got.len(), payload.len());
        // After GOAWAY the client may not open streams.
        client.closed().await;
        assert!(client.open_stream(Headers::new()).await.is_err());
        assert!(ci.accept().await.is_none());
        drop(client);
        closer.await.unwrap();
    }

    #[tokio::test]
    async fn idle_connections_are_closed() {
        let limits = Limits {
            idle_timeout: Some(Duration::from_millis(100)),
            ..Limits::default()
        };
        let ((_client, _ci), (server, _si)) = pair(limits);
        tokio::time::timeout(Duration::from_secs(5), server.closed())
            .await
            .unwrap();
    }
}
