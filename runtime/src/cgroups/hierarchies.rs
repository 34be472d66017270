//! What the native paths do to cgroups alike on every layout (v1, hybrid, v2): a cgroup
//! made in every mounted hierarchy and joined (a container's init, a pod's pause), another
//! process's cgroups joined (an exec's resident helper joining its container's), a cgroup's
//! processes listed and signalled.

use crate::pidfd::Pidfd;
use peapod_host::cgroup::{below_root, hierarchy_dirs};
use std::collections::HashSet;
use std::path::{Path, PathBuf};

/// Makes cgroup `path` in every hierarchy under `root` and moves process `pid` into it, as a
/// runtime's `create` does for a container's init; returns the cgroup's directory in each
/// hierarchy. A v1 cpuset cgroup starts with no CPUs and memory nodes, which no process may
/// join: each level made here gets its parent's. On failure what was made stays for
/// [`Cgroups::remove`](super::Cgroups::remove) (the caller's undo, which also kills what joined).
pub fn create_and_join(root: &Path, path: &str, pid: u32) -> std::io::Result<Vec<PathBuf>> {
    let rel = below_root(path)?;
    let mut dirs = Vec::new();
    for hierarchy in hierarchy_dirs(root) {
        let mut dir = hierarchy.clone();
        for part in rel.split('/').filter(|p| !p.is_empty()) {
            let parent = dir.clone();
            dir.push(part);
            match std::fs::create_dir(&dir) {
                Ok(()) => inherit_cpuset(&parent, &dir)?,
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(with_path(e, &dir)),
            }
        }
        let procs = dir.join("cgroup.procs");
        std::fs::write(&procs, pid.to_string()).map_err(|e| with_path(e, &procs))?;
        dirs.push(dir);
    }
    Ok(dirs)
}

/// A new v1 cpuset cgroup `dir` gets the CPUs and memory nodes of `parent` (nothing to do in
/// other hierarchies, whose directories have no such files).
fn inherit_cpuset(parent: &Path, dir: &Path) -> std::io::Result<()> {
    for file in ["cpuset.cpus", "cpuset.mems"] {
        let mine = dir.join(file);
        if !mine.exists() || dir.join("cgroup.controllers").exists() {
            // Not a v1 cpuset hierarchy (v2 cgroups inherit their effective sets).
            continue;
        }
        let current = std::fs::read_to_string(&mine).map_err(|e| with_path(e, &mine))?;
        if !current.trim().is_empty() {
            continue;
        }
        let from = parent.join(file);
        let value = std::fs::read_to_string(&from).map_err(|e| with_path(e, &from))?;
        std::fs::write(&mine, value.trim()).map_err(|e| with_path(e, &mine))?;
    }
    Ok(())
}

fn with_path(e: std::io::Error, path: &Path) -> std::io::Error {
    std::io::Error::new(e.kind(), format!("{}: {e}", path.display()))
}

/// The processes in cgroup `path` and the cgroups below it, as the first hierarchy under
/// `root` that has it lists them (every hierarchy holds a container's processes alike).
pub fn members(root: &Path, path: &str) -> Vec<i32> {
    let rel = path.trim_start_matches('/');
    let mut out = Vec::new();
    if let Some(dir) = hierarchy_dirs(root)
        .into_iter()
        .map(|h| h.join(rel))
        .find(|d| d.is_dir())
    {
        collect_members(&dir, &mut out);
    }
    out
}

fn collect_members(dir: &Path, out: &mut Vec<i32>) {
    let procs = std::fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default();
    out.extend(procs.lines().filter_map(|l| l.trim().parse::<i32>().ok()));
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                collect_members(&e.path(), out);
            }
        }
    }
}

/// Moves this process into the cgroups of process `pid`, in every hierarchy it is in that is
/// mounted here (v1, hybrid or v2): an exec's helper joining its container's init.
pub fn join_those_of(pid: i32) -> Result<(), String> {
    let cgroups = std::fs::read_to_string(format!("/proc/{pid}/cgroup"))
        .map_err(|e| format!("read the cgroups of {pid}: {e}"))?;
    let mounts = std::fs::read_to_string("/proc/self/mountinfo")
        .map_err(|e| format!("read mountinfo: {e}"))?;
    let me = std::process::id().to_string();
    for line in cgroups.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(_), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        let Some(mount) = hierarchy_mount(&mounts, controllers) else {
            // A hierarchy nobody mounted here (a named one of another tool): runc leaves it.
            continue;
        };
        let procs = Path::new(&mount)
            .join(path.trim_start_matches('/'))
            .join("cgroup.procs");
        std::fs::write(&procs, &me).map_err(|e| format!("join {}: {e}", procs.display()))?;
    }
    Ok(())
}

/// The mount point of the cgroup hierarchy with these controllers ("" for v2; "name=systemd").
fn hierarchy_mount(mountinfo: &str, controllers: &str) -> Option<String> {
    for line in mountinfo.lines() {
        let Some((left, right)) = line.split_once(" - ") else {
            continue;
        };
        let fields: Vec<&str> = left.split(' ').collect();
        let r: Vec<&str> = right.split(' ').collect();
        let (Some(point), Some(fstype), Some(opts)) = (fields.get(4), r.first(), r.get(2)) else {
            continue;
        };
        // Only whole hierarchies (root "/"), as mounted by the host.
        if fields.get(3) != Some(&"/") {
            continue;
        }
        if controllers.is_empty() {
            if *fstype == "cgroup2" {
                return Some(point.to_string());
            }
            continue;
        }
        if *fstype != "cgroup" {
            continue;
        }
        let opts: Vec<&str> = opts.split(',').collect();
        if controllers.split(',').all(|c| opts.contains(&c)) {
            return Some(point.to_string());
        }
    }
    None
}

