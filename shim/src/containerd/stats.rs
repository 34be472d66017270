//! Stats of a container as containerd's cgroup `Metrics` (types `io.containerd.cgroups.v1.
//! Metrics` and, on a unified hierarchy, `io.containerd.cgroups.v2.Metrics`, which the CRI plugin
//! decodes for ContainerStats), read from the cgroups of the container's init process.
//!
//! The cgroups are found once, while the init runs ([`CgroupDirs::of_pid`]), and kept: after the
//! init exits, until the Delete, containerd still asks (2.x's CRI polls every task each second,
//! and reads `oom_kill` when a container exits with status 137), and the container's cgroups
//! are still there to read, as runc's shim reads them.

use containerd_shim_protos::cgroups::metrics::{
    CPUStat, CPUUsage, MemoryEntry, MemoryOomControl, MemoryStat, Metrics, PidsStat, Throttle,
};
use containerd_shim_protos::cgroups_v2::metrics as v2;
use containerd_shim_protos::protobuf::well_known_types::any::Any;
use containerd_shim_protos::protobuf::{Message, MessageField};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// The type URLs containerd registers the cgroup metrics under.
pub const METRICS_V1_TYPE_URL: &str = "io.containerd.cgroups.v1.Metrics";
pub const METRICS_V2_TYPE_URL: &str = "io.containerd.cgroups.v2.Metrics";

/// Nanoseconds per USER_HZ tick (cpuacct.stat counts ticks of 1/100 s on Linux).
const NS_PER_TICK: u64 = 10_000_000;

/// The v1 hierarchy directory of each controller for `pid` (`/proc/PID/cgroup`).
fn cgroup_dirs(pid: u32, root: &Path) -> std::io::Result<HashMap<String, PathBuf>> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup"))?;
    let mut dirs = HashMap::new();
    for line in text.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(_), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        for controller in controllers.split(',').filter(|c| !c.is_empty()) {
            // A co-mounted hierarchy ("cpu,cpuacct") is mounted under its joined name.
            let dir = root.join(controllers).join(path.trim_start_matches('/'));
            dirs.insert(controller.to_string(), dir);
        }
    }
    Ok(dirs)
}

fn read_u64(dir: &Path, file: &str) -> u64 {
    std::fs::read_to_string(dir.join(file))
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0)
}

/// `key value` lines (memory.stat, cpu.stat, cpuacct.stat).
fn read_keyed(dir: &Path, file: &str) -> HashMap<String, u64> {
    std::fs::read_to_string(dir.join(file))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let (k, v) = l.split_once(' ')?;
            Some((k.to_string(), v.trim().parse().ok()?))
        })
        .collect()
}

fn memory(dir: &Path) -> MemoryStat {
    let stat = read_keyed(dir, "memory.stat");
    let get = |k: &str| stat.get(k).copied().unwrap_or(0);
    let mut m = MemoryStat::new();
    m.cache = get("cache");
    m.rss = get("rss");
    m.rss_huge = get("rss_huge");
    m.mapped_file = get("mapped_file");
    m.dirty = get("dirty");
    m.writeback = get("writeback");
    m.pg_fault = get("pgfault");
    m.pg_maj_fault = get("pgmajfault");
    m.inactive_anon = get("inactive_anon");
    m.active_anon = get("active_anon");
    m.inactive_file = get("inactive_file");
    m.active_file = get("active_file");
    m.unevictable = get("unevictable");
    m.hierarchical_memory_limit = get("hierarchical_memory_limit");
    m.total_cache = get("total_cache");
    m.total_rss = get("total_rss");
    m.total_mapped_file = get("total_mapped_file");
    m.total_inactive_anon = get("total_inactive_anon");
    m.total_active_anon = get("total_active_anon");
    m.total_inactive_file = get("total_inactive_file");
    m.total_active_file = get("total_active_file");
    m.total_unevictable = get("total_unevictable");
    let mut usage = MemoryEntry::new();
    usage.usage = read_u64(dir, "memory.usage_in_bytes");
    usage.limit = read_u64(dir, "memory.limit_in_bytes");
    usage.max = read_u64(dir, "memory.max_usage_in_bytes");
    usage.failcnt = read_u64(dir, "memory.failcnt");
    m.usage = MessageField::some(usage);
    m
}

fn cpu(acct: Option<&PathBuf>, cpu: Option<&PathBuf>) -> CPUStat {
    let mut usage = CPUUsage::new();
    if let Some(dir) = acct {
        usage.total = read_u64(dir, "cpuacct.usage");
        usage.per_cpu = std::fs::read_to_string(dir.join("cpuacct.usage_percpu"))
            .unwrap_or_default()
            .split_whitespace()
            .filter_map(|v| v.parse().ok())
            .collect();
        let stat = read_keyed(dir, "cpuacct.stat");
        usage.user = stat.get("user").copied().unwrap_or(0) * NS_PER_TICK;
        usage.kernel = stat.get("system").copied().unwrap_or(0) * NS_PER_TICK;
    }
    let mut throttling = Throttle::new();
    if let Some(dir) = cpu {
        let stat = read_keyed(dir, "cpu.stat");
        throttling.periods = stat.get("nr_periods").copied().unwrap_or(0);
        throttling.throttled_periods = stat.get("nr_throttled").copied().unwrap_or(0);
        throttling.throttled_time = stat.get("throttled_time").copied().unwrap_or(0);
    }
    let mut c = CPUStat::new();
    c.usage = MessageField::some(usage);
    c.throttling = MessageField::some(throttling);
    c
}

