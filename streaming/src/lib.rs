//! peapod's streaming server: `exec`, `attach` and `port-forward` over SPDY/3.1 and WebSocket,
//! as the kubelet's CRI streaming server speaks them.
//!
//! # How it fits in
//!
//! CRI `Exec`, `Attach` and `PortForward` do not stream over gRPC: they return a URL, and the
//! client (kubelet proxying for kubectl, or crictl) connects to it and upgrades the HTTP
//! connection. The daemon owns the CRI side; this crate owns the URL side:
//!
//! 1. The daemon starts one [`Server`] ([`Server::start`]) with a [`Config`] and its
//!    implementation of [`Runtime`].
//! 2. On a CRI `Exec`, the daemon checks what only it can check (the container exists and
//!    runs), checks the request's shape with [`validate_exec`] (or lets [`Server::exec_url`]
//!    do it) and answers with the URL [`Server::exec_url`] returns. Likewise
//!    [`Server::attach_url`] / [`validate_attach`] and [`Server::port_forward_url`] /
//!    [`validate_port_forward`]. A [`ValidationError`] names the offending CRI field, for an
//!    `InvalidArgument` status.
//! 3. A URL carries only a random single-use token (`/exec/{token}`, `/attach/{token}`,
//!    `/portforward/{token}`) that expires after [`Config::token_ttl`], as the kubelet's
//!    request cache does. An unknown, expired or already used token gets 404.
//! 4. When the client connects, the server negotiates the protocol, collects the streams and
//!    calls [`Runtime::exec`], [`Runtime::attach`] or, once per forwarded connection,
//!    [`Runtime::port_forward`], handing over the client's streams as plain `AsyncRead` /
//!    `AsyncWrite` objects. The runtime never sees the wire protocol.
//!
//! # The contract for [`Runtime`] implementations
//!
//! * `exec` runs the command, copies [`StreamIo::stdin`] into it until EOF (then closes the
//!   process's stdin) and its output into [`StreamIo::stdout`] / [`StreamIo::stderr`], and
//!   returns the exit code. The server reports 0 as `Success` and anything else as
//!   `NonZeroExitCode` with the code (so `kubectl exec` and `crictl exec` exit with it). An
//!   `Err` is reported to the client as an internal error carrying the message.
//! * `attach` does the same for the container's main process and returns when the attach
//!   ends (the process exited, or the streams closed).
//! * When [`StreamIo::tty`] is set, stderr is `None` (a terminal merges it into stdout) and
//!   [`StreamIo::resize`] delivers the terminal sizes the client sends (kubectl and crictl
//!   send the initial size right after connecting). Sizes are coalesced: a runtime that
//!   reads slowly gets the latest, and one that never reads does not hold anything up.
//! * `port_forward` connects the stream to TCP `port` inside the sandbox's network
//!   namespace and copies both ways until both directions have ended (shut down the
//!   stream's write side when the port's side reaches EOF, and the port's write side when
//!   the stream reaches EOF). An `Err` is written to the client's error stream.
//! * Writers given to the runtime are closed (the client sees EOF) when the runtime drops
//!   them or returns. Reads return EOF when the client half-closes a stream.
//! * If the client disconnects, the server *drops the runtime's future*: implementations
//!   must tolerate cancellation at any `.await` (release what they hold in `Drop` or in
//!   spawned tasks), as with any cancellable Tokio future.
//! * Buffers are bounded: a runtime that stops reading stdin eventually stops the client
//!   from sending (TCP backpressure), it does not make the server buffer without limit.
//!
//! # Protocols
//!
//! * SPDY/3.1 upgrade (`Upgrade: SPDY/3.1`, `X-Stream-Protocol-Version`): remotecommand
//!   `v4.channel.k8s.io` (exit status as a `metav1.Status` JSON on the error stream),
//!   `v3.channel.k8s.io` (adds terminal resize), `v2.channel.k8s.io`, `channel.k8s.io`
//!   (error text only); port-forward `portforward.k8s.io` (a data and an error stream per
//!   forwarded connection, paired by the `requestID` header; many per connection).
//! * WebSocket: remotecommand `v5.channel.k8s.io` (adds the stdin close signal),
//!   `v4.channel.k8s.io`, `v4.base64.channel.k8s.io`, `v3.channel.k8s.io`,
//!   `v2.channel.k8s.io`, `channel.k8s.io`, `base64.channel.k8s.io` (the first byte of a
//!   message is the channel: 0 stdin, 1 stdout, 2 stderr, 3 error, 4 resize); port-forward
//!   `v4.channel.k8s.io` / `v4.base64.channel.k8s.io` / no subprotocol (channel 2i carries
//!   data and 2i+1 errors for the i-th `port` query parameter; each channel's first message
//!   is the port, little endian), and `SPDY/3.1+portforward.k8s.io` (the SPDY port-forward
//!   protocol tunnelled through WebSocket binary messages, as newer kubectl sends it).
//!
//! The [`client`] module (cargo feature `client`) implements the client side of all of
//! these, for tests here and in the daemon.
//!
//! # Limits
//!
//! A SPDY connection queues at most 8 MiB of received payload for slow readers (then stops
//! reading the socket), accepts control frames up to 64 KiB and header blocks inflating to
//! 256 KiB, and at most 256 open streams; a WebSocket message is at most 4 MiB. Headers must
//! arrive within 30 s, TLS handshakes within 10 s, requested streams within
//! [`Config::stream_creation_timeout`]; sessions idle for [`Config::stream_idle_timeout`]
//! are closed.
//!
//! # Tests
//!
//! Unit tests sit beside the code (framing, compression against reference zlib output,
//! channel codec, token cache, resize parsing). `tests/` drives a real [`Server`] with a fake
//! [`Runtime`] through the [`client`] module, and `tests/kubectl.rs` runs the real kubectl
//! binaries of the machine image (1.27 and 1.33: SPDY, WebSocket v5, SPDY over WebSocket)
//! against it through a minimal fake API server.

