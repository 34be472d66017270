//! Small filesystem helpers: usage walks, temp names. (Atomic writes are `peapod_host::fs`.)

use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// A random hex name for temp files and directories.
pub(crate) fn random_hex() -> String {
    let bytes: [u8; 8] = rand::random();
    hex::encode(bytes)
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

/// Sets `path`'s permission bits exactly (the process umask does not apply to chmod). Used
/// where a directory must be reachable by containers running as other users although the
/// daemon creates everything under a restrictive umask.
pub(crate) fn chmod(path: &Path, mode: u32) -> Result<(), crate::Error> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .map_err(|e| crate::Error::io(format!("chmod {:o} {}", mode, path.display()), e))
}
