//! The HTTP side: listening, TLS, routing `/{exec,attach,portforward}/{token}`, protocol
//! negotiation and the upgrade to SPDY or WebSocket.

use peapod_host::sync::LockUnpoisoned;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderValue};
use http::{Method, Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::upgrade::OnUpgrade;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;
use tokio_rustls::TlsAcceptor;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::Role as WsRole;
use tokio_tungstenite::WebSocketStream;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, info_span, warn, Instrument};

use crate::cache::{CachedRequest, RequestCache};
use crate::protocol::{self, RemoteCommandVersion, WsEncoding};
use crate::remotecommand::{self, Command, SessionCtx};
use crate::request::{validate_attach, validate_exec, validate_port_forward};
use crate::{
    portforward, tls, ws, AttachRequest, Config, Error, ExecRequest, PortForwardRequest, Runtime,
};

/// Time a client gets to send a request's headers (slow clients cannot hold connections).
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);
/// Time a client gets to complete the TLS handshake.
const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

struct State {
    cache: RequestCache,
    ctx: SessionCtx,
    /// Path the routes live under (from the base URL), without a trailing slash.
    prefix: String,
}

/// The streaming server. Dropping it stops accepting; [`Server::shutdown`] also ends the
/// sessions in progress.
pub struct Server {
    state: Arc<State>,
    local_addr: SocketAddr,
    base_url: String,
    cancel: CancellationToken,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("local_addr", &self.local_addr)
            .field("base_url", &self.base_url)
            .finish_non_exhaustive()
    }
}

