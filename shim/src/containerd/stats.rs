//! Stats of a container as containerd's cgroup v1 `Metrics` (type `io.containerd.cgroups.v1.
//! Metrics`, which the CRI plugin decodes for ContainerStats), read from the cgroups of the
//! container's init process.

use containerd_shim_protos::cgroups::metrics::{
    CPUStat, CPUUsage, MemoryEntry, MemoryStat, Metrics, PidsStat, Throttle,
};
use containerd_shim_protos::protobuf::well_known_types::any::Any;
use containerd_shim_protos::protobuf::{Message, MessageField};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// The type URL containerd registers the cgroup v1 metrics under.
pub const METRICS_V1_TYPE_URL: &str = "io.containerd.cgroups.v1.Metrics";

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

/// The metrics of the cgroups `pid` is in, under the v1 hierarchy at `root`.
pub fn metrics(pid: u32, root: &Path) -> std::io::Result<Metrics> {
    let dirs = cgroup_dirs(pid, root)?;
    let mut m = Metrics::new();
    if let Some(dir) = dirs.get("memory") {
        m.memory = MessageField::some(memory(dir));
    }
    m.cpu = MessageField::some(cpu(dirs.get("cpuacct"), dirs.get("cpu")));
    if let Some(dir) = dirs.get("pids") {
        let mut p = PidsStat::new();
        p.current = read_u64(dir, "pids.current");
        // "max" does not parse: no limit, reported as 0 as containerd does.
        p.limit = read_u64(dir, "pids.max");
        m.pids = MessageField::some(p);
    }
    Ok(m)
}

/// [`metrics`] as the Any of a StatsResponse.
pub fn metrics_any(pid: u32, root: &Path) -> std::io::Result<Any> {
    let m = metrics(pid, root)?;
    let mut any = Any::new();
    any.type_url = METRICS_V1_TYPE_URL.to_string();
    any.value = m.write_to_bytes().map_err(std::io::Error::other)?;
    Ok(any)
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
        let m = metrics(std::process::id(), root).unwrap();
        assert!(m.memory.usage.usage > 0, "{m:?}");
        assert!(m.cpu.usage.total > 0, "{m:?}");
    }
}
