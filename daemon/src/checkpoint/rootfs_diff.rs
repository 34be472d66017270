//! The container's changes to its image: its overlay upper directory as `rootfs-diff.tar` (what
//! it wrote) and `deleted.files` (what it removed), and both applied to a new container's root
//! filesystem at a restore.
//!
//! In the upper directory a removed file is a whiteout (a 0/0 character device) and a
//! directory removed and made again is opaque (`trusted.overlay.opaque=y`): neither goes into
//! the tar. A whiteout's path goes into `deleted.files`; so does an opaque directory's, since
//! what it hid is gone too, and the tar then brings back what the container put in it. For
//! that, a restore removes the deleted paths first and unpacks the tar after (CRI-O unpacks
//! first; on its archives, which list only whiteouts, the order makes no difference).

use super::layout::{self, ArchiveError};
use std::collections::HashSet;
use std::ffi::CString;
use std::fs::File;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Component, Path, PathBuf};

const OPAQUE_XATTR: &str = "trusted.overlay.opaque";

/// Writes the upper directory `upper` as a tar at `tar_path`, leaving out whiteouts and the
/// paths in `excluded` (relative, e.g. `etc/hosts`: the mount points the runtime made, whose
/// content is never the container's), and returns the removed paths (`/etc/motd` form).
pub fn collect(
    upper: &Path,
    excluded: &HashSet<PathBuf>,
    tar_path: &Path,
) -> std::io::Result<Vec<String>> {
    let mut tar = tar::Builder::new(File::create(tar_path)?);
    tar.follow_symlinks(false);
    let mut deleted = Vec::new();
    walk(upper, Path::new(""), excluded, &mut tar, &mut deleted)?;
    tar.into_inner()?.sync_all()?;
    deleted.sort();
    Ok(deleted)
}

fn walk(
    upper: &Path,
    rel: &Path,
    excluded: &HashSet<PathBuf>,
    tar: &mut tar::Builder<File>,
    deleted: &mut Vec<String>,
) -> std::io::Result<()> {
    let mut entries: Vec<_> = std::fs::read_dir(upper.join(rel))?.collect::<Result<_, _>>()?;
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        let rel = rel.join(entry.file_name());
        if excluded.contains(&rel) {
            continue;
        }
        let path = entry.path();
        let meta = std::fs::symlink_metadata(&path)?;
        let kind = meta.file_type();
        if kind.is_char_device() && meta.rdev() == 0 {
            deleted.push(format!("/{}", rel.display()));
            continue;
        }
        if kind.is_dir() {
            if is_opaque(&path) {
                deleted.push(format!("/{}", rel.display()));
            }
            tar.append_path_with_name(&path, &rel)?;
            walk(upper, &rel, excluded, tar, deleted)?;
        } else {
            tar.append_path_with_name(&path, &rel)?;
        }
    }
    Ok(())
}

fn is_opaque(dir: &Path) -> bool {
    let (Ok(path), Ok(name)) = (
        CString::new(dir.as_os_str().as_bytes()),
        CString::new(OPAQUE_XATTR),
    ) else {
        return false;
    };
    let mut value = [0u8; 1];
    // SAFETY: valid C strings and a buffer of the length passed.
    let n = unsafe {
        libc::lgetxattr(
            path.as_ptr(),
            name.as_ptr(),
            value.as_mut_ptr().cast(),
            value.len(),
        )
    };
    n == 1 && value[0] == b'y'
}

/// Applies a checkpoint's changes to `rootfs` (the new container's, not yet running): the
/// `deleted` paths removed, then `diff` (if any) unpacked over it, every path kept inside.
pub fn apply(rootfs: &Path, diff: Option<&Path>, deleted: &[String]) -> Result<(), ArchiveError> {
    for path in deleted {
        remove_inside(rootfs, path)?;
    }
    if let Some(diff) = diff {
        let mut file = File::open(diff)
            .map_err(|e| ArchiveError::io(format!("opening {}", layout::ROOTFS_DIFF), e))?;
        peapod_image::unpack::unpack(&mut file, rootfs, Default::default()).map_err(|e| {
            ArchiveError::Malformed {
                entry: layout::ROOTFS_DIFF,
                reason: e.to_string(),
            }
        })?;
    }
    Ok(())
}

