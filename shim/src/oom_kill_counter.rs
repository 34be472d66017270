//! Telling an OOM kill from any other SIGKILL.
//!
//! The kernel counts OOM kills per memory cgroup: `oom_kill` in `memory.oom_control` (cgroup
//! v1) or in `memory.events` (cgroup v2). The shim reads the counter of the container's cgroup
//! when the container is created and again when its init exits; a higher count means the
//! memory limit killed something in the container.
//!
//! On v1, and on v2 with the cgroupfs driver, the cgroup lives until the runtime deletes it,
//! so the read at exit sees the count. Under the systemd driver it does not: systemd removes
//! a transient scope's cgroup as soon as its last process has exited, often before the shim
//! has handled the init's exit (found in the Debian guest: a NoSwap container OOM-killed was
//! reported `Error`). So on v2 the counter is also watched while the container runs, as
//! containerd's and CRI-O's monitors watch it: the kernel notifies `memory.events` as its
//! counts move (EPOLLPRI on an open descriptor), the shim reads it each time and keeps an OOM
//! kill it saw.
//!
//! The watch alone still loses: when the init exits just after the kill (a shell whose child
//! was killed), systemd removes the scope within milliseconds, before the woken watch or the
//! exit's read gets to the file (in the Debian guest: 20 kills of 20 reported `Error`). So
//! when the counter is gone at the exit, the parent cgroup's counter (which counts its
//! children's kills and outlives them) tells whether any kill happened beside it since the
//! baseline, and if one did, the kernel's log ([`crate::kernel_log`]) tells whose it was.

use peapod_host::cgroup::{v1_dir, Hierarchy, Layout, ProcCgroups};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

/// Where the OOM-kill counter of a process's memory cgroup lives.
#[derive(Debug, Clone)]
pub struct OomCounter {
    file: PathBuf,
    baseline: u64,
    watch: Arc<Watch>,
    /// Where to look when the cgroup is gone at the exit: its memory cgroup as the kernel
    /// names it, and its parent's counter with that counter's baseline.
    gone: Option<GoneCgroup>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct GoneCgroup {
    cgroup: String,
    parent_file: PathBuf,
    parent_baseline: u64,
}

impl PartialEq for OomCounter {
    fn eq(&self, other: &Self) -> bool {
        self.file == other.file && self.baseline == other.baseline && self.gone == other.gone
    }
}

impl Eq for OomCounter {}

/// What the v2 watch found, and the task that watches (ended with the last counter).
#[derive(Debug, Default)]
struct Watch {
    seen: AtomicBool,
    task: Mutex<Option<tokio::task::AbortHandle>>,
}

impl Watch {
    /// Records an OOM kill if the count in `file` now passes `baseline`. Returns whether
    /// watching should go on: not once a kill is seen, nor once the cgroup is gone.
    fn check(&self, file: &Path, baseline: u64) -> bool {
        match read_count(file) {
            Some(count) if count > baseline => {
                self.seen.store(true, Ordering::SeqCst);
                false
            }
            Some(_) => true,
            None => false,
        }
    }
}

impl GoneCgroup {
    /// Whether the gone cgroup had an OOM kill: the parent's count grew since the baseline
    /// (no growth, no kill: the cheap answer, and the usual one), and the kernel's log names
    /// this cgroup as a victim (a sibling's kill also grows the parent's count). An unreadable
    /// log answers no, as the exit's read did before the watch.
    fn killed(&self, victims: impl FnOnce() -> std::io::Result<Vec<String>>) -> bool {
        if read_count(&self.parent_file).is_none_or(|n| n <= self.parent_baseline) {
            return false;
        }
        match victims() {
            Ok(victims) => victims.contains(&self.cgroup),
            Err(err) => {
                eprintln!("peapod-shim: reading the kernel's log for OOM kills: {err}");
                false
            }
        }
    }
}

/// The count in `file` now, if the cgroup is still there.
fn read_count(file: &Path) -> Option<u64> {
    parse_oom_kill(&std::fs::read_to_string(file).ok()?)
}

impl Drop for Watch {
    fn drop(&mut self) {
        if let Some(task) = self.task.get_mut().ok().and_then(|t| t.take()) {
            task.abort();
        }
    }
}

/// The `oom_kill` count in `memory.oom_control` or `memory.events` text.
pub fn parse_oom_kill(text: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let mut it = l.split_whitespace();
        match (it.next(), it.next()) {
            (Some("oom_kill"), Some(n)) => n.parse().ok(),
            _ => None,
        }
    })
}

impl OomCounter {
    /// Finds the counter for `pid` under the cgroup mount `root` (normally /sys/fs/cgroup):
    /// `memory.oom_control` of its v1 memory cgroup, else `memory.events` of its unified one.
    pub fn for_pid(pid: u32, root: &Path) -> Option<OomCounter> {
        Self::for_cgroups(&ProcCgroups::of_pid(pid).ok()?, root)
    }

