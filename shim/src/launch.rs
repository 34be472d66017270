//! Starting a shim detached and knowing when it serves, without polling its socket.
//!
//! The launcher (the daemon for `peapod-shim serve`, `containerd-shim-peapod-v2 start` for
//! containerd's face) gives the shim the write end of a pipe, named by
//! [`READY_FD_ENV`]; the shim writes one byte there once its socket listens. The launcher
//! waits for that byte, or for end of file when the shim died before serving (its copy of the
//! write end closes with it). Polling the socket every 2 ms added a millisecond on average to
//! every pod's start, and the daemon ran a whole process (`peapod-shim start`) to do it.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::time::{Duration, Instant};

/// The environment variable that names the descriptor the shim reports readiness on.
pub const READY_FD_ENV: &str = "PEAPOD_SHIM_READY_FD";

/// The descriptor number the launcher puts the pipe on in the shim.
const READY_FD: RawFd = 3;

/// glibc's malloc settings a launched shim starts with (`GLIBC_TUNABLES`, read by glibc
/// before `main`): no per-thread cache of freed blocks. The cache kept up to seven freed
/// blocks of each size out of the heap's free lists, where they could neither merge with
/// their neighbours nor be given back, and a shim's heap is small enough for that to show:
/// 108 -> 70-80 kB resident per shim with 20 pods. A shim makes a few hundred allocations
/// in its life, so the cache's speed is not missed. An operator's own `GLIBC_TUNABLES`
/// stands instead.
pub const MALLOC_TUNABLES: &str = "glibc.malloc.tcache_count=0";

/// What a launcher waits on.
pub struct ReadyPipe {
    read: OwnedFd,
    /// Held until the shim is spawned (the child's copy is made from it), then closed, so
    /// that end of file means the shim's copy is gone.
    write: Option<OwnedFd>,
}

/// How the wait for a shim ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Readiness {
    /// Its socket listens.
    Serving,
    /// It ended (or closed the descriptor) without serving.
    Ended,
    /// Nothing within the time given.
    TimedOut,
}

impl ReadyPipe {
    /// Prepares `cmd` to run detached: in a session of its own (no terminal's or process
    /// group's signal reaches it, and it outlives the launcher) and with the pipe's write end
    /// as descriptor 3, named in its environment; with the shim's malloc settings
    /// ([`MALLOC_TUNABLES`]). Spawn `cmd`, then [`ReadyPipe::wait`].
    pub fn detach(cmd: &mut Command) -> io::Result<ReadyPipe> {
        let (read, write) = pipe()?;
        let write_fd = write.as_raw_fd();
        cmd.env(READY_FD_ENV, READY_FD.to_string());
        if std::env::var_os("GLIBC_TUNABLES").is_none() {
            cmd.env("GLIBC_TUNABLES", MALLOC_TUNABLES);
        }
        // SAFETY: between fork and exec only async-signal-safe calls (setsid, dup2, fcntl),
        // on descriptors the child inherited; no memory of the parent is touched.
        unsafe {
            cmd.pre_exec(move || {
                if libc::setsid() < 0 {
                    return Err(io::Error::last_os_error());
                }
                if write_fd == READY_FD {
                    // dup2 onto itself would keep FD_CLOEXEC: clear it by hand.
                    let flags = libc::fcntl(READY_FD, libc::F_GETFD);
                    if flags < 0
                        || libc::fcntl(READY_FD, libc::F_SETFD, flags & !libc::FD_CLOEXEC) < 0
                    {
                        return Err(io::Error::last_os_error());
                    }
                } else if libc::dup2(write_fd, READY_FD) < 0 {
                    return Err(io::Error::last_os_error());
                }
                Ok(())
            });
        }
        Ok(ReadyPipe {
            read,
            write: Some(write),
        })
    }

    /// Once the shim is spawned: waits up to `timeout` for it to serve or end.
    pub fn wait(mut self, timeout: Duration) -> io::Result<Readiness> {
        drop(self.write.take());
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if !readable_within(self.read.as_fd(), left)? {
                return Ok(Readiness::TimedOut);
            }
            let mut byte = [0u8; 1];
            match nix::unistd::read(self.read.as_raw_fd(), &mut byte) {
                Ok(0) => return Ok(Readiness::Ended),
                Ok(_) => return Ok(Readiness::Serving),
                Err(nix::errno::Errno::EINTR) => {}
                Err(e) => return Err(e.into()),
            }
        }
    }
}

