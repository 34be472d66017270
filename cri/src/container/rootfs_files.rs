//! Reading files from a container's root filesystem without following its symlinks out of it.
//!
//! An image's `/etc/passwd` may be a symlink to anything; resolving it on the host would read
//! the host's files. `openat2(RESOLVE_IN_ROOT)` resolves every component as if the rootfs
//! were `/`.

use std::io::Read;
use std::os::fd::{FromRawFd, OwnedFd};
use std::path::Path;

/// Files larger than this are not read (an /etc/passwd is a few KiB).
const MAX_SIZE: u64 = 4 << 20;

#[repr(C)]
struct OpenHow {
    flags: u64,
    mode: u64,
    resolve: u64,
}

const RESOLVE_IN_ROOT: u64 = 0x10;
const RESOLVE_NO_MAGICLINKS: u64 = 0x02;

fn openat2(dirfd: i32, path: &str, how: &OpenHow) -> std::io::Result<OwnedFd> {
    let c = std::ffi::CString::new(path).map_err(std::io::Error::other)?;
    // SAFETY: openat2 reads the path and the open_how struct, both valid for the call.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            dirfd,
            c.as_ptr(),
            how as *const OpenHow,
            std::mem::size_of::<OpenHow>(),
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: fd is a fresh descriptor.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// The content of `rel` (e.g. "etc/passwd") inside `root`; `Ok(None)` when it does not exist.
pub fn read_in_root(root: &Path, rel: &str) -> std::io::Result<Option<String>> {
    let dir = std::fs::File::open(root)?;
    use std::os::fd::AsRawFd;
    let how = OpenHow {
        flags: (libc::O_RDONLY | libc::O_CLOEXEC | libc::O_NOCTTY) as u64,
        mode: 0,
        resolve: RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS,
    };
    let fd = match openat2(dir.as_raw_fd(), rel, &how) {
        Ok(fd) => fd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let file = std::fs::File::from(fd);
    if !file.metadata()?.is_file() {
        return Ok(None);
    }
    let mut text = String::new();
    file.take(MAX_SIZE).read_to_string(&mut text)?;
    Ok(Some(text))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn symlinks_resolve_inside_the_root() {
        let root = std::env::temp_dir().join(format!("peapod-rootfs-files-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(root.join("etc")).unwrap();
        std::fs::create_dir_all(root.join("data")).unwrap();
        std::fs::write(root.join("data/passwd"), "inside:x:1:1::/:/bin/sh\n").unwrap();
        // An absolute symlink that on the host would point at the host's file.
        std::os::unix::fs::symlink("/data/passwd", root.join("etc/passwd")).unwrap();
        std::os::unix::fs::symlink("../../../../../../etc/hostname", root.join("etc/group"))
            .unwrap();
        assert_eq!(
            read_in_root(&root, "etc/passwd").unwrap().unwrap(),
            "inside:x:1:1::/:/bin/sh\n"
        );
        // `..` cannot climb out: it stops at the root, where etc/hostname does not exist.
        assert_eq!(read_in_root(&root, "etc/group").unwrap(), None);
        assert_eq!(read_in_root(&root, "etc/missing").unwrap(), None);
        std::fs::remove_dir_all(&root).unwrap();
    }
}
