//! Atomic file replacement and removal that tolerates "already gone".

use std::ffi::OsString;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// How the temporary files of [`write_atomic`] begin (a hidden name; swept at start-up by
/// stores that own their directory).
pub const TEMP_PREFIX: &str = ".tmp-";

/// Whether [`write_atomic`] waits for the data to reach the disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// fsync the file before the rename and the directory after it: once the call returns,
    /// the new content survives a crash (records, exit statuses, image metadata).
    Durable,
    /// Only atomic: readers see the old or the new content, but a crash may lose the update
    /// (progress files rewritten many times a second).
    AtomicOnly,
}

/// Replaces `path` with `bytes` durably: readers see the old or the new content, never a mix,
/// and the new content survives a crash once this returns.
pub fn write_file_atomic(path: &Path, bytes: &[u8]) -> io::Result<()> {
    write_atomic(path, bytes, Durability::Durable)
}

/// Replaces `path` with `bytes` through a temporary file in the same directory (so the rename
/// stays on one filesystem) and a rename. On failure the temporary file is removed and `path`
/// is unchanged.
pub fn write_atomic(path: &Path, bytes: &[u8], durability: Durability) -> io::Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let tmp = temp_path(dir, path)?;
    let result = (|| {
        let mut file = std::fs::File::create(&tmp)?;
        file.write_all(bytes)?;
        if durability == Durability::Durable {
            file.sync_all()?;
        }
        drop(file);
        std::fs::rename(&tmp, path)?;
        if durability == Durability::Durable {
            sync_dir(dir)?;
        }
        Ok(())
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// A temporary name beside `path` that no other writer in this or another process uses at the
/// same time: process id plus a per-process counter (two threads writing the same record must
/// not share a temporary file). It starts with [`TEMP_PREFIX`], so owners of a directory can
/// sweep leftovers of a crash by that prefix.
fn temp_path(dir: &Path, path: &Path) -> io::Result<PathBuf> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let name = path
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "path has no file name"))?;
    let mut tmp = OsString::from(TEMP_PREFIX);
    tmp.push(name);
    tmp.push(format!(
        "-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    Ok(dir.join(tmp))
}

/// fsyncs a directory, so that entries created or renamed in it survive a crash.
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    std::fs::File::open(dir)?.sync_all()
}

/// Removes a directory tree; one that does not exist is success (cleanup can be retried).
pub fn remove_dir_all_if_exists(path: &Path) -> io::Result<()> {
    ignore_not_found(std::fs::remove_dir_all(path))
}

/// Removes a file; one that does not exist is success (cleanup can be retried).
pub fn remove_file_if_exists(path: &Path) -> io::Result<()> {
    ignore_not_found(std::fs::remove_file(path))
}

fn ignore_not_found(r: io::Result<()>) -> io::Result<()> {
    match r {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn replaces_content_and_leaves_no_temporary_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("record.json");
        write_file_atomic(&path, b"one").unwrap();
        write_atomic(&path, b"two", Durability::AtomicOnly).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"two");
        write_file_atomic(&path, b"three").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"three");
        assert_eq!(names(dir.path()), vec!["record.json".to_string()]);
    }

    #[test]
    fn failed_write_keeps_the_old_content_and_removes_the_temporary_file() {
        let dir = tempfile::tempdir().unwrap();
        // The target is a non-empty directory: the rename fails after the temp file exists.
        let path = dir.path().join("busy");
        std::fs::create_dir(&path).unwrap();
        std::fs::write(path.join("inside"), b"x").unwrap();
        assert!(write_file_atomic(&path, b"new").is_err());
        assert!(path.is_dir());
        assert_eq!(names(dir.path()), vec!["busy".to_string()]);
    }

    #[test]
    fn a_path_without_a_file_name_is_refused() {
        let err = write_file_atomic(Path::new("/"), b"x").unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
    }

    #[test]
    fn concurrent_writers_of_one_path_do_not_share_a_temporary_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("shared");
        std::thread::scope(|s| {
            for i in 0..8u8 {
                let path = &path;
                s.spawn(move || {
                    for _ in 0..50 {
                        write_file_atomic(path, &[i; 64]).unwrap();
                    }
                });
            }
        });
        let content = std::fs::read(&path).unwrap();
        assert_eq!(content.len(), 64);
        assert!(content.iter().all(|b| *b == content[0]));
        assert_eq!(names(dir.path()), vec!["shared".to_string()]);
    }

    #[test]
    fn removal_of_what_is_gone_is_success() {
        let dir = tempfile::tempdir().unwrap();
        let tree = dir.path().join("tree");
        std::fs::create_dir_all(tree.join("a/b")).unwrap();
        std::fs::write(tree.join("a/b/f"), b"x").unwrap();
        remove_dir_all_if_exists(&tree).unwrap();
        assert!(!tree.exists());
        remove_dir_all_if_exists(&tree).unwrap();

        let file = dir.path().join("f");
        std::fs::write(&file, b"x").unwrap();
        remove_file_if_exists(&file).unwrap();
        assert!(!file.exists());
        remove_file_if_exists(&file).unwrap();

        // Other errors still surface: a directory is not a file.
        std::fs::create_dir(&file).unwrap();
        assert!(remove_file_if_exists(&file).is_err());
    }
}
