//! Reading a file of a container's root filesystem safely: an image's `/etc/passwd` is input
//! from whoever built the image.
//!
//! Three ways such a file could hurt the host, and what stops each:
//! - a symlink (`/etc/passwd -> /etc/shadow`, or `../../..`) resolved on the host would read
//!   the host's files: `openat2(RESOLVE_IN_ROOT)` resolves every component as if the rootfs were
//!   `/`, and `RESOLVE_NO_MAGICLINKS` refuses `/proc/self/...`-style links;
//! - a FIFO would block the reader forever on `open` (a hung daemon), and a device node could
//!   act when opened: the path is first opened with `O_PATH` (which opens nothing), checked to
//!   be a regular file, and only that very inode is then opened for reading, through
//!   `/proc/self/fd` (no second lookup an attacker could race);
//! - a huge file would eat memory: reads are bounded, and a larger file is an error.

use std::ffi::CString;
use std::io::{self, Read};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// An `/etc/passwd` or `/etc/group` is a few KiB; anything above this is refused.
pub const MAX_ACCOUNT_FILE: u64 = 4 << 20;

/// The content of `rel` (e.g. `etc/passwd`) inside the directory `root`, read as if `root`
/// were `/`. `Ok(None)` when it does not exist. Something that exists but is not a regular
/// file (a FIFO, a device, a directory: nothing an account database could be) is an
/// `InvalidData` error naming its type and is never opened for reading — an image that ships
/// such a file is broken or hostile, and saying so beats guessing. A file larger than `max`
/// bytes is an `InvalidData` error too.
///
/// Blocking: call it off an async runtime's worker threads (`spawn_blocking`).
pub fn read_file_in_root(root: &Path, rel: &str, max: u64) -> io::Result<Option<Vec<u8>>> {
    let dir = open_dir_path(root)?;
    let found = match open_in_root(dir.as_fd(), rel.as_bytes(), libc::O_PATH, 0) {
        Ok(fd) => fd,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    // O_PATH follows a final symlink inside the root, so this is the target's type.
    let file_type = std::fs::File::from(found.try_clone()?)
        .metadata()?
        .file_type();
    if !file_type.is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "{rel} is {}, not a regular file",
                describe_file_type(file_type)
            ),
        ));
    }
    let file = reopen_for_reading(&found)?;
    let mut data = Vec::new();
    file.take(max + 1).read_to_end(&mut data)?;
    if data.len() as u64 > max {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{rel} is larger than {max} bytes"),
        ));
    }
    Ok(Some(data))
}

/// "a FIFO", "a directory", ... for an error message.
fn describe_file_type(t: std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if t.is_fifo() {
        "a FIFO"
    } else if t.is_dir() {
        "a directory"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else if t.is_socket() {
        "a socket"
    } else {
        "not a file"
    }
}

/// [`read_file_in_root`] for an account database (`etc/passwd`, `etc/group`) as text, bounded
/// by [`MAX_ACCOUNT_FILE`]; bytes that are not UTF-8 are replaced, as they cannot name a user.
pub fn read_account_file(root: &Path, rel: &str) -> io::Result<Option<String>> {
    Ok(read_file_in_root(root, rel, MAX_ACCOUNT_FILE)?
        .map(|b| String::from_utf8_lossy(&b).into_owned()))
}

/// Opens a directory as an `O_PATH` descriptor, the anchor for [`open_in_root`].
pub fn open_dir_path(path: &Path) -> io::Result<OwnedFd> {
    let c = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains a NUL byte"))?;
    // SAFETY: a NUL-terminated path; the result is checked.
    let fd = unsafe {
        libc::open(
            c.as_ptr(),
            libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh descriptor from the kernel, owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `openat2(root, path, flags)` with `RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS` plus `resolve`
/// (e.g. `RESOLVE_NO_XDEV`): `path` is resolved as if `root` were `/`, so `..` and absolute
/// symlinks can never leave it. An empty path is `root` itself. `O_CLOEXEC` is always added.
/// Retries EAGAIN, which the kernel returns when a rename races with the lookup.
pub fn open_in_root(
    root: BorrowedFd<'_>,
    path: &[u8],
    flags: libc::c_int,
    resolve: u64,
) -> io::Result<OwnedFd> {
    let c = CString::new(if path.is_empty() { b"." } else { path })
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains a NUL byte"))?;
    // SAFETY: open_how is plain data; zero is "no flags".
    let mut how: libc::open_how = unsafe { std::mem::zeroed() };
    how.flags = (flags | libc::O_CLOEXEC) as u64;
    how.resolve = libc::RESOLVE_IN_ROOT | libc::RESOLVE_NO_MAGICLINKS | resolve;
    for _ in 0..16 {
        // SAFETY: a valid directory fd, a NUL-terminated path and a properly sized open_how.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_openat2,
                root.as_raw_fd(),
                c.as_ptr(),
                &how as *const libc::open_how,
                std::mem::size_of::<libc::open_how>(),
            )
        };
        if fd >= 0 {
            // SAFETY: a fresh descriptor from the kernel.
            return Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) });
        }
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EAGAIN) {
            return Err(e);
        }
    }
    Err(io::Error::from_raw_os_error(libc::EAGAIN))
}

