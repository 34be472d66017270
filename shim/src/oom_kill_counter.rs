//! Telling an OOM kill from any other SIGKILL.
//!
//! The kernel counts OOM kills per memory cgroup: `oom_kill` in `memory.oom_control` (cgroup
//! v1) or in `memory.events` (cgroup v2). The shim reads the counter of the container's cgroup
//! when the container is created and again when its init exits, before the runtime deletes the
//! cgroup; a higher count means the memory limit killed something in the container.

use peapod_host::cgroup::{v1_dir, Hierarchy, Layout, ProcCgroups};
use std::path::{Path, PathBuf};

/// Where the OOM-kill counter of a process's memory cgroup lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OomCounter {
    file: PathBuf,
    baseline: u64,
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
        let file = match cgroups.controller("memory")? {
            (Hierarchy::V1, path) => v1_dir(root, "memory", path)?.join("memory.oom_control"),
            (Hierarchy::Unified, path) => Layout::detect(root)
                .unified_dir(root, path)?
                .join("memory.events"),
        };
        OomCounter::from_file(file)
    }

    /// The counter in `file` (`memory.oom_control` or `memory.events`), its current count
    /// as the baseline.
    pub fn from_file(file: PathBuf) -> Option<OomCounter> {
        let baseline = parse_oom_kill(&std::fs::read_to_string(&file).ok()?)?;
        Some(OomCounter { file, baseline })
    }

    /// Whether an OOM kill happened in the cgroup since the baseline.
    pub fn fired(&self) -> bool {
        std::fs::read_to_string(&self.file)
            .ok()
            .and_then(|t| parse_oom_kill(&t))
            .is_some_and(|n| n > self.baseline)
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
            Some(OomCounter {
                file: v1_dir.join("memory.oom_control"),
                baseline: 2
            })
        );

        let v2 = tempfile::tempdir().unwrap();
        std::fs::write(v2.path().join("cgroup.controllers"), "memory\n").unwrap();
        let dir = v2.path().join("kubepods.slice/cri-abc.scope");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("memory.events"), "oom 0\noom_kill 0\n").unwrap();
        let cg = ProcCgroups::parse("0::/kubepods.slice/cri-abc.scope\n");
        assert_eq!(
            OomCounter::for_cgroups(&cg, v2.path()),
            Some(OomCounter {
                file: dir.join("memory.events"),
                baseline: 0
            })
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
        let c = OomCounter {
            file: file.clone(),
            baseline: 0,
        };
        assert!(!c.fired());
        std::fs::write(&file, "oom 1\noom_kill 1\n").unwrap();
        assert!(c.fired());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
