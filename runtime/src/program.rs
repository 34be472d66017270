//! The helpers' program: the shim's own executable, run through a view of it that no
//! container can write (the class of runc's CVE-2019-5736).
//!
//! A helper becomes a container's process: the native create's init is the shim's program
//! until it execs the entrypoint, and an exec's process is too until its exec. Run from the
//! host's file, `/proc/self/exe` inside the container would name that file: an image whose
//! entrypoint is `/proc/self/exe` runs the host's shim there, and a handle to it kept until
//! no shim runs could rewrite the binary every pod runs. So the shim opens its executable
//! once, at its start, through one of two views, and every helper is exec'd from that
//! descriptor (`/proc/self/fd/N`):
//!
//! - a private, detached overlayfs mount whose lower layers are the executable's directory
//!   and an empty one (overlayfs needs two without an upper): the file is an overlay inode on
//!   a filesystem with no upper layer, read-only whatever the mount's flags, and the host's
//!   inode behind it is reachable from neither the path nor a file handle. No copy, no memory:
//!   what runc 1.2 does. Needs the new mount API (Linux 5.2) and the right to mount;
//! - else a memfd copy sealed against writing, growing and shrinking (and further sealing):
//!   what runc did before, costing the binary's size in memory per shim.
//!
//! The detached mount is on no mount table: it lives as long as the descriptor or a process
//! running from it, and leaves nothing to clean up.

use peapod_host::mount::{FsContext, MOUNT_ATTR_NODEV, MOUNT_ATTR_NOSUID, MOUNT_ATTR_RDONLY};
use std::ffi::{CString, OsStr};
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// How a [`Program`] is seen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum View {
    /// Through a detached overlayfs mount with no upper layer.
    Overlay,
    /// A sealed memfd copy.
    SealedMemfd,
    /// The file itself, as it is ([`Program::plain`]: unit tests' scripted helpers).
    Plain,
}

/// An executable the shim runs its helpers from.
#[derive(Debug)]
pub struct Program {
    /// The file as the host names it: the helpers' `argv[0]`, so `ps` shows them as before.
    host_path: PathBuf,
    /// The descriptor the view is held by (none for [`View::Plain`]).
    fd: Option<OwnedFd>,
    view: View,
}

impl Program {
    /// `exe` (the shim's own: `std::env::current_exe()`) through a view no container can
    /// write; `scratch` is a directory where an empty one may be made for a moment (the
    /// overlay's second lower layer, removed before this returns).
    pub fn sealed(exe: &Path, scratch: &Path) -> io::Result<Program> {
        let (fd, view) = match overlay_view(exe, scratch) {
            Ok(fd) => (fd, View::Overlay),
            Err(overlay) => match sealed_copy(exe) {
                Ok(fd) => (fd, View::SealedMemfd),
                Err(memfd) => {
                    return Err(io::Error::new(
                        memfd.kind(),
                        format!(
                            "no read-only view of {}: overlay: {overlay}; sealed memfd: {memfd}",
                            exe.display()
                        ),
                    ))
                }
            },
        };
        Ok(Program {
            host_path: exe.to_path_buf(),
            fd: Some(fd),
            view,
        })
    }

    /// `path` run as it is: for unit tests whose helpers are scripts (an interpreter could not
    /// open a script through a descriptor closed at exec).
    pub fn plain(path: PathBuf) -> Program {
        Program {
            host_path: path,
            fd: None,
            view: View::Plain,
        }
    }

    pub fn view(&self) -> View {
        self.view
    }

    /// The file as the host names it.
    pub fn host_path(&self) -> &Path {
        &self.host_path
    }

    /// A command running the program: exec'd through the view (the descriptor is close-on-exec,
    /// but the kernel resolves `/proc/self/fd/N` before it closes anything), with the host's
    /// name as its `argv[0]`.
    pub fn command(&self) -> Command {
        match &self.fd {
            Some(fd) => {
                let mut cmd = Command::new(format!("/proc/self/fd/{}", fd.as_raw_fd()));
                cmd.arg0(&self.host_path);
                cmd
            }
            None => Command::new(&self.host_path),
        }
    }
}

