//! Name reservation: the kubelet relies on a second create with the same metadata failing,
//! except when it is the *same* request again (it retries a call whose deadline expired):
//! that one gets the first call's result, as CRI-O answers it.
//!
//! A reservation keeps a digest of the request that made it and a `settled` flag: while the
//! first call runs, an identical retry waits for it to settle, then finds the object in the
//! table (success: same id) or the name free again (failure: it makes the object itself).

use crate::error::{Error, Result};
use serde::Serialize;
use std::collections::HashMap;
use tokio::sync::watch;

/// A stable digest of a request (FNV-1a over its canonical JSON: a `serde_json::Value`'s
/// objects are sorted maps, so protobuf maps hash the same whatever their order). 0 is never
/// returned: it means "no digest" (records from before digests).
pub fn digest<T: Serialize>(request: &T) -> u64 {
    let text = serde_json::to_value(request)
        .map(|v| v.to_string())
        .unwrap_or_default();
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in text.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h.max(1)
}

#[derive(Debug)]
struct Owner {
    id: String,
    digest: u64,
    settled: watch::Receiver<bool>,
}

/// Held by the call that made a reservation; dropping it (success, failure, panic or the
/// task's end) wakes identical retries waiting for the call.
#[derive(Debug)]
pub struct Settle(watch::Sender<bool>);

impl Drop for Settle {
    fn drop(&mut self) {
        self.0.send_replace(true);
    }
}

/// The answer to a reservation.
#[derive(Debug)]
pub enum Claim {
    /// The name is now reserved for the new id; the caller makes the object.
    New(Settle),
    /// The same request reserved it before for `id`: wait for `settled`, then look for `id`.
    Same {
        id: String,
        settled: watch::Receiver<bool>,
    },
}

#[derive(Debug, Default)]
pub struct NameIndex {
    owners: HashMap<String, Owner>,
}

impl NameIndex {
    /// Reserves `name` for `id` made by a request with `digest`: [`Claim::Same`] if the same
    /// request holds it, AlreadyExists naming the current owner if another does.
    pub fn claim(&mut self, name: &str, id: &str, digest: u64, what: &str) -> Result<Claim> {
        if let Some(owner) = self.owners.get(name) {
            if owner.digest != 0 && owner.digest == digest {
                return Ok(Claim::Same {
                    id: owner.id.clone(),
                    settled: owner.settled.clone(),
                });
            }
            return Err(Error::already_exists(format!(
                "{what} name {name:?} is reserved for {}",
                owner.id
            )));
        }
        let (tx, rx) = watch::channel(false);
        self.set_owner(name, id, digest, rx);
        Ok(Claim::New(Settle(tx)))
    }

    /// Reserves `name` for an object that exists already (a loaded record).
    pub fn reserve(&mut self, name: &str, id: &str, digest: u64, what: &str) -> Result<()> {
        match self.owners.get(name) {
            Some(owner) if owner.id != id => Err(Error::already_exists(format!(
                "{what} name {name:?} is reserved for {}",
                owner.id
            ))),
            _ => {
                self.set_owner(name, id, digest, watch::channel(true).1);
                Ok(())
            }
        }
    }

    fn set_owner(&mut self, name: &str, id: &str, digest: u64, settled: watch::Receiver<bool>) {
        let owner = Owner {
            id: id.to_string(),
            digest,
            settled,
        };
        self.owners.insert(name.to_string(), owner);
    }

    /// Releases `name` if `id` holds it.
    pub fn release(&mut self, name: &str, id: &str) {
        if self.owners.get(name).is_some_and(|o| o.id == id) {
            self.owners.remove(name);
        }
    }
}

/// Waits until the call that holds a reservation has finished (or gone away).
pub async fn settled(mut rx: watch::Receiver<bool>) {
    // An error means the sender is gone, which also means the call is over.
    let _ = rx.wait_for(|done| *done).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_has_one_owner_until_released() {
        let mut n = NameIndex::default();
        n.reserve("a_ns_uid_0", "id1", 7, "sandbox").unwrap();
        let err = n.reserve("a_ns_uid_0", "id2", 7, "sandbox").unwrap_err();
        assert_eq!(err.code(), crate::error::Code::AlreadyExists);
        assert!(err.message().contains("id1"), "{err}");
        n.release("a_ns_uid_0", "id2");
        assert!(n.reserve("a_ns_uid_0", "id2", 7, "sandbox").is_err());
        n.release("a_ns_uid_0", "id1");
        n.reserve("a_ns_uid_0", "id2", 7, "sandbox").unwrap();
    }

    #[tokio::test]
    async fn the_same_request_gets_the_first_owner_and_waits_for_it() {
        let mut n = NameIndex::default();
        let Claim::New(settle) = n.claim("x", "id1", 5, "thing").unwrap() else {
            panic!("a free name is claimed anew");
        };
        let Claim::Same { id, settled: rx } = n.claim("x", "id2", 5, "thing").unwrap() else {
            panic!("an identical request joins the first");
        };
        assert_eq!(id, "id1");
        assert!(!*rx.borrow(), "not settled while the first call runs");
        let err = n.claim("x", "id3", 6, "thing").unwrap_err();
        assert_eq!(err.code(), crate::error::Code::AlreadyExists);
        drop(settle);
        settled(rx).await;
    }

    #[test]
    fn records_without_a_digest_never_match() {
        let mut n = NameIndex::default();
        n.reserve("x", "id1", 0, "thing").unwrap();
        assert!(n.claim("x", "id2", 0, "thing").is_err());
    }

    #[test]
    fn digests_ignore_map_order_and_see_every_field() {
        let a: std::collections::HashMap<&str, &str> = [("a", "1"), ("b", "2")].into();
        let b: std::collections::HashMap<&str, &str> = [("b", "2"), ("a", "1")].into();
        assert_eq!(digest(&a), digest(&b));
        let c: std::collections::HashMap<&str, &str> = [("a", "1"), ("b", "3")].into();
        assert_ne!(digest(&a), digest(&c));
    }
}