/// The metrics of the v1 cgroups `dirs` (controller to directory).
fn metrics(dirs: &HashMap<String, PathBuf>) -> Metrics {
    let mut m = Metrics::new();
    if let Some(dir) = dirs.get("memory") {
        m.memory = MessageField::some(memory(dir));
        let control = read_keyed(dir, "memory.oom_control");
        let mut oom = MemoryOomControl::new();
        oom.oom_kill_disable = control.get("oom_kill_disable").copied().unwrap_or(0);
        oom.under_oom = control.get("under_oom").copied().unwrap_or(0);
        oom.oom_kill = control.get("oom_kill").copied().unwrap_or(0);
        m.memory_oom_control = MessageField::some(oom);
    }
    m.cpu = MessageField::some(cpu(dirs.get("cpuacct"), dirs.get("cpu")));
    if let Some(dir) = dirs.get("pids") {
        let mut p = PidsStat::new();
        p.current = read_u64(dir, "pids.current");
        // "max" does not parse: no limit, reported as 0 as containerd does.
        p.limit = read_u64(dir, "pids.max");
        m.pids = MessageField::some(p);
    }
    m
}

/// A container's cgroups, as its init process was in them.
#[derive(Debug, Clone, PartialEq)]
pub enum CgroupDirs {
    /// Each controller's directory in the v1 hierarchies.
    V1(HashMap<String, PathBuf>),
    /// The directory in the unified hierarchy.
    Unified(PathBuf),
}

impl CgroupDirs {
    /// The cgroups of process `pid`: in the unified hierarchy when `root` is one, else v1's.
    pub fn of_pid(pid: u32, root: &Path) -> std::io::Result<CgroupDirs> {
        if root.join("cgroup.controllers").exists() {
            unified_dir(pid, root).map(CgroupDirs::Unified)
        } else {
            cgroup_dirs(pid, root).map(CgroupDirs::V1)
        }
    }

    /// Whether the cgroup (v1: the memory cgroup) is still there: removed, it has no metrics,
    /// only zeros.
    fn exists(&self) -> bool {
        match self {
            CgroupDirs::V1(dirs) => dirs.get("memory").is_none_or(|d| d.is_dir()),
            CgroupDirs::Unified(dir) => dir.is_dir(),
        }
    }

    /// The metrics as the Any of a StatsResponse; NotFound once the cgroup is gone.
    pub fn metrics_any(&self) -> std::io::Result<Any> {
        if !self.exists() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                "the container's cgroup is gone",
            ));
        }
        let mut any = Any::new();
        let value = match self {
            CgroupDirs::Unified(dir) => {
                any.type_url = METRICS_V2_TYPE_URL.to_string();
                metrics_v2(dir).write_to_bytes()
            }
            CgroupDirs::V1(dirs) => {
                any.type_url = METRICS_V1_TYPE_URL.to_string();
                metrics(dirs).write_to_bytes()
            }
        };
        any.value = value.map_err(std::io::Error::other)?;
        Ok(any)
    }
}

/// `pid`'s cgroup directory in the unified hierarchy at `root` (the `0::PATH` line).
fn unified_dir(pid: u32, root: &Path) -> std::io::Result<PathBuf> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup"))?;
    text.lines()
        .find_map(|l| l.strip_prefix("0::"))
        .map(|path| root.join(path.trim_start_matches('/')))
        .ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::NotFound,
                format!("process {pid} is in no unified cgroup"),
            )
        })
}

/// A cgroup v2 limit file: a number, or "max" (reported as u64::MAX, as containerd does).
fn read_limit(dir: &Path, file: &str) -> u64 {
    match std::fs::read_to_string(dir.join(file)) {
        Ok(s) if s.trim() == "max" => u64::MAX,
        Ok(s) => s.trim().parse().unwrap_or(0),
        Err(_) => 0,
    }
}

