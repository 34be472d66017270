//! Unmounting where "nothing to unmount" is success, so cleanup can run twice.

use nix::errno::Errno;
use nix::mount::{umount2, MntFlags};
use std::io;
use std::path::Path;

/// What an unmount found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unmounted {
    /// A mount was there and is gone (or detached).
    Yes,
    /// Nothing was mounted there (EINVAL) or the path does not exist (ENOENT).
    NothingThere,
}

/// `umount2(path, flags)`, where "not a mount point" (EINVAL) and "no such path" (ENOENT) are
/// success: cleanup paths call this for mounts that may never have been made or were already
/// removed. Every other error (EBUSY, EPERM) is returned.
pub fn unmount(path: &Path, flags: MntFlags) -> io::Result<Unmounted> {
    match umount2(path, flags) {
        Ok(()) => Ok(Unmounted::Yes),
        Err(Errno::EINVAL) | Err(Errno::ENOENT) => Ok(Unmounted::NothingThere),
        Err(e) => Err(io::Error::from(e)),
    }
}

/// Detaches the mount at `path` lazily (`MNT_DETACH`): it disappears from the namespace now and
/// is released when its last user goes. For pinned namespaces and pod-level mounts, where a
/// process still inside must not make teardown fail. Nothing mounted is success.
pub fn detach(path: &Path) -> io::Result<Unmounted> {
    unmount(path, MntFlags::MNT_DETACH)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_path_is_nothing_there() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing");
        assert_eq!(detach(&missing).unwrap(), Unmounted::NothingThere);
        assert_eq!(
            unmount(&missing, MntFlags::UMOUNT_NOFOLLOW).unwrap(),
            Unmounted::NothingThere
        );
    }

    #[test]
    fn a_directory_that_is_not_a_mount_point_is_nothing_there_or_not_permitted() {
        let dir = tempfile::tempdir().unwrap();
        match detach(dir.path()) {
            Ok(u) => assert_eq!(u, Unmounted::NothingThere),
            // Without CAP_SYS_ADMIN the kernel answers EPERM before looking: that is an error
            // the caller must see, not success.
            Err(e) => assert_eq!(e.raw_os_error(), Some(libc::EPERM)),
        }
    }
}