/// Removes `path` under `rootfs` without following a symlink on the way: a path through one
/// is refused (the container removed the file where it was, never through a link), a missing
/// one is already gone.
fn remove_inside(rootfs: &Path, path: &str) -> Result<(), ArchiveError> {
    let malformed = |reason: String| ArchiveError::Malformed {
        entry: layout::DELETED_FILES,
        reason,
    };
    layout::check_relative(path).map_err(malformed)?;
    let mut at = rootfs.to_path_buf();
    let parts: Vec<_> = Path::new(path)
        .components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n.to_os_string()),
            _ => None,
        })
        .collect();
    for (i, part) in parts.iter().enumerate() {
        at.push(part);
        let meta = match std::fs::symlink_metadata(&at) {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(ArchiveError::io(format!("removing {path}"), e)),
        };
        let last = i + 1 == parts.len();
        let removed = if !last {
            if meta.is_dir() {
                continue;
            }
            return Err(malformed(format!(
                "{path:?} goes through {}, which is not a directory",
                at.display()
            )));
        } else if meta.is_dir() {
            std::fs::remove_dir_all(&at)
        } else {
            std::fs::remove_file(&at)
        };
        removed.map_err(|e| ArchiveError::io(format!("removing {path}"), e))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_the_container_wrote_and_removed_comes_back_on_a_new_rootfs() {
        let dir = tempfile::tempdir().unwrap();
        let upper = dir.path().join("upper");
        std::fs::create_dir_all(upper.join("data/sub")).unwrap();
        std::fs::write(upper.join("data/sub/file"), b"kept").unwrap();
        std::fs::create_dir_all(upper.join("etc")).unwrap();
        std::fs::write(upper.join("etc/hosts"), b"").unwrap();
        std::os::unix::fs::symlink("/nowhere", upper.join("link")).unwrap();
        // A whiteout needs CAP_MKNOD: a test as root sees it listed, others skip that part.
        let whiteout = nix::sys::stat::mknod(
            &upper.join("etc/motd"),
            nix::sys::stat::SFlag::S_IFCHR,
            nix::sys::stat::Mode::from_bits_truncate(0o600),
            0,
        )
        .is_ok();
        let excluded: HashSet<PathBuf> = [PathBuf::from("etc/hosts")].into();
        let tar = dir.path().join("diff.tar");
        let deleted = collect(&upper, &excluded, &tar).unwrap();
        if whiteout {
            assert_eq!(deleted, vec!["/etc/motd".to_string()]);
        }

        let rootfs = dir.path().join("rootfs");
        std::fs::create_dir_all(rootfs.join("etc")).unwrap();
        std::fs::write(rootfs.join("etc/motd"), b"image's").unwrap();
        std::fs::write(rootfs.join("etc/hosts"), b"image's").unwrap();
        apply(&rootfs, Some(&tar), &["/etc/motd".to_string()]).unwrap();
        assert_eq!(
            std::fs::read(rootfs.join("data/sub/file")).unwrap(),
            b"kept"
        );
        assert!(!rootfs.join("etc/motd").exists());
        // Excluded: the image's file stays.
        assert_eq!(std::fs::read(rootfs.join("etc/hosts")).unwrap(), b"image's");
        assert_eq!(
            std::fs::read_link(rootfs.join("link")).unwrap(),
            PathBuf::from("/nowhere")
        );
    }

    #[test]
    fn deletions_stay_inside_and_never_follow_a_link() {
        let dir = tempfile::tempdir().unwrap();
        let outside = dir.path().join("outside");
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(outside.join("precious"), b"x").unwrap();
        let rootfs = dir.path().join("rootfs");
        std::fs::create_dir_all(&rootfs).unwrap();
        std::os::unix::fs::symlink(&outside, rootfs.join("evil")).unwrap();
        let err = apply(&rootfs, None, &["/evil/precious".to_string()]).unwrap_err();
        assert!(err.to_string().contains("deleted.files"), "{err}");
        let err = apply(&rootfs, None, &["../outside/precious".to_string()]).unwrap_err();
        assert!(err.to_string().contains("deleted.files"), "{err}");
        assert!(outside.join("precious").exists());
        // A missing path is already gone; the link itself may be removed.
        apply(
            &rootfs,
            None,
            &["/not/there".to_string(), "/evil".to_string()],
        )
        .unwrap();
        assert!(!rootfs.join("evil").exists());
        assert!(outside.join("precious").exists());
    }
}
