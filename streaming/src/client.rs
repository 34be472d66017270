//! Clients for the streaming protocols (cargo feature `client`), written from the protocols as
//! client-go implements them: what kubectl and crictl do, in Rust, for tests.
//!
//! * [`remote_command_spdy`] / [`remote_command_websocket`]: exec or attach to a URL from
//!   `Exec`/`Attach`, wiring local readers/writers, and report how the command ended.
//! * [`SpdyPortForwarder`]: one SPDY (or SPDY-over-WebSocket) connection carrying any number of
//!   forwarded connections, each a data stream plus an error stream.
//! * [`WsPortForward`]: the WebSocket channel port-forward protocol (one connection per port).

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::header::{self, HeaderValue};
use http::{Request, StatusCode, Uri};
use http_body_util::{BodyExt, Empty, Limited};
use hyper_util::rt::TokioIo;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::WebSocketStream;

use crate::mux::InboundReader;
use crate::protocol::{
    self, channel, stream_type, RemoteCommandVersion, WsEncoding, HEADER_PORT,
    HEADER_PROTOCOL_VERSION, HEADER_REQUEST_ID, HEADER_STREAM_TYPE,
};
use crate::resize::WireSize;
use crate::spdy::{self, Connection, Headers, Incoming, Role, SpdyError};
use crate::status::Status;
use crate::ws::{self, ChannelConn, ChannelOptions, ChannelWriter};
use crate::TerminalSize;

/// Anything a connection can run over (TCP or TLS).
pub trait Io: AsyncRead + AsyncWrite + Send + Unpin {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin> Io for T {}

type BoxRead = Box<dyn AsyncRead + Send + Unpin>;
type BoxWrite = Box<dyn AsyncWrite + Send + Unpin>;

/// How to reach the server.
#[derive(Clone, Default)]
pub struct ClientOptions {
    /// TLS settings for `https` URLs.
    pub tls: Option<Arc<rustls::ClientConfig>>,
    /// Bound on TCP connect + TLS + HTTP upgrade (default 30 s).
    pub connect_timeout: Option<Duration>,
}

impl std::fmt::Debug for ClientOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientOptions")
            .field("tls", &self.tls.is_some())
            .field("connect_timeout", &self.connect_timeout)
            .finish()
    }
}

/// A TLS client configuration trusting the certificates in `pem` (e.g. the server's own
/// self-signed certificate).
pub fn tls_trusting(pem: &[u8]) -> Result<Arc<rustls::ClientConfig>, ClientError> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(pem) {
        let cert = cert.map_err(|e| ClientError::Tls(e.to_string()))?;
        roots
            .add(cert)
            .map_err(|e| ClientError::Tls(e.to_string()))?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| ClientError::Tls(e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(config))
}

