//! A client for the OCI distribution protocol, just the pull half: resolve a
//! manifest, stream a blob. Written on reqwest rather than through oci-client
//! because the CRI needs things that crate keeps out of reach: per-request
//! credentials (all four AuthConfig forms, including the OAuth2 refresh-token
//! flow for `identity_token`), mirrors given as endpoint URLs tried in order,
//! plain HTTP per host, and bounded manifest sizes.
//!
//! Auth: a request goes out anonymously (or with `registry_token` as a bearer
//! token); on 401 the `WWW-Authenticate` challenge decides: `Basic` retries with
//! the username/password, `Bearer` fetches a token from the realm (GET with
//! basic auth, or POST with the refresh token) and retries. Tokens are cached
//! per endpoint for the life of one pull. Credentials are only ever sent to the
//! registry the reference names, never to a mirror, and never over plain HTTP
//! to a token realm unless the registry itself is plain HTTP.

use crate::endpoints::Endpoint;
pub use crate::endpoints::RegistryConfig;
use crate::hosts;
use crate::manifest;
use crate::reference::Reference;
use crate::retry;
use crate::Error;
use base64::Engine as _;
use futures_util::StreamExt;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

/// Credentials from the CRI AuthConfig. Empty strings mean "not given".
#[derive(Clone, Default)]
pub struct Credentials {
    pub username: String,
    pub password: String,
    /// base64 of `username:password`.
    pub auth: String,
    /// An OAuth2 refresh token, exchanged at the registry's token realm.
    pub identity_token: String,
    /// A bearer token sent to the registry as it is.
    pub registry_token: String,
    pub server_address: String,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("username", &self.username)
            .field("server_address", &self.server_address)
            .finish_non_exhaustive()
    }
}

impl Credentials {
    /// (user, password) from either the plain fields or `auth`.
    fn basic(&self) -> Option<(String, String)> {
        if !self.username.is_empty() || !self.password.is_empty() {
            return Some((self.username.clone(), self.password.clone()));
        }
        if !self.auth.is_empty() {
            let decoded = base64::engine::general_purpose::STANDARD
                .decode(self.auth.trim())
                .ok()?;
            let s = String::from_utf8(decoded).ok()?;
            let (u, p) = s.split_once(':')?;
            return Some((u.to_string(), p.to_string()));
        }
        None
    }
}

/// Bound on a whole manifest or token exchange.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

pub(crate) const MANIFEST_ACCEPT: &str = "application/vnd.oci.image.index.v1+json, application/vnd.docker.distribution.manifest.list.v2+json, application/vnd.oci.image.manifest.v1+json, application/vnd.docker.distribution.manifest.v2+json";

/// One pull's view of the registry: endpoints, credentials, cached tokens.
pub(crate) struct Session {
    client: reqwest::Client,
    repo: String,
    creds: Option<Credentials>,
    pub endpoints: Vec<Endpoint>,
    /// Endpoint API root -> Authorization header value.
    auth: Mutex<HashMap<String, String>>,
}

#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Challenge {
    pub scheme: String,
    pub params: HashMap<String, String>,
}

/// Parses `Bearer realm="https://auth",service="registry",scope="repository:x:pull"`.
pub(crate) fn parse_challenge(h: &str) -> Option<Challenge> {
    let h = h.trim();
    let (scheme, rest) = h.split_once(' ').unwrap_or((h, ""));
    let mut params = HashMap::new();
    let mut s = rest.trim();
    while !s.is_empty() {
        let eq = s.find('=')?;
        let key = s[..eq].trim().to_ascii_lowercase();
        s = &s[eq + 1..];
        let value;
        if let Some(q) = s.strip_prefix('"') {
            let mut v = String::new();
            let mut chars = q.char_indices();
            let mut end = None;
            while let Some((i, c)) = chars.next() {
                match c {
                    '\\' => {
                        if let Some((_, n)) = chars.next() {
                            v.push(n);
                        }
                    }
                    '"' => {
                        end = Some(i);
                        break;
                    }
                    c => v.push(c),
                }
            }
            let end = end?;
            value = v;
            s = &q[end + 1..];
        } else {
            let end = s.find(',').unwrap_or(s.len());
            value = s[..end].trim().to_string();
            s = &s[end..];
        }
        params.insert(key, value);
        s = s.trim_start().trim_start_matches(',').trim_start();
    }
    Some(Challenge {
        scheme: scheme.to_ascii_lowercase(),
        params,
    })
}