/// A pipe whose ends are closed on exec (`pipe2(O_CLOEXEC)`).
pub fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    Ok(nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?)
}

/// Whether `fd` becomes readable (data or end of file) within `timeout`; a signal that
/// interrupts the wait does not end it.
pub fn readable_within(fd: BorrowedFd<'_>, timeout: Duration) -> io::Result<bool> {
    let deadline = Instant::now() + timeout;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let mut pfd = libc::pollfd {
            fd: fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = left.as_millis().min(i32::MAX as u128) as i32;
        // SAFETY: one pollfd that lives through the call.
        match unsafe { libc::poll(&mut pfd, 1, ms) } {
            0 => return Ok(false),
            n if n > 0 => return Ok(true),
            _ => {
                let err = io::Error::last_os_error();
                if err.kind() != io::ErrorKind::Interrupted {
                    return Err(err);
                }
            }
        }
    }
}

/// In the shim, first thing (while it has one thread: it changes the environment): takes
/// the descriptor its launcher waits on, if there is one, out of the environment, so that
/// nothing the shim starts inherits the name.
pub fn take_ready_fd() -> Option<OwnedFd> {
    let value = std::env::var(READY_FD_ENV).ok()?;
    std::env::remove_var(READY_FD_ENV);
    let fd: RawFd = value.parse().ok()?;
    // SAFETY: F_GETFD only asks whether the descriptor is open; it changes nothing.
    if fd < 3 || unsafe { libc::fcntl(fd, libc::F_GETFD) } < 0 {
        return None;
    }
    // Not inherited by anything the shim starts from now on.
    // SAFETY: setting FD_CLOEXEC on an open descriptor.
    unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
    // SAFETY: the launcher gave this descriptor to us alone; nothing else owns it.
    Some(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// In the shim, first thing (one thread): drops [`MALLOC_TUNABLES`] from the environment
/// (glibc has read it), so that the runtime and helpers the shim starts do not inherit a
/// setting made for the shim; an operator's own value is left.
pub fn forget_malloc_tunables() {
    if std::env::var("GLIBC_TUNABLES").as_deref() == Ok(MALLOC_TUNABLES) {
        std::env::remove_var("GLIBC_TUNABLES");
    }
}

/// In the shim, once its socket listens: tells the launcher (and closes the descriptor).
pub fn report_serving(fd: OwnedFd) {
    // Nobody waiting any more (the launcher gave up) is fine.
    let _ = nix::unistd::write(&fd, b"s");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shell(script: &str) -> (std::process::Child, ReadyPipe) {
        let mut cmd = Command::new("/bin/sh");
        cmd.args(["-c", script]);
        let ready = ReadyPipe::detach(&mut cmd).unwrap();
        (cmd.spawn().unwrap(), ready)
    }

    #[test]
    fn a_child_that_reports_is_serving_and_runs_in_its_own_session() {
        // The shim's malloc settings, unless this environment has its own.
        let tunables =
            std::env::var("GLIBC_TUNABLES").unwrap_or_else(|_| MALLOC_TUNABLES.to_string());
        let (mut child, ready) = shell(&format!(
            "[ \"$PEAPOD_SHIM_READY_FD\" = 3 ] || exit 9; \
             [ \"$(cut -d' ' -f6 /proc/$$/stat)\" = $$ ] || exit 8; \
             [ \"$GLIBC_TUNABLES\" = '{tunables}' ] || exit 7; \
             printf s >&3; sleep 0.2",
        ));
        assert_eq!(
            ready.wait(Duration::from_secs(10)).unwrap(),
            Readiness::Serving
        );
        assert!(child.wait().unwrap().success());
    }

    #[test]
    fn a_child_that_ends_without_reporting_is_seen_at_once() {
        let (mut child, ready) = shell("exit 3");
        // Not a time-out: end of file came from the child's exit.
        assert_eq!(
            ready.wait(Duration::from_secs(60)).unwrap(),
            Readiness::Ended
        );
        assert_eq!(child.wait().unwrap().code(), Some(3));
    }

    #[test]
    fn a_child_that_neither_reports_nor_ends_times_out() {
        let (mut child, ready) = shell("sleep 5");
        assert_eq!(
            ready.wait(Duration::from_millis(100)).unwrap(),
            Readiness::TimedOut
        );
        child.kill().unwrap();
        child.wait().unwrap();
    }
}