/// Client-side failures.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The URL is not `http(s)://host[:port]/path`.
    #[error("invalid streaming URL {0:?}")]
    InvalidUrl(String),
    /// TCP connect failed.
    #[error("connecting to {addr}: {source}")]
    Connect {
        /// host:port.
        addr: String,
        /// Cause.
        #[source]
        source: io::Error,
    },
    /// TLS setup or handshake failed.
    #[error("TLS: {0}")]
    Tls(String),
    /// Connecting or upgrading took too long.
    #[error("timed out connecting to the streaming server")]
    Timeout,
    /// The server answered with a non-101 status.
    #[error("server refused the upgrade: {status}: {body}")]
    Http {
        /// HTTP status.
        status: StatusCode,
        /// Response body (truncated).
        body: String,
    },
    /// The HTTP exchange failed.
    #[error("HTTP upgrade failed: {0}")]
    Upgrade(String),
    /// The SPDY layer failed.
    #[error(transparent)]
    Spdy(#[from] SpdyError),
    /// Local or stream I/O failed.
    #[error("stream I/O: {0}")]
    Io(#[from] io::Error),
    /// The server broke the protocol.
    #[error("protocol error: {0}")]
    Protocol(String),
}

struct Target {
    tls: bool,
    host: String,
    port: u16,
    authority: String,
    path_and_query: String,
}

fn target(url: &str) -> Result<Target, ClientError> {
    let bad = || ClientError::InvalidUrl(url.to_string());
    let uri: Uri = url.parse().map_err(|_| bad())?;
    let tls = match uri.scheme_str() {
        Some("http") | Some("ws") => false,
        Some("https") | Some("wss") => true,
        _ => return Err(bad()),
    };
    let authority = uri.authority().ok_or_else(bad)?;
    let host = authority
        .host()
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string();
    let port = authority.port_u16().unwrap_or(if tls { 443 } else { 80 });
    Ok(Target {
        tls,
        host,
        port,
        authority: authority.as_str().to_string(),
        path_and_query: uri
            .path_and_query()
            .map(|p| p.as_str().to_string())
            .unwrap_or_else(|| "/".into()),
    })
}

async fn dial(t: &Target, opts: &ClientOptions) -> Result<Box<dyn Io>, ClientError> {
    let addr = format!("{}:{}", t.host, t.port);
    let addr = if t.host.contains(':') {
        format!("[{}]:{}", t.host, t.port)
    } else {
        addr
    };
    let tcp = TcpStream::connect(&addr)
        .await
        .map_err(|source| ClientError::Connect {
            addr: addr.clone(),
            source,
        })?;
    let _ = tcp.set_nodelay(true);
    if !t.tls {
        return Ok(Box::new(tcp));
    }
    let config = opts
        .tls
        .clone()
        .ok_or_else(|| ClientError::Tls("https URL but no TLS configuration given".into()))?;
    let name = ServerName::try_from(t.host.clone()).map_err(|e| ClientError::Tls(e.to_string()))?;
    let stream = tokio_rustls::TlsConnector::from(config)
        .connect(name, tcp)
        .await
        .map_err(|e| ClientError::Tls(e.to_string()))?;
    Ok(Box::new(stream))
}

async fn with_timeout<T>(
    opts: &ClientOptions,
    f: impl std::future::Future<Output = Result<T, ClientError>>,
) -> Result<T, ClientError> {
    let limit = opts.connect_timeout.unwrap_or(Duration::from_secs(30));
    tokio::time::timeout(limit, f)
        .await
        .map_err(|_| ClientError::Timeout)?
}

/// Upgrades `url` to SPDY/3.1 offering `protocols` (most preferred first); returns the
/// connection, the streams the server opens (none, in the Kubernetes protocols) and the
/// negotiated protocol ("" if the server named none).
pub async fn upgrade_spdy(
    url: &str,
    protocols: &[&str],
    opts: &ClientOptions,
) -> Result<(Connection, Incoming, String), ClientError> {
    let t = target(url)?;
    with_timeout(opts, async {
        let io = dial(&t, opts).await?;
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io))
            .await
            .map_err(|e| ClientError::Upgrade(e.to_string()))?;
        tokio::spawn(async move {
            let _ = conn.with_upgrades().await;
        });
        let mut req = Request::post(t.path_and_query.as_str())
            .header(header::HOST, t.authority.as_str())
            .header(header::CONNECTION, "Upgrade")
            .header(header::UPGRADE, protocol::UPGRADE_SPDY)
            .body(Empty::<Bytes>::new())
            .map_err(|e| ClientError::Upgrade(e.to_string()))?;
        for p in protocols {
            let v = HeaderValue::from_str(p).map_err(|e| ClientError::Upgrade(e.to_string()))?;
            req.headers_mut().append(HEADER_PROTOCOL_VERSION, v);
        }
        let resp = sender
            .send_request(req)
            .await
            .map_err(|e| ClientError::Upgrade(e.to_string()))?;
        if resp.status() != StatusCode::SWITCHING_PROTOCOLS {
            let status = resp.status();
            let body = Limited::new(resp.into_body(), 64 * 1024)
                .collect()
                .await
                .map(|b| String::from_utf8_lossy(&b.to_bytes()).trim().to_string())
                .unwrap_or_default();
            return Err(ClientError::Http { status, body });
        }
        let negotiated = resp
            .headers()
            .get(HEADER_PROTOCOL_VERSION)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string();
        let upgraded = hyper::upgrade::on(resp)
            .await
            .map_err(|e| ClientError::Upgrade(e.to_string()))?;
        let (conn, incoming) = Connection::new(
            TokioIo::new(upgraded),
            Role::Client,
            spdy::Limits::default(),
        );
        Ok((conn, incoming, negotiated))
    })
    .await
}