/// Opens the inode behind an `O_PATH` descriptor for reading, without looking its path up
/// again. `O_NONBLOCK` as a second guard: even a FIFO would not block the open.
fn reopen_for_reading(fd: &OwnedFd) -> io::Result<std::fs::File> {
    let proc_path = CString::new(format!("/proc/self/fd/{}", fd.as_raw_fd()))
        .map_err(|_| io::Error::other("fd path contains a NUL byte"))?;
    // SAFETY: a NUL-terminated path; the result is checked.
    let r = unsafe {
        libc::open(
            proc_path.as_ptr(),
            libc::O_RDONLY | libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh descriptor from the kernel.
    Ok(std::fs::File::from(unsafe { OwnedFd::from_raw_fd(r) }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rootfs() -> tempfile::TempDir {
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(root.path().join("etc")).unwrap();
        std::fs::create_dir_all(root.path().join("data")).unwrap();
        root
    }

    #[test]
    fn reads_a_regular_file_and_none_when_missing() {
        let root = rootfs();
        std::fs::write(root.path().join("etc/passwd"), "root:x:0:0::/:/bin/sh\n").unwrap();
        assert_eq!(
            read_account_file(root.path(), "etc/passwd").unwrap(),
            Some("root:x:0:0::/:/bin/sh\n".to_string())
        );
        assert_eq!(read_account_file(root.path(), "etc/group").unwrap(), None);
        assert_eq!(read_account_file(root.path(), "nodir/group").unwrap(), None);
    }

    #[test]
    fn symlinks_resolve_inside_the_root() {
        let root = rootfs();
        let r = root.path();
        std::fs::write(r.join("data/passwd"), "inside:x:1:1::/:/bin/sh\n").unwrap();
        // An absolute symlink that on the host would point at the host's file.
        std::os::unix::fs::symlink("/data/passwd", r.join("etc/passwd")).unwrap();
        // `..` cannot climb out: it stops at the root, where etc/hostname does not exist.
        std::os::unix::fs::symlink("../../../../../../etc/hostname", r.join("etc/group")).unwrap();
        assert_eq!(
            read_account_file(r, "etc/passwd").unwrap().unwrap(),
            "inside:x:1:1::/:/bin/sh\n"
        );
        assert_eq!(read_account_file(r, "etc/group").unwrap(), None);
        // The same for a path that starts with `/`.
        assert_eq!(
            read_account_file(r, "/etc/passwd").unwrap().unwrap(),
            "inside:x:1:1::/:/bin/sh\n"
        );
    }

    fn refused(root: &Path, rel: &str) -> String {
        let err = read_account_file(root, rel).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData, "{err}");
        err.to_string()
    }

    #[test]
    fn a_fifo_is_never_opened() {
        let root = rootfs();
        let fifo = root.path().join("etc/group");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o644)).unwrap();
        // Opening a FIFO for reading without a writer would block this test forever.
        assert_eq!(
            refused(root.path(), "etc/group"),
            "etc/group is a FIFO, not a regular file"
        );
        // A symlink to the FIFO is refused the same way.
        std::os::unix::fs::symlink("/etc/group", root.path().join("etc/passwd")).unwrap();
        assert!(refused(root.path(), "etc/passwd").contains("a FIFO"));
    }

    #[test]
    fn directories_and_devices_are_not_files() {
        let root = rootfs();
        std::fs::create_dir(root.path().join("etc/passwd")).unwrap();
        assert!(refused(root.path(), "etc/passwd").contains("a directory"));
        // A device node inside the root is refused without being opened.
        let dev = root.path().join("etc/group");
        nix::sys::stat::mknod(
            &dev,
            nix::sys::stat::SFlag::S_IFCHR,
            nix::sys::stat::Mode::from_bits_truncate(0o666),
            nix::sys::stat::makedev(1, 3),
        )
        .unwrap();
        assert!(refused(root.path(), "etc/group").contains("a character device"));
        // /dev/null through an absolute symlink resolves inside the root: not there.
        std::fs::remove_file(&dev).unwrap();
        std::os::unix::fs::symlink("/dev/null", &dev).unwrap();
        assert_eq!(read_account_file(root.path(), "etc/group").unwrap(), None);
    }

    #[test]
    fn a_file_over_the_bound_is_an_error() {
        let root = rootfs();
        std::fs::write(root.path().join("etc/passwd"), vec![b'a'; 100]).unwrap();
        assert_eq!(
            read_file_in_root(root.path(), "etc/passwd", 100)
                .unwrap()
                .map(|d| d.len()),
            Some(100)
        );
        let err = read_file_in_root(root.path(), "etc/passwd", 99).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
    }

    #[test]
    fn a_missing_root_is_an_error() {
        let root = rootfs();
        assert!(read_account_file(&root.path().join("nope"), "etc/passwd").is_err());
    }
}
