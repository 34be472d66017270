//! A process the shim started, held by a pidfd: whether it runs and signals to it, without
//! the pid being reused under us (the pidfd names the process, not the number).

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

#[derive(Debug)]
pub struct Pidfd(OwnedFd);

impl Pidfd {
    /// The pidfd of `pid`. Call it while `pid` cannot have been reaped (the shim's own child
    /// whose exit it has not yet taken), so that it names the process meant.
    pub fn open(pid: u32) -> std::io::Result<Pidfd> {
        // SAFETY: pidfd_open with integer arguments; the descriptor is owned from here on.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::c_int, 0) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: a fresh descriptor.
        Ok(Pidfd(unsafe { OwnedFd::from_raw_fd(fd as i32) }))
    }

    /// The descriptor itself (to join the process's namespaces with setns, or to poll).
    pub fn into_owned(self) -> OwnedFd {
        self.0
    }

    /// Whether the process still runs (its pidfd becomes readable when it exits).
    pub fn running(&self) -> bool {
        let mut fd = libc::pollfd {
            fd: self.0.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: poll of one live descriptor, no waiting.
        unsafe { libc::poll(&mut fd, 1, 0) == 0 }
    }

    /// Sends `signal`; a process that has exited already is not an error.
    pub fn signal(&self, signal: u32) -> std::io::Result<()> {
        // SAFETY: pidfd_send_signal on a live pidfd with no siginfo.
        let r = unsafe {
            libc::syscall(
                libc::SYS_pidfd_send_signal,
                self.0.as_raw_fd(),
                signal as libc::c_int,
                std::ptr::null::<libc::siginfo_t>(),
                0u32,
            )
        };
        match sent(r) {
            Err(e) if e.raw_os_error() == Some(libc::ENOSYS) => self.signal_by_pid(signal),
            other => other,
        }
    }

    /// Where pidfd_send_signal is refused though pidfds exist (valgrind, which scripts/
    /// text-order runs the shim under, knows pidfd_open but not it; a seccomp filter may
    /// do the same): kill() to the pid the kernel shows for the pidfd, while the pidfd
    /// still names a live process (no pid is reused before the shim reaps its child).
    fn signal_by_pid(&self, signal: u32) -> std::io::Result<()> {
        let info = std::fs::read_to_string(format!("/proc/self/fdinfo/{}", self.0.as_raw_fd()))?;
        let pid = info
            .lines()
            .find_map(|l| l.strip_prefix("Pid:"))
            .and_then(|p| p.trim().parse::<libc::pid_t>().ok());
        match pid {
            // -1: the process has exited.
            Some(pid) if pid > 0 => {
                // SAFETY: kill with integer arguments.
                sent(unsafe { libc::kill(pid, signal as libc::c_int) }.into())
            }
            Some(_) => Ok(()),
            None => Err(std::io::Error::new(
                std::io::ErrorKind::Unsupported,
                "pidfd_send_signal is refused and the pidfd's fdinfo names no pid",
            )),
        }
    }
}

/// A signal call's return: sent, or not needed (ESRCH: the process has exited already).
fn sent(rc: i64) -> std::io::Result<()> {
    if rc == 0 {
        return Ok(());
    }
    match std::io::Error::last_os_error() {
        e if e.raw_os_error() == Some(libc::ESRCH) => Ok(()),
        e => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_child_is_seen_running_then_gone_after_a_signal() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let fd = Pidfd::open(child.id()).unwrap();
        assert!(fd.running());
        fd.signal(libc::SIGKILL as u32).unwrap();
        child.wait().unwrap();
        assert!(!fd.running());
        // Exited (and reaped): signalling it again is still fine, and reaches nobody else.
        fd.signal(libc::SIGKILL as u32).unwrap();
    }

    #[test]
    fn without_pidfd_send_signal_the_pid_is_signalled_while_it_lives() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let fd = Pidfd::open(child.id()).unwrap();
        fd.signal_by_pid(libc::SIGTERM as u32).unwrap();
        let status = child.wait().unwrap();
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(status.signal(), Some(libc::SIGTERM));
        // Gone: fdinfo says -1, and no one is signalled.
        fd.signal_by_pid(libc::SIGKILL as u32).unwrap();
    }
}
