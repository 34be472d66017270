//! Where a process's cgroups are, on cgroup v1, hybrid and v2 hosts.
//!
//! `/proc/<pid>/cgroup` has one `id:controllers:path` line per hierarchy: v1 hierarchies name
//! their controllers (`4:memory:/peapod/abc`, `3:cpu,cpuacct:/peapod/abc`), the v2 unified one
//! has none (`0::/peapod/abc`). Where those paths live depends on the host's layout:
//!
//! - v2 (unified): one hierarchy mounted at the cgroup root (`/sys/fs/cgroup`), which then has
//!   a `cgroup.controllers` file;
//! - hybrid: v1 controllers each mounted at `<root>/<controller>` (or a co-mount such as
//!   `<root>/cpu,cpuacct`) and a controller-less v2 hierarchy at `<root>/unified`;
//! - v1 only: the controllers and no unified hierarchy.
//!
//! Parsing is separate from reading so every layout is unit-tested with fixtures on any host.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// The usual cgroup mount.
pub const DEFAULT_ROOT: &str = "/sys/fs/cgroup";

/// A process's cgroups, from the text of `/proc/<pid>/cgroup`.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ProcCgroups {
    /// v1 controller name -> path (`cpuacct` -> `/peapod/abc`); a co-mounted line
    /// (`cpu,cpuacct`) gives one entry per controller.
    pub v1: HashMap<String, String>,
    /// The v2 (unified) path, from the `0::` line.
    pub unified: Option<String>,
}

impl ProcCgroups {
    /// Parses the text of `/proc/<pid>/cgroup`; malformed lines are skipped.
    pub fn parse(text: &str) -> ProcCgroups {
        let mut out = ProcCgroups::default();
        for line in text.lines() {
            let mut parts = line.splitn(3, ':');
            let (Some(_id), Some(controllers), Some(path)) =
                (parts.next(), parts.next(), parts.next())
            else {
                continue;
            };
            if controllers.is_empty() {
                out.unified = Some(path.to_string());
            } else {
                for c in controllers.split(',') {
                    out.v1.insert(c.to_string(), path.to_string());
                }
            }
        }
        out
    }

    /// Reads and parses `/proc/<pid>/cgroup`.
    pub fn of_pid(pid: u32) -> std::io::Result<ProcCgroups> {
        std::fs::read_to_string(format!("/proc/{pid}/cgroup")).map(|t| ProcCgroups::parse(&t))
    }

    /// The cgroup of `controller` on this host: the v1 hierarchy's path when the process has
    /// one for it, else the unified path. The flag says which ([`Hierarchy`]).
    pub fn controller(&self, controller: &str) -> Option<(Hierarchy, &str)> {
        if let Some(p) = self.v1.get(controller) {
            return Some((Hierarchy::V1, p));
        }
        self.unified.as_deref().map(|p| (Hierarchy::Unified, p))
    }
}

/// Which kind of hierarchy a cgroup path belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hierarchy {
    V1,
    Unified,
}

/// How the host mounts cgroups.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// v2 only, mounted at the root.
    Unified,
    /// v1 controllers plus a v2 hierarchy at `<root>/unified`.
    Hybrid,
    /// v1 controllers only.
    Legacy,
}

impl Layout {
    /// Detects the layout under the cgroup mount `root` (normally [`DEFAULT_ROOT`]).
    pub fn detect(root: &Path) -> Layout {
        if root.join("cgroup.controllers").exists() {
            Layout::Unified
        } else if root.join("unified").join("cgroup.procs").exists() {
            Layout::Hybrid
        } else {
            Layout::Legacy
        }
    }

    /// The directory of unified-hierarchy cgroup `path` under `root`, or `None` when the host
    /// has no unified hierarchy.
    pub fn unified_dir(self, root: &Path, path: &str) -> Option<PathBuf> {
        let rel = path.trim_start_matches('/');
        match self {
            Layout::Unified => Some(root.join(rel)),
            Layout::Hybrid => Some(root.join("unified").join(rel)),
            Layout::Legacy => None,
        }
    }
}

/// Whether the host runs the unified (v2-only) hierarchy.
pub fn is_unified(root: &Path) -> bool {
    Layout::detect(root) == Layout::Unified
}

