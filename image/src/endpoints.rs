//! Where a pull goes: the endpoints of a reference's registry, in the order they are tried,
//! each with what it may be used for and the HTTP client that speaks to it.
//!
//! Two sources, one host at a time:
//! - the registry host's directory under `config_path` (containerd's `certs.d`, see
//!   [`crate::hosts`]), when there is one: its `[host."URL"]` entries in file order, then its
//!   `server` (the registry itself, by default). It replaces `[registry.mirrors]` for that
//!   host (a mirror of `*` included), as containerd 2.x's hosts.toml replaces its deprecated
//!   mirrors;
//! - otherwise `[registry.mirrors]` (the host's own, then `*`'s) and then the registry.
//!
//! Plain HTTP: loopback (`localhost`, 127.0.0.0/8, ::1) and `insecure` hosts, for mirrors
//! given without a scheme and for the registry itself; a hosts.toml server or host with a
//! scheme keeps it, and a server the file leaves to the reference with TLS settings (ca,
//! client, skip_verify) speaks HTTPS, as containerd tries HTTPS first for such a host.

use crate::hosts::{self, Capabilities, HostEntry};
use crate::reference::Reference;
use crate::Error;
use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

/// Registry settings from the daemon's config (`[registry]`).
#[derive(Debug, Clone)]
pub struct RegistryConfig {
    /// `host[:port]` spoken to over plain HTTP. `localhost` and loopback IP
    /// addresses (127.0.0.0/8, ::1) always are.
    pub insecure: Vec<String>,
    /// Registry host (as in the reference: `docker.io`, `registry.k8s.io`; `*`
    /// for every registry) -> endpoint URLs (`http://127.0.0.1:5055`) tried in
    /// order before the registry itself.
    pub mirrors: HashMap<String, Vec<String>>,
    /// containerd's `config_path`: a directory of `<host>/hosts.toml`; None: not used.
    pub config_path: Option<PathBuf>,
    /// A containers-policy.json(5) file checked before a pull stores anything; None: every
    /// image is accepted.
    pub signature_policy: Option<PathBuf>,
    /// The longest a whole pull may take (manifests, configs, every layer);
    /// None: no overall bound. A registry that trickles a byte now and then
    /// never trips the idle timeout; this catches it.
    pub pull_timeout: Option<Duration>,
    /// The longest a registry may send nothing on a connection that is
    /// waiting for it (the client's read timeout).
    pub idle_timeout: Duration,
}

/// Default of [`RegistryConfig::pull_timeout`]: large images over slow links
/// fit, a stuck pull is given up within the hour.
pub const DEFAULT_PULL_TIMEOUT: Duration = Duration::from_secs(30 * 60);
/// Default of [`RegistryConfig::idle_timeout`].
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(120);

impl Default for RegistryConfig {
    fn default() -> Self {
        RegistryConfig {
            insecure: Vec::new(),
            mirrors: HashMap::new(),
            config_path: None,
            signature_policy: None,
            pull_timeout: Some(DEFAULT_PULL_TIMEOUT),
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
        }
    }
}

#[derive(Debug, Clone)]
pub(crate) struct Endpoint {
    /// The API root: `scheme://host[:port]/v2` (or a prefix before `/v2`, or what a
    /// hosts.toml's `override_path` gave).
    pub api: String,
    pub host: String,
    /// Not the registry itself: a mirror, or a hosts.toml `[host]`. Never given credentials;
    /// its failures move on to the next endpoint.
    pub mirror: bool,
    /// The registry the content belongs to; sent to mirrors as `?ns=`, as containerd does.
    pub namespace: String,
    pub caps: Capabilities,
    /// Its own client (TLS settings of its own); None: the store's.
    pub client: Option<reqwest::Client>,
    /// Sent with every request (a hosts.toml's `header`).
    pub headers: Vec<(String, String)>,
    /// A client certificate is configured (hosts.toml `client`, or Docker's `*.cert`).
    pub client_certificate: bool,
    /// The hosts.toml (or certificate directory) that configured it, for errors.
    pub source: Option<PathBuf>,
}

impl Endpoint {
    pub fn plain_http(&self) -> bool {
        self.api.starts_with("http://")
    }
}

/// Whether `host` (`host[:port]`, `[v6]:port` or a bare IPv6 address) is this machine's
/// loopback: the name `localhost`, or an address that parses as a loopback IP. Parsed, not
/// matched by prefix: `127.evil.example` is a name anyone can register, and speaking plain
/// HTTP to it would let the network hand us any image.
pub(crate) fn is_loopback_host(host: &str) -> bool {
    let loopback_ip = |s: &str| {
        s.parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
    };
    // A bare IPv6 address has colons but no port to strip.
    if loopback_ip(host) {
        return true;
    }
    let h = strip_port(host);
    h.eq_ignore_ascii_case("localhost")
        || loopback_ip(h)
        || h.strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .is_some_and(loopback_ip)
}