/// Opens a WebSocket to `url` offering `protocols`; returns it and the chosen subprotocol.
pub async fn upgrade_websocket(
    url: &str,
    protocols: &[&str],
    opts: &ClientOptions,
) -> Result<(WebSocketStream<Box<dyn Io>>, String), ClientError> {
    let t = target(url)?;
    with_timeout(opts, async {
        let io = dial(&t, opts).await?;
        let ws_url = format!(
            "{}://{}{}",
            if t.tls { "wss" } else { "ws" },
            t.authority,
            t.path_and_query
        );
        let mut req = ws_url
            .into_client_request()
            .map_err(|e| ClientError::Upgrade(e.to_string()))?;
        if !protocols.is_empty() {
            let v = HeaderValue::from_str(&protocols.join(", "))
                .map_err(|e| ClientError::Upgrade(e.to_string()))?;
            req.headers_mut().insert(header::SEC_WEBSOCKET_PROTOCOL, v);
        }
        match tokio_tungstenite::client_async_with_config(req, io, Some(ws::websocket_config()))
            .await
        {
            Ok((ws, resp)) => {
                let proto = resp
                    .headers()
                    .get(header::SEC_WEBSOCKET_PROTOCOL)
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("")
                    .to_string();
                Ok((ws, proto))
            }
            Err(tokio_tungstenite::tungstenite::Error::Http(resp)) => Err(ClientError::Http {
                status: resp.status(),
                body: resp
                    .body()
                    .as_ref()
                    .map(|b| String::from_utf8_lossy(b).trim().to_string())
                    .unwrap_or_default(),
            }),
            Err(e) => Err(ClientError::Upgrade(e.to_string())),
        }
    })
    .await
}

/// Local ends of an exec or attach session.
///
/// The streams given must match the request the URL was issued for (stdin with `stdin`,
/// stdout with `stdout`, stderr with `stderr`): over SPDY the server waits, up to its
/// stream creation timeout, for every stream the request asked for, as the kubelet does.
#[derive(Default)]
pub struct CommandIo {
    /// Sent as the command's stdin; EOF half-closes it.
    pub stdin: Option<BoxRead>,
    /// Receives stdout.
    pub stdout: Option<BoxWrite>,
    /// Receives stderr (ignored with `tty`).
    pub stderr: Option<BoxWrite>,
    /// Whether the session has a terminal.
    pub tty: bool,
    /// Terminal sizes to send.
    pub resize: Option<mpsc::Receiver<TerminalSize>>,
}

/// How the remote command ended, as the error stream told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Exit code 0 (or a successful attach).
    Success,
    /// The command exited with this non-zero code.
    ExitCode(i32),
    /// Anything else the server reported.
    Failure(String),
}

/// A finished remote command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandResult {
    /// The protocol the server chose.
    pub protocol: String,
    /// How it ended.
    pub outcome: Outcome,
}

fn outcome(version: RemoteCommandVersion, error: &[u8]) -> Result<Outcome, ClientError> {
    if version.json_status() {
        if error.is_empty() {
            return Err(ClientError::Protocol(
                "connection ended without an exit status".into(),
            ));
        }
        let status: Status = serde_json::from_slice(error)
            .map_err(|e| ClientError::Protocol(format!("undecodable status: {e}")))?;
        Ok(if status.is_success() {
            Outcome::Success
        } else if let Some(code) = status.exit_code_of() {
            Outcome::ExitCode(code)
        } else {
            Outcome::Failure(status.message)
        })
    } else if error.is_empty() {
        Ok(Outcome::Success)
    } else {
        Ok(Outcome::Failure(
            String::from_utf8_lossy(error).into_owned(),
        ))
    }
}

async fn copy_out(mut src: impl AsyncRead + Unpin, dst: Option<BoxWrite>) -> io::Result<()> {
    match dst {
        Some(mut dst) => {
            tokio::io::copy(&mut src, &mut dst).await?;
            dst.flush().await?;
            dst.shutdown().await
        }
        None => {
            tokio::io::copy(&mut src, &mut tokio::io::sink()).await?;
            Ok(())
        }
    }
}

