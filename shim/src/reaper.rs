//! Reaping every child of the shim and handing each exit to whoever waits for that pid.
//!
//! As a subreaper the shim inherits container processes it never spawned, so it must
//! `waitpid(-1)`; that would steal the exits of the runc commands it does spawn from anything
//! that waits on them individually (as `tokio::process` does). So all waiting goes through
//! here: spawn a command with [`Reaper::spawn`], or subscribe to an inherited pid with
//! [`Reaper::subscribe`]. The lock is held both while spawning and while reaping, so an exit
//! can never be reaped before its subscriber is registered.

use peapod_host::sync::LockUnpoisoned;
use std::collections::HashMap;
use std::process::Command;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::oneshot;

/// How long an exit nobody asked for is kept (an inherited process may exit before the shim
/// has read its pid file).
const UNCLAIMED_TTL: Duration = Duration::from_secs(60);

#[derive(Default)]
struct Inner {
    waiters: HashMap<i32, oneshot::Sender<i32>>,
    unclaimed: HashMap<i32, (i32, Instant)>,
}

#[derive(Default)]
pub struct Reaper {
    inner: Mutex<Inner>,
}

/// The conventional exit code of a wait status: the code, or 128 + the signal.
pub fn exit_code(status: libc::c_int) -> i32 {
    if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else if libc::WIFSIGNALED(status) {
        128 + libc::WTERMSIG(status)
    } else {
        255
    }
}

impl Reaper {
    /// Starts reaping on SIGCHLD.
    pub fn start() -> std::io::Result<Arc<Reaper>> {
        let reaper = Arc::new(Reaper::default());
        let mut sigchld = signal(SignalKind::child())?;
        let r = reaper.clone();
        tokio::spawn(async move {
            loop {
                r.reap();
                if sigchld.recv().await.is_none() {
                    break;
                }
            }
        });
        Ok(reaper)
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock_unpoisoned()
    }

    /// Reaps every exited child without blocking.
    pub fn reap(&self) {
        let mut inner = self.lock();
        loop {
            let mut status: libc::c_int = 0;
            // SAFETY: waitpid with a valid status pointer and WNOHANG never blocks.
            let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
            if pid <= 0 {
                break;
            }
            let code = exit_code(status);
            match inner.waiters.remove(&pid) {
                Some(tx) => {
                    let _ = tx.send(code);
                }
                None => {
                    let now = Instant::now();
                    inner
                        .unclaimed
                        .retain(|_, (_, at)| now.duration_since(*at) < UNCLAIMED_TTL);
                    inner.unclaimed.insert(pid, (code, now));
                }
            }
        }
    }

    /// Spawns `cmd` and returns its pid and a receiver of its exit code.
    pub fn spawn(&self, cmd: &mut Command) -> std::io::Result<(u32, oneshot::Receiver<i32>)> {
        let mut inner = self.lock();
        let child = cmd.spawn()?;
        let pid = child.id();
        // The std Child handle is dropped without waiting: this reaper owns the wait.
        drop(child);
        let (tx, rx) = oneshot::channel();
        inner.waiters.insert(pid as i32, tx);
        Ok((pid, rx))
    }

    /// Subscribes to the exit of an inherited process (one that was reparented to the shim).
    pub fn subscribe(&self, pid: u32) -> oneshot::Receiver<i32> {
        let mut inner = self.lock();
        let (tx, rx) = oneshot::channel();
        match inner.unclaimed.remove(&(pid as i32)) {
            Some((code, _)) => {
                let _ = tx.send(code);
            }
            None => {
                inner.waiters.insert(pid as i32, tx);
            }
        }
        rx
    }
}
