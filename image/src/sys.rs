//! Thin, fd-relative wrappers over the Linux calls the extractor and the
//! mounter need. Everything here works relative to directory file
//! descriptors so that no path is ever resolved outside the directory it names.

use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

pub(crate) fn cstr(b: &[u8]) -> io::Result<CString> {
    CString::new(b)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "name contains a NUL byte"))
}

fn check(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// openat2 with RESOLVE_IN_ROOT: `path` is resolved as if `root` were `/`, so
/// `..` and absolute symlinks can never leave it; magic links and mount
/// crossings are refused (see `peapod_host::rootfs::open_in_root`).
pub(crate) fn open_in_root(
    root: BorrowedFd<'_>,
    path: &[u8],
    flags: libc::c_int,
) -> io::Result<OwnedFd> {
    peapod_host::rootfs::open_in_root(root, path, flags, libc::RESOLVE_NO_XDEV)
}

pub(crate) fn openat(
    dir: BorrowedFd<'_>,
    name: &[u8],
    flags: libc::c_int,
    mode: u32,
) -> io::Result<OwnedFd> {
    let n = cstr(name)?;
    // SAFETY: valid fd and NUL-terminated name.
    let fd =
        check(unsafe { libc::openat(dir.as_raw_fd(), n.as_ptr(), flags | libc::O_CLOEXEC, mode) })?;
    // SAFETY: fresh descriptor from the kernel.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

pub(crate) use peapod_host::rootfs::open_dir_path;

/// lstat relative to `dir`; Ok(None) if the name does not exist.
pub(crate) fn lstatat(dir: BorrowedFd<'_>, name: &[u8]) -> io::Result<Option<libc::stat>> {
    let n = cstr(name)?;
    // SAFETY: libc::stat is plain data, for which all-zero bytes are a valid value.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: valid fd, name and out-pointer.
    let r = unsafe {
        libc::fstatat(
            dir.as_raw_fd(),
            n.as_ptr(),
            &mut st,
            libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    if r < 0 {
        let e = io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::ENOENT) {
            return Ok(None);
        }
        return Err(e);
    }
    Ok(Some(st))
}

pub(crate) fn is_dir(st: &libc::stat) -> bool {
    st.st_mode & libc::S_IFMT == libc::S_IFDIR
}

pub(crate) fn is_symlink(st: &libc::stat) -> bool {
    st.st_mode & libc::S_IFMT == libc::S_IFLNK
}

pub(crate) fn mkdirat(dir: BorrowedFd<'_>, name: &[u8], mode: u32) -> io::Result<()> {
    let n = cstr(name)?;
    // SAFETY: valid fd and name.
    check(unsafe { libc::mkdirat(dir.as_raw_fd(), n.as_ptr(), mode) }).map(drop)
}

pub(crate) fn unlinkat(dir: BorrowedFd<'_>, name: &[u8], is_dir: bool) -> io::Result<()> {
    let n = cstr(name)?;
    let flags = if is_dir { libc::AT_REMOVEDIR } else { 0 };
    // SAFETY: valid fd and name.
    check(unsafe { libc::unlinkat(dir.as_raw_fd(), n.as_ptr(), flags) }).map(drop)
}

/// Removes `name` in `dir` whatever it is; directories recursively, without
/// following symlinks (each level is opened with O_NOFOLLOW relative to its parent).
pub(crate) fn remove_all_at(dir: BorrowedFd<'_>, name: &[u8]) -> io::Result<()> {
    let st = match lstatat(dir, name)? {
        Some(st) => st,
        None => return Ok(()),
    };
    if !is_dir(&st) {
        return unlinkat(dir, name, false);
    }
    let sub = openat(
        dir,
        name,
        libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW,
        0,
    )?;
    for child in read_dir_names(sub.as_raw_fd())? {
        remove_all_at(sub_borrow(&sub), &child)?;
    }
    drop(sub);
    unlinkat(dir, name, true)
}

fn sub_borrow(fd: &OwnedFd) -> BorrowedFd<'_> {
    use std::os::fd::AsFd;
    fd.as_fd()
}

/// Names in a directory (without `.` and `..`), read through a dup of `fd`.
pub(crate) fn read_dir_names(fd: RawFd) -> io::Result<Vec<Vec<u8>>> {
    // SAFETY: dup of a valid fd; fdopendir takes ownership of the dup.
    let dup = check(unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 0) })?;
    // SAFETY: `dup` is a valid directory fd that nothing else owns.
    let dirp = unsafe { libc::fdopendir(dup) };
    if dirp.is_null() {
        let e = io::Error::last_os_error();
        // SAFETY: fdopendir failed, so the dup is still ours to close, once.
        unsafe { libc::close(dup) };
        return Err(e);
    }
    // SAFETY: fdopendir does not reset the position of a dup'ed fd that was
    // never read; rewind to be sure.
    unsafe { libc::rewinddir(dirp) };
    let mut names = Vec::new();
    loop {
        // SAFETY: dirp is a valid DIR*.
        let ent = unsafe { libc::readdir64(dirp) };
        if ent.is_null() {
            break;
        }
        // SAFETY: d_name is NUL-terminated within the dirent.
        let name = unsafe { CStr::from_ptr((*ent).d_name.as_ptr()) }.to_bytes();
        if name != b"." && name != b".." {
            names.push(name.to_vec());
        }
    }
    // SAFETY: closes the DIR* and the dup it owns.
    unsafe { libc::closedir(dirp) };
    Ok(names)
}