async fn send_resizes(mut rx: mpsc::Receiver<TerminalSize>, mut dst: impl AsyncWrite + Unpin) {
    while let Some(size) = rx.recv().await {
        let Ok(mut line) = serde_json::to_vec(&WireSize::from(size)) else {
            continue;
        };
        line.push(b'\n');
        if dst.write_all(&line).await.is_err() {
            break;
        }
    }
}

/// Runs exec or attach over SPDY, as client-go's `StreamExecutor` does: offers `protocols`,
/// opens the error stream first, then stdin, stdout, stderr (not with a tty) and, from v3
/// with a tty, resize; copies until the outputs end; returns the exit status.
pub async fn remote_command_spdy(
    url: &str,
    protocols: &[&str],
    io: CommandIo,
    opts: &ClientOptions,
) -> Result<CommandResult, ClientError> {
    let (conn, _incoming, negotiated) = upgrade_spdy(url, protocols, opts).await?;
    let version = protocol::spdy_remotecommand(&negotiated).ok_or_else(|| {
        ClientError::Protocol(format!("server chose unknown protocol {negotiated:?}"))
    })?;
    let open = |ty: &str| {
        let conn = conn.clone();
        let headers = Headers::new().with(HEADER_STREAM_TYPE, ty);
        async move { conn.open_stream(headers).await }
    };
    let error = open(stream_type::ERROR).await?;
    let stdin = match io.stdin {
        Some(_) => Some(open(stream_type::STDIN).await?),
        None => None,
    };
    let stdout = match io.stdout {
        Some(_) => Some(open(stream_type::STDOUT).await?),
        None => None,
    };
    let stderr = match io.stderr {
        Some(_) if !io.tty => Some(open(stream_type::STDERR).await?),
        _ => None,
    };
    let resize = if io.tty && version.supports_resize() {
        Some(open(stream_type::RESIZE).await?)
    } else {
        None
    };

    let mut tasks = tokio::task::JoinSet::new();
    if let (Some(mut src), Some(s)) = (io.stdin, stdin) {
        let (_r, mut w) = s.split();
        // Not waited for: a command may end before its input does.
        tokio::spawn(async move {
            let _ = tokio::io::copy(&mut src, &mut w).await;
            let _ = w.shutdown().await;
        });
    }
    if let (Some(rx), Some(s)) = (io.resize, resize) {
        let (_r, w) = s.split();
        tokio::spawn(send_resizes(rx, w));
    }
    if let Some(s) = stdout {
        let (r, _w) = s.split();
        tasks.spawn(copy_out(r, io.stdout));
    }
    if let Some(s) = stderr {
        let (r, _w) = s.split();
        tasks.spawn(copy_out(r, io.stderr));
    }
    let (err_r, _err_w) = error.split();
    let result = finish_command(err_r, tasks, version, negotiated).await;
    drop(conn);
    result
}

/// Runs exec or attach over WebSocket channels (binary or base64, v1 to v5). With v5, the end
/// of stdin is sent as a close signal; before v5 stdin cannot be half-closed.
pub async fn remote_command_websocket(
    url: &str,
    protocols: &[&str],
    io: CommandIo,
    opts: &ClientOptions,
) -> Result<CommandResult, ClientError> {
    let (socket, negotiated) = upgrade_websocket(url, protocols, opts).await?;
    let (version, encoding) = protocol::ws_remotecommand(&negotiated).ok_or_else(|| {
        ClientError::Protocol(format!("server chose unknown protocol {negotiated:?}"))
    })?;
    let (conn, mut readers) = ChannelConn::start(
        socket,
        ChannelOptions {
            send_close_signals: version.close_signal(),
            ..ChannelOptions::new(encoding, vec![false, true, true, true, false])
        },
    );
    if let Some(mut src) = io.stdin {
        let mut w = conn.writer(channel::STDIN);
        tokio::spawn(async move {
            let _ = tokio::io::copy(&mut src, &mut w).await;
            let _ = w.shutdown().await;
        });
    }
    if let (Some(rx), true) = (io.resize, io.tty) {
        tokio::spawn(send_resizes(rx, conn.writer(channel::RESIZE)));
    }
    let mut tasks = tokio::task::JoinSet::new();
    let take = |readers: &mut Vec<Option<InboundReader>>, ch: u8| {
        readers[usize::from(ch)]
            .take()
            .ok_or_else(|| ClientError::Protocol(format!("channel {ch} missing")))
    };
    tasks.spawn(copy_out(take(&mut readers, channel::STDOUT)?, io.stdout));
    tasks.spawn(copy_out(take(&mut readers, channel::STDERR)?, io.stderr));
    let result = finish_command(
        take(&mut readers, channel::ERROR)?,
        tasks,
        version,
        negotiated,
    )
    .await;
    drop(conn);
    result
}

