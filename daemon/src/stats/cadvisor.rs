//! The figures cAdvisor exports beyond what the CRI stats messages carry (CPU user/system and
//! throttling, memory cache/mapped/kernel/swap/failcnt, block I/O, threads, file descriptors,
//! sockets, OOM kills), read from a container's cgroups and its processes' `/proc` entries for
//! ListPodSandboxMetrics. cgroup v1 and v2; the parsers are pure and tested on fixture text.

use super::cgroup::parse_flat_keyed;
use peapod_host::cgroup::{controller_dir, ProcCgroups};
use std::path::Path;

/// USER_HZ: the unit of cpuacct.stat (100 on every Linux architecture peapod runs on).
const USER_HZ: u64 = 100;

#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Extra {
    pub cpu_user_seconds: Option<u64>,
    pub cpu_system_seconds: Option<u64>,
    pub cfs_periods: Option<u64>,
    pub cfs_throttled_periods: Option<u64>,
    pub cfs_throttled_seconds: Option<u64>,
    pub memory_cache: Option<u64>,
    pub memory_rss: Option<u64>,
    pub memory_mapped_file: Option<u64>,
    pub memory_swap: Option<u64>,
    pub memory_kernel: Option<u64>,
    pub memory_failcnt: Option<u64>,
    pub memory_max_usage: Option<u64>,
    pub oom_kills: Option<u64>,
    pub io_read_bytes: Option<u64>,
    pub io_write_bytes: Option<u64>,
    pub io_reads: Option<u64>,
    pub io_writes: Option<u64>,
    pub threads: Option<u64>,
    pub threads_max: Option<u64>,
    pub file_descriptors: Option<u64>,
    pub sockets: Option<u64>,
}

fn read(path: &Path) -> Option<String> {
    std::fs::read_to_string(path).ok()
}

fn number(path: &Path) -> Option<u64> {
    read(path)?.trim().parse().ok()
}

/// `cpu.stat` of v1 (`nr_periods`, `nr_throttled`, `throttled_time` in ns) or v2
/// (`nr_periods`, `nr_throttled`, `throttled_usec`, `user_usec`, `system_usec`).
pub fn apply_cpu_stat(text: &str, e: &mut Extra) {
    let s = parse_flat_keyed(text);
    e.cfs_periods = s.get("nr_periods").copied();
    e.cfs_throttled_periods = s.get("nr_throttled").copied();
    if let Some(ns) = s.get("throttled_time") {
        e.cfs_throttled_seconds = Some(ns / 1_000_000_000);
    }
    if let Some(us) = s.get("throttled_usec") {
        e.cfs_throttled_seconds = Some(us / 1_000_000);
    }
    if let Some(us) = s.get("user_usec") {
        e.cpu_user_seconds = Some(us / 1_000_000);
    }
    if let Some(us) = s.get("system_usec") {
        e.cpu_system_seconds = Some(us / 1_000_000);
    }
}

/// v1 `cpuacct.stat`: `user` and `system` in USER_HZ ticks.
pub fn apply_cpuacct_stat(text: &str, e: &mut Extra) {
    let s = parse_flat_keyed(text);
    e.cpu_user_seconds = s.get("user").map(|t| t / USER_HZ);
    e.cpu_system_seconds = s.get("system").map(|t| t / USER_HZ);
}

/// v1 `memory.stat` (hierarchical `total_*` figures, as cAdvisor reads them).
pub fn apply_memory_stat_v1(text: &str, e: &mut Extra) {
    let s = parse_flat_keyed(text);
    e.memory_cache = s.get("total_cache").copied();
    e.memory_rss = s.get("total_rss").copied();
    e.memory_mapped_file = s.get("total_mapped_file").copied();
    e.memory_swap = s.get("total_swap").copied().or(Some(0));
}