/// Binds `address`, retrying for up to `wait` while the port is in use (logged once): a
/// predecessor killed a moment ago may still hold it.
async fn bind_waiting(address: &str, wait: Duration) -> std::io::Result<TcpListener> {
    let start = std::time::Instant::now();
    let mut logged = false;
    loop {
        match TcpListener::bind(address).await {
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse && start.elapsed() < wait => {
                if !logged {
                    tracing::warn!(%address, error = %e, wait_s = wait.as_secs_f64(), "the streaming port is held by another process (a peapod still exiting?); waiting for it");
                    logged = true;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse && !wait.is_zero() => {
                return Err(std::io::Error::new(
                    e.kind(),
                    format!(
                        "still in use after waiting {:.1}s: {e}",
                        start.elapsed().as_secs_f64()
                    ),
                ))
            }
            other => return other,
        }
    }
}

impl Server {
    /// Binds `cfg.address`, loads TLS if configured, and starts accepting connections.
    pub async fn start(cfg: Config, runtime: Arc<dyn Runtime>) -> Result<Server, Error> {
        let acceptor = cfg.tls.as_ref().map(tls::acceptor).transpose()?;
        let listener = bind_waiting(&cfg.address, cfg.bind_wait)
            .await
            .map_err(|source| Error::Bind {
                address: cfg.address.clone(),
                source,
            })?;
        let local_addr = listener.local_addr().map_err(|source| Error::Bind {
            address: cfg.address.clone(),
            source,
        })?;
        let (base_url, prefix) = match &cfg.base_url {
            Some(u) => parse_base_url(u)?,
            None => {
                let scheme = if acceptor.is_some() { "https" } else { "http" };
                (format!("{scheme}://{local_addr}"), String::new())
            }
        };
        let state = Arc::new(State {
            cache: RequestCache::new(cfg.token_ttl, cfg.max_in_flight),
            ctx: SessionCtx {
                runtime,
                creation_timeout: cfg.stream_creation_timeout,
                idle_timeout: cfg.stream_idle_timeout,
            },
            prefix,
        });
        let cancel = CancellationToken::new();
        let task = tokio::spawn(
            accept_loop(
                listener,
                state.clone(),
                acceptor,
                cfg.max_connections.max(1),
                cancel.clone(),
            )
            .instrument(info_span!("streaming_server", addr = %local_addr)),
        );
        info!(%local_addr, %base_url, "streaming server listening");
        Ok(Server {
            state,
            local_addr,
            base_url,
            cancel,
            task: Some(task),
        })
    }

    /// The URL prefix of the URLs handed out, e.g. `http://127.0.0.1:34567`.
    pub fn base_url(&self) -> String {
        self.base_url.clone()
    }

    /// The address actually bound (useful with port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    fn issue(&self, kind: &str, req: CachedRequest) -> Result<String, Error> {
        let token = self
            .state
            .cache
            .insert(req)
            .map_err(|_| Error::TooManyInFlight {
                limit: self.state.cache.max_in_flight(),
            })?;
        Ok(format!("{}/{kind}/{token}", self.base_url))
    }

    /// Validates the request and returns the single-use URL for a CRI `ExecResponse`.
    pub fn exec_url(&self, req: ExecRequest) -> Result<String, Error> {
        validate_exec(&req)?;
        self.issue("exec", CachedRequest::Exec(req))
    }

    /// Validates the request and returns the single-use URL for a CRI `AttachResponse`.
    pub fn attach_url(&self, req: AttachRequest) -> Result<String, Error> {
        validate_attach(&req)?;
        self.issue("attach", CachedRequest::Attach(req))
    }

    /// Validates the request and returns the single-use URL for a CRI `PortForwardResponse`.
    pub fn port_forward_url(&self, req: PortForwardRequest) -> Result<String, Error> {
        validate_port_forward(&req)?;
        self.issue("portforward", CachedRequest::PortForward(req))
    }

    /// Stops accepting, ends every connection and session, and waits for that.
    pub async fn shutdown(mut self) {
        self.cancel.cancel();
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
        info!(addr = %self.local_addr, "streaming server stopped");
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

fn parse_base_url(raw: &str) -> Result<(String, String), Error> {
    let bad = || Error::BaseUrl(raw.to_string());
    let uri: http::Uri = raw.parse().map_err(|_| bad())?;
    match uri.scheme_str() {
        Some("http") | Some("https") => {}
        _ => return Err(bad()),
    }
    if uri.authority().is_none() || uri.query().is_some() {
        return Err(bad());
    }
    let base = raw.trim_end_matches('/').to_string();
    let prefix = uri.path().trim_end_matches('/').to_string();
    Ok((base, prefix))
}

async fn accept_loop(
    listener: TcpListener,
    state: Arc<State>,
    acceptor: Option<TlsAcceptor>,
    max_connections: usize,
    cancel: CancellationToken,
) {
    let slots = Arc::new(Semaphore::new(max_connections));
    let mut conns = JoinSet::new();
    loop {
        tokio::select! {
            _ = cancel.cancelled() => break,
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
            accepted = listener.accept() => {
                let (tcp, peer) = match accepted {
                    Ok(a) => a,
                    Err(e) => {
                        // Out of descriptors and the like: back off rather than spin.
                        warn!("accept failed: {e}");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                };
                let Ok(permit) = slots.clone().try_acquire_owned() else {
                    warn!(%peer, "too many connections ({max_connections}); closing");
                    continue;
                };
                conns.spawn(
                    serve_connection(state.clone(), tcp, acceptor.clone(), permit)
                        .instrument(info_span!("conn", %peer)),
                );
            }
        }
    }
    conns.shutdown().await;
}

/// An upgrade the HTTP handler agreed to, run on the connection's own task once hyper has
/// sent the 101 and handed the socket over. Running it here (rather than in a detached
/// task) keeps every session under the accept loop's control for shutdown.
enum Pending {
    Spdy(OnUpgrade, SpdySession),
    Ws(OnUpgrade, WsSession),
}

enum SpdySession {
    Command(Command, RemoteCommandVersion),
    PortForward(PortForwardRequest),
}

enum WsSession {
    Command(Command, RemoteCommandVersion, WsEncoding),
    PortForward(PortForwardRequest, Vec<u16>, WsEncoding),
    TunneledPortForward(PortForwardRequest),
}

type Slot = Arc<Mutex<Option<Pending>>>;
type HttpResponse = Response<Full<Bytes>>;

trait Io: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin {}
impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin> Io for T {}

async fn serve_connection(
    state: Arc<State>,
    tcp: TcpStream,
    acceptor: Option<TlsAcceptor>,
    _permit: OwnedSemaphorePermit,
) {
    let _ = tcp.set_nodelay(true);
    let io: Box<dyn Io> = match acceptor {
        Some(acceptor) => {
            match tokio::time::timeout(TLS_HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                Ok(Ok(s)) => Box::new(s),
                Ok(Err(e)) => {
                    debug!("TLS handshake failed: {e}");
                    return;
                }
                Err(_) => {
                    debug!("TLS handshake timed out");
                    return;
                }
            }
        }
        None => Box::new(tcp),
    };
    let slot: Slot = Arc::new(Mutex::new(None));
    let svc = {
        let state = state.clone();
        let slot = slot.clone();
        service_fn(move |req| {
            let state = state.clone();
            let slot = slot.clone();
            async move { Ok::<_, Infallible>(route(&state, req, &slot)) }
        })
    };
    let served = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT)
        .serve_connection(TokioIo::new(io), svc)
        .with_upgrades()
        .await;
    if let Err(e) = served {
        debug!("HTTP connection ended: {e}");
    }
    let pending = slot.lock_unpoisoned().take();
    let Some(pending) = pending else { return };
    run_session(&state, pending).await;
}

async fn run_session(state: &State, pending: Pending) {
    let ctx = state.ctx.clone();
    match pending {
        Pending::Spdy(on, session) => {
            let upgraded = match on.await {
                Ok(u) => TokioIo::new(u),
                Err(e) => {
                    debug!("SPDY upgrade failed: {e}");
                    return;
                }
            };
            match session {
                SpdySession::Command(cmd, version) => {
                    let span = command_span(&cmd, "spdy");
                    remotecommand::serve_spdy(ctx, upgraded, cmd, version)
                        .instrument(span)
                        .await
                }
                SpdySession::PortForward(req) => {
                    let span = info_span!("portforward", sandbox = %req.sandbox_id, proto = "spdy");
                    portforward::serve_spdy(ctx, upgraded, req)
                        .instrument(span)
                        .await
                }
            }
        }
        Pending::Ws(on, session) => {
            let upgraded = match on.await {
                Ok(u) => TokioIo::new(u),
                Err(e) => {
                    debug!("WebSocket upgrade failed: {e}");
                    return;
                }
            };
            let ws = WebSocketStream::from_raw_socket(
                upgraded,
                WsRole::Server,
                Some(ws::websocket_config()),
            )
            .await;
            match session {
                WsSession::Command(cmd, version, encoding) => {
                    let span = command_span(&cmd, "websocket");
                    remotecommand::serve_ws(ctx, ws, cmd, version, encoding)
                        .instrument(span)
                        .await
                }
                WsSession::PortForward(req, ports, encoding) => {
                    let span =
                        info_span!("portforward", sandbox = %req.sandbox_id, proto = "websocket");
                    portforward::serve_ws(ctx, ws, req, ports, encoding)
                        .instrument(span)
                        .await
                }
                WsSession::TunneledPortForward(req) => {
                    let span = info_span!("portforward", sandbox = %req.sandbox_id, proto = "spdy-over-websocket");
                    portforward::serve_spdy(ctx, ws::WsByteStream::new(ws), req)
                        .instrument(span)
                        .await
                }
            }
        }
    }
}

fn command_span(cmd: &Command, proto: &'static str) -> tracing::Span {
    let kind = match cmd {
        Command::Exec(_) => "exec",
        Command::Attach(_) => "attach",
    };
    info_span!("session", kind, container = %cmd.container_id(), proto)
}

fn reply(status: StatusCode, msg: impl Into<String>) -> HttpResponse {
    let mut body = msg.into();
    body.push('\n');
    let mut resp = Response::new(Full::new(Bytes::from(body)));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    resp
}

fn not_found() -> HttpResponse {
    reply(StatusCode::NOT_FOUND, "404 page not found")
}

fn header_values<'a>(headers: &'a HeaderMap, name: &str) -> Vec<String> {
    protocol::split_header_values(
        headers
            .get_all(name)
            .iter()
            .filter_map(|v: &'a HeaderValue| v.to_str().ok()),
    )
}

fn header_contains(headers: &HeaderMap, name: header::HeaderName, token: &str) -> bool {
    headers
        .get_all(name)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.to_ascii_lowercase().contains(token))
}

fn is_websocket(headers: &HeaderMap) -> bool {
    let upgrade_ws = headers
        .get_all(header::UPGRADE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.trim().eq_ignore_ascii_case("websocket"));
    upgrade_ws && header_contains(headers, header::CONNECTION, "upgrade")
}

fn is_spdy(headers: &HeaderMap) -> bool {
    header_contains(headers, header::CONNECTION, "upgrade")
        && header_contains(headers, header::UPGRADE, "spdy/3.1")
}

fn route(state: &State, mut req: Request<Incoming>, slot: &Slot) -> HttpResponse {
    if req.method() != Method::GET && req.method() != Method::POST {
        return reply(StatusCode::METHOD_NOT_ALLOWED, "method not allowed");
    }
    let path = req.uri().path().to_string();
    let Some(rest) = path.strip_prefix(state.prefix.as_str()) else {
        return not_found();
    };
    let mut parts = rest.split('/');
    let (Some(""), Some(kind), Some(token), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return not_found();
    };
    if !matches!(kind, "exec" | "attach" | "portforward") || token.is_empty() {
        return not_found();
    }
    // The token is consumed by any request that names it, as the kubelet does: a failed
    // upgrade does not leave a usable URL behind.
    let Some(cached) = state.cache.consume(token) else {
        debug!(kind, "unknown, used or expired token");
        return not_found();
    };
    let query = req.uri().query().unwrap_or("").to_string();
    let on_upgrade = hyper::upgrade::on(&mut req);
    let headers = req.headers();
    let (resp, pending) = match (kind, cached) {
        ("exec", CachedRequest::Exec(r)) => {
            log_query_mismatch(&query, &r);
            command_upgrade(headers, Command::Exec(r), on_upgrade)
        }
        ("attach", CachedRequest::Attach(r)) => {
            command_upgrade(headers, Command::Attach(r), on_upgrade)
        }
        ("portforward", CachedRequest::PortForward(r)) => {
            port_forward_upgrade(headers, &query, r, on_upgrade)
        }
        _ => {
            debug!(kind, "token used with the wrong verb");
            (not_found(), None)
        }
    };
    if let Some(p) = pending {
        *slot.lock_unpoisoned() = Some(p);
    }
    resp
}

/// The kubelet builds the session from the cached request, not from the query; the query
/// (which a proxying kubelet may pass along) is only compared, to spot confused clients.
fn log_query_mismatch(query: &str, req: &ExecRequest) {
    if query.is_empty() {
        return;
    }
    let cmd: Vec<String> = form_urlencoded::parse(query.as_bytes())
        .filter(|(k, _)| k == protocol::query::COMMAND)
        .map(|(_, v)| v.into_owned())
        .collect();
    if !cmd.is_empty() && cmd != req.cmd {
        debug!(
            ?cmd,
            "query command differs from the requested one; using the request's"
        );
    }
}

fn spdy_switch(protocol: Option<&str>) -> HttpResponse {
    let mut resp = Response::new(Full::new(Bytes::new()));
    *resp.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let h = resp.headers_mut();
    h.insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
    h.insert(
        header::UPGRADE,
        HeaderValue::from_static(protocol::UPGRADE_SPDY),
    );
    if let Some(p) = protocol.filter(|p| !p.is_empty()) {
        if let Ok(v) = HeaderValue::from_str(p) {
            h.insert(protocol::HEADER_PROTOCOL_VERSION, v);
        }
    }
    resp
}

/// `httpstream.Handshake`: the client's `X-Stream-Protocol-Version` values against ours.
/// A client that sends none gets the oldest protocol (Ok("")).
fn spdy_negotiate(
    headers: &HeaderMap,
    supported: &[&'static str],
) -> Result<&'static str, Box<HttpResponse>> {
    let offered = header_values(headers, protocol::HEADER_PROTOCOL_VERSION);
    if offered.is_empty() {
        return Ok("");
    }
    match protocol::negotiate(&offered, supported) {
        Some(p) => Ok(p),
        None => {
            let mut resp = reply(
                StatusCode::FORBIDDEN,
                format!(
                    "unable to upgrade: unable to negotiate protocol: client supports {offered:?}, server accepts {supported:?}"
                ),
            );
            for p in supported {
                resp.headers_mut().append(
                    protocol::HEADER_ACCEPTED_PROTOCOL_VERSIONS,
                    HeaderValue::from_static(p),
                );
            }
            Err(Box::new(resp))
        }
    }
}

/// Checks the WebSocket handshake headers and picks the subprotocol (wsstream's rule: the
/// first one the client offers that we support; none offered means "").
fn ws_negotiate(
    headers: &HeaderMap,
    supported: &[&'static str],
    allow_none: bool,
) -> Result<(&'static str, HttpResponse), Box<HttpResponse>> {
    let version_ok = headers
        .get(header::SEC_WEBSOCKET_VERSION)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim() == "13");
    let Some(key) = headers.get(header::SEC_WEBSOCKET_KEY) else {
        return Err(Box::new(reply(
            StatusCode::BAD_REQUEST,
            "missing Sec-WebSocket-Key",
        )));
    };
    if !version_ok {
        let mut resp = reply(StatusCode::BAD_REQUEST, "unsupported WebSocket version");
        resp.headers_mut().insert(
            header::SEC_WEBSOCKET_VERSION,
            HeaderValue::from_static("13"),
        );
        return Err(Box::new(resp));
    }
    let offered = header_values(headers, header::SEC_WEBSOCKET_PROTOCOL.as_str());
    let chosen = if offered.is_empty() && allow_none {
        ""
    } else {
        match protocol::negotiate(&offered, supported) {
            Some(p) => p,
            None => {
                return Err(Box::new(reply(
                    StatusCode::FORBIDDEN,
                    format!(
                    "requested protocol(s) are not supported: {offered:?}; supports {supported:?}"
                ),
                )))
            }
        }
    };
    let mut resp = Response::new(Full::new(Bytes::new()));
    *resp.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let h = resp.headers_mut();
    h.insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
    h.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
    let accept = derive_accept_key(key.as_bytes());
    if let Ok(v) = HeaderValue::from_str(&accept) {
        h.insert(header::SEC_WEBSOCKET_ACCEPT, v);
    }
    if !chosen.is_empty() {
        h.insert(
            header::SEC_WEBSOCKET_PROTOCOL,
            HeaderValue::from_static(chosen),
        );
    }
    Ok((chosen, resp))
}

/// The answer to a streaming request that asks for neither WebSocket nor SPDY.
fn no_upgrade_headers() -> (HttpResponse, Option<Pending>) {
    (
        reply(
            StatusCode::BAD_REQUEST,
            "unable to upgrade: missing upgrade headers in request",
        ),
        None,
    )
}

fn command_upgrade(
    headers: &HeaderMap,
    cmd: Command,
    on_upgrade: OnUpgrade,
) -> (HttpResponse, Option<Pending>) {
    if is_websocket(headers) {
        match ws_negotiate(headers, protocol::WS_REMOTECOMMAND_PROTOCOLS, true) {
            Ok((chosen, resp)) => match protocol::ws_remotecommand(chosen) {
                Some((version, encoding)) => (
                    resp,
                    Some(Pending::Ws(
                        on_upgrade,
                        WsSession::Command(cmd, version, encoding),
                    )),
                ),
                None => (reply(StatusCode::FORBIDDEN, "unsupported protocol"), None),
            },
            Err(resp) => (*resp, None),
        }
    } else if is_spdy(headers) {
        match spdy_negotiate(headers, protocol::SPDY_REMOTECOMMAND_PROTOCOLS) {
            Ok(chosen) => match protocol::spdy_remotecommand(chosen) {
                Some(version) => (
                    spdy_switch(Some(chosen)),
                    Some(Pending::Spdy(
                        on_upgrade,
                        SpdySession::Command(cmd, version),
                    )),
                ),
                None => (reply(StatusCode::FORBIDDEN, "unsupported protocol"), None),
            },
            Err(resp) => (*resp, None),
        }
    } else {
        no_upgrade_headers()
    }
}

/// Ports for a WebSocket port-forward: the `port` query parameters (each may be a comma
/// list), else the request's ports; every one must be allowed by the request.
pub(crate) fn ws_ports(query: &str, req: &PortForwardRequest) -> Result<Vec<u16>, String> {
    let mut ports = Vec::new();
    for (k, v) in form_urlencoded::parse(query.as_bytes()) {
        if k != protocol::query::PORT {
            continue;
        }
        if v.is_empty() {
            return Err("query parameter \"port\" cannot be empty".into());
        }
        for p in v.split(',') {
            match p.trim().parse::<u16>() {
                Ok(port) if port > 0 => ports.push(port),
                _ => return Err(format!("unable to parse {v:?} as a port")),
            }
        }
    }
    if ports.is_empty() {
        ports = req
            .ports
            .iter()
            .filter_map(|p| u16::try_from(*p).ok())
            .collect();
    }
    if ports.is_empty() {
        return Err("query parameter \"port\" is required".into());
    }
    if ports.len() > portforward::MAX_WS_PORTS {
        return Err(format!(
            "at most {} ports per connection",
            portforward::MAX_WS_PORTS
        ));
    }
    if !req.ports.is_empty() {
        if let Some(p) = ports.iter().find(|p| !req.ports.contains(&i32::from(**p))) {
            return Err(format!("port {p} is not among the requested ports"));
        }
    }
    Ok(ports)
}

fn port_forward_upgrade(
    headers: &HeaderMap,
    query: &str,
    req: PortForwardRequest,
    on_upgrade: OnUpgrade,
) -> (HttpResponse, Option<Pending>) {
    if is_websocket(headers) {
        let (chosen, resp) = match ws_negotiate(headers, protocol::WS_PORTFORWARD_PROTOCOLS, true) {
            Ok(x) => x,
            Err(resp) => return (*resp, None),
        };
        if let Some(inner) = chosen.strip_prefix(protocol::SPDY_TUNNELING_PREFIX) {
            debug!(protocol = inner, "SPDY tunnelled through WebSocket");
            return (
                resp,
                Some(Pending::Ws(on_upgrade, WsSession::TunneledPortForward(req))),
            );
        }
        let encoding = if chosen == protocol::BASE64_STREAM_PROTOCOL_V4 {
            WsEncoding::Base64
        } else {
            WsEncoding::Binary
        };
        match ws_ports(query, &req) {
            Ok(ports) => (
                resp,
                Some(Pending::Ws(
                    on_upgrade,
                    WsSession::PortForward(req, ports, encoding),
                )),
            ),
            Err(msg) => (reply(StatusCode::BAD_REQUEST, msg), None),
        }
    } else if is_spdy(headers) {
        match spdy_negotiate(headers, protocol::SPDY_PORTFORWARD_PROTOCOLS) {
            Ok(chosen) => (
                spdy_switch(Some(chosen)),
                Some(Pending::Spdy(on_upgrade, SpdySession::PortForward(req))),
            ),
            Err(resp) => (*resp, None),
        }
    } else {
        no_upgrade_headers()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_urls() {
        assert_eq!(
            parse_base_url("https://node:10250/cri/").unwrap(),
            ("https://node:10250/cri".to_string(), "/cri".to_string())
        );
        assert_eq!(
            parse_base_url("http://127.0.0.1:1").unwrap(),
            ("http://127.0.0.1:1".to_string(), String::new())
        );
        assert!(parse_base_url("ftp://x").is_err());
        assert!(parse_base_url("/relative").is_err());
        assert!(parse_base_url("http://x/?q=1").is_err());
    }

    #[test]
    fn websocket_port_selection() {
        let any = PortForwardRequest {
            sandbox_id: "s".into(),
            ports: vec![],
        };
        assert_eq!(
            ws_ports("port=80&port=443,8080", &any).unwrap(),
            vec![80, 443, 8080]
        );
        assert!(ws_ports("", &any).unwrap_err().contains("required"));
        assert!(ws_ports("port=", &any).unwrap_err().contains("empty"));
        assert!(ws_ports("port=0", &any).is_err());
        assert!(ws_ports("port=x", &any).is_err());
        let some = PortForwardRequest {
            sandbox_id: "s".into(),
            ports: vec![80, 443],
        };
        assert_eq!(ws_ports("", &some).unwrap(), vec![80, 443]);
        assert_eq!(ws_ports("port=443", &some).unwrap(), vec![443]);
        assert!(ws_ports("port=22", &some).is_err());
    }

    #[test]
    fn upgrade_detection() {
        let mut h = HeaderMap::new();
        h.insert(
            header::CONNECTION,
            HeaderValue::from_static("keep-alive, Upgrade"),
        );
        h.insert(header::UPGRADE, HeaderValue::from_static("SPDY/3.1"));
        assert!(is_spdy(&h) && !is_websocket(&h));
        h.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
        assert!(is_websocket(&h) && !is_spdy(&h));
        h.insert(header::CONNECTION, HeaderValue::from_static("close"));
        assert!(!is_websocket(&h));
    }
}