fn strip_port(host: &str) -> &str {
    if host.starts_with('[') {
        return match host.find(']') {
            Some(i) => &host[..=i],
            None => host,
        };
    }
    host.rsplit_once(':').map(|(h, _)| h).unwrap_or(host)
}

impl RegistryConfig {
    fn is_insecure(&self, host: &str) -> bool {
        is_loopback_host(host)
            || self
                .insecure
                .iter()
                .any(|i| i == host || i == strip_port(host))
    }

    /// The endpoints for a reference, in the order they are tried (see the module's doc).
    /// `clients` builds (and keeps) the clients of hosts with TLS settings of their own.
    pub(crate) fn endpoints(
        &self,
        r: &Reference,
        clients: &hosts::Clients,
    ) -> Result<Vec<Endpoint>, Error> {
        if let Some(root) = &self.config_path {
            if let Some(entries) = hosts::load(root, &r.domain)? {
                return entries
                    .iter()
                    .map(|e| self.hosts_endpoint(r, e, clients))
                    .collect();
            }
        }
        Ok(self.mirror_endpoints(r))
    }

    fn hosts_endpoint(
        &self,
        r: &Reference,
        e: &HostEntry,
        clients: &hosts::Clients,
    ) -> Result<Endpoint, Error> {
        let (scheme, host, path) = match (&e.scheme, &e.host) {
            (Some(s), Some(h)) => (s.clone(), h.clone(), e.path.clone()),
            _ => {
                let host = r.registry_host().to_string();
                let scheme = if self.is_insecure(&host) && !e.tls.configures_tls() {
                    "http"
                } else {
                    "https"
                };
                let path = if e.path.is_empty() { "/v2" } else { &e.path };
                (scheme.to_string(), host, path.to_string())
            }
        };
        Ok(Endpoint {
            api: format!("{scheme}://{host}{path}"),
            host,
            mirror: !e.server,
            namespace: r.domain.clone(),
            caps: e.capabilities.unwrap_or(Capabilities::ALL),
            client: clients.for_entry(e)?,
            headers: e.headers.clone(),
            client_certificate: !e.tls.client.is_empty(),
            source: Some(e.file.clone()),
        })
    }

