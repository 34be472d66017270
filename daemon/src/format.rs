//! The version of what the daemon keeps on disk, checked at start before anything is touched:
//! the root's records and image store, and the state directory's bundles, namespace pins and
//! the shims' sockets (the shims a previous daemon started are reached through them, so the
//! shim protocol is part of that format).
//!
//! Each directory holds `peapod-format.json` (`{"format": N, "written_by": "<version>"}`). A
//! daemon reads every format up to its own [`FORMAT`] and then records its own; a directory
//! without the file was written by a release from before formats were numbered (format 0),
//! which this one reads as it is. A newer format is refused with what to do, and nothing in
//! the directory is changed: a downgrade fails cleanly instead of misreading records, and
//! the pods of that root keep running under their shims meanwhile.

use crate::error::{Error, Result};
use serde::{Deserialize, Serialize};
use std::path::Path;

/// The on-disk format this daemon writes. Raise it when a change to records, the image
/// store, the state directory or the shim protocol cannot be read by the previous release,
/// and make the previous formats readable here.
pub const FORMAT: u32 = 1;

const FILE: &str = "peapod-format.json";

#[derive(Debug, Serialize, Deserialize, PartialEq, Eq)]
struct Stamp {
    format: u32,
    written_by: String,
}

/// The format `dir` holds: Ok(None) where it has no file (new, or format 0); an error if the
/// file is unreadable or its format newer than [`FORMAT`].
pub fn check(dir: &Path, what: &str) -> Result<Option<u32>> {
    let path = dir.join(FILE);
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io(format!("read {}", path.display()), e)),
    };
    let stamp: Stamp = serde_json::from_str(&text).map_err(|e| {
        Error::failed_precondition(format!("{}: not a format stamp: {e}", path.display()))
    })?;
    if stamp.format > FORMAT {
        return Err(Error::failed_precondition(format!(
            "{what} {} holds peapod's on-disk format {} (written by peapod {}); this peapod ({}) \
             reads formats up to {FORMAT}. Run peapod {} or newer on it, or give this one \
             another directory (`{what}` in the configuration); nothing was changed, and the \
             pods of that directory keep running under their shims",
            dir.display(),
            stamp.format,
            stamp.written_by,
            env!("CARGO_PKG_VERSION"),
            stamp.written_by,
        )));
    }
    Ok(Some(stamp.format))
}

/// Records [`FORMAT`] in `dir` (once its older format was checked), durably.
pub fn record(dir: &Path) -> Result<()> {
    let stamp = Stamp {
        format: FORMAT,
        written_by: env!("CARGO_PKG_VERSION").to_string(),
    };
    let path = dir.join(FILE);
    let mut bytes =
        serde_json::to_vec(&stamp).map_err(|e| Error::internal(format!("format stamp: {e}")))?;
    bytes.push(b'\n');
    peapod_host::fs::write_file_atomic(&path, &bytes)
        .map_err(|e| Error::io(format!("write {}", path.display()), e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_older_or_missing_format_is_read_and_a_newer_one_refused_unchanged() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(check(dir.path(), "root").unwrap(), None);
        record(dir.path()).unwrap();
        assert_eq!(check(dir.path(), "root").unwrap(), Some(FORMAT));

        let newer = format!("{{\"format\":{},\"written_by\":\"9.9.9\"}}", FORMAT + 1);
        std::fs::write(dir.path().join(FILE), &newer).unwrap();
        let err = check(dir.path(), "root").unwrap_err().to_string();
        assert!(
            err.contains("format 2")
                && err.contains("9.9.9")
                && err.contains("nothing was changed"),
            "{err}"
        );
        assert_eq!(
            std::fs::read_to_string(dir.path().join(FILE)).unwrap(),
            newer
        );

        std::fs::write(dir.path().join(FILE), "{\"format\":").unwrap();
        let err = check(dir.path(), "root").unwrap_err().to_string();
        assert!(err.contains("not a format stamp"), "{err}");
    }
}