/// v2 `memory.stat`.
pub fn apply_memory_stat_v2(text: &str, e: &mut Extra) {
    let s = parse_flat_keyed(text);
    e.memory_cache = s.get("file").copied();
    e.memory_rss = s.get("anon").copied();
    e.memory_mapped_file = s.get("file_mapped").copied();
    e.memory_kernel = s.get("kernel").copied().or_else(|| {
        let parts = ["kernel_stack", "slab", "sock", "percpu", "pagetables"];
        let v: Vec<u64> = parts.iter().filter_map(|k| s.get(k).copied()).collect();
        (!v.is_empty()).then(|| v.iter().sum())
    });
}

/// v1 `blkio.throttle.io_service_bytes_recursive` / `io_serviced_recursive`: the `Total` of
/// each device's `Read` and `Write` lines, summed over devices.
pub fn blkio_v1_totals(text: &str) -> (u64, u64) {
    let (mut read, mut write) = (0, 0);
    for line in text.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() != 3 {
            continue;
        }
        let n: u64 = f[2].parse().unwrap_or(0);
        match f[1] {
            "Read" => read += n,
            "Write" => write += n,
            _ => {}
        }
    }
    (read, write)
}

/// v2 `io.stat`: `MAJ:MIN rbytes=.. wbytes=.. rios=.. wios=..`, summed over devices.
pub fn io_stat_v2_totals(text: &str) -> [u64; 4] {
    let mut t = [0u64; 4];
    for line in text.lines() {
        for kv in line.split_whitespace().skip(1) {
            let Some((k, v)) = kv.split_once('=') else {
                continue;
            };
            let v: u64 = v.parse().unwrap_or(0);
            match k {
                "rbytes" => t[0] += v,
                "wbytes" => t[1] += v,
                "rios" => t[2] += v,
                "wios" => t[3] += v,
                _ => {}
            }
        }
    }
    t
}

/// `Threads:` of a `/proc/<pid>/status`.
pub fn threads_of_status(text: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .and_then(|v| v.trim().parse().ok())
}

/// One interface of `/proc/<pid>/net/dev`.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct NetDev {
    pub name: String,
    pub rx_bytes: u64,
    pub rx_packets: u64,
    pub rx_errors: u64,
    pub rx_dropped: u64,
    pub tx_bytes: u64,
    pub tx_packets: u64,
    pub tx_errors: u64,
    pub tx_dropped: u64,
}

/// The interfaces of a network namespace but loopback, from `/proc/<pid>/net/dev` text.
pub fn parse_net_dev(text: &str) -> Vec<NetDev> {
    text.lines()
        .skip(2)
        .filter_map(|l| {
            let (name, rest) = l.split_once(':')?;
            let f: Vec<u64> = rest
                .split_whitespace()
                .filter_map(|n| n.parse().ok())
                .collect();
            (f.len() >= 16).then(|| NetDev {
                name: name.trim().to_string(),
                rx_bytes: f[0],
                rx_packets: f[1],
                rx_errors: f[2],
                rx_dropped: f[3],
                tx_bytes: f[8],
                tx_packets: f[9],
                tx_errors: f[10],
                tx_dropped: f[11],
            })
        })
        .filter(|i| i.name != "lo")
        .collect()
}

/// Size and inodes of the filesystem holding `path`.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct FsInfo {
    pub capacity_bytes: u64,
    pub inodes_total: u64,
    pub inodes_free: u64,
}

pub fn fs_info(path: &Path) -> Option<FsInfo> {
    let v = nix::sys::statvfs::statvfs(path).ok()?;
    Some(FsInfo {
        capacity_bytes: v.blocks() as u64 * v.fragment_size() as u64,
        inodes_total: v.files() as u64,
        inodes_free: v.files_free() as u64,
    })
}

