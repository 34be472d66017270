//! Persisted records of sandboxes and containers, and their in-memory index.
//!
//! Each record is one JSON file replaced atomically (temporary file, rename), so a crash of the
//! daemon leaves the old or the new record, never a torn one. The states a call answers with
//! are written durably (fsync of the file and of its directory: they survive the machine's
//! crash too); the steps on the way to them ([`Durability::Step`]) are only atomic, since the
//! machine's crash takes with it everything a step records (mounts, namespaces, processes,
//! the runtime's state under /run), and a record that falls back to an earlier step after a
//! reboot is the record of a call cut short there, which recovery already converges (what it
//! made on disk is swept as unclaimed, or cleaned up from the record). Each fsync costs
//! 1-2 ms here: CreateContainer made eight of them before.
//! The in-memory tables hold the records plus what only lives while the daemon runs (locks,
//! watchers).
//!
//! Lock order (always taken in this order, never the other way round):
//! 1. a sandbox's `op`, then its `members` (exclusive in Stop/RemovePodSandbox, shared in
//!    CreateContainer), then a container's `op`;
//! 2. the sandbox table's lock before the container table's lock, each held only for a
//!    lookup or an insert/remove: never across an `.await` or disk I/O;
//! 3. an entry's record lock is innermost, and held only to read or swap the record in
//!    memory (see `Entry::update`).

pub mod container;
pub mod names;
pub mod sandbox;
pub mod table;
pub mod to_cri;

use crate::error::{Error, Result};
use serde::{de::DeserializeOwned, Serialize};
use std::path::Path;

/// How long a record write must last.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// A state a call answers with: it survives the machine's crash.
    Durable,
    /// A step on the way to such a state (an intent before a side effect that a reboot
    /// undoes anyway): it survives the daemon's crash, not always the machine's.
    Step,
}

/// Writes `value` as JSON to `path` atomically (and durably, if asked). The directory must
/// exist: a record whose directory was removed belongs to a removed object, and a late update
/// (an exit watcher's, say) must not bring it back.
pub fn write_record<T: Serialize>(path: &Path, value: &T, durability: Durability) -> Result<()> {
    let bytes = serde_json::to_vec_pretty(value)
        .map_err(|e| Error::internal(format!("encode record {}: {e}", path.display())))?;
    let durability = match durability {
        Durability::Durable => peapod_host::fs::Durability::Durable,
        Durability::Step => peapod_host::fs::Durability::AtomicOnly,
    };
    peapod_host::fs::write_atomic(path, &bytes, durability)
        .map_err(|e| Error::path("write record", path, e))
}

/// Reads a JSON record; `Ok(None)` when the file does not exist.
pub fn read_record<T: DeserializeOwned>(path: &Path) -> Result<Option<T>> {
    match std::fs::read(path) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| Error::internal(format!("decode record {}: {e}", path.display()))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Error::path("read record", path, e)),
    }
}