#![warn(missing_docs)]

use std::fmt;

use async_trait::async_trait;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::mpsc;

mod cache;
mod config;
mod conn_tasks;
pub mod mux;
mod portforward;
pub mod protocol;
mod remotecommand;
mod request;
mod resize;
mod server;
pub mod spdy;
pub mod status;
mod tls;
pub mod ws;

#[cfg(feature = "client")]
pub mod client;

pub use config::{Config, TlsConfig};
pub use request::{
    validate_attach, validate_exec, validate_port_forward, AttachRequest, ExecRequest,
    PortForwardRequest, ValidationError,
};
pub use server::Server;

/// A terminal size, as `kubectl exec -t` and `crictl exec -t` report it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct TerminalSize {
    /// Columns.
    pub width: u16,
    /// Rows.
    pub height: u16,
}

/// A bidirectional byte stream handed to [`Runtime::port_forward`].
pub trait AsyncReadWrite: AsyncRead + AsyncWrite + Send + Unpin {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin> AsyncReadWrite for T {}

/// The client's side of an exec or attach session.
pub struct StreamIo {
    /// What the client types; `None` if it asked for no stdin.
    pub stdin: Option<Box<dyn AsyncRead + Send + Unpin>>,
    /// Where the process's stdout goes; `None` if not requested.
    pub stdout: Option<Box<dyn AsyncWrite + Send + Unpin>>,
    /// Where the process's stderr goes; `None` if not requested, and always with a tty.
    pub stderr: Option<Box<dyn AsyncWrite + Send + Unpin>>,
    /// Whether the process should get a terminal.
    pub tty: bool,
    /// Terminal sizes from the client, when `tty` is set and the protocol carries them.
    pub resize: Option<mpsc::Receiver<TerminalSize>>,
}

impl fmt::Debug for StreamIo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StreamIo")
            .field("stdin", &self.stdin.is_some())
            .field("stdout", &self.stdout.is_some())
            .field("stderr", &self.stderr.is_some())
            .field("tty", &self.tty)
            .field("resize", &self.resize.is_some())
            .finish()
    }
}

/// Why the runtime could not serve a session; the message reaches the client.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// The container does not exist (any more).
    #[error("container {0} not found")]
    ContainerNotFound(String),
    /// The container is not running.
    #[error("container {0} is not running")]
    ContainerNotRunning(String),
    /// The pod sandbox does not exist (any more).
    #[error("pod sandbox {0} not found")]
    SandboxNotFound(String),
    /// I/O failed; `context` says what was being done.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The failure.
        #[source]
        source: std::io::Error,
    },
    /// Anything else.
    #[error("{0}")]
    Other(String),
}

/// What the daemon implements so the server can run sessions.
///
/// See the crate documentation for the contract (EOF, closing, cancellation).
#[async_trait]
pub trait Runtime: Send + Sync + 'static {
    /// Runs `cmd` in the container, wired to `io`; returns its exit code.
    async fn exec(
        &self,
        container_id: &str,
        cmd: Vec<String>,
        io: StreamIo,
    ) -> Result<i32, RuntimeError>;

    /// Attaches `io` to the container's main process.
    async fn attach(&self, container_id: &str, io: StreamIo) -> Result<(), RuntimeError>;

    /// Connects `stream` to TCP `port` inside the pod sandbox's network namespace.
    async fn port_forward(
        &self,
        sandbox_id: &str,
        port: u16,
        stream: Box<dyn AsyncReadWrite>,
    ) -> Result<(), RuntimeError>;
}

/// Errors of the server's own API.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The listen address could not be parsed or bound.
    #[error("cannot listen on streaming server address {address:?}: {source}")]
    Bind {
        /// Configured address.
        address: String,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// The TLS certificate or key could not be loaded or used.
    #[error("streaming server TLS setup failed ({path}): {message}")]
    Tls {
        /// File involved, or `config`.
        path: String,
        /// What went wrong.
        message: String,
    },
    /// The configured base URL is not a usable http(s) URL.
    #[error("invalid streaming base URL {0:?}: expected http(s)://host[:port][/prefix]")]
    BaseUrl(String),
    /// The request's shape is invalid (a CRI `InvalidArgument`).
    #[error(transparent)]
    InvalidRequest(#[from] ValidationError),
    /// Too many issued URLs are still unused (a CRI `ResourceExhausted`), as the kubelet's
    /// cache limits them.
    #[error("too many in-flight streaming requests (limit {limit}); try again later")]
    TooManyInFlight {
        /// The limit.
        limit: usize,
    },
}