/// The cgroup v2 metrics of the cgroup directory `dir`.
pub fn metrics_v2(dir: &Path) -> v2::Metrics {
    let mut m = v2::Metrics::new();
    let stat = read_keyed(dir, "memory.stat");
    let get = |k: &str| stat.get(k).copied().unwrap_or(0);
    let mut mem = v2::MemoryStat::new();
    mem.anon = get("anon");
    mem.file = get("file");
    mem.kernel_stack = get("kernel_stack");
    mem.slab = get("slab");
    mem.sock = get("sock");
    mem.shmem = get("shmem");
    mem.file_mapped = get("file_mapped");
    mem.file_dirty = get("file_dirty");
    mem.file_writeback = get("file_writeback");
    mem.inactive_anon = get("inactive_anon");
    mem.active_anon = get("active_anon");
    mem.inactive_file = get("inactive_file");
    mem.active_file = get("active_file");
    mem.unevictable = get("unevictable");
    mem.pgfault = get("pgfault");
    mem.pgmajfault = get("pgmajfault");
    mem.usage = read_u64(dir, "memory.current");
    mem.usage_limit = read_limit(dir, "memory.max");
    mem.max_usage = read_u64(dir, "memory.peak");
    mem.swap_usage = read_u64(dir, "memory.swap.current");
    mem.swap_limit = read_limit(dir, "memory.swap.max");
    m.memory = MessageField::some(mem);
    let cpu_stat = read_keyed(dir, "cpu.stat");
    let get = |k: &str| cpu_stat.get(k).copied().unwrap_or(0);
    let mut cpu = v2::CPUStat::new();
    cpu.usage_usec = get("usage_usec");
    cpu.user_usec = get("user_usec");
    cpu.system_usec = get("system_usec");
    cpu.nr_periods = get("nr_periods");
    cpu.nr_throttled = get("nr_throttled");
    cpu.throttled_usec = get("throttled_usec");
    m.cpu = MessageField::some(cpu);
    let mut pids = v2::PidsStat::new();
    pids.current = read_u64(dir, "pids.current");
    pids.limit = read_u64(dir, "pids.max");
    m.pids = MessageField::some(pids);
    let events = read_keyed(dir, "memory.events");
    let get = |k: &str| events.get(k).copied().unwrap_or(0);
    let mut e = v2::MemoryEvents::new();
    e.low = get("low");
    e.high = get("high");
    e.max = get("max");
    e.oom = get("oom");
    e.oom_kill = get("oom_kill");
    m.memory_events = MessageField::some(e);
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_this_processs_memory_cgroup() {
        // The test's own process is in some memory cgroup on a v1 (or hybrid) host.
        let root = Path::new(peapod_host::cgroup::DEFAULT_ROOT);
        let dirs = cgroup_dirs(std::process::id(), root).unwrap();
        let Some(dir) = dirs.get("memory") else {
            // A pure cgroup v2 host has no v1 memory hierarchy: nothing of this to read.
            assert!(root.join("cgroup.controllers").exists());
            return;
        };
        assert!(dir.starts_with(root.join("memory")), "{}", dir.display());
        let m = metrics(&dirs);
        assert!(m.memory.usage.usage > 0, "{m:?}");
        assert!(m.cpu.usage.total > 0, "{m:?}");
        assert!(m.memory_oom_control.is_some(), "{m:?}");
        let any = CgroupDirs::of_pid(std::process::id(), root)
            .unwrap()
            .metrics_any()
            .unwrap();
        assert_eq!(any.type_url, METRICS_V1_TYPE_URL);
    }

    #[test]
    fn kept_cgroups_answer_until_they_are_removed() {
        let dir = tempfile::tempdir().unwrap();
        let memory = dir.path().join("memory/pod/c1");
        std::fs::create_dir_all(&memory).unwrap();
        std::fs::write(memory.join("memory.usage_in_bytes"), "4096\n").unwrap();
        std::fs::write(
            memory.join("memory.oom_control"),
            "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n",
        )
        .unwrap();
        let dirs = CgroupDirs::V1(HashMap::from([("memory".to_string(), memory.clone())]));
        let any = dirs.metrics_any().unwrap();
        let m = Metrics::parse_from_bytes(&any.value).unwrap();
        assert_eq!(m.memory.usage.usage, 4096);
        assert_eq!(
            m.memory_oom_control.oom_kill, 2,
            "what containerd 2.x reads at exit 137"
        );
        std::fs::remove_dir_all(&memory).unwrap();
        let err = dirs.metrics_any().unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::NotFound);
        let gone = CgroupDirs::Unified(dir.path().join("unified/gone"));
        assert_eq!(
            gone.metrics_any().unwrap_err().kind(),
            std::io::ErrorKind::NotFound
        );
    }

    #[test]
    fn reads_a_unified_cgroup_directory() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let write = |f: &str, s: &str| std::fs::write(d.join(f), s).unwrap();
        write("memory.current", "1048576\n");
        write("memory.max", "max\n");
        write("memory.stat", "anon 4096\nfile 8192\ninactive_file 1024\n");
        write(
            "cpu.stat",
            "usage_usec 1500\nuser_usec 1000\nsystem_usec 500\n",
        );
        write("pids.current", "3\n");
        write("pids.max", "max\n");
        write("memory.events", "low 0\nhigh 0\nmax 4\noom 1\noom_kill 1\n");
        let m = metrics_v2(d);
        assert_eq!((m.memory_events.max, m.memory_events.oom_kill), (4, 1));
        assert_eq!(m.memory.usage, 1 << 20);
        assert_eq!(m.memory.usage_limit, u64::MAX);
        assert_eq!(
            (m.memory.anon, m.memory.file, m.memory.inactive_file),
            (4096, 8192, 1024)
        );
        assert_eq!(
            (m.cpu.usage_usec, m.cpu.user_usec, m.cpu.system_usec),
            (1500, 1000, 500)
        );
        assert_eq!((m.pids.current, m.pids.limit), (3, 0));
    }
}