pub(crate) fn symlinkat(target: &[u8], dir: BorrowedFd<'_>, name: &[u8]) -> io::Result<()> {
    let t = cstr(target)?;
    let n = cstr(name)?;
    // SAFETY: valid fd and strings.
    check(unsafe { libc::symlinkat(t.as_ptr(), dir.as_raw_fd(), n.as_ptr()) }).map(drop)
}

pub(crate) fn readlinkat(dir: BorrowedFd<'_>, name: &[u8]) -> io::Result<Vec<u8>> {
    let n = cstr(name)?;
    let mut buf = vec![0u8; libc::PATH_MAX as usize + 1];
    // SAFETY: valid fd, name and buffer.
    let r = unsafe {
        libc::readlinkat(
            dir.as_raw_fd(),
            n.as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    buf.truncate(r as usize);
    Ok(buf)
}

/// A hard link; never follows a symlink at `old_name`.
pub(crate) fn linkat(
    old_dir: BorrowedFd<'_>,
    old_name: &[u8],
    new_dir: BorrowedFd<'_>,
    new_name: &[u8],
) -> io::Result<()> {
    let o = cstr(old_name)?;
    let n = cstr(new_name)?;
    // SAFETY: valid fds and names.
    check(unsafe {
        libc::linkat(
            old_dir.as_raw_fd(),
            o.as_ptr(),
            new_dir.as_raw_fd(),
            n.as_ptr(),
            0,
        )
    })
    .map(drop)
}

pub(crate) fn mknodat(
    dir: BorrowedFd<'_>,
    name: &[u8],
    mode: u32,
    major: u32,
    minor: u32,
) -> io::Result<()> {
    let n = cstr(name)?;
    let dev = libc::makedev(major, minor);
    // SAFETY: valid fd and name.
    check(unsafe { libc::mknodat(dir.as_raw_fd(), n.as_ptr(), mode, dev) }).map(drop)
}

pub(crate) fn lchownat(dir: BorrowedFd<'_>, name: &[u8], uid: u32, gid: u32) -> io::Result<()> {
    let n = cstr(name)?;
    // SAFETY: valid fd and name.
    check(unsafe {
        libc::fchownat(
            dir.as_raw_fd(),
            n.as_ptr(),
            uid,
            gid,
            libc::AT_SYMLINK_NOFOLLOW,
        )
    })
    .map(drop)
}

/// chmod of a name that is known not to be a symlink (we just created it).
pub(crate) fn fchmodat(dir: BorrowedFd<'_>, name: &[u8], mode: u32) -> io::Result<()> {
    let n = cstr(name)?;
    // SAFETY: valid fd and name.
    check(unsafe { libc::fchmodat(dir.as_raw_fd(), n.as_ptr(), mode, 0) }).map(drop)
}

pub(crate) fn fchown(fd: BorrowedFd<'_>, uid: u32, gid: u32) -> io::Result<()> {
    // SAFETY: valid fd.
    check(unsafe { libc::fchown(fd.as_raw_fd(), uid, gid) }).map(drop)
}

pub(crate) fn fchmod(fd: BorrowedFd<'_>, mode: u32) -> io::Result<()> {
    // SAFETY: valid fd.
    check(unsafe { libc::fchmod(fd.as_raw_fd(), mode) }).map(drop)
}

fn timespec(sec: i64, nsec: u32) -> libc::timespec {
    libc::timespec {
        tv_sec: sec as libc::time_t,
        tv_nsec: nsec as libc::c_long,
    }
}

pub(crate) fn futimens(fd: BorrowedFd<'_>, atime: (i64, u32), mtime: (i64, u32)) -> io::Result<()> {
    let t = [timespec(atime.0, atime.1), timespec(mtime.0, mtime.1)];
    // SAFETY: valid fd and a two-element array.
    check(unsafe { libc::futimens(fd.as_raw_fd(), t.as_ptr()) }).map(drop)
}

pub(crate) fn lutimensat(
    dir: BorrowedFd<'_>,
    name: &[u8],
    atime: (i64, u32),
    mtime: (i64, u32),
) -> io::Result<()> {
    let n = cstr(name)?;
    let t = [timespec(atime.0, atime.1), timespec(mtime.0, mtime.1)];
    // SAFETY: valid fd, name and a two-element array.
    check(unsafe {
        libc::utimensat(
            dir.as_raw_fd(),
            n.as_ptr(),
            t.as_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
        )
    })
    .map(drop)
}

pub(crate) fn fsetxattr(fd: BorrowedFd<'_>, name: &[u8], value: &[u8]) -> io::Result<()> {
    let n = cstr(name)?;
    // SAFETY: valid fd, name and value buffer.
    check(unsafe {
        libc::fsetxattr(
            fd.as_raw_fd(),
            n.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            0,
        )
    })
    .map(drop)
}

/// Reads an xattr; the tests check the overlay xattrs unpacking writes.
#[cfg(test)]
pub(crate) fn fgetxattr(fd: BorrowedFd<'_>, name: &[u8]) -> io::Result<Option<Vec<u8>>> {
    let n = cstr(name)?;
    let mut buf = vec![0u8; 256];
    // SAFETY: valid fd, name and buffer.
    let r = unsafe {
        libc::fgetxattr(
            fd.as_raw_fd(),
            n.as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    if r < 0 {
        let e = io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::ENODATA) {
            return Ok(None);
        }
        return Err(e);
    }
    buf.truncate(r as usize);
    Ok(Some(buf))
}

/// Flushes the whole filesystem holding `fd` (one call instead of an fsync per file).
pub(crate) fn syncfs(fd: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: valid fd.
    check(unsafe { libc::syncfs(fd.as_raw_fd()) }).map(drop)
}

pub(crate) fn is_root() -> bool {
    // SAFETY: geteuid cannot fail.
    unsafe { libc::geteuid() == 0 }
}