/// The end of a remote command, either protocol: reads the status from the error stream,
/// waits for the output copies and reports. The caller holds the connection until then.
async fn finish_command(
    error: impl AsyncRead + Unpin,
    mut tasks: tokio::task::JoinSet<io::Result<()>>,
    version: RemoteCommandVersion,
    negotiated: String,
) -> Result<CommandResult, ClientError> {
    let mut status = Vec::new();
    error.take(1024 * 1024).read_to_end(&mut status).await?;
    while let Some(r) = tasks.join_next().await {
        r.map_err(|e| ClientError::Protocol(e.to_string()))??;
    }
    Ok(CommandResult {
        protocol: negotiated,
        outcome: outcome(version, &status)?,
    })
}

/// One forwarded connection of a [`SpdyPortForwarder`].
pub struct ForwardedStream {
    /// The connection's bytes, both ways; shut it down to end our direction.
    pub data: spdy::Stream,
    /// The server's error report for this connection (empty on success), until EOF.
    pub error: spdy::StreamReader,
}

impl ForwardedStream {
    /// Reads the error stream to its end (after the data has finished).
    pub async fn error_message(&mut self) -> io::Result<String> {
        let mut buf = Vec::new();
        (&mut self.error)
            .take(64 * 1024)
            .read_to_end(&mut buf)
            .await?;
        Ok(String::from_utf8_lossy(&buf).into_owned())
    }
}

/// A port-forward connection as kubectl and crictl make it: SPDY with `portforward.k8s.io`,
/// a stream pair per forwarded connection.
pub struct SpdyPortForwarder {
    conn: Connection,
    _incoming: Incoming,
    next_request_id: AtomicU64,
    protocol: String,
}

impl SpdyPortForwarder {
    /// Upgrades `url` (a PortForward URL) to SPDY.
    pub async fn connect(url: &str, opts: &ClientOptions) -> Result<Self, ClientError> {
        let (conn, incoming, protocol) =
            upgrade_spdy(url, &[protocol::PORT_FORWARD_PROTOCOL_V1], opts).await?;
        Ok(Self::from_parts(conn, incoming, protocol))
    }

    /// Like [`SpdyPortForwarder::connect`], but tunnels SPDY through a WebSocket, as kubectl
    /// does since Kubernetes 1.30 (`SPDY/3.1+portforward.k8s.io`).
    pub async fn connect_tunneled(url: &str, opts: &ClientOptions) -> Result<Self, ClientError> {
        let offered = format!(
            "{}{}",
            protocol::SPDY_TUNNELING_PREFIX,
            protocol::PORT_FORWARD_PROTOCOL_V1
        );
        let (socket, negotiated) = upgrade_websocket(url, &[&offered], opts).await?;
        if negotiated != offered {
            return Err(ClientError::Protocol(format!(
                "server chose {negotiated:?}, not {offered:?}"
            )));
        }
        let (conn, incoming) = Connection::new(
            ws::WsByteStream::new(socket),
            Role::Client,
            spdy::Limits::default(),
        );
        Ok(Self::from_parts(
            conn,
            incoming,
            protocol::PORT_FORWARD_PROTOCOL_V1.to_string(),
        ))
    }

    fn from_parts(conn: Connection, incoming: Incoming, protocol: String) -> Self {
        SpdyPortForwarder {
            conn,
            _incoming: incoming,
            next_request_id: AtomicU64::new(0),
            protocol,
        }
    }

    /// The protocol the server chose.
    pub fn protocol(&self) -> &str {
        &self.protocol
    }