/// The directory of v1 cgroup `path` of `controller` under `root`: the controller's own mount
/// or a co-mount with `cpu` (`cpu,cpuacct` as most distributions mount it, `cpuacct,cpu`).
/// `None` when no such hierarchy is mounted.
pub fn v1_dir(root: &Path, controller: &str, path: &str) -> Option<PathBuf> {
    let rel = path.trim_start_matches('/');
    [
        controller.to_string(),
        format!("cpu,{controller}"),
        format!("{controller},cpu"),
    ]
    .iter()
    .map(|m| root.join(m))
    .find(|d| d.is_dir())
    .map(|d| d.join(rel))
}

/// The directory of `controller`'s cgroup for a process with cgroups `cg` under `root`, on
/// any layout: its v1 hierarchy when it has one, else its unified cgroup.
pub fn controller_dir(root: &Path, cg: &ProcCgroups, controller: &str) -> Option<PathBuf> {
    match cg.controller(controller)? {
        (Hierarchy::V1, path) => v1_dir(root, controller, path),
        (Hierarchy::Unified, path) => Layout::detect(root).unified_dir(root, path),
    }
}

/// The directory of every mounted hierarchy under `root`: the root itself on a unified host,
/// else each v1 controller mount (a co-mount and the links to it once) and a hybrid host's
/// `unified`. A directory counts when it has `cgroup.procs`.
pub fn hierarchy_dirs(root: &Path) -> Vec<PathBuf> {
    if is_unified(root) {
        return vec![root.to_path_buf()];
    }
    let mut seen = std::collections::HashSet::new();
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(root) else {
        return out;
    };
    let mut dirs: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
    dirs.sort();
    for dir in dirs {
        if !dir.join("cgroup.procs").exists() {
            continue;
        }
        let real = std::fs::canonicalize(&dir).unwrap_or_else(|_| dir.clone());
        if seen.insert(real) {
            out.push(dir);
        }
    }
    out
}

/// Writes this process into the cgroup it is already in, in one hierarchy: a move that
/// changes nothing, made for its side effect on the kernel's timing.
///
/// Every move of a process into a cgroup (runc joining a container's init, the pause
/// helper joining its pod's cgroup) first takes the kernel's cgroup threadgroup lock for
/// writing, which waits one RCU grace period for the lock's readers to switch to their slow
/// path (5-15 ms on a 2-CPU VM) unless a move happened in the last few tens of milliseconds.
/// A call that is about to move a process runs this beside its other work, so that the
/// grace period passes while the mover starts up instead of after. The lock is global (all
/// hierarchies, v1 and v2), so one hierarchy is enough; even a refused write (a v2 cgroup
/// with controllers enabled for its children) took the lock first.
pub fn rejoin_own_cgroup(root: &Path) -> std::io::Result<()> {
    let pid = std::process::id();
    let own = ProcCgroups::of_pid(pid)?;
    let dir = match (Layout::detect(root), own.unified.as_deref()) {
        (Layout::Unified, Some(path)) => Layout::Unified.unified_dir(root, path),
        _ => ["pids", "cpu", "memory"]
            .iter()
            .find_map(|c| own.v1.get(*c).and_then(|p| v1_dir(root, c, p))),
    };
    let dir = dir.ok_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::NotFound,
            "this process is in no cgroup hierarchy under the cgroup root",
        )
    })?;
    std::fs::write(dir.join("cgroup.procs"), pid.to_string())
}

/// Cgroup `path` relative to a hierarchy's root, refused when it is the root itself or leaves
/// it (`..`, `.`): what a cgroup made, joined or removed for a container must be below.
pub fn below_root(path: &str) -> std::io::Result<&str> {
    let rel = path.trim_start_matches('/');
    if rel.is_empty() || rel.split('/').any(|c| c == ".." || c == ".") {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("not a cgroup below the root: {path:?}"),
        ));
    }
    Ok(rel)
}

/// How long [`remove`] waits for the processes it killed to leave a cgroup.
const EMPTY_WITHIN: std::time::Duration = std::time::Duration::from_secs(2);

/// Removes cgroup `path` (and any cgroup below it) from every hierarchy under `root`, killing
/// what still runs in it first. A path no hierarchy has is success. This is what a runtime
/// `delete` does, for a container the runtime never finished making: a `create` killed half-way
/// has made its cgroups but not yet the state that would let `delete` find them.
pub fn remove(root: &Path, path: &str) -> std::io::Result<()> {
    let rel = below_root(path)?;
    for hierarchy in hierarchy_dirs(root) {
        remove_tree(&hierarchy.join(rel))?;
    }
    Ok(())
}

