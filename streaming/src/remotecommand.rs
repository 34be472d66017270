//! Exec and attach sessions (the kubelet's `remotecommand` server), over SPDY or WebSocket.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio_tungstenite::WebSocketStream;
use tracing::{debug, info, warn};

use crate::protocol::{channel, stream_type, RemoteCommandVersion, WsEncoding, HEADER_STREAM_TYPE};
use crate::request::{AttachRequest, ExecRequest};
use crate::spdy::{self, Role};
use crate::status::Status;
use crate::ws::{ChannelConn, ChannelOptions};
use crate::{resize, Runtime, StreamIo};

type BoxRead = Box<dyn AsyncRead + Send + Unpin>;
type BoxWrite = Box<dyn AsyncWrite + Send + Unpin>;

/// How long we wait, after our last byte, for the client to hang up before we do.
pub(crate) const LINGER: Duration = Duration::from_secs(5);

/// What the session runs.
#[derive(Debug, Clone)]
pub(crate) enum Command {
    Exec(ExecRequest),
    Attach(AttachRequest),
}

#[derive(Debug, Clone, Copy)]
pub(crate) struct Opts {
    pub(crate) stdin: bool,
    pub(crate) stdout: bool,
    pub(crate) stderr: bool,
    pub(crate) tty: bool,
}

impl Command {
    pub(crate) fn opts(&self) -> Opts {
        match self {
            Command::Exec(r) => Opts {
                stdin: r.stdin,
                stdout: r.stdout,
                stderr: r.stderr && !r.tty,
                tty: r.tty,
            },
            Command::Attach(r) => Opts {
                stdin: r.stdin,
                stdout: r.stdout,
                stderr: r.stderr && !r.tty,
                tty: r.tty,
            },
        }
    }

    pub(crate) fn container_id(&self) -> &str {
        match self {
            Command::Exec(r) => &r.container_id,
            Command::Attach(r) => &r.container_id,
        }
    }
}

/// Settings every session needs.
#[derive(Clone)]
pub(crate) struct SessionCtx {
    pub(crate) runtime: Arc<dyn Runtime>,
    pub(crate) creation_timeout: Duration,
    pub(crate) idle_timeout: Duration,
}

impl SessionCtx {
    pub(crate) fn spdy_limits(&self) -> spdy::Limits {
        spdy::Limits {
            idle_timeout: Some(self.idle_timeout),
            ..spdy::Limits::default()
        }
    }

    pub(crate) fn channel_options(
        &self,
        encoding: WsEncoding,
        readable: Vec<bool>,
    ) -> ChannelOptions {
        ChannelOptions {
            idle_timeout: Some(self.idle_timeout),
            ..ChannelOptions::new(encoding, readable)
        }
    }
}

/// The client's streams, however they were carried.
#[derive(Default)]
struct Streams {
    stdin: Option<BoxRead>,
    stdout: Option<BoxWrite>,
    stderr: Option<BoxWrite>,
    resize: Option<BoxRead>,
    error: Option<BoxWrite>,
}

/// Runs the command against the runtime and reports how it ended on the error stream.
/// Returns early (dropping the runtime's future) if `client_gone` resolves first.
async fn run(
    ctx: &SessionCtx,
    cmd: &Command,
    mut streams: Streams,
    version: RemoteCommandVersion,
    client_gone: impl Future<Output = ()>,
) {
    let opts = cmd.opts();
    let (resize_rx, _resize_pump) = match streams.resize.take() {
        Some(r) if opts.tty => {
            let (rx, pump) = resize::spawn_pump(r);
            (Some(rx), Some(pump))
        }
        _ => (None, None),
    };
    let io = StreamIo {
        stdin: streams.stdin.take(),
        stdout: streams.stdout.take(),
        stderr: streams.stderr.take(),
        tty: opts.tty,
        resize: resize_rx,
    };
    let runtime = ctx.runtime.clone();
    let work = async move {
        match cmd {
            Command::Exec(r) => runtime
                .exec(&r.container_id, r.cmd.clone(), io)
                .await
                .map(Some)
                .map_err(|e| format!("error executing command in container: {e}")),
            Command::Attach(r) => runtime
                .attach(&r.container_id, io)
                .await
                .map(|()| None)
                .map_err(|e| format!("error attaching to container: {e}")),
        }
    };
    let outcome = tokio::select! {
        r = work => Some(r),
        _ = client_gone => None,
    };
    let status = match outcome {
        None => {
            info!("client disconnected; session abandoned");
            return;
        }
        Some(Ok(None)) | Some(Ok(Some(0))) => {
            info!("session ended successfully");
            Status::success()
        }
        Some(Ok(Some(code))) => {
            info!(exit_code = code, "command exited");
            Status::exit_code(code)
        }
        Some(Err(msg)) => {
            warn!("{msg}");
            Status::internal_error(&msg)
        }
    };
    let Some(mut err) = streams.error.take() else {
        return;
    };
    let payload = if version.json_status() {
        match serde_json::to_vec(&status) {
            Ok(v) => v,
            Err(e) => {
                warn!("cannot encode status: {e}");
                return;
            }
        }
    } else if status.is_success() {
        // Before v4 success is the absence of an error message.
        Vec::new()
    } else {
        status.message.into_bytes()
    };
    if !payload.is_empty() {
        if let Err(e) = err.write_all(&payload).await {
            debug!("cannot write the exit status: {e}");
        }
    }
    let _ = err.shutdown().await;
}

