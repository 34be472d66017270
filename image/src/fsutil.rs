//! Small filesystem helpers: atomic writes, usage walks, temp names.

use std::io::{self, Write};
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// A random hex name for temp files and directories.
pub(crate) fn random_hex() -> String {
    let bytes: [u8; 8] = rand::random();
    hex::encode(bytes)
}

/// Writes `data` to `path` through a temp file in the same directory and a
/// rename, so readers see the old or the new content, never a mix. With
/// `durable`, the file and then the directory are fsynced, so the new content
/// survives a crash once this returns.
pub(crate) fn write_atomic(path: &Path, data: &[u8], durable: bool) -> io::Result<()> {
    let dir = path
        .parent()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "path without parent"))?;
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("file");
    let tmp = dir.join(format!(".tmp-{name}-{}", random_hex()));
    let res = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(data)?;
        if durable {
            f.sync_all()?;
        }
        std::fs::rename(&tmp, path)?;
        if durable {
            sync_dir(dir)?;
        }
        Ok(())
    })();
    if res.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    res
}

pub(crate) fn sync_dir(dir: &Path) -> io::Result<()> {
    std::fs::File::open(dir)?.sync_all()
}

/// Disk usage of a tree, like `du`: bytes in allocated blocks and inode count,
/// hard links counted once. Never follows symlinks or crosses into other
/// filesystems. Iterative, so a deep tree cannot overflow the stack.
pub(crate) fn disk_usage(root: &Path) -> (u64, u64) {
    let Ok(meta) = std::fs::symlink_metadata(root) else {
        return (0, 0);
    };
    let dev = meta.dev();
    let mut seen = std::collections::HashSet::new();
    let mut bytes = 0u64;
    let mut inodes = 0u64;
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in rd.flatten() {
            let Ok(m) = e.metadata() else { continue };
            if m.dev() != dev {
                continue;
            }
            if m.nlink() > 1 && !m.is_dir() && !seen.insert(m.ino()) {
                continue;
            }
            bytes += m.blocks() * 512;
            inodes += 1;
            if m.is_dir() {
                stack.push(e.path());
            }
        }
    }
    (bytes, inodes)
}
