//! What the supervisor knows about its node, resolved from the daemon's `[pods]` table.

use crate::resources::Amounts;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Debug, Clone)]
pub struct Settings {
    /// `<root>/pods`: records, volumes and logs of applied pods.
    pub pods_dir: PathBuf,
    pub node_name: String,
    /// Always holds kubernetes.io/hostname, kubernetes.io/os and kubernetes.io/arch.
    pub node_labels: BTreeMap<String, String>,
    pub allocatable: Amounts,
    /// The node's memory capacity, for Burstable oom_score_adj.
    pub memory_capacity: i64,
    /// Absolute cgroup path of `kubepods`, e.g. "/kubepods".
    pub cgroup_parent: String,
    /// How pod cgroups are made: directories under the cgroup mount, or systemd slices (the
    /// daemon's cgroup driver).
    pub cgroups: crate::cgroup::PodCgroups,
    /// First restart delay; doubles up to 30 times this (10 s → 5 min by default).
    pub backoff_base: Duration,
    /// How often each pod is reconciled when nothing wakes it.
    pub sync_period: Duration,
    /// The lowest oom_score_adj this daemon can give (its own without CAP_SYS_RESOURCE).
    pub oom_score_adj_floor: i64,
    pub host_ip: String,
}

impl Settings {
    /// The labels every node has, plus `extra` (which may override none of them).
    pub fn node_labels(
        node_name: &str,
        extra: &BTreeMap<String, String>,
    ) -> BTreeMap<String, String> {
        let mut l = extra.clone();
        l.insert("kubernetes.io/hostname".into(), node_name.into());
        l.insert("kubernetes.io/os".into(), "linux".into());
        let arch = match std::env::consts::ARCH {
            "x86_64" => "amd64",
            "aarch64" => "arm64",
            other => other,
        };
        l.insert("kubernetes.io/arch".into(), arch.into());
        l
    }

    pub fn max_backoff(&self) -> Duration {
        self.backoff_base * 30
    }
}

/// The machine's hostname, lower-cased (a node name).
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_lowercase())
        .unwrap_or_else(|_| "localhost".into())
}

/// Online CPUs in millicores.
pub fn machine_cpu_milli() -> i64 {
    std::thread::available_parallelism()
        .map(|n| n.get() as i64 * 1000)
        .unwrap_or(1000)
}

/// MemTotal in bytes.
pub fn machine_memory() -> i64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("MemTotal:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<i64>().ok())
        })
        .map(|kb| kb * 1024)
        .unwrap_or(1 << 30)
}

/// Without CAP_SYS_RESOURCE a process cannot lower oom_score_adj below the daemon's own: the
/// floor is that value; with it, -1000.
pub fn oom_score_adj_floor() -> i64 {
    let cap_eff = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("CapEff:"))
                .and_then(|l| u64::from_str_radix(l[7..].trim(), 16).ok())
        })
        .unwrap_or(0);
    const CAP_SYS_RESOURCE: u64 = 24;
    if cap_eff & (1 << CAP_SYS_RESOURCE) != 0 {
        return -1000;
    }
    let own = std::fs::read_to_string("/proc/self/oom_score_adj")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0);
    tracing::info!(
        floor = own,
        "no CAP_SYS_RESOURCE: pod containers' oom_score_adj is raised to the daemon's own at least"
    );
    own
}

/// The first IPv4 address of an interface that is up and not loopback; 127.0.0.1 without one.
pub fn host_ip() -> String {
    let mut best = None;
    // SAFETY: getifaddrs allocates a list that we walk read-only and free once.
    unsafe {
        let mut addrs: *mut libc::ifaddrs = std::ptr::null_mut();
        if libc::getifaddrs(&mut addrs) == 0 {
            let mut p = addrs;
            while !p.is_null() {
                let a = &*p;
                let up = a.ifa_flags & (libc::IFF_UP as u32) != 0;
                let lo = a.ifa_flags & (libc::IFF_LOOPBACK as u32) != 0;
                if up
                    && !lo
                    && !a.ifa_addr.is_null()
                    && i32::from((*a.ifa_addr).sa_family) == libc::AF_INET
                {
                    let sin = &*(a.ifa_addr as *const libc::sockaddr_in);
                    let ip = std::net::Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr));
                    best.get_or_insert(ip.to_string());
                }
                p = a.ifa_next;
            }
            libc::freeifaddrs(addrs);
        }
    }
    best.unwrap_or_else(|| "127.0.0.1".into())
}
