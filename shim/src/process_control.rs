//! What the Task service does to host processes directly, rather than through the OCI
//! runtime: wait for an inherited process's exit, signal an exec'd process and its children,
//! read the OOM-kill counter of a container's cgroup. Behind a trait so unit tests run without
//! real processes.

use crate::oom_kill_counter::OomCounter;
use crate::reaper::Reaper;
use std::path::PathBuf;
use std::sync::Arc;
use tokio::sync::oneshot;

pub trait ProcessControl: Send + Sync {
    /// The exit code of `pid`, a process reparented to the shim, once it exits.
    fn subscribe_exit(&self, pid: u32) -> oneshot::Receiver<i32>;
    /// Sends `signal` to `pid`; for SIGKILL first to everything it started.
    fn signal_tree(&self, pid: u32, signal: i32);
    /// The OOM-kill counter of `pid`'s memory cgroup, read now as the baseline (and watched
    /// from now on where the cgroup may be gone by the exit).
    fn oom_counter(&self, pid: u32) -> Option<OomCounter>;
}

/// The real processes of this host, reaped by the shim's [`Reaper`].
pub struct HostProcesses {
    reaper: Arc<Reaper>,
    cgroup_root: PathBuf,
}

impl HostProcesses {
    pub fn new(reaper: Arc<Reaper>) -> HostProcesses {
        HostProcesses {
            reaper,
            cgroup_root: PathBuf::from(peapod_host::cgroup::DEFAULT_ROOT),
        }
    }
}

impl ProcessControl for HostProcesses {
    fn subscribe_exit(&self, pid: u32) -> oneshot::Receiver<i32> {
        self.reaper.subscribe(pid)
    }

    fn signal_tree(&self, pid: u32, signal: i32) {
        kill_tree(pid, signal);
    }

    fn oom_counter(&self, pid: u32) -> Option<OomCounter> {
        let counter = OomCounter::for_pid(pid, &self.cgroup_root)?;
        counter.watch();
        Some(counter)
    }
}

/// Kills a process and, for SIGKILL, everything it started (an exec'd shell's children would
/// otherwise outlive a timed-out exec).
fn kill_tree(pid: u32, signal: i32) {
    if signal == libc::SIGKILL {
        for child in children_of(pid) {
            kill_tree(child, signal);
        }
    }
    // SAFETY: kill has no memory-safety preconditions.
    unsafe { libc::kill(pid as i32, signal) };
}

/// The children of every thread of `pid`, from `/proc/PID/task/*/children`.
fn children_of(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return out;
    };
    for task in tasks.flatten() {
        if let Ok(text) = std::fs::read_to_string(task.path().join("children")) {
            out.extend(
                text.split_whitespace()
                    .filter_map(|p| p.parse::<u32>().ok()),
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sigkill_reaches_the_children_of_a_process() {
        // sh starts a sleep child and waits for it: killing sh's tree must end the sleep too.
        let mut sh = std::process::Command::new("sh")
            .args(["-c", "sleep 1000 & echo $!; wait"])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(sh.stdout.as_mut().unwrap()),
            &mut line,
        )
        .unwrap();
        let sleep_pid: u32 = line.trim().parse().unwrap();
        assert!(children_of(sh.id()).contains(&sleep_pid));
        // A pidfd becomes readable when its process exits: no polling of /proc, no sleeps.
        // SAFETY: pidfd_open takes a pid and flags; the result is checked.
        let pidfd = unsafe { libc::syscall(libc::SYS_pidfd_open, sleep_pid as i32, 0) } as i32;
        assert!(
            pidfd >= 0,
            "pidfd_open: {}",
            std::io::Error::last_os_error()
        );
        kill_tree(sh.id(), libc::SIGKILL);
        // Another test's reaper (runc.rs) may reap sh first: either way it is gone.
        let _ = sh.wait();
        let mut poll = libc::pollfd {
            fd: pidfd,
            events: libc::POLLIN,
            revents: 0,
        };
        // The bound only keeps a broken kill_tree from hanging the test run.
        // SAFETY: one valid pollfd.
        let ready = unsafe { libc::poll(&mut poll, 1, 60_000) };
        // SAFETY: pidfd is ours.
        unsafe { libc::close(pidfd) };
        assert_eq!(ready, 1, "the child of the killed process is still running");
    }
}