    /// The counter of the memory cgroup in `cgroups` (a process's `/proc/PID/cgroup`).
    fn for_cgroups(cgroups: &ProcCgroups, root: &Path) -> Option<OomCounter> {
        let (hierarchy, path) = cgroups.controller("memory")?;
        let file = match hierarchy {
            Hierarchy::V1 => v1_dir(root, "memory", path)?.join("memory.oom_control"),
            Hierarchy::Unified => Layout::detect(root)
                .unified_dir(root, path)?
                .join("memory.events"),
        };
        let mut counter = OomCounter::from_file(file)?;
        // The root cgroup has no counter file: a container directly under it has no parent
        // to ask.
        counter.gone = counter.file.parent().and_then(|dir| {
            let parent_file = dir.parent()?.join(counter.file.file_name()?);
            Some(GoneCgroup {
                cgroup: path.to_string(),
                parent_baseline: read_count(&parent_file)?,
                parent_file,
            })
        });
        Some(counter)
    }

    /// The counter in `file` (`memory.oom_control` or `memory.events`), its current count
    /// as the baseline.
    pub fn from_file(file: PathBuf) -> Option<OomCounter> {
        let baseline = read_count(&file)?;
        Some(OomCounter {
            file,
            baseline,
            watch: Arc::default(),
            gone: None,
        })
    }

    /// Whether an OOM kill happened in the cgroup since the baseline: seen by the watch, or
    /// read now, or, with the cgroup gone, in the kernel's log.
    pub fn fired(&self) -> bool {
        if self.watch.seen.load(Ordering::SeqCst) {
            return true;
        }
        match read_count(&self.file) {
            Some(count) => count > self.baseline,
            None => self
                .gone
                .as_ref()
                .is_some_and(|gone| gone.killed(crate::kernel_log::oom_kill_victims)),
        }
    }

