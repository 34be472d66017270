//! TaskOOM when it happens, not only when the container exits: the memory cgroup (v1) signals
//! an eventfd registered through `cgroup.event_control` on each OOM in the container, so a
//! process the OOM killer ends in a container that lives on is reported too, as containerd's
//! own shims do. (On a unified hierarchy the exit-time report of the Task service remains.)

use super::events::Publisher;
use containerd_shim_protos::events::task::TaskOOM;
use containerd_shim_protos::topics;
use peapod_host::cgroup::{v1_dir, Hierarchy, ProcCgroups};
use std::io::Write;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use tokio::io::unix::AsyncFd;

/// The v1 memory cgroup directory of `pid`, if it has one.
fn memory_dir(pid: u32, root: &Path) -> Option<PathBuf> {
    let cgroups = ProcCgroups::of_pid(pid).ok()?;
    match cgroups.controller("memory")? {
        (Hierarchy::V1, path) => v1_dir(root, "memory", path),
        _ => None,
    }
}

/// An eventfd the kernel signals on each OOM in the memory cgroup `dir`.
fn register(dir: &Path) -> std::io::Result<OwnedFd> {
    let control = std::fs::File::open(dir.join("memory.oom_control"))?;
    // SAFETY: eventfd takes an initial value and flags; the result is checked.
    let efd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
    if efd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: efd is a fresh descriptor nobody else owns.
    let efd = unsafe { OwnedFd::from_raw_fd(efd) };
    std::fs::OpenOptions::new()
        .write(true)
        .open(dir.join("cgroup.event_control"))?
        .write_all(format!("{} {}", efd.as_raw_fd(), control.as_raw_fd()).as_bytes())?;
    Ok(efd)
}

/// Publishes TaskOOM for container `id` (init `pid`) on each OOM kill in its memory cgroup,
/// until the cgroup is removed. Whether the watch could be set up.
pub fn watch(id: &str, pid: u32, root: &Path, events: Publisher) -> bool {
    let Some(dir) = memory_dir(pid, root) else {
        return false;
    };
    let registered = register(&dir).and_then(|efd| {
        // SAFETY: the eventfd is owned by the AsyncFd from here on and closed only with it.
        unsafe { AsyncFd::register(efd) }.map_err(|e| e.into_parts().1)
    });
    let efd = match registered {
        Ok(efd) => efd,
        Err(err) => {
            eprintln!(
                "containerd-shim-peapod-v2: OOM notification for {id} in {}: {err}",
                dir.display()
            );
            return false;
        }
    };
    let id = id.to_string();
    tokio::spawn(async move {
        loop {
            let Ok(mut ready) = efd.readable().await else {
                return;
            };
            let mut counter = [0u8; 8];
            // SAFETY: reads 8 bytes into a buffer of 8 from a descriptor we own.
            unsafe { libc::read(efd.as_raw_fd(), counter.as_mut_ptr().cast(), 8) };
            ready.clear_ready();
            // The kernel signals an OOM before its killer acts (so the kill counter may not
            // have moved yet), and once more when the cgroup is removed: the watch ends then.
            if !dir.join("memory.oom_control").exists() {
                return;
            }
            let mut e = TaskOOM::new();
            e.container_id = id.clone();
            events.publish(topics::TASK_OOM_EVENT_TOPIC, &e);
        }
    });
    true
}
