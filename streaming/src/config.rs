//! Server configuration.

use std::path::PathBuf;
use std::time::Duration;

/// How the streaming server listens and how long things may take.
#[derive(Debug, Clone)]
pub struct Config {
    /// `host:port` to listen on; port 0 picks a free one. Default `127.0.0.1:0`.
    pub address: String,
    /// URL prefix put in front of `/exec/{token}` etc. in the URLs handed out, for when the
    /// listen address is not what clients should dial (e.g. `0.0.0.0`). Default: derived
    /// from the bound address and whether TLS is on.
    pub base_url: Option<String>,
    /// Serve HTTPS with this certificate and key.
    pub tls: Option<TlsConfig>,
    /// How long a URL stays valid before its first (and only) use. Default 1 minute, as the
    /// kubelet's request cache.
    pub token_ttl: Duration,
    /// Issued-but-unused URLs allowed at once. Default 1000, as the kubelet.
    pub max_in_flight: usize,
    /// How long a client may take to open the streams it asked for after the upgrade (and to
    /// complete a port-forward stream pair). Default 30 s, as the kubelet.
    pub stream_creation_timeout: Duration,
    /// Close a session after this long without traffic. Default 4 h, as the kubelet.
    pub stream_idle_timeout: Duration,
    /// HTTP connections served at once; more are closed on accept. Default 512.
    pub max_connections: usize,
    /// How long [`crate::Server::start`] retries a port another process still holds (a
    /// predecessor that is exiting) before failing. Default 0: no retry.
    pub bind_wait: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            address: "127.0.0.1:0".into(),
            base_url: None,
            tls: None,
            token_ttl: Duration::from_secs(60),
            max_in_flight: 1000,
            stream_creation_timeout: Duration::from_secs(30),
            stream_idle_timeout: Duration::from_secs(4 * 60 * 60),
            max_connections: 512,
            bind_wait: Duration::ZERO,
        }
    }
}

/// PEM files for HTTPS.
#[derive(Debug, Clone)]
pub struct TlsConfig {
    /// Certificate chain, leaf first.
    pub cert_file: PathBuf,
    /// Private key (PKCS#8, PKCS#1 or SEC1).
    pub key_file: PathBuf,
}