    /// Opens a forwarded connection to `port`: the error stream first (half-closed at once,
    /// as client-go does), then the data stream, paired by a fresh request id.
    pub async fn open(&self, port: u16) -> Result<ForwardedStream, ClientError> {
        let id = self
            .next_request_id
            .fetch_add(1, Ordering::Relaxed)
            .to_string();
        let headers = |ty: &str| {
            Headers::new()
                .with(HEADER_STREAM_TYPE, ty)
                .with(HEADER_PORT, port.to_string())
                .with(HEADER_REQUEST_ID, id.clone())
        };
        let error = self.conn.open_stream(headers(stream_type::ERROR)).await?;
        let (error, mut error_w) = error.split();
        error_w.shutdown().await?;
        let data = self.conn.open_stream(headers(stream_type::DATA)).await?;
        Ok(ForwardedStream { data, error })
    }

    /// Opens one raw stream with the given headers (for tests of malformed requests).
    pub async fn open_raw(&self, headers: Headers) -> Result<spdy::Stream, ClientError> {
        Ok(self.conn.open_stream(headers).await?)
    }

    /// Resolves when the server has closed the connection.
    pub async fn closed(&self) {
        self.conn.closed().await
    }
}

/// One port of a [`WsPortForward`].
pub struct WsForwardedPort {
    /// The remote port.
    pub port: u16,
    /// The forwarded bytes, both ways.
    pub data: tokio::io::Join<InboundReader, ChannelWriter>,
    /// Error text from the server for this port, until the connection ends.
    pub error: InboundReader,
}

/// The WebSocket channel port-forward protocol: `port` query parameters select the ports,
/// channel 2i carries port i's data and 2i+1 its errors, each announcing the port first.
pub struct WsPortForward {
    conn: ChannelConn,
    /// The ports, in the order requested.
    pub ports: Vec<WsForwardedPort>,
    /// The protocol the server chose.
    pub protocol: String,
}

impl WsPortForward {
    /// Connects to `url` (a PortForward URL) for `ports`, offering `protocol`
    /// (`v4.channel.k8s.io`, `v4.base64.channel.k8s.io`, or "" for none).
    pub async fn connect(
        url: &str,
        ports: &[u16],
        protocol: &str,
        opts: &ClientOptions,
    ) -> Result<Self, ClientError> {
        if ports.is_empty() || ports.len() > 127 {
            return Err(ClientError::Protocol(format!(
                "{} ports: one WebSocket forwards 1 to 127",
                ports.len()
            )));
        }
        let mut url = url.to_string();
        for (i, p) in ports.iter().enumerate() {
            url.push(if i == 0 && !url.contains('?') {
                '?'
            } else {
                '&'
            });
            url.push_str(&format!("{}={p}", protocol::query::PORT));
        }
        let offered: Vec<&str> = if protocol.is_empty() {
            vec![]
        } else {
            vec![protocol]
        };
        let (socket, negotiated) = upgrade_websocket(&url, &offered, opts).await?;
        let encoding = if negotiated == protocol::BASE64_STREAM_PROTOCOL_V4 {
            WsEncoding::Base64
        } else {
            WsEncoding::Binary
        };
        let readable = ports.iter().flat_map(|_| [true, true]).collect();
        let (conn, mut readers) =
            ChannelConn::start(socket, ChannelOptions::new(encoding, readable));
        let mut out = Vec::with_capacity(ports.len());
        for (i, port) in ports.iter().copied().enumerate() {
            let (Some(mut data_r), Some(mut err_r)) =
                (readers[2 * i].take(), readers[2 * i + 1].take())
            else {
                return Err(ClientError::Protocol("missing channel".into()));
            };
            for r in [&mut data_r, &mut err_r] {
                let mut announced = [0u8; 2];
                r.read_exact(&mut announced).await?;
                if u16::from_le_bytes(announced) != port {
                    return Err(ClientError::Protocol(format!(
                        "channel announced port {}, expected {port}",
                        u16::from_le_bytes(announced)
                    )));
                }
            }
            out.push(WsForwardedPort {
                port,
                data: tokio::io::join(data_r, conn.writer((2 * i) as u8)),
                error: err_r,
            });
        }
        Ok(WsPortForward {
            conn,
            ports: out,
            protocol: negotiated,
        })
    }

    /// Closes the WebSocket (which ends every forwarded port on the server).
    pub async fn close(self) {
        self.conn.close(Duration::from_secs(2)).await;
    }
}