/// Depth first: a cgroup directory can only go once its children have.
fn remove_tree(dir: &Path) -> std::io::Result<()> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    for e in entries.flatten() {
        if e.file_type().is_ok_and(|t| t.is_dir()) {
            remove_tree(&e.path())?;
        }
    }
    let deadline = std::time::Instant::now() + EMPTY_WITHIN;
    loop {
        kill_members(dir);
        match std::fs::remove_dir(dir) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            // EBUSY: a member has not finished exiting yet.
            Err(_) if std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            Err(e) => return Err(e),
        }
    }
}

fn kill_members(dir: &Path) {
    let procs = std::fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default();
    for pid in procs.lines().filter_map(|l| l.trim().parse::<i32>().ok()) {
        if pid > 0 {
            // SAFETY: kill has no memory-safety preconditions.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const V1: &str = "12:pids:/peapod/c1\n7:cpu,cpuacct:/peapod/c1\n4:memory:/peapod/c1\n1:name=systemd:/init.scope\n";
    const HYBRID: &str = "12:pids:/peapod/c1\n7:cpu,cpuacct:/peapod/c1\n4:memory:/peapod/c1\n1:name=systemd:/x\n0::/peapod/c1\n";
    const V2: &str = "0::/kubepods.slice/cri-abc.scope\n";

    fn touch(root: &Path, rel: &str) {
        let p = root.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, "").unwrap();
    }

    #[test]
    fn parses_v1_hybrid_and_v2_proc_cgroup() {
        let v1 = ProcCgroups::parse(V1);
        assert_eq!(v1.v1.get("memory").map(String::as_str), Some("/peapod/c1"));
        assert_eq!(v1.v1.get("cpu").map(String::as_str), Some("/peapod/c1"));
        assert_eq!(v1.v1.get("cpuacct").map(String::as_str), Some("/peapod/c1"));
        assert_eq!(
            v1.v1.get("name=systemd").map(String::as_str),
            Some("/init.scope")
        );
        assert_eq!(v1.unified, None);

        let hybrid = ProcCgroups::parse(HYBRID);
        assert_eq!(hybrid.v1.len(), 5);
        assert_eq!(hybrid.unified.as_deref(), Some("/peapod/c1"));

        let v2 = ProcCgroups::parse(V2);
        assert!(v2.v1.is_empty());
        assert_eq!(v2.unified.as_deref(), Some("/kubepods.slice/cri-abc.scope"));

        assert_eq!(ProcCgroups::parse("garbage\n\n1:x"), ProcCgroups::default());
    }

    #[test]
    fn a_controller_prefers_its_v1_hierarchy() {
        let hybrid = ProcCgroups::parse(HYBRID);
        assert_eq!(
            hybrid.controller("memory"),
            Some((Hierarchy::V1, "/peapod/c1"))
        );
        // No v1 `io` hierarchy: the unified cgroup answers.
        assert_eq!(
            hybrid.controller("io"),
            Some((Hierarchy::Unified, "/peapod/c1"))
        );
        let v2 = ProcCgroups::parse(V2);
        assert_eq!(
            v2.controller("memory"),
            Some((Hierarchy::Unified, "/kubepods.slice/cri-abc.scope"))
        );
        assert_eq!(ProcCgroups::parse(V1).controller("io"), None);
    }

    #[test]
    fn hierarchies_of_each_layout() {
        let unified = tempfile::tempdir().unwrap();
        touch(unified.path(), "cgroup.controllers");
        touch(unified.path(), "cgroup.procs");
        assert_eq!(
            hierarchy_dirs(unified.path()),
            vec![unified.path().to_path_buf()]
        );

        let hybrid = tempfile::tempdir().unwrap();
        touch(hybrid.path(), "unified/cgroup.procs");
        touch(hybrid.path(), "memory/cgroup.procs");
        touch(hybrid.path(), "cpu,cpuacct/cgroup.procs");
        std::os::unix::fs::symlink("cpu,cpuacct", hybrid.path().join("cpu")).unwrap();
        std::fs::create_dir(hybrid.path().join("not-a-hierarchy")).unwrap();
        let names: Vec<_> = hierarchy_dirs(hybrid.path())
            .iter()
            .map(|d| d.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        // The link to the co-mount is the same hierarchy: once.
        assert_eq!(names, ["cpu", "memory", "unified"]);
    }

    #[test]
    fn remove_refuses_paths_that_leave_the_hierarchy() {
        let root = tempfile::tempdir().unwrap();
        for bad in ["", "/", "/a/../../etc", "./x"] {
            assert!(remove(root.path(), bad).is_err(), "{bad:?}");
        }
        // A path no hierarchy has is removed already.
        touch(root.path(), "memory/cgroup.procs");
        assert!(remove(root.path(), "/peapod/gone").is_ok());
    }

    #[test]
    fn detects_each_layout_and_finds_directories() {
        let unified = tempfile::tempdir().unwrap();
        touch(unified.path(), "cgroup.controllers");
        assert_eq!(Layout::detect(unified.path()), Layout::Unified);
        assert!(is_unified(unified.path()));
        let cg = ProcCgroups::parse(V2);
        assert_eq!(
            controller_dir(unified.path(), &cg, "memory"),
            Some(unified.path().join("kubepods.slice/cri-abc.scope"))
        );

        let hybrid = tempfile::tempdir().unwrap();
        touch(hybrid.path(), "unified/cgroup.procs");
        touch(hybrid.path(), "memory/cgroup.procs");
        touch(hybrid.path(), "cpu,cpuacct/cgroup.procs");
        assert_eq!(Layout::detect(hybrid.path()), Layout::Hybrid);
        assert!(!is_unified(hybrid.path()));
        let cg = ProcCgroups::parse(HYBRID);
        assert_eq!(
            controller_dir(hybrid.path(), &cg, "memory"),
            Some(hybrid.path().join("memory/peapod/c1"))
        );
        assert_eq!(
            controller_dir(hybrid.path(), &cg, "cpuacct"),
            Some(hybrid.path().join("cpu,cpuacct/peapod/c1"))
        );
        assert_eq!(
            controller_dir(hybrid.path(), &cg, "io"),
            Some(hybrid.path().join("unified/peapod/c1"))
        );
        // pids is in /proc/<pid>/cgroup but not mounted here.
        assert_eq!(controller_dir(hybrid.path(), &cg, "pids"), None);

        let legacy = tempfile::tempdir().unwrap();
        touch(legacy.path(), "memory/cgroup.procs");
        assert_eq!(Layout::detect(legacy.path()), Layout::Legacy);
        assert_eq!(Layout::Legacy.unified_dir(legacy.path(), "/x"), None);
        assert_eq!(
            v1_dir(legacy.path(), "memory", "/peapod/c1"),
            Some(legacy.path().join("memory/peapod/c1"))
        );
    }

    #[test]
    fn rejoin_writes_this_process_into_its_own_cgroup_of_one_hierarchy() {
        let pid = std::process::id();
        let own = ProcCgroups::of_pid(pid).unwrap();
        let root = tempfile::tempdir().unwrap();
        let r = root.path();
        // The host's own layout, mirrored: a v1 hierarchy the process is in, or unified.
        let expected = match ["pids", "cpu", "memory"]
            .iter()
            .find_map(|c| own.v1.get(*c).map(|p| (c, p)))
        {
            Some((c, path)) => r.join(c).join(path.trim_start_matches('/')),
            None => {
                touch(r, "cgroup.controllers");
                r.join(own.unified.as_deref().unwrap().trim_start_matches('/'))
            }
        };
        std::fs::create_dir_all(&expected).unwrap();
        rejoin_own_cgroup(r).unwrap();
        assert_eq!(
            std::fs::read_to_string(expected.join("cgroup.procs")).unwrap(),
            pid.to_string()
        );
        // A root with no hierarchy of this process is an error, not a write elsewhere.
        let empty = tempfile::tempdir().unwrap();
        assert!(rejoin_own_cgroup(empty.path()).is_err());
    }

    #[test]
    fn rejoin_on_the_real_host_moves_nothing() {
        let before = std::fs::read_to_string("/proc/self/cgroup").unwrap();
        rejoin_own_cgroup(Path::new(DEFAULT_ROOT)).expect("the tests run as root");
        assert_eq!(
            std::fs::read_to_string("/proc/self/cgroup").unwrap(),
            before
        );
    }

    #[test]
    fn reads_this_process() {
        // Every Linux process is in some cgroup; the parse of the real file is not empty.
        let cg = ProcCgroups::of_pid(std::process::id()).unwrap();
        assert!(cg.unified.is_some() || !cg.v1.is_empty());
    }
}
