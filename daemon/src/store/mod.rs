//! Persisted records of sandboxes and containers, and their in-memory index.
//!
//! Each record is one JSON file replaced atomically (temporary file, fsync, rename), so a
//! crash leaves the old or the new record, never a torn one. The in-memory tables hold the
//! records plus what only lives while the daemon runs (locks, watchers).
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

/// Writes `value` as JSON to `path` atomically and durably. The directory must exist: a
/// record whose directory was removed belongs to a removed object, and a late update (an exit
/// watcher's, say) must not bring it back.
pub fn write_record<T: Serialize>(path: &Path, value: &T) -> Result<()> {
    let bytes = serde_json::to_vec_pretty(value)
        .map_err(|e| Error::internal(format!("encode record {}: {e}", path.display())))?;
    peapod_host::fs::write_file_atomic(path, &bytes)
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
