//! Waiting, at start-up, for what a predecessor still holds.
//!
//! A daemon killed with SIGKILL is not gone when `kill` returns: the kernel closes its files
//! (and with them its flocks and listening sockets) a few milliseconds later. A supervisor or
//! an operator's `kill -9; peapod serve &` starts the next daemon in that window, so each
//! exclusive resource taken at start-up (the image store's lock, a fixed TCP port) is retried
//! for a bounded time while another process holds it — as containerd waits for its metadata
//! database's lock — with one log line saying what it waits for, then a clear error.

use std::io;
use std::time::{Duration, Instant};

/// How long start-up waits for a resource another process holds, unless configured.
pub const DEFAULT_WAIT: Duration = Duration::from_secs(30);

/// How often a held resource is tried again.
const POLL: Duration = Duration::from_millis(50);

/// Whether `e` says "another process holds it" (a flock taken with LOCK_NB, a port in use)
/// rather than a failure that waiting cannot cure.
pub fn is_held_elsewhere(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::WouldBlock
        || e.kind() == io::ErrorKind::AddrInUse
        || e.raw_os_error() == Some(libc::EAGAIN)
        || e.raw_os_error() == Some(libc::EADDRINUSE)
}

/// Runs `attempt` until it succeeds, fails with an error that is not [`is_held_elsewhere`], or
/// `bound` has passed since the first try. `on_wait` is called once, at the first held
/// attempt, to log what is waited for. The error after the bound says how long it waited.
pub fn retry_while_held<T>(
    what: &str,
    bound: Duration,
    mut on_wait: impl FnMut(&io::Error),
    mut attempt: impl FnMut() -> io::Result<T>,
) -> io::Result<T> {
    let start = Instant::now();
    let mut waited = false;
    loop {
        match attempt() {
            Ok(v) => return Ok(v),
            Err(e) if is_held_elsewhere(&e) => {
                if start.elapsed() >= bound {
                    return Err(gave_up(what, start.elapsed(), e));
                }
                if !waited {
                    on_wait(&e);
                    waited = true;
                }
                std::thread::sleep(POLL.min(bound.saturating_sub(start.elapsed())));
            }
            Err(e) => return Err(e),
        }
    }
}

/// The error after waiting `waited` for `what`, keeping the last error's kind.
pub fn gave_up(what: &str, waited: Duration, last: io::Error) -> io::Error {
    io::Error::new(
        last.kind(),
        format!(
            "{what} is still held by another process after waiting {:.1}s (is another peapod running?): {last}",
            waited.as_secs_f64()
        ),
    )
}

/// Takes an exclusive flock on `file`, waiting (as [`retry_while_held`]) while another process
/// holds one.
pub fn lock_exclusive(
    file: &std::fs::File,
    what: &str,
    bound: Duration,
    on_wait: impl FnMut(&io::Error),
) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    retry_while_held(what, bound, on_wait, || {
        // SAFETY: a valid descriptor owned by `file`; flock has no memory preconditions.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    #[test]
    fn waits_for_a_lock_released_meanwhile_and_says_so_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("LOCK");
        let holder = std::fs::File::create(&path).unwrap();
        // SAFETY: a valid descriptor.
        assert_eq!(unsafe { libc::flock(holder.as_raw_fd(), libc::LOCK_EX) }, 0);
        let release = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            drop(holder);
        });
        let mine = std::fs::File::open(&path).unwrap();
        let mut logged = 0;
        let start = Instant::now();
        lock_exclusive(&mine, "the lock", Duration::from_secs(10), |_| logged += 1).unwrap();
        release.join().unwrap();
        assert!(start.elapsed() >= Duration::from_millis(250));
        assert_eq!(logged, 1, "one log line however long it waits");
    }

    #[test]
    fn gives_up_after_the_bound_with_an_error_naming_what() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("LOCK");
        let holder = std::fs::File::create(&path).unwrap();
        // SAFETY: a valid descriptor.
        assert_eq!(unsafe { libc::flock(holder.as_raw_fd(), libc::LOCK_EX) }, 0);
        let mine = std::fs::File::open(&path).unwrap();
        let err =
            lock_exclusive(&mine, "image store X", Duration::from_millis(200), |_| {}).unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains("image store X is still held by another process after waiting"),
            "{msg}"
        );
        assert_eq!(err.kind(), io::ErrorKind::WouldBlock);
    }

    #[test]
    fn other_errors_are_not_waited_for() {
        let mut tries = 0;
        let err = retry_while_held(
            "x",
            Duration::from_secs(10),
            |_| {},
            || -> io::Result<()> {
                tries += 1;
                Err(io::Error::from_raw_os_error(libc::EACCES))
            },
        )
        .unwrap_err();
        assert_eq!(tries, 1);
        assert_eq!(err.raw_os_error(), Some(libc::EACCES));
    }
}