/// `signal` to every process of cgroup `path` not in `done` (each then added to it); how many
/// there were. Each is signalled through a pidfd opened after its cgroups are read, so that
/// no reused pid is hit: if the process the pidfd holds still runs after its cgroups are
/// read, they were its own.
pub(super) fn signal_all(root: &Path, path: &str, signal: u32, done: &mut HashSet<i32>) -> usize {
    let fresh: Vec<i32> = members(root, path)
        .into_iter()
        .filter(|p| !done.contains(p))
        .collect();
    for &pid in &fresh {
        done.insert(pid);
        let Ok(fd) = Pidfd::open(pid as u32) else {
            continue;
        };
        let cgroups = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap_or_default();
        if fd.running() && cgroups.lines().any(|l| l.ends_with(path)) {
            let _ = fd.signal(signal);
        }
    }
    fresh.len()
}

/// `runc kill --all SIGKILL`: every process of cgroup `path` killed. runc freezes the cgroup
/// first so that none forks unseen; here the cgroup is read again until a reading finds no
/// process not killed already (a process forked before its parent died is found by the next
/// reading; a killed one leaves the list as it exits).
pub(super) fn kill_all(root: &Path, path: &str) {
    let mut killed = HashSet::new();
    for _ in 0..100 {
        if signal_all(root, path, libc::SIGKILL as u32, &mut killed) == 0 {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn touch(root: &Path, rel: &str) {
        let p = root.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, "").unwrap();
    }

    #[test]
    fn create_and_join_makes_every_level_in_every_hierarchy() {
        let root = tempfile::tempdir().unwrap();
        let r = root.path();
        touch(r, "cpuset/cgroup.procs");
        touch(r, "memory/cgroup.procs");
        touch(r, "memory/kubepods/cgroup.procs");
        let dirs = create_and_join(r, "/kubepods/pod1", 42).unwrap();
        assert_eq!(
            dirs,
            vec![
                r.join("cpuset/kubepods/pod1"),
                r.join("memory/kubepods/pod1")
            ]
        );
        for d in &dirs {
            assert_eq!(
                std::fs::read_to_string(d.join("cgroup.procs")).unwrap(),
                "42"
            );
        }
        assert!(create_and_join(r, "/", 1).is_err());
        assert!(create_and_join(r, "/a/../b", 1).is_err());
    }

    #[test]
    fn members_are_read_below_the_path_in_the_first_hierarchy_that_has_it() {
        let root = tempfile::tempdir().unwrap();
        let r = root.path();
        touch(r, "blkio/cgroup.procs");
        touch(r, "memory/cgroup.procs");
        std::fs::create_dir_all(r.join("memory/pod/c1/sub")).unwrap();
        std::fs::write(r.join("memory/pod/c1/cgroup.procs"), "10\n11\n").unwrap();
        std::fs::write(r.join("memory/pod/c1/sub/cgroup.procs"), "12\n").unwrap();
        let mut pids = members(r, "/pod/c1");
        pids.sort();
        assert_eq!(pids, vec![10, 11, 12]);
        assert!(members(r, "/pod/none").is_empty());
    }

    #[test]
    fn a_new_v1_cpuset_gets_its_parents_sets_and_a_filled_one_is_kept() {
        let root = tempfile::tempdir().unwrap();
        let parent = root.path();
        std::fs::write(parent.join("cpuset.cpus"), "0-1\n").unwrap();
        std::fs::write(parent.join("cpuset.mems"), "0\n").unwrap();
        // What the kernel gives a new cpuset directory: empty set files.
        let dir = parent.join("new");
        touch(&dir, "cpuset.cpus");
        touch(&dir, "cpuset.mems");
        inherit_cpuset(parent, &dir).unwrap();
        assert_eq!(
            std::fs::read_to_string(dir.join("cpuset.cpus")).unwrap(),
            "0-1"
        );
        assert_eq!(
            std::fs::read_to_string(dir.join("cpuset.mems")).unwrap(),
            "0"
        );
        std::fs::write(dir.join("cpuset.cpus"), "1").unwrap();
        inherit_cpuset(parent, &dir).unwrap();
        assert_eq!(
            std::fs::read_to_string(dir.join("cpuset.cpus")).unwrap(),
            "1"
        );
        // Another hierarchy's directory has no such files: nothing to do.
        let other = parent.join("other");
        std::fs::create_dir(&other).unwrap();
        inherit_cpuset(parent, &other).unwrap();
        assert!(!other.join("cpuset.cpus").exists());
    }

    const MOUNTINFO: &str = "\
30 23 0:26 / /sys/fs/cgroup ro,nosuid - tmpfs tmpfs ro,mode=755
31 30 0:27 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw,nsdelegate
32 30 0:28 / /sys/fs/cgroup/systemd rw - cgroup cgroup rw,xattr,name=systemd
33 30 0:29 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct
34 30 0:30 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory
35 30 0:30 /inner /elsewhere rw - cgroup cgroup rw,memory
";

    #[test]
    fn hierarchies_are_found_by_their_controllers() {
        let m = |c| hierarchy_mount(MOUNTINFO, c);
        assert_eq!(
            m("cpu,cpuacct").as_deref(),
            Some("/sys/fs/cgroup/cpu,cpuacct")
        );
        assert_eq!(m("memory").as_deref(), Some("/sys/fs/cgroup/memory"));
        assert_eq!(m("name=systemd").as_deref(), Some("/sys/fs/cgroup/systemd"));
        assert_eq!(m("").as_deref(), Some("/sys/fs/cgroup/unified"));
        assert_eq!(m("pids"), None);
    }
}