/// Serves an upgraded SPDY connection for exec or attach.
pub(crate) async fn serve_spdy<T>(
    ctx: SessionCtx,
    io: T,
    cmd: Command,
    version: RemoteCommandVersion,
) where
    T: AsyncRead + AsyncWrite + Send + 'static,
{
    let (conn, mut incoming) = spdy::Connection::new(io, Role::Server, ctx.spdy_limits());
    let opts = cmd.opts();
    let want_resize = opts.tty && version.supports_resize();
    let expected = 1
        + usize::from(opts.stdin)
        + usize::from(opts.stdout)
        + usize::from(opts.stderr)
        + usize::from(want_resize);

    let mut error = None;
    let mut stdin = None;
    let mut stdout = None;
    let mut stderr = None;
    let mut resize = None;
    let mut received = 0;
    let deadline = tokio::time::sleep(ctx.creation_timeout);
    tokio::pin!(deadline);
    while received < expected {
        tokio::select! {
            s = incoming.accept() => {
                let Some(s) = s else {
                    debug!("connection closed while waiting for streams");
                    return;
                };
                let ty = s.headers().get(HEADER_STREAM_TYPE).unwrap_or("").to_string();
                let slot = match ty.as_str() {
                    stream_type::ERROR => Some(&mut error),
                    stream_type::STDIN if opts.stdin => Some(&mut stdin),
                    stream_type::STDOUT if opts.stdout => Some(&mut stdout),
                    stream_type::STDERR if opts.stderr => Some(&mut stderr),
                    stream_type::RESIZE if want_resize => Some(&mut resize),
                    _ => None,
                };
                match slot {
                    Some(slot) if slot.is_none() => {
                        *slot = Some(s);
                        received += 1;
                    }
                    Some(_) => warn!(stream_type = %ty, "duplicate stream ignored"),
                    None => warn!(stream_type = %ty, "unexpected stream type ignored"),
                }
            }
            _ = &mut deadline => {
                warn!("timed out waiting for client to create streams");
                conn.close(Duration::from_secs(1)).await;
                return;
            }
        }
    }
    // Streams opened from now on are refused.
    drop(incoming);
    debug!(?version, "streams established");

    // Keep the halves we do not use open until the end: dropping a writable half would
    // half-close that stream towards the client early, and the kubelet does not do that.
    let mut keep: Vec<Box<dyn Send>> = Vec::new();
    let mut streams = Streams::default();
    if let Some(s) = stdin {
        let (r, w) = s.split();
        keep.push(Box::new(w));
        streams.stdin = Some(Box::new(r));
    }
    for (s, slot) in [(stdout, &mut streams.stdout), (stderr, &mut streams.stderr)] {
        if let Some(s) = s {
            // Anything the client sends on an output stream is discarded.
            let (_, w) = s.split();
            *slot = Some(Box::new(w));
        }
    }
    if let Some(s) = resize {
        let (r, w) = s.split();
        keep.push(Box::new(w));
        streams.resize = Some(Box::new(r));
    }
    if let Some(s) = error {
        let (_, w) = s.split();
        streams.error = Some(Box::new(w));
    }

    let gone = {
        let conn = conn.clone();
        async move { conn.closed().await }
    };
    run(&ctx, &cmd, streams, version, gone).await;
    drop(keep);
    conn.close(LINGER).await;
}

/// Serves an upgraded WebSocket for exec or attach.
pub(crate) async fn serve_ws<S>(
    ctx: SessionCtx,
    ws: WebSocketStream<S>,
    cmd: Command,
    version: RemoteCommandVersion,
    encoding: WsEncoding,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let opts = cmd.opts();
    // Channels: 0 stdin, 1 stdout, 2 stderr, 3 error, 4 resize.
    let readable = vec![opts.stdin, false, false, false, opts.tty];
    let mut chan_opts = ctx.channel_options(encoding, readable);
    chan_opts.accept_close_signals = version.close_signal();
    let (conn, mut readers) = ChannelConn::start(ws, chan_opts);

    // The kubelet tells the client the connection is ready with an empty message on the
    // lowest channel it will write.
    let ready = if opts.stdout {
        channel::STDOUT
    } else if opts.stderr {
        channel::STDERR
    } else {
        channel::ERROR
    };
    if conn.send(ready, &[]).await.is_err() {
        return;
    }
    let mut streams = Streams::default();
    if let Some(r) = readers[usize::from(channel::STDIN)].take() {
        streams.stdin = Some(Box::new(r));
    }
    if opts.stdout {
        streams.stdout = Some(Box::new(conn.writer(channel::STDOUT)));
    }
    if opts.stderr {
        streams.stderr = Some(Box::new(conn.writer(channel::STDERR)));
    }
    if let Some(r) = readers[usize::from(channel::RESIZE)].take() {
        streams.resize = Some(Box::new(r));
    }
    streams.error = Some(Box::new(conn.writer(channel::ERROR)));
    debug!(?version, ?encoding, "websocket channels established");

    let gone = {
        let conn = conn.clone();
        async move { conn.closed().await }
    };
    run(&ctx, &cmd, streams, version, gone).await;
    conn.close(LINGER).await;
}
