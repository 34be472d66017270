//! Unmounting where "nothing to unmount" is success, so cleanup can run twice; and the new
//! mount API (`fsopen`, `fsconfig`, `fsmount`, `move_mount`): a filesystem configured key by
//! key, mounted detached, then placed at a path or kept as a descriptor.

use nix::errno::Errno;
use nix::mount::{umount2, MntFlags};
use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

const FSOPEN_CLOEXEC: libc::c_uint = 1;
const FSCONFIG_SET_FLAG: libc::c_uint = 0;
const FSCONFIG_SET_STRING: libc::c_uint = 1;
const FSCONFIG_CMD_CREATE: libc::c_uint = 6;
const FSMOUNT_CLOEXEC: libc::c_uint = 1;
const MOVE_MOUNT_F_EMPTY_PATH: libc::c_uint = 4;
/// `fsmount`'s (and `mount_setattr`'s) attributes.
pub const MOUNT_ATTR_RDONLY: libc::c_uint = 0x1;
pub const MOUNT_ATTR_NOSUID: libc::c_uint = 0x2;
pub const MOUNT_ATTR_NODEV: libc::c_uint = 0x4;

/// A filesystem being configured (`fsopen`), mounted detached by [`FsContext::mount`].
pub struct FsContext(OwnedFd);

impl FsContext {
    /// A context for a filesystem of type `fstype` (`overlay`, `tmpfs`, ...); Linux 5.2.
    pub fn open(fstype: &str) -> io::Result<FsContext> {
        let name = CString::new(fstype)?;
        // SAFETY: a NUL-terminated filesystem name.
        let fd = unsafe { libc::syscall(libc::SYS_fsopen, name.as_ptr(), FSOPEN_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a fresh descriptor from the kernel, owned from here on.
        Ok(FsContext(unsafe { OwnedFd::from_raw_fd(fd as i32) }))
    }

    /// Sets option `key` to `value`.
    pub fn set_string(&self, key: &str, value: &[u8]) -> io::Result<()> {
        let key = CString::new(key)?;
        let value = CString::new(value)?;
        self.config(FSCONFIG_SET_STRING, key.as_ptr(), value.as_ptr().cast())
    }

    /// Sets the flag option `key`.
    pub fn set_flag(&self, key: &str) -> io::Result<()> {
        let key = CString::new(key)?;
        self.config(FSCONFIG_SET_FLAG, key.as_ptr(), std::ptr::null())
    }

    fn config(
        &self,
        cmd: libc::c_uint,
        key: *const libc::c_char,
        value: *const libc::c_void,
    ) -> io::Result<()> {
        // SAFETY: a valid context; key and value are NUL-terminated or null, as `cmd` wants.
        let r =
            unsafe { libc::syscall(libc::SYS_fsconfig, self.0.as_raw_fd(), cmd, key, value, 0) };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Creates the filesystem as configured and mounts it detached with `attrs`
    /// (`MOUNT_ATTR_*`): the mount's descriptor, on no mount table until [`move_mount`].
    pub fn mount(self, attrs: libc::c_uint) -> io::Result<OwnedFd> {
        self.config(FSCONFIG_CMD_CREATE, std::ptr::null(), std::ptr::null())?;
        // SAFETY: a valid, created context.
        let m = unsafe {
            libc::syscall(
                libc::SYS_fsmount,
                self.0.as_raw_fd(),
                FSMOUNT_CLOEXEC,
                attrs,
            )
        };
        if m < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a fresh descriptor from the kernel, owned from here on.
        Ok(unsafe { OwnedFd::from_raw_fd(m as i32) })
    }
}

/// Attaches the detached mount `mnt` (from [`FsContext::mount`] or `open_tree`) at `target`.
pub fn move_mount(mnt: &OwnedFd, target: &Path) -> io::Result<()> {
    let target = CString::new(target.as_os_str().as_bytes())?;
    // SAFETY: a valid mount descriptor and NUL-terminated paths.
    let r = unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            mnt.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_FDCWD,
            target.as_ptr(),
            MOVE_MOUNT_F_EMPTY_PATH,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

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

/// The mount points at or below `path` in this mount namespace, deepest first.
pub fn mounts_under(path: &Path) -> Vec<std::path::PathBuf> {
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let prefix = format!("{}/", path.display());
    let mut found: Vec<std::path::PathBuf> = mounts
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .filter(|m| *m == path.to_string_lossy() || m.starts_with(&prefix))
        .map(std::path::PathBuf::from)
        .collect();
    found.sort_by_key(|m| std::cmp::Reverse(m.as_os_str().len()));
    found.dedup();
    found
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
