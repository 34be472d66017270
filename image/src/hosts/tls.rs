//! HTTP clients for hosts with TLS settings of their own: a CA added to the system's roots
//! (as containerd adds it to Go's system pool), a client certificate and key (mTLS), or
//! skip_verify. Each file is loaded on its own first, so that an error names the file and the
//! field it was given in; a key that does not match its certificate is caught here, when the
//! client is built, not in the middle of a handshake.
//!
//! Clients are cached by the digest of what went into them (the files' contents, not their
//! names), so repeated pulls share connections and a replaced certificate takes effect at the
//! next pull.

use super::HostEntry;
use crate::error::chain;
use crate::Error;
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::path::Path;
use std::sync::Mutex;
use std::time::Duration;

/// More distinct TLS set-ups than this and the cache starts again (files that keep changing).
const MAX_CACHED: usize = 32;

pub(crate) struct Clients {
    idle_timeout: Duration,
    cache: Mutex<HashMap<[u8; 32], reqwest::Client>>,
}

struct Loaded {
    roots: Vec<reqwest::Certificate>,
    identity: Option<reqwest::Identity>,
    skip_verify: bool,
    dial_timeout: Option<Duration>,
    key: [u8; 32],
}

impl Clients {
    pub fn new(idle_timeout: Duration) -> Clients {
        Clients {
            idle_timeout,
            cache: Mutex::new(HashMap::new()),
        }
    }

    /// The client for `entry`, or None when it has no TLS settings (the shared client serves).
    pub fn for_entry(&self, entry: &HostEntry) -> Result<Option<reqwest::Client>, Error> {
        if entry.tls.is_empty() {
            return Ok(None);
        }
        let loaded = load(entry)?;
        if let Some(c) = self
            .cache
            .lock()
            .ok()
            .and_then(|m| m.get(&loaded.key).cloned())
        {
            return Ok(Some(c));
        }
        let key = loaded.key;
        let client = build(entry, loaded, self.idle_timeout)?;
        if let Ok(mut m) = self.cache.lock() {
            if m.len() >= MAX_CACHED {
                m.clear();
            }
            m.insert(key, client.clone());
        }
        Ok(Some(client))
    }
}

fn field_of(entry: &HostEntry, key: &str) -> String {
    if key.is_empty() {
        entry.field.clone()
    } else if entry.field.is_empty() {
        key.to_string()
    } else {
        format!("{}.{key}", entry.field)
    }
}

fn bad(entry: &HostEntry, key: &str, message: String) -> Error {
    Error::HostsConfig {
        file: entry.file.clone(),
        field: field_of(entry, key),
        message,
    }
}

fn read(entry: &HostEntry, key: &str, path: &Path) -> Result<Vec<u8>, Error> {
    std::fs::read(path).map_err(|e| {
        bad(
            entry,
            key,
            format!("{}: cannot be read: {e}", path.display()),
        )
    })
}

/// A builder that trusts nothing but what is added: checking one file costs no system roots.
fn bare() -> reqwest::ClientBuilder {
    reqwest::Client::builder().tls_built_in_root_certs(false)
}

fn load(entry: &HostEntry) -> Result<Loaded, Error> {
    let tls = &entry.tls;
    let mut h = Sha256::new();
    let mut roots = Vec::new();
    for path in &tls.ca {
        let pem = read(entry, "ca", path)?;
        let certs = reqwest::Certificate::from_pem_bundle(&pem).map_err(|e| {
            bad(
                entry,
                "ca",
                format!("{}: not PEM certificates: {}", path.display(), chain(&e)),
            )
        })?;
        if certs.is_empty() {
            return Err(bad(
                entry,
                "ca",
                format!("{}: no PEM certificate in it", path.display()),
            ));
        }
        for c in &certs {
            bare()
                .add_root_certificate(c.clone())
                .build()
                .map_err(|e| {
                    bad(
                        entry,
                        "ca",
                        format!("{}: does not load: {}", path.display(), chain(&e)),
                    )
                })?;
        }
        h.update(b"ca\0");
        h.update(&pem);
        roots.extend(certs);
    }
    let identity = match tls.client.as_slice() {
        [] => None,
        [(cert, key)] => {
            let mut pem = read(entry, "client", cert)?;
            let named = match key {
                Some(k) => {
                    pem.push(b'\n');
                    pem.extend(read(entry, "client", k)?);
                    format!("{} with key {}", cert.display(), k.display())
                }
                None => format!("{} (certificate and key in one file)", cert.display()),
            };
            let id = reqwest::Identity::from_pem(&pem)
                .map_err(|e| bad(entry, "client", format!("{named}: {}", chain(&e))))?;
            // rustls compares the key's public half with the certificate's here.
            bare().identity(id.clone()).build().map_err(|e| {
                bad(
                    entry,
                    "client",
                    format!(
                        "{named}: does not load (does the key match the certificate?): {}",
                        chain(&e)
                    ),
                )
            })?;
            h.update(b"client\0");
            h.update(&pem);
            Some(id)
        }
        _ => {
            return Err(bad(
                entry,
                "client",
                format!(
                    "{} client certificates given; peapod presents one per host",
                    tls.client.len()
                ),
            ))
        }
    };
    let skip_verify = tls.skip_verify.unwrap_or(false);
    h.update([u8::from(skip_verify)]);
    if let Some(t) = tls.dial_timeout {
        h.update(t.as_nanos().to_le_bytes());
    }
    Ok(Loaded {
        roots,
        identity,
        skip_verify,
        dial_timeout: tls.dial_timeout,
        key: h.finalize().into(),
    })
}

fn build(entry: &HostEntry, l: Loaded, idle_timeout: Duration) -> Result<reqwest::Client, Error> {
    let mut b = crate::http::client_builder(idle_timeout);
    for c in l.roots {
        b = b.add_root_certificate(c);
    }
    if let Some(id) = l.identity {
        b = b.identity(id);
    }
    if l.skip_verify {
        tracing::warn!(file = %entry.file.display(), field = %field_of(entry, "skip_verify"), "TLS certificates of this registry host are not verified (skip_verify)");
        b = b.danger_accept_invalid_certs(true);
    }
    if let Some(t) = l.dial_timeout {
        b = b.connect_timeout(t);
    }
    b.build().map_err(|e| {
        bad(
            entry,
            "",
            format!("building its HTTP client: {}", chain(&e)),
        )
    })
}