/// Reads everything for the container whose init process is `pid`.
pub fn read_container(root: &Path, pid: u32) -> Extra {
    let mut e = Extra::default();
    let Ok(cg) = ProcCgroups::of_pid(pid) else {
        return e;
    };
    let unified = peapod_host::cgroup::is_unified(root);
    if let Some(dir) = controller_dir(root, &cg, "cpu") {
        if let Some(t) = read(&dir.join("cpu.stat")) {
            apply_cpu_stat(&t, &mut e);
        }
    }
    if !unified {
        if let Some(dir) = controller_dir(root, &cg, "cpuacct") {
            if let Some(t) = read(&dir.join("cpuacct.stat")) {
                apply_cpuacct_stat(&t, &mut e);
            }
        }
    }
    if let Some(dir) = controller_dir(root, &cg, "memory") {
        if unified {
            if let Some(t) = read(&dir.join("memory.stat")) {
                apply_memory_stat_v2(&t, &mut e);
            }
            e.memory_swap = number(&dir.join("memory.swap.current")).or(Some(0));
            e.memory_max_usage = number(&dir.join("memory.peak"));
            if let Some(t) = read(&dir.join("memory.events")) {
                let s = parse_flat_keyed(&t);
                e.memory_failcnt = s.get("max").copied();
                e.oom_kills = s.get("oom_kill").copied();
            }
        } else {
            if let Some(t) = read(&dir.join("memory.stat")) {
                apply_memory_stat_v1(&t, &mut e);
            }
            e.memory_kernel = number(&dir.join("memory.kmem.usage_in_bytes"));
            e.memory_failcnt = number(&dir.join("memory.failcnt"));
            e.memory_max_usage = number(&dir.join("memory.max_usage_in_bytes"));
            if let Some(t) = read(&dir.join("memory.oom_control")) {
                e.oom_kills = parse_flat_keyed(&t).get("oom_kill").copied().or(Some(0));
            }
        }
    }
    if unified {
        if let Some(dir) = controller_dir(root, &cg, "io") {
            if let Some(t) = read(&dir.join("io.stat")) {
                let [rb, wb, r, w] = io_stat_v2_totals(&t);
                (e.io_read_bytes, e.io_write_bytes) = (Some(rb), Some(wb));
                (e.io_reads, e.io_writes) = (Some(r), Some(w));
            }
        }
    } else if let Some(dir) = controller_dir(root, &cg, "blkio") {
        if let Some(t) = read(&dir.join("blkio.throttle.io_service_bytes_recursive")) {
            let (r, w) = blkio_v1_totals(&t);
            (e.io_read_bytes, e.io_write_bytes) = (Some(r), Some(w));
        }
        if let Some(t) = read(&dir.join("blkio.throttle.io_serviced_recursive")) {
            let (r, w) = blkio_v1_totals(&t);
            (e.io_reads, e.io_writes) = (Some(r), Some(w));
        }
    }
    if let Some(dir) = controller_dir(root, &cg, "pids") {
        // "max" is no limit: cAdvisor reports 0, "infinity".
        e.threads_max = read(&dir.join("pids.max")).map(|t| t.trim().parse().unwrap_or(0));
        if let Some(procs) = read(&dir.join("cgroup.procs")) {
            let (mut threads, mut fds, mut sockets) = (0u64, 0u64, 0u64);
            for p in procs.lines().filter(|l| !l.is_empty()) {
                if let Some(t) = read(Path::new(&format!("/proc/{p}/status"))) {
                    threads += threads_of_status(&t).unwrap_or(0);
                }
                if let Ok(d) = std::fs::read_dir(format!("/proc/{p}/fd")) {
                    for fd in d.flatten() {
                        fds += 1;
                        if std::fs::read_link(fd.path())
                            .is_ok_and(|l| l.to_string_lossy().starts_with("socket:"))
                        {
                            sockets += 1;
                        }
                    }
                }
            }
            (e.threads, e.file_descriptors, e.sockets) = (Some(threads), Some(fds), Some(sockets));
        }
    }
    e
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v1_files() {
        let mut e = Extra::default();
        apply_cpu_stat(
            "nr_periods 40\nnr_throttled 3\nthrottled_time 2500000000\n",
            &mut e,
        );
        apply_cpuacct_stat("user 250\nsystem 120\n", &mut e);
        apply_memory_stat_v1(
            "cache 1\nrss 2\ntotal_cache 4096\ntotal_rss 8192\ntotal_mapped_file 512\n",
            &mut e,
        );
        assert_eq!(
            (
                e.cfs_periods,
                e.cfs_throttled_periods,
                e.cfs_throttled_seconds
            ),
            (Some(40), Some(3), Some(2))
        );
        assert_eq!(
            (e.cpu_user_seconds, e.cpu_system_seconds),
            (Some(2), Some(1))
        );
        assert_eq!(
            (
                e.memory_cache,
                e.memory_rss,
                e.memory_mapped_file,
                e.memory_swap
            ),
            (Some(4096), Some(8192), Some(512), Some(0))
        );
        let blkio =
            "8:0 Read 100\n8:0 Write 50\n8:0 Total 150\n8:16 Read 1\n8:16 Write 2\nTotal 153\n";
        assert_eq!(blkio_v1_totals(blkio), (101, 52));
    }

    #[test]
    fn v2_files() {
        let mut e = Extra::default();
        apply_cpu_stat(
            "usage_usec 9000000\nuser_usec 6000000\nsystem_usec 3000000\nnr_periods 7\nnr_throttled 1\nthrottled_usec 2000000\n",
            &mut e,
        );
        apply_memory_stat_v2("anon 100\nfile 200\nfile_mapped 30\nkernel 40\n", &mut e);
        assert_eq!(
            (e.cpu_user_seconds, e.cpu_system_seconds),
            (Some(6), Some(3))
        );
        assert_eq!(e.cfs_throttled_seconds, Some(2));
        assert_eq!(
            (
                e.memory_rss,
                e.memory_cache,
                e.memory_mapped_file,
                e.memory_kernel
            ),
            (Some(100), Some(200), Some(30), Some(40))
        );
        let mut e = Extra::default();
        apply_memory_stat_v2("anon 1\nkernel_stack 2\nslab 3\n", &mut e);
        assert_eq!(e.memory_kernel, Some(5));
        let io = "8:0 rbytes=10 wbytes=20 rios=1 wios=2 dbytes=0 dios=0\n8:16 rbytes=5 wbytes=0 rios=1 wios=0\n";
        assert_eq!(io_stat_v2_totals(io), [15, 20, 2, 2]);
    }

    #[test]
    fn net_dev_has_packets_and_drops() {
        let text = "Inter-|   Receive |  Transmit\n face |bytes packets errs drop fifo frame compressed multicast|bytes packets errs drop fifo colls carrier compressed\n    lo: 100 1 0 0 0 0 0 0 100 1 0 0 0 0 0 0\n  eth0: 5000 40 2 3 0 0 0 0 3000 30 1 4 0 0 0 0\n";
        let ifs = parse_net_dev(text);
        assert_eq!(
            ifs,
            vec![NetDev {
                name: "eth0".into(),
                rx_bytes: 5000,
                rx_packets: 40,
                rx_errors: 2,
                rx_dropped: 3,
                tx_bytes: 3000,
                tx_packets: 30,
                tx_errors: 1,
                tx_dropped: 4,
            }]
        );
    }

    #[test]
    fn fs_info_of_a_real_filesystem() {
        let fs = fs_info(Path::new("/")).expect("statvfs /");
        assert!(
            fs.capacity_bytes > 0 && fs.inodes_total >= fs.inodes_free,
            "{fs:?}"
        );
        assert!(fs_info(Path::new("/no/such/dir")).is_none());
    }

    #[test]
    fn proc_status_threads() {
        assert_eq!(
            threads_of_status("Name:\tsh\nThreads:\t3\nVmRSS: 1 kB\n"),
            Some(3)
        );
        assert_eq!(threads_of_status("Name:\tsh\n"), None);
    }
}