    /// `[registry.mirrors]` (the host's, then `*`'s), then the registry itself.
    fn mirror_endpoints(&self, r: &Reference) -> Vec<Endpoint> {
        let mut out = Vec::new();
        let mirrors = self
            .mirrors
            .get(&r.domain)
            .into_iter()
            .chain(self.mirrors.get("*"))
            .flatten();
        let plain = |api: String, host: String, mirror: bool| Endpoint {
            api,
            host,
            mirror,
            namespace: r.domain.clone(),
            caps: Capabilities::ALL,
            client: None,
            headers: Vec::new(),
            client_certificate: false,
            source: None,
        };
        for m in mirrors {
            let (scheme, rest) = match m.split_once("://") {
                Some((s, rest)) => (s.to_string(), rest),
                None => {
                    let host = m.split('/').next().unwrap_or(m);
                    let s = if self.is_insecure(host) {
                        "http"
                    } else {
                        "https"
                    };
                    (s.to_string(), m.as_str())
                }
            };
            let rest = rest.trim_end_matches('/');
            let rest = rest.strip_suffix("/v2").unwrap_or(rest);
            let host = rest.split('/').next().unwrap_or(rest).to_string();
            out.push(plain(format!("{scheme}://{rest}/v2"), host, true));
        }
        let host = r.registry_host().to_string();
        let scheme = if self.is_insecure(&host) {
            "http"
        } else {
            "https"
        };
        out.push(plain(format!("{scheme}://{host}/v2"), host, false));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn eps(cfg: &RegistryConfig, r: &str) -> Vec<Endpoint> {
        cfg.endpoints(
            &Reference::parse(r).unwrap(),
            &hosts::Clients::new(Duration::from_secs(5)),
        )
        .unwrap()
    }

    #[test]
    fn endpoints_and_schemes() {
        let mut cfg = RegistryConfig {
            insecure: vec!["myreg:5000".into(), "plain.example".into()],
            ..Default::default()
        };
        cfg.mirrors.insert(
            "docker.io".into(),
            vec!["http://127.0.0.1:5055/".into(), "mirror.example/v2".into()],
        );
        let e = eps(&cfg, "busybox");
        let apis: Vec<_> = e.iter().map(|e| e.api.as_str()).collect();
        assert_eq!(
            apis,
            vec![
                "http://127.0.0.1:5055/v2",
                "https://mirror.example/v2",
                "https://registry-1.docker.io/v2"
            ]
        );
        assert!(e[0].mirror && !e[2].mirror);
        let api = |s: &str| eps(&cfg, s).last().unwrap().api.clone();
        assert_eq!(api("localhost:5000/x"), "http://localhost:5000/v2");
        assert_eq!(api("127.0.0.1:41000/x"), "http://127.0.0.1:41000/v2");
        assert_eq!(api("myreg:5000/x"), "http://myreg:5000/v2");
        assert_eq!(api("myreg:5001/x"), "https://myreg:5001/v2");
        assert_eq!(api("plain.example:8080/x"), "http://plain.example:8080/v2");
        assert_eq!(api("quay.io/x/y"), "https://quay.io/v2");
    }

    #[test]
    fn only_real_loopback_is_plain_http_by_default() {
        for host in [
            "localhost",
            "localhost:5000",
            "LOCALHOST:5000",
            "127.0.0.1",
            "127.0.0.1:5000",
            "127.1.2.3:80",
            "::1",
            "[::1]",
            "[::1]:5000",
        ] {
            assert!(is_loopback_host(host), "{host}");
        }
        for host in [
            "127.evil.example",
            "127.evil.example:5000",
            "127.0.0.1.nip.io:5000",
            "localhost.evil.example",
            "127.0.0.1evil",
            "[::2]:5000",
            "10.0.0.1:5000",
            "::ffff:8.8.8.8",
            "",
        ] {
            assert!(!is_loopback_host(host), "{host}");
        }
        let cfg = RegistryConfig::default();
        let api = |s: &str| eps(&cfg, s)[0].api.clone();
        assert_eq!(
            api("127.evil.example:5000/x"),
            "https://127.evil.example:5000/v2"
        );
        assert_eq!(api("127.0.0.1:5000/x"), "http://127.0.0.1:5000/v2");
        assert_eq!(api("[::1]:5000/x"), "http://[::1]:5000/v2");
    }

    #[test]
    fn a_host_directory_replaces_mirrors_for_its_host() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("127.0.0.1:5000");
        std::fs::create_dir(&dir).unwrap();
        std::fs::write(
            dir.join("hosts.toml"),
            "server = \"https://127.0.0.1:5000\"\n\
             [host.\"http://127.0.0.1:6000\"]\ncapabilities = [\"pull\"]\n\
             [host.\"http://127.0.0.1:6000\".header]\nx-mirror = \"yes\"\n",
        )
        .unwrap();
        let mut cfg = RegistryConfig {
            config_path: Some(root.path().into()),
            ..Default::default()
        };
        cfg.mirrors
            .insert("*".into(), vec!["http://127.0.0.1:7000".into()]);
        let e = eps(&cfg, "127.0.0.1:5000/app:1");
        assert_eq!(e.len(), 2);
        assert_eq!(e[0].api, "http://127.0.0.1:6000/v2");
        assert!(e[0].mirror && e[0].caps.pull && !e[0].caps.resolve);
        assert_eq!(e[0].headers, vec![("x-mirror".into(), "yes".into())]);
        assert_eq!(e[1].api, "https://127.0.0.1:5000/v2");
        assert!(!e[1].mirror && e[1].caps == Capabilities::ALL);
        assert_eq!(
            e[1].source.as_deref(),
            Some(dir.join("hosts.toml").as_path())
        );
        // Hosts without a directory keep [registry.mirrors].
        let e = eps(&cfg, "127.0.0.1:5001/app:1");
        assert_eq!(e[0].api, "http://127.0.0.1:7000/v2");
        assert_eq!(e[1].api, "http://127.0.0.1:5001/v2");
        // A server left to the reference: loopback stays plain HTTP, unless TLS is configured.
        std::fs::write(dir.join("hosts.toml"), "").unwrap();
        assert_eq!(
            eps(&cfg, "127.0.0.1:5000/a")[0].api,
            "http://127.0.0.1:5000/v2"
        );
        std::fs::write(dir.join("hosts.toml"), "skip_verify = true\n").unwrap();
        assert_eq!(
            eps(&cfg, "127.0.0.1:5000/a")[0].api,
            "https://127.0.0.1:5000/v2"
        );
        // docker.io's server is registry-1.docker.io, as without a directory.
        std::fs::create_dir(root.path().join("docker.io")).unwrap();
        assert_eq!(
            eps(&cfg, "busybox")[0].api,
            "https://registry-1.docker.io/v2"
        );
    }
}
