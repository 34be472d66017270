//! Single-use, expiring tokens for the URLs handed out by Exec, Attach and PortForward.
//!
//! Behaves as the kubelet's `requestCache`: a token is removed on first use whether or not it
//! is still valid, expired entries are purged on insert, and the number of unused entries is
//! capped. Tokens are 256 random bits from a CSPRNG (the kubelet uses 48): the URL is the only
//! credential for running a command in a container, so it must not be guessable.

use peapod_host::sync::LockUnpoisoned;
use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::Duration;

use base64::Engine;
use rand::RngCore;
use tokio::time::Instant;

use crate::request::{AttachRequest, ExecRequest, PortForwardRequest};

/// What a token stands for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum CachedRequest {
    Exec(ExecRequest),
    Attach(AttachRequest),
    PortForward(PortForwardRequest),
}

struct Inner {
    entries: HashMap<String, (Instant, CachedRequest)>,
    /// Insertion order, for purging; may name tokens already consumed.
    order: VecDeque<(Instant, String)>,
}

pub(crate) struct RequestCache {
    inner: Mutex<Inner>,
    ttl: Duration,
    max_in_flight: usize,
}

/// The cache holds `max_in_flight` unused requests already.
#[derive(Debug)]
pub(crate) struct CacheFull;

impl RequestCache {
    pub(crate) fn new(ttl: Duration, max_in_flight: usize) -> Self {
        RequestCache {
            inner: Mutex::new(Inner {
                entries: HashMap::new(),
                order: VecDeque::new(),
            }),
            ttl,
            max_in_flight: max_in_flight.max(1),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock_unpoisoned()
    }

    pub(crate) fn insert(&self, req: CachedRequest) -> Result<String, CacheFull> {
        let now = Instant::now();
        let mut inner = self.lock();
        // Purge what has expired (oldest first).
        while let Some((expiry, _)) = inner.order.front() {
            if *expiry > now {
                break;
            }
            if let Some((_, token)) = inner.order.pop_front() {
                if inner.entries.get(&token).is_some_and(|(e, _)| *e <= now) {
                    inner.entries.remove(&token);
                }
            }
        }
        if inner.entries.len() >= self.max_in_flight {
            return Err(CacheFull);
        }
        let token = loop {
            let t = new_token();
            if !inner.entries.contains_key(&t) {
                break t;
            }
        };
        let expiry = now + self.ttl;
        inner.entries.insert(token.clone(), (expiry, req));
        inner.order.push_back((expiry, token.clone()));
        // Consumed tokens leave their order entries behind until they expire; keep that
        // backlog from outgrowing the cap when URLs are issued and used quickly.
        if inner.order.len() > 2 * self.max_in_flight {
            let Inner { entries, order } = &mut *inner;
            order.retain(|(_, t)| entries.contains_key(t));
        }
        Ok(token)
    }

    /// Takes the request out; `None` if the token is unknown, used or expired.
    pub(crate) fn consume(&self, token: &str) -> Option<CachedRequest> {
        let (expiry, req) = self.lock().entries.remove(token)?;
        (Instant::now() < expiry).then_some(req)
    }

    pub(crate) fn max_in_flight(&self) -> usize {
        self.max_in_flight
    }
}

fn new_token() -> String {
    let mut raw = [0u8; 32];
    rand::rng().fill_bytes(&mut raw);
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(raw)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exec(id: &str) -> CachedRequest {
        CachedRequest::Exec(ExecRequest {
            container_id: id.into(),
            cmd: vec!["true".into()],
            stdout: true,
            ..Default::default()
        })
    }

    #[tokio::test]
    async fn tokens_are_single_use() {
        let c = RequestCache::new(Duration::from_secs(60), 10);
        let t = c.insert(exec("a")).unwrap();
        assert_eq!(t.len(), 43);
        assert!(t
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'));
        assert_eq!(c.consume(&t), Some(exec("a")));
        assert_eq!(c.consume(&t), None);
        assert_eq!(c.consume("nope"), None);
    }

    #[tokio::test(start_paused = true)]
    async fn tokens_expire() {
        let c = RequestCache::new(Duration::from_secs(60), 10);
        let t1 = c.insert(exec("a")).unwrap();
        tokio::time::advance(Duration::from_secs(30)).await;
        let t2 = c.insert(exec("b")).unwrap();
        tokio::time::advance(Duration::from_secs(31)).await;
        assert_eq!(c.consume(&t1), None, "expired after the TTL");
        assert_eq!(c.consume(&t2), Some(exec("b")), "still valid");
    }

    #[tokio::test(start_paused = true)]
    async fn in_flight_is_capped_and_expiry_frees_room() {
        let c = RequestCache::new(Duration::from_secs(60), 2);
        let a = c.insert(exec("a")).unwrap();
        c.insert(exec("b")).unwrap();
        assert!(c.insert(exec("c")).is_err());
        // Consuming frees a place.
        c.consume(&a).unwrap();
        c.insert(exec("c")).unwrap();
        assert!(c.insert(exec("d")).is_err());
        // So does expiry.
        tokio::time::advance(Duration::from_secs(61)).await;
        c.insert(exec("d")).unwrap();
        c.insert(exec("e")).unwrap();
        assert_eq!(c.max_in_flight(), 2);
    }

    #[tokio::test]
    async fn order_backlog_stays_bounded() {
        let c = RequestCache::new(Duration::from_secs(60), 4);
        for _ in 0..1000 {
            let t = c.insert(exec("a")).unwrap();
            c.consume(&t).unwrap();
        }
        assert!(c.lock().order.len() <= 8);
    }
}