#[derive(serde::Deserialize)]
struct TokenResponse {
    #[serde(default)]
    token: String,
    #[serde(default)]
    access_token: String,
}

#[derive(serde::Deserialize)]
struct RegistryErrors {
    #[serde(default)]
    errors: Vec<RegistryErrorItem>,
}

#[derive(serde::Deserialize)]
struct RegistryErrorItem {
    #[serde(default)]
    code: String,
    #[serde(default)]
    message: String,
}

/// What to say when an HTTPS endpoint with no client certificate dropped the connection
/// during or right after the handshake. A TLS 1.3 server that requires a certificate checks
/// for it only after the client's handshake has finished, so the client's next write meets a
/// closed socket; the error then says "broken pipe", which alone would send an operator to
/// the network rather than to hosts.toml.
fn no_client_certificate_hint(ep: &Endpoint, e: &reqwest::Error) -> Option<String> {
    // A failed connect (refused, an untrusted server certificate) is not this: the handshake
    // is part of the connect, and it finished.
    if ep.plain_http() || ep.client_certificate || e.is_connect() || e.is_timeout() {
        return None;
    }
    let text = crate::error::chain(e).to_lowercase();
    // Which of these the client meets depends on when it writes: all were seen here.
    let dropped = [
        "broken pipe",
        "connection reset",
        "connection closed",
        "unexpected eof",
        "certificaterequired",
        // Go's server answers a missing certificate with this alert when the client reads first.
        "badcertificate",
    ]
    .iter()
    .any(|s| text.contains(s));
    if !dropped {
        return None;
    }
    let place = match &ep.source {
        Some(file) => format!("`client` in {}", file.display()),
        None => format!("`client` in <registry.config_path>/{}/hosts.toml", ep.host),
    };
    Some(format!(
        "the registry may require a client certificate, and none is configured for {} ({place})",
        ep.host
    ))
}

