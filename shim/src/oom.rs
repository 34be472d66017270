//! Telling an OOM kill from any other SIGKILL.
//!
//! The kernel counts OOM kills per memory cgroup: `oom_kill` in `memory.oom_control` (cgroup
//! v1) or in `memory.events` (cgroup v2). The shim reads the counter of the container's cgroup
//! when the container is created and again when its init exits, before the runtime deletes the
//! cgroup; a higher count means the memory limit killed something in the container.

use std::path::{Path, PathBuf};

/// Where the OOM-kill counter of a process's memory cgroup lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OomCounter {
    file: PathBuf,
    baseline: u64,
}

/// The memory cgroup path of a process, from the text of `/proc/PID/cgroup`:
/// `(true, path)` for a v1 `memory` hierarchy, `(false, path)` for the v2 unified one.
pub fn memory_cgroup(proc_cgroup: &str) -> Option<(bool, String)> {
    let mut unified = None;
    for line in proc_cgroup.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(_id), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        if controllers.split(',').any(|c| c == "memory") {
            return Some((true, path.to_string()));
        }
        if controllers.is_empty() {
            unified = Some((false, path.to_string()));
        }
    }
    unified
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
    /// Finds the counter for `pid` under the cgroup mount `root` (normally /sys/fs/cgroup).
    pub fn for_pid(pid: u32, root: &Path) -> Option<OomCounter> {
        let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
        let (v1, path) = memory_cgroup(&text)?;
        let rel = path.trim_start_matches('/');
        let file = if v1 {
            root.join("memory").join(rel).join("memory.oom_control")
        } else if root.join("cgroup.controllers").exists() {
            root.join(rel).join("memory.events")
        } else {
            root.join("unified").join(rel).join("memory.events")
        };
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
    fn finds_the_memory_cgroup_on_v1_hybrid_and_v2() {
        let hybrid =
            "12:pids:/kubepods/pod1/abc\n4:memory:/kubepods/pod1/abc\n1:name=systemd:/x\n0::/\n";
        assert_eq!(
            memory_cgroup(hybrid),
            Some((true, "/kubepods/pod1/abc".to_string()))
        );
        let v2 = "0::/kubepods.slice/cri-abc.scope\n";
        assert_eq!(
            memory_cgroup(v2),
            Some((false, "/kubepods.slice/cri-abc.scope".to_string()))
        );
        assert_eq!(memory_cgroup("garbage"), None);
    }

    #[test]
    fn parses_oom_kill_from_v1_and_v2_files() {
        let v1 = "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n";
        assert_eq!(parse_oom_kill(v1), Some(3));
        let v2 = "low 0\nhigh 0\nmax 7\noom 2\noom_kill 1\noom_group_kill 0\n";
        assert_eq!(parse_oom_kill(v2), Some(1));
        assert_eq!(parse_oom_kill("oom_kill_disable 0\n"), None);
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