/// `exe` opened through a detached overlayfs mount of its directory.
fn overlay_view(exe: &Path, scratch: &Path) -> io::Result<OwnedFd> {
    let (Some(dir), Some(name)) = (exe.parent(), exe.file_name()) else {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "not a file in a directory",
        ));
    };
    let empty = tempdir_in(scratch)?;
    let mounted = overlay_mount(&[dir, &empty]);
    // The overlay holds its layers by reference: the empty one may go now, made or not.
    let _ = std::fs::remove_dir(&empty);
    let mnt = mounted?;
    let name = CString::new(name.as_bytes())?;
    // SAFETY: a valid mount fd and a NUL-terminated name.
    let fd = unsafe {
        libc::openat(
            mnt.as_raw_fd(),
            name.as_ptr(),
            libc::O_RDONLY | libc::O_CLOEXEC | libc::O_NOFOLLOW,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh descriptor from the kernel, owned from here on.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// A detached, read-only overlayfs mount of `lowers` (no upper layer); its mount fd.
fn overlay_mount(lowers: &[&Path]) -> io::Result<OwnedFd> {
    let fs = FsContext::open("overlay")?;
    let lowerdir = lowers
        .iter()
        .map(|l| escape_layer(l.as_os_str()))
        .collect::<Vec<_>>()
        .join(&b':');
    fs.set_string("source", b"peapod-shim")?;
    fs.set_string("lowerdir", &lowerdir)?;
    fs.mount(MOUNT_ATTR_RDONLY | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOSUID)
}

/// A layer's path as overlayfs's `lowerdir` reads it: `:` separates layers, `,` options, and
/// `\` escapes either.
fn escape_layer(path: &OsStr) -> Vec<u8> {
    let mut out = Vec::with_capacity(path.len());
    for &b in path.as_bytes() {
        if matches!(b, b':' | b',' | b'\\') {
            out.push(b'\\');
        }
        out.push(b);
    }
    out
}

/// A new empty directory under `scratch`, its name unique to this process and moment.
fn tempdir_in(scratch: &Path) -> io::Result<PathBuf> {
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    let dir = scratch.join(format!(".exe-layer-{}-{stamp}", std::process::id()));
    std::fs::create_dir(&dir)?;
    Ok(dir)
}

/// `exe` copied into a memfd, sealed so that nothing writes, grows, shrinks or unseals it.
fn sealed_copy(exe: &Path) -> io::Result<OwnedFd> {
    // SAFETY: a NUL-terminated name; the flags are memfd_create's.
    let fd = unsafe {
        libc::memfd_create(
            c"peapod-shim".as_ptr(),
            libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh descriptor from the kernel, owned by the File from here on.
    let mut copy = unsafe { File::from_raw_fd(fd) };
    io::copy(&mut File::open(exe)?, &mut copy)?;
    let seals = libc::F_SEAL_SEAL | libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_WRITE;
    // SAFETY: a valid memfd; F_ADD_SEALS takes an int.
    if unsafe { libc::fcntl(copy.as_raw_fd(), libc::F_ADD_SEALS, seals) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(OwnedFd::from(copy))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn own_exe() -> PathBuf {
        std::env::current_exe().unwrap()
    }

    fn assert_runs(program: &Program) {
        // The test binary itself, asked to list its tests: it runs through the view.
        let out = program
            .command()
            .args(["--list", "--format=terse"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        assert!(String::from_utf8_lossy(&out.stdout).contains("sealed_views_run"));
    }

    fn assert_unwritable(program: &Program) {
        let fd = program.fd.as_ref().unwrap().as_raw_fd();
        let path = format!("/proc/self/fd/{fd}");
        match std::fs::OpenOptions::new().append(true).open(&path) {
            // A memfd opens for writing; its seal refuses the write.
            Ok(mut f) => {
                let err = f.write_all(b"x").unwrap_err();
                assert_eq!(err.raw_os_error(), Some(libc::EPERM), "{err}");
            }
            Err(e) => assert_eq!(e.raw_os_error(), Some(libc::EROFS), "{e}"),
        }
    }

    #[test]
    fn sealed_views_run_and_refuse_writes() {
        let scratch = tempfile::tempdir().unwrap();
        let program = Program::sealed(&own_exe(), scratch.path()).unwrap();
        assert_eq!(program.view(), View::Overlay);
        assert_runs(&program);
        assert_unwritable(&program);
        // The empty layer is gone, and nothing is left mounted.
        assert_eq!(std::fs::read_dir(scratch.path()).unwrap().count(), 0);
        let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
        assert!(!mounts.contains("peapod-shim"), "{mounts}");

        let copy = Program {
            host_path: own_exe(),
            fd: Some(sealed_copy(&own_exe()).unwrap()),
            view: View::SealedMemfd,
        };
        assert_runs(&copy);
        assert_unwritable(&copy);
    }

    #[test]
    fn layer_paths_are_escaped() {
        assert_eq!(
            escape_layer(OsStr::new("/a:b,c\\d")),
            b"/a\\:b\\,c\\\\d".to_vec()
        );
    }
}