/// Reads a response body, refusing more than `max` bytes.
async fn read_bounded(resp: reqwest::Response, max: u64, url: &str) -> Result<Vec<u8>, Error> {
    if resp.content_length().is_some_and(|n| n > max) {
        return Err(Error::InvalidImage(format!(
            "{url}: response larger than {max} bytes"
        )));
    }
    let mut body = Vec::new();
    let mut stream = resp.bytes_stream();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| Error::Http {
            url: url.to_string(),
            source: e,
        })?;
        if body.len() as u64 + chunk.len() as u64 > max {
            return Err(Error::InvalidImage(format!(
                "{url}: response larger than {max} bytes"
            )));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

impl Session {
    /// A session for `r`; fails when its registry's host configuration (hosts.toml, its
    /// certificates) does not load.
    pub fn new(
        client: reqwest::Client,
        cfg: &RegistryConfig,
        clients: &hosts::Clients,
        r: &Reference,
        creds: Option<&Credentials>,
    ) -> Result<Session, Error> {
        let endpoints = cfg.endpoints(r, clients)?;
        let mut auth = HashMap::new();
        if let Some(c) = creds {
            if !c.registry_token.is_empty() {
                if let Some(ep) = endpoints.iter().find(|e| !e.mirror) {
                    auth.insert(ep.api.clone(), format!("Bearer {}", c.registry_token));
                }
            }
        }
        Ok(Session {
            client,
            repo: r.path.clone(),
            creds: creds.cloned(),
            endpoints,
            auth: Mutex::new(auth),
        })
    }

    /// The client that speaks to `ep`: its own when its host has TLS settings.
    fn client_for<'a>(&'a self, ep: &'a Endpoint) -> &'a reqwest::Client {
        ep.client.as_ref().unwrap_or(&self.client)
    }

    fn url(&self, ep: &Endpoint, tail: &str) -> String {
        let mut u = format!("{}/{}/{}", ep.api, self.repo, tail);
        if ep.mirror {
            u.push_str("?ns=");
            u.push_str(&ep.namespace);
        }
        u
    }

    fn cached_auth(&self, ep: &Endpoint) -> Option<String> {
        self.auth.lock().ok()?.get(&ep.api).cloned()
    }

    /// GET with auth handling and error mapping; returns a 2xx response.
    /// `timeout` bounds the whole exchange (manifests); blob downloads pass
    /// None and rely on the client's idle read timeout instead.
    async fn get(
        &self,
        ep: &Endpoint,
        tail: &str,
        accept: Option<&str>,
        timeout: Option<Duration>,
    ) -> Result<reqwest::Response, Error> {
        self.get_from(ep, tail, accept, timeout, None).await
    }

    /// [`Session::get`] from byte `range_from` on (`Range: bytes=N-`), for a download that
    /// resumes. Retries (bounded, see `retry`) a dropped connection, 429 and 5xx.
    async fn get_from(
        &self,
        ep: &Endpoint,
        tail: &str,
        accept: Option<&str>,
        timeout: Option<Duration>,
        range_from: Option<u64>,
    ) -> Result<reqwest::Response, Error> {
        let url = self.url(ep, tail);
        let send = |auth: Option<String>| {
            let mut req = self.client_for(ep).get(&url);
            for (k, v) in &ep.headers {
                req = req.header(k.as_str(), v.as_str());
            }
            if let Some(t) = timeout {
                req = req.timeout(t);
            }
            if let Some(a) = accept {
                req = req.header(reqwest::header::ACCEPT, a);
            }
            if let Some(a) = auth {
                req = req.header(reqwest::header::AUTHORIZATION, a);
            }
            if let Some(from) = range_from {
                req = req.header(reqwest::header::RANGE, format!("bytes={from}-"));
            }
            req.send()
        };
        let http_err = |e: reqwest::Error| match no_client_certificate_hint(ep, &e) {
            Some(hint) => Error::HttpNoClientCertificate {
                url: url.clone(),
                source: e,
                hint,
            },
            None => Error::Http {
                url: url.clone(),
                source: e,
            },
        };
        let mut backoff = retry::Backoff::new();
        let mut resp = loop {
            let wait = match send(self.cached_auth(ep)).await {
                Ok(r) if retry::retryable_status(r.status()) => {
                    match backoff.next(retry::retry_after(r.headers())) {
                        Some(wait) => {
                            tracing::warn!(%url, status = %r.status(), try_ = backoff.tries(), wait_ms = wait.as_millis() as u64, "registry asks to try again later");
                            wait
                        }
                        None => {
                            let status = r.status();
                            let body = read_bounded(r, 4096, &url).await.unwrap_or_default();
                            let detail = String::from_utf8_lossy(&body).trim().to_string();
                            return Err(Error::RegistryBusy {
                                url: url.clone(),
                                message: format!("{status} {detail}").trim().to_string(),
                                tries: retry::MAX_TRIES,
                            });
                        }
                    }
                }
                Ok(r) => break r,
                Err(e) if retry::retryable_send(&e) => match backoff.next(None) {
                    Some(wait) => {
                        tracing::warn!(%url, error = %e, try_ = backoff.tries(), "registry connection failed; trying again");
                        wait
                    }
                    None => return Err(http_err(e)),
                },
                Err(e) => return Err(http_err(e)),
            };
            tokio::time::sleep(wait).await;
        };
        if resp.status() == reqwest::StatusCode::UNAUTHORIZED {
            let challenge = resp
                .headers()
                .get(reqwest::header::WWW_AUTHENTICATE)
                .and_then(|v| v.to_str().ok())
                .and_then(parse_challenge);
            let Some(challenge) = challenge else {
                return Err(self.status_error(ep, &url, resp).await);
            };
            let header = self.authenticate(ep, &challenge).await?;
            resp = send(Some(header)).await.map_err(http_err)?;
        }
        if resp.status().is_success() {
            return Ok(resp);
        }
        Err(self.status_error(ep, &url, resp).await)
    }

    async fn status_error(&self, ep: &Endpoint, url: &str, resp: reqwest::Response) -> Error {
        let status = resp.status();
        let body = read_bounded(resp, 64 * 1024, url).await.unwrap_or_default();
        let detail = serde_json::from_slice::<RegistryErrors>(&body)
            .ok()
            .and_then(|e| e.errors.into_iter().next())
            .map(|e| format!("{} {}", e.code, e.message).trim().to_string())
            .unwrap_or_else(|| {
                String::from_utf8_lossy(&body[..body.len().min(200)])
                    .trim()
                    .to_string()
            });
        let message = if detail.is_empty() {
            status.to_string()
        } else {
            format!("{status}: {detail}")
        };
        match status {
            reqwest::StatusCode::UNAUTHORIZED => Error::Unauthenticated {
                registry: ep.host.clone(),
                message,
            },
            reqwest::StatusCode::FORBIDDEN => Error::PermissionDenied {
                registry: ep.host.clone(),
                message,
            },
            reqwest::StatusCode::NOT_FOUND => Error::NotFound(format!("{url}: {message}")),
            _ => Error::Registry {
                url: url.to_string(),
                message,
            },
        }
    }

    /// Answers a 401 challenge; caches and returns the Authorization header.
    async fn authenticate(&self, ep: &Endpoint, ch: &Challenge) -> Result<String, Error> {
        // Credentials are for the registry the reference names, not for mirrors.
        let creds = if ep.mirror { None } else { self.creds.as_ref() };
        let unauth = |message: String| Error::Unauthenticated {
            registry: ep.host.clone(),
            message,
        };
        let header = match ch.scheme.as_str() {
            "basic" => {
                let (u, p) = creds.and_then(Credentials::basic).ok_or_else(|| {
                    unauth(
                        "the registry requires credentials (basic auth) and none were given".into(),
                    )
                })?;
                format!(
                    "Basic {}",
                    base64::engine::general_purpose::STANDARD.encode(format!("{u}:{p}"))
                )
            }
            "bearer" => {
                let realm = ch
                    .params
                    .get("realm")
                    .ok_or_else(|| unauth("bearer challenge without a realm".into()))?;
                let realm_url = reqwest::Url::parse(realm)
                    .map_err(|e| unauth(format!("bad token realm {realm:?}: {e}")))?;
                let has_secret =
                    creds.is_some_and(|c| !c.identity_token.is_empty() || c.basic().is_some());
                if has_secret && realm_url.scheme() != "https" && !ep.plain_http() {
                    return Err(unauth(format!(
                        "refusing to send credentials to non-TLS token realm {realm}"
                    )));
                }
                let scope = ch
                    .params
                    .get("scope")
                    .cloned()
                    .unwrap_or_else(|| format!("repository:{}:pull", self.repo));
                let service = ch.params.get("service").cloned().unwrap_or_default();
                let resp = match creds {
                    Some(c) if !c.identity_token.is_empty() => {
                        let form = [
                            ("grant_type", "refresh_token"),
                            ("refresh_token", c.identity_token.as_str()),
                            ("service", service.as_str()),
                            ("scope", scope.as_str()),
                            ("client_id", "peapod"),
                        ];
                        self.client_for(ep)
                            .post(realm_url.clone())
                            .timeout(REQUEST_TIMEOUT)
                            .form(&form)
                            .send()
                            .await
                    }
                    _ => {
                        let mut req = self
                            .client_for(ep)
                            .get(realm_url.clone())
                            .timeout(REQUEST_TIMEOUT)
                            .query(&[("scope", &scope)]);
                        if !service.is_empty() {
                            req = req.query(&[("service", &service)]);
                        }
                        if let Some((u, p)) = creds.and_then(Credentials::basic) {
                            req = req.basic_auth(u, Some(p));
                        }
                        req.send().await
                    }
                }
                .map_err(|e| Error::Http {
                    url: realm.clone(),
                    source: e,
                })?;
                let status = resp.status();
                let body = read_bounded(resp, 1 << 20, realm).await?;
                if !status.is_success() {
                    let msg = format!(
                        "token request to {realm} failed: {status}: {}",
                        String::from_utf8_lossy(&body[..body.len().min(200)]).trim()
                    );
                    return Err(if status == reqwest::StatusCode::FORBIDDEN {
                        Error::PermissionDenied {
                            registry: ep.host.clone(),
                            message: msg,
                        }
                    } else {
                        unauth(msg)
                    });
                }
                let tok: TokenResponse = serde_json::from_slice(&body)
                    .map_err(|e| Error::json(format!("token response from {realm}"), e))?;
                let t = if tok.token.is_empty() {
                    tok.access_token
                } else {
                    tok.token
                };
                if t.is_empty() {
                    return Err(unauth(format!("token response from {realm} has no token")));
                }
                format!("Bearer {t}")
            }
            other => return Err(unauth(format!("unsupported auth scheme {other:?}"))),
        };
        if let Ok(mut m) = self.auth.lock() {
            m.insert(ep.api.clone(), header.clone());
        }
        Ok(header)
    }

    /// Fetches a manifest (or index) by tag or digest, trying endpoints in
    /// order. Returns the body, its media type and the endpoint that served it.
    /// When `reference` is a digest, the body is verified against it.
    #[tracing::instrument(
        level = "debug",
        name = "registry.manifest",
        skip_all,
        fields(reference = %reference)
    )]
    pub async fn manifest(
        &self,
        reference: &str,
    ) -> Result<(Vec<u8>, Option<String>, usize), Error> {
        let mut last = None;
        // A tag is resolved by hosts that may resolve; a digest is content, fetched from hosts
        // that may pull (containerd's capabilities).
        let by_digest = reference.starts_with("sha256:");
        for (i, ep) in self.endpoints.iter().enumerate() {
            if !(if by_digest {
                ep.caps.pull
            } else {
                ep.caps.resolve
            }) {
                continue;
            }
            let res = async {
                let resp = self
                    .get(
                        ep,
                        &format!("manifests/{reference}"),
                        Some(MANIFEST_ACCEPT),
                        Some(REQUEST_TIMEOUT),
                    )
                    .await?;
                let ct = resp
                    .headers()
                    .get(reqwest::header::CONTENT_TYPE)
                    .and_then(|v| v.to_str().ok())
                    .map(|s| s.split(';').next().unwrap_or(s).trim().to_string());
                let url = self.url(ep, &format!("manifests/{reference}"));
                let body = read_bounded(resp, manifest::MAX_MANIFEST_BYTES, &url).await?;
                if reference.starts_with("sha256:") {
                    crate::digest::verify(&format!("manifest {url}"), reference, &body)?;
                }
                Ok::<_, Error>((body, ct))
            }
            .await;
            match res {
                Ok((body, ct)) => return Ok((body, ct, i)),
                Err(e) if ep.mirror => {
                    tracing::warn!(mirror = %ep.api, error = %e, "mirror failed, trying next endpoint");
                    last = Some(e);
                }
                Err(e) => return Err(e),
            }
        }
        Err(last.unwrap_or_else(|| {
            Error::NotFound(format!(
                "no endpoint may {} manifest {reference} (capabilities in {})",
                if by_digest { "pull" } else { "resolve" },
                self.endpoints
                    .iter()
                    .find_map(|e| e.source.as_ref())
                    .map(|p| p.display().to_string())
                    .unwrap_or_else(|| "the configuration".into())
            ))
        }))
    }

    /// Resumes a blob download from byte `from` (endpoints in the same order as
    /// [`Session::blob`]): a 206 with the rest, or (a registry that ignores ranges) a 200 with
    /// all of it.
    pub async fn blob_from(
        &self,
        digest: &str,
        preferred: usize,
        from: u64,
    ) -> Result<reqwest::Response, Error> {
        self.blob_ranged(digest, preferred, Some(from)).await
    }

    /// Starts a blob download, preferring the endpoint that served the manifest.
    pub async fn blob(&self, digest: &str, preferred: usize) -> Result<reqwest::Response, Error> {
        self.blob_ranged(digest, preferred, None).await
    }

    async fn blob_ranged(
        &self,
        digest: &str,
        preferred: usize,
        from: Option<u64>,
    ) -> Result<reqwest::Response, Error> {
        // The endpoint that served the manifest first: a mirror that had it has its blobs.
        // But hosts that may pull and not resolve (a hosts.toml mirror with capabilities =
        // ["pull"]) were never asked for the tag: they come before the registry, as
        // containerd fetches content from its hosts in their order.
        let mut order: Vec<usize> = Vec::with_capacity(self.endpoints.len());
        if self.endpoints.get(preferred).is_some_and(|e| !e.mirror) {
            order.extend(
                (0..self.endpoints.len())
                    .filter(|&i| self.endpoints[i].mirror && self.endpoints[i].caps.pull)
                    .filter(|&i| !self.endpoints[i].caps.resolve),
            );
        }
        order.push(preferred);
        let rest: Vec<usize> = (0..self.endpoints.len())
            .filter(|i| !order.contains(i))
            .collect();
        order.extend(rest);
        let mut last = None;
        for i in order {
            let Some(ep) = self.endpoints.get(i).filter(|ep| ep.caps.pull) else {
                continue;
            };
            match self
                .get_from(ep, &format!("blobs/{digest}"), None, None, from)
                .await
            {
                Ok(r) => return Ok(r),
                Err(e) => {
                    tracing::debug!(endpoint = %ep.api, %digest, error = %e, "blob fetch failed");
                    let fatal = !ep.mirror
                        && matches!(
                            e.kind(),
                            crate::ErrorKind::Unauthenticated | crate::ErrorKind::PermissionDenied
                        );
                    last = Some(e);
                    if fatal {
                        break;
                    }
                }
            }
        }
        Err(last.unwrap_or_else(|| Error::NotFound(format!("blob {digest}"))))
    }

    /// Fetches a small blob (a config) into memory, bounded and verified.
    pub async fn small_blob(
        &self,
        digest: &str,
        preferred: usize,
        max: u64,
    ) -> Result<Vec<u8>, Error> {
        let resp = self.blob(digest, preferred).await?;
        let url = resp.url().to_string();
        let body = read_bounded(resp, max, &url).await?;
        crate::digest::verify(&format!("blob {digest}"), digest, &body)?;
        Ok(body)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn challenges() {
        let c = parse_challenge(r#"Bearer realm="https://auth.docker.io/token",service="registry.docker.io",scope="repository:library/busybox:pull""#).unwrap();
        assert_eq!(c.scheme, "bearer");
        assert_eq!(c.params["realm"], "https://auth.docker.io/token");
        assert_eq!(c.params["service"], "registry.docker.io");
        assert_eq!(c.params["scope"], "repository:library/busybox:pull");
        let c = parse_challenge(r#"Basic realm="Registry Realm""#).unwrap();
        assert_eq!(c.scheme, "basic");
        assert_eq!(c.params["realm"], "Registry Realm");
        let c = parse_challenge(r#"Bearer realm="a\"b", error=insufficient_scope"#).unwrap();
        assert_eq!(c.params["realm"], "a\"b");
        assert_eq!(c.params["error"], "insufficient_scope");
    }

    #[test]
    fn credentials_forms() {
        let c = Credentials {
            auth: base64::engine::general_purpose::STANDARD.encode("u:p:w"),
            ..Default::default()
        };
        assert_eq!(c.basic(), Some(("u".into(), "p:w".into())));
        let c = Credentials {
            username: "a".into(),
            password: "s3cret-pw".into(),
            ..Default::default()
        };
        assert_eq!(c.basic(), Some(("a".into(), "s3cret-pw".into())));
        assert_eq!(Credentials::default().basic(), None);
        assert!(
            !format!("{c:?}").contains("s3cret"),
            "password must not be printed"
        );
    }
}