    /// On a unified hierarchy, watches `memory.events` until an OOM kill is seen or the last
    /// clone of this counter is dropped (v1's file lives as long as the container: nothing to
    /// do). The kernel signals a change of a cgroup file to pollers of an open descriptor of
    /// it (EPOLLPRI), so the watch is one descriptor in the shim's reactor: no inotify
    /// instance, of which a user has 128 by default and the kubelet and systemd need theirs.
    /// Needs a tokio runtime; where it cannot be set up, the read at exit remains.
    pub fn watch(&self) {
        if self.file.file_name().is_none_or(|n| n != "memory.events") {
            return;
        }
        let registered = std::fs::File::open(&self.file).and_then(|f| {
            // SAFETY: the descriptor is owned by the AsyncFd from here on and closed only
            // with it.
            unsafe { AsyncFd::register_with_interest(OwnedFd::from(f), Interest::PRIORITY) }
                .map_err(|e| e.into_parts().1)
        });
        let fd = match registered {
            Ok(fd) => fd,
            Err(err) => {
                eprintln!(
                    "peapod-shim: watching {} for OOM kills: {err}",
                    self.file.display()
                );
                return;
            }
        };
        let (file, baseline) = (self.file.clone(), self.baseline);
        // The task holds only a weak handle: it must not keep its own Watch alive.
        let shared = Arc::downgrade(&self.watch);
        let task = tokio::spawn(async move {
            // A kill between the baseline's read and the registration is caught at once.
            loop {
                let Some(w) = shared.upgrade() else { return };
                if !w.check(&file, baseline) {
                    return;
                }
                drop(w);
                let Ok(mut ready) = fd.ready(Interest::PRIORITY).await else {
                    return;
                };
                ready.clear_ready();
            }
        });
        if let Ok(mut t) = self.watch.task.lock() {
            *t = Some(task.abort_handle());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_oom_kill_from_v1_and_v2_files() {
        let v1 = "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n";
        assert_eq!(parse_oom_kill(v1), Some(3));
        let v2 = "low 0\nhigh 0\nmax 7\noom 2\noom_kill 1\noom_group_kill 0\n";
        assert_eq!(parse_oom_kill(v2), Some(1));
        assert_eq!(parse_oom_kill("oom_kill_disable 0\n"), None);
    }

    #[test]
    fn finds_the_counter_file_on_hybrid_and_v2_layouts() {
        let hybrid = tempfile::tempdir().unwrap();
        let v1_dir = hybrid.path().join("memory/kubepods/pod1/abc");
        std::fs::create_dir_all(&v1_dir).unwrap();
        std::fs::create_dir_all(hybrid.path().join("unified")).unwrap();
        std::fs::write(hybrid.path().join("unified/cgroup.procs"), "").unwrap();
        std::fs::write(
            v1_dir.join("memory.oom_control"),
            "oom_kill_disable 0\noom_kill 2\n",
        )
        .unwrap();
        let cg = ProcCgroups::parse("4:memory:/kubepods/pod1/abc\n1:name=systemd:/x\n0::/\n");
        assert_eq!(
            OomCounter::for_cgroups(&cg, hybrid.path()),
            OomCounter::from_file(v1_dir.join("memory.oom_control"))
        );

        let v2 = tempfile::tempdir().unwrap();
        std::fs::write(v2.path().join("cgroup.controllers"), "memory\n").unwrap();
        let dir = v2.path().join("kubepods.slice/cri-abc.scope");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("memory.events"), "oom 0\noom_kill 0\n").unwrap();
        let cg = ProcCgroups::parse("0::/kubepods.slice/cri-abc.scope\n");
        assert_eq!(
            OomCounter::for_cgroups(&cg, v2.path()),
            OomCounter::from_file(dir.join("memory.events"))
        );
        // No memory cgroup file at all: no counter, not a wrong one.
        assert_eq!(OomCounter::for_cgroups(&cg, hybrid.path()), None);
    }

    #[test]
    fn counter_fires_when_the_count_grows() {
        let dir = std::env::temp_dir().join(format!("peapod-oom-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("memory.events");
        std::fs::write(&file, "oom 0\noom_kill 0\n").unwrap();
        let c = OomCounter::from_file(file.clone()).unwrap();
        assert!(!c.fired());
        std::fs::write(&file, "oom 1\noom_kill 1\n").unwrap();
        assert!(c.fired());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_kill_the_watch_saw_is_kept_after_the_cgroup_is_gone() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("memory.events");
        std::fs::write(&file, "max 0\noom 0\noom_kill 0\n").unwrap();
        let c = OomCounter::from_file(file.clone()).unwrap();
        // A change that is not a kill (the limit reached): watching goes on, nothing fired.
        std::fs::write(&file, "max 3\noom 0\noom_kill 0\n").unwrap();
        assert!(c.watch.check(&c.file, c.baseline));
        assert!(!c.fired());
        // A kill: seen, and watching ends.
        std::fs::write(&file, "max 4\noom 1\noom_kill 1\n").unwrap();
        assert!(!c.watch.check(&c.file, c.baseline));
        // As systemd removes an empty scope's cgroup before the exit is handled.
        std::fs::remove_file(&file).unwrap();
        assert!(c.fired());
        // Without the watch, the same removal loses the kill; a gone file ends the watch.
        std::fs::write(&file, "oom_kill 0\n").unwrap();
        let unwatched = OomCounter::from_file(file.clone()).unwrap();
        std::fs::write(&file, "oom_kill 1\n").unwrap();
        std::fs::remove_file(&file).unwrap();
        assert!(!unwatched.fired());
        assert!(!unwatched.watch.check(&unwatched.file, unwatched.baseline));
    }

    #[test]
    fn a_gone_cgroups_kill_is_found_through_its_parent_and_the_kernels_log() {
        let v2 = tempfile::tempdir().unwrap();
        std::fs::write(v2.path().join("cgroup.controllers"), "memory\n").unwrap();
        let pod = v2.path().join("pod.slice");
        let dir = pod.join("peapod-abc.scope");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(pod.join("memory.events"), "oom 4\noom_kill 2\n").unwrap();
        std::fs::write(dir.join("memory.events"), "oom 0\noom_kill 0\n").unwrap();
        let cg = ProcCgroups::parse("0::/pod.slice/peapod-abc.scope\n");
        let c = OomCounter::for_cgroups(&cg, v2.path()).unwrap();
        let gone = c.gone.clone().expect("a parent to ask");
        assert_eq!(gone.cgroup, "/pod.slice/peapod-abc.scope");
        assert_eq!(gone.parent_baseline, 2);
        std::fs::remove_dir_all(&dir).unwrap();
        let log = |victims: &[&str]| {
            let v: Vec<String> = victims.iter().map(|s| s.to_string()).collect();
            move || Ok(v)
        };
        // The parent's count did not grow: no kill, and the log is not read.
        assert!(!gone.killed(|| panic!("read the log without a kill beside it")));
        std::fs::write(pod.join("memory.events"), "oom 5\noom_kill 3\n").unwrap();
        // It grew, by this container's kill or a sibling's: the log says whose.
        assert!(gone.killed(log(&["/other.scope", "/pod.slice/peapod-abc.scope"])));
        assert!(!gone.killed(log(&["/pod.slice/peapod-sibling.scope"])));
        assert!(!gone.killed(|| Err(std::io::Error::from_raw_os_error(libc::EPERM))));
        // A container straight under the root has no parent counter to ask.
        let top = v2.path().join("top.scope");
        std::fs::create_dir_all(&top).unwrap();
        std::fs::write(top.join("memory.events"), "oom_kill 0\n").unwrap();
        let cg = ProcCgroups::parse("0::/top.scope\n");
        assert_eq!(OomCounter::for_cgroups(&cg, v2.path()).unwrap().gone, None);
    }
}
