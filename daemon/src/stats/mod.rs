//! ContainerStats, ListContainerStats, PodSandboxStats, ListPodSandboxStats.
//!
//! CPU and memory come from the cgroups of the container's process (see [`cgroup`]), the
//! writable layer's usage from the image store, a pod's network from its pause process's
//! `/proc/<pid>/net/dev` (the pod's netns). `usage_nano_cores` is the rate over at least the
//! last second where there are samples that old, else since the object started ([`Sampler`]): clients sample an object often,
//! a few milliseconds apart, and a rate over those milliseconds is no usage figure (the
//! kubelet, with PodAndContainerStatsFromCRI, shows it as is). A pod with a cgroup of its own
//! (the kubelet's pod<uid>, its cgroup parent) reports that cgroup's CPU and memory, as
//! containerd does: with its limit (hence available bytes), and the CPU its containers used
//! before a restart; other pods the sum of their pause's and running containers' figures.
//!
//! Pressure stall information (the `psi` of CPU, memory and IO usage) comes from the cgroup v2
//! `cpu.pressure`, `memory.pressure` and `io.pressure` files: of the container's own cgroup
//! ([`cgroup::unified_dir`]: on a hybrid host only where runc joined the unified hierarchy
//! too), and for a pod of its cgroup parent, which the kubelet makes per pod (as containerd
//! reads a pod's figures there), when the pod's config names one. Where the host has no such
//! file the `psi` is left unset, and `io` (whose only figure is its PSI) with it. PSI totals
//! are given in nanoseconds, the CRI's unit (the kernel counts microseconds).

pub mod cadvisor;
pub mod cgroup;
pub mod cri_metrics;
#[cfg(test)]
mod service_tests;

use crate::container::ContainerService;
use crate::sandbox::SandboxService;
use crate::store::container::{config_name, ContainerRecord, ContainerState};
use crate::store::sandbox::{SandboxRecord, SandboxState};
use crate::store::to_cri::labels_match;
use peapod_host::sync::LockUnpoisoned;
use peapod_host::timefmt;
use peapod_proto::v1 as cri;
use std::collections::{HashMap, VecDeque};
use std::path::Path;
use std::sync::{Arc, Mutex};

const CGROUP_ROOT: &str = "/sys/fs/cgroup";

/// Recent CPU samples of each object, for rates.
#[derive(Default)]
pub struct Sampler {
    history: Mutex<HashMap<String, History>>,
}

#[derive(Default)]
struct History {
    samples: VecDeque<(i64, u64)>,
    /// The counter went backwards once (a pod's sum when a container restarted): it no longer
    /// counts from the object's start.
    restarted: bool,
}

/// A rate covers at least this much time when the samples allow: several clients sample an
/// object (the kubelet's summary, its eviction manager, metrics scrapes), often a few
/// milliseconds apart, and the CPU a container used in those milliseconds (none while it
/// sleeps) says nothing of its usage.
const RATE_WINDOW_NS: i64 = 1_000_000_000;
/// Samples closer together than this are not kept (the history stays short).
const SAMPLE_SPACING_NS: i64 = 100_000_000;
/// An object not sampled for this long is forgotten (it was removed, most likely).
const FORGET_AFTER_NS: i64 = 600_000_000_000;

impl Sampler {
    /// Nanocores used since the newest earlier sample of `key` at least [`RATE_WINDOW_NS`]
    /// old. An object younger than that is measured since `started_ns`, when its counter was
    /// 0 (its cgroup was made then): its average so far, where two clients' samples a few
    /// milliseconds apart would give the CPU of those milliseconds (0 for a container between
    /// two steps of its loop: the kubelet's summary then failed its `UsageNanoCores` check).
    /// Otherwise since the oldest sample there is; None on the first sample with no start
    /// known, and when the counter went backwards (a restarted container starts over).
    fn rate(&self, key: &str, at_ns: i64, cpu_ns: u64, started_ns: Option<i64>) -> Option<u64> {
        let mut all = self.history.lock_unpoisoned();
        if !all.contains_key(key) {
            all.retain(|_, h| {
                h.samples
                    .back()
                    .is_some_and(|(t, _)| at_ns - t < FORGET_AFTER_NS)
            });
        }
        let h = all.entry(key.to_string()).or_default();
        let went_back = h.samples.back().is_some_and(|(_, c)| *c > cpu_ns);
        if went_back {
            h.samples.clear();
            h.restarted = true;
        }
        let since_start = started_ns
            .filter(|t0| *t0 > 0 && *t0 < at_ns && !h.restarted)
            .map(|t0| (t0, 0));
        let reference = h
            .samples
            .iter()
            .rev()
            .find(|(t, _)| at_ns - t >= RATE_WINDOW_NS)
            .copied()
            .or(since_start)
            .or(h.samples.front().copied());
        if let Some((t0, _)) = reference {
            while h.samples.front().is_some_and(|(t, _)| *t < t0) {
                h.samples.pop_front();
            }
        }
        if h.samples
            .back()
            .is_none_or(|(t, _)| at_ns - t >= SAMPLE_SPACING_NS)
        {
            h.samples.push_back((at_ns, cpu_ns));
        }
        if went_back {
            return None;
        }
        let (t0, c0) = reference?;
        let dt = at_ns.checked_sub(t0).filter(|d| *d > 0)? as u128;
        let dc = cpu_ns.checked_sub(c0)? as u128;
        Some((dc * 1_000_000_000 / dt) as u64)
    }

    pub fn forget(&self, key: &str) {
        self.history.lock_unpoisoned().remove(key);
    }
}

fn u64v(v: Option<u64>) -> Option<cri::UInt64Value> {
    v.map(|value| cri::UInt64Value { value })
}

/// The interfaces of a network namespace but loopback, from `/proc/<pid>/net/dev` text, as
/// the CRI stats messages carry them.
pub fn parse_net_dev(text: &str) -> Vec<cri::NetworkInterfaceUsage> {
    cadvisor::parse_net_dev(text)
        .into_iter()
        .map(|i| cri::NetworkInterfaceUsage {
            name: i.name,
            rx_bytes: u64v(Some(i.rx_bytes)),
            rx_errors: u64v(Some(i.rx_errors)),
            tx_bytes: u64v(Some(i.tx_bytes)),
            tx_errors: u64v(Some(i.tx_errors)),
        })
        .collect()
}

/// One process's cgroup figures, read once.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub struct Sample {
    pub usage: cgroup::Usage,
    pub processes: u64,
    pub pressure: cgroup::Pressure,
}

/// What the stats read from the host about a process: its cgroups' figures and the
/// interfaces of its network namespace. Behind a trait so that the stats calls are
/// unit-tested with a fake (`crate::testing`).
pub trait ProcessStats: Send + Sync {
    /// The figures of the cgroups of `pid` (none for pid 0 or a process that is gone).
    fn sample(&self, pid: u32) -> Sample;
    /// The text of `/proc/<pid>/net/dev`.
    fn net_dev(&self, pid: u32) -> Option<String>;
    /// The PSI of the parent of `pid`'s cgroup (for a pause process: the pod's cgroup parent).
    fn parent_pressure(&self, _pid: u32) -> cgroup::Pressure {
        cgroup::Pressure::default()
    }
    /// The figures of the parent of `pid`'s cgroup (for a pause process: the pod's cgroup
    /// parent), when it reports any.
    fn parent_usage(&self, _pid: u32) -> Option<cgroup::Usage> {
        None
    }
}

/// The real host: `/proc` and the cgroup mount.
pub struct HostProcessStats;

impl ProcessStats for HostProcessStats {
    fn sample(&self, pid: u32) -> Sample {
        if pid == 0 {
            return Sample::default();
        }
        let Ok(paths) = peapod_host::cgroup::ProcCgroups::of_pid(pid) else {
            return Sample::default();
        };
        let root = Path::new(CGROUP_ROOT);
        Sample {
            usage: cgroup::read_usage(root, &paths),
            processes: cgroup::process_count(root, &paths).unwrap_or(0),
            pressure: cgroup::unified_dir(root, &paths)
                .map(|dir| cgroup::read_pressure(&dir))
                .unwrap_or_default(),
        }
    }

    fn net_dev(&self, pid: u32) -> Option<String> {
        std::fs::read_to_string(format!("/proc/{pid}/net/dev")).ok()
    }

    fn parent_usage(&self, pid: u32) -> Option<cgroup::Usage> {
        if pid == 0 {
            return None;
        }
        let paths = peapod_host::cgroup::ProcCgroups::of_pid(pid).ok()?;
        let u = cgroup::read_usage(Path::new(CGROUP_ROOT), &cgroup::parents(&paths));
        (u.cpu_ns.is_some() || u.memory_usage.is_some()).then_some(u)
    }

    fn parent_pressure(&self, pid: u32) -> cgroup::Pressure {
        if pid == 0 {
            return cgroup::Pressure::default();
        }
        let Ok(paths) = peapod_host::cgroup::ProcCgroups::of_pid(pid) else {
            return cgroup::Pressure::default();
        };
        let root = Path::new(CGROUP_ROOT);
        cgroup::unified_dir(root, &paths)
            .and_then(|dir| dir.parent().map(cgroup::read_pressure))
            .unwrap_or_default()
    }
}

/// The stats calls, over what they read: the records, the image store (writable layers) and
/// the previous CPU samples.
pub struct StatsService {
    containers: Arc<ContainerService>,
    sandboxes: Arc<SandboxService>,
    images: Arc<peapod_image::Store>,
    host: Arc<dyn ProcessStats>,
    sampler: Sampler,
    /// The host has PSI of containers' cgroups (read once): the pressure metrics are described.
    psi: bool,
}

/// Whether the kernel keeps PSI and a unified hierarchy holds containers' cgroups (v2, or a
/// hybrid host's `unified`): where containers' `*.pressure` files can exist.
fn host_has_psi(root: &Path) -> bool {
    let unified = if peapod_host::cgroup::is_unified(root) {
        root.to_path_buf()
    } else {
        root.join("unified")
    };
    Path::new("/proc/pressure/cpu").exists() && unified.join("cgroup.procs").exists()
}

impl StatsService {
    pub fn new(
        containers: Arc<ContainerService>,
        sandboxes: Arc<SandboxService>,
        images: Arc<peapod_image::Store>,
        host: Arc<dyn ProcessStats>,
    ) -> StatsService {
        StatsService {
            containers,
            sandboxes,
            images,
            host,
            sampler: Sampler::default(),
            psi: host_has_psi(Path::new(CGROUP_ROOT)),
        }
    }

    /// Whether the host has PSI of containers' cgroups (decided at start).
    pub fn psi(&self) -> bool {
        self.psi
    }

    /// CPU and memory messages for a usage; `key` names the object for the CPU rate.
    fn cpu_mem(
        &self,
        key: &str,
        started: i64,
        u: &cgroup::Usage,
        pressure: &cgroup::Pressure,
        at: i64,
    ) -> (Option<cri::CpuUsage>, Option<cri::MemoryUsage>) {
        let cpu = u.cpu_ns.map(|ns| cri::CpuUsage {
            timestamp: at,
            usage_core_nano_seconds: u64v(Some(ns)),
            usage_nano_cores: u64v(self.sampler.rate(key, at, ns, Some(started))),
            psi: psi(pressure.cpu),
        });
        let mem = u.memory_usage.map(|_| cri::MemoryUsage {
            psi: psi(pressure.memory),
            ..memory(u, at)
        });
        (cpu, mem)
    }

    async fn container_stats_of(&self, rec: &ContainerRecord) -> (cri::ContainerStats, Sample) {
        let at = timefmt::now_ns();
        let sample = if rec.state == ContainerState::Running {
            self.host.sample(rec.pid)
        } else {
            Sample::default()
        };
        let (cpu, memory) = self.cpu_mem(
            &rec.id,
            rec.created_at_ns,
            &sample.usage,
            &sample.pressure,
            at,
        );
        let store = self.images.clone();
        let id = rec.id.clone();
        let usage = tokio::task::spawn_blocking(move || store.rootfs_usage(&id))
            .await
            .ok()
            .flatten();
        let writable_layer = usage.map(|(bytes, inodes)| cri::FilesystemUsage {
            timestamp: at,
            fs_id: Some(cri::FilesystemIdentifier {
                // Where ImageFsInfo reports the container filesystem.
                mountpoint: self
                    .images
                    .root()
                    .join("containers")
                    .to_string_lossy()
                    .into_owned(),
            }),
            used_bytes: u64v(Some(bytes)),
            inodes_used: u64v(Some(inodes)),
        });
        let stats = cri::ContainerStats {
            attributes: Some(cri::ContainerAttributes {
                id: rec.id.clone(),
                metadata: rec.config.metadata.clone(),
                labels: rec.config.labels.clone(),
                annotations: rec.config.annotations.clone(),
            }),
            cpu,
            memory,
            writable_layer,
            swap: swap(&sample.usage, at),
            io: io(&sample.pressure, at),
        };
        (stats, sample)
    }

    pub async fn container_stats(&self, id: &str) -> crate::Result<cri::ContainerStats> {
        let rec = self.containers.records().read().resolve(id)?.get();
        Ok(self.container_stats_of(&rec).await.0)
    }

    pub async fn list_container_stats(
        &self,
        filter: Option<&cri::ContainerStatsFilter>,
    ) -> Vec<cri::ContainerStats> {
        let f = filter.cloned().unwrap_or_default();
        let list_filter = cri::ContainerFilter {
            id: f.id,
            pod_sandbox_id: f.pod_sandbox_id,
            label_selector: f.label_selector,
            state: Some(cri::ContainerStateValue {
                state: cri::ContainerState::ContainerRunning as i32,
            }),
        };
        let mut out = Vec::new();
        for rec in self.containers.list(Some(&list_filter)) {
            out.push(self.container_stats_of(&rec).await.0);
        }
        out
    }

    async fn pod_stats_of(&self, sb: &SandboxRecord) -> cri::PodSandboxStats {
        let at = timefmt::now_ns();
        let ready = sb.state == SandboxState::Ready;
        // The pod's figures: its running containers' plus the pause container's.
        let mut total = if ready {
            self.host.sample(sb.pause_pid)
        } else {
            Sample::default()
        };
        let mut containers = Vec::new();
        for c in self.containers.records().of_sandbox(&sb.id) {
            let rec = c.get();
            if rec.state == ContainerState::Running {
                let (stats, s) = self.container_stats_of(&rec).await;
                total.usage.add(&s.usage);
                total.processes += s.processes;
                containers.push(stats);
            }
        }
        // The pod's cgroup is its cgroup parent, when its config names one (the kubelet's
        // pod<uid> cgroup); the default parent is shared by pods, its pressure no pod's.
        let has_own_cgroup = sb
            .config
            .linux
            .as_ref()
            .is_some_and(|l| !l.cgroup_parent.is_empty());
        let pressure = if ready && has_own_cgroup {
            self.host.parent_pressure(sb.pause_pid)
        } else {
            cgroup::Pressure::default()
        };
        // That cgroup's own figures, where it has them: with its limit, and cumulative over
        // restarts of the pod's containers (a sum of running ones drops at each restart).
        if ready && has_own_cgroup {
            if let Some(pod) = self.host.parent_usage(sb.pause_pid) {
                total.usage = pod;
            }
        }
        let (cpu, memory) = if ready {
            self.cpu_mem(
                &format!("pod-{}", sb.id),
                sb.created_at_ns,
                &total.usage,
                &pressure,
                at,
            )
        } else {
            (None, None)
        };
        let network = (ready && sb.netns.is_some())
            .then(|| self.host.net_dev(sb.pause_pid))
            .flatten()
            .map(|text| {
                let interfaces = parse_net_dev(&text);
                cri::NetworkUsage {
                    timestamp: at,
                    default_interface: interfaces
                        .iter()
                        .find(|i| i.name == crate::network::cni::POD_IFNAME)
                        .cloned(),
                    interfaces,
                }
            });
        cri::PodSandboxStats {
            attributes: Some(cri::PodSandboxAttributes {
                id: sb.id.clone(),
                metadata: sb.config.metadata.clone(),
                labels: sb.config.labels.clone(),
                annotations: sb.config.annotations.clone(),
            }),
            linux: Some(cri::LinuxPodSandboxStats {
                cpu,
                memory,
                network,
                process: ready.then(|| cri::ProcessUsage {
                    timestamp: at,
                    process_count: u64v(Some(total.processes)),
                }),
                containers,
                io: io(&pressure, at),
            }),
            windows: None,
        }
    }

    pub async fn pod_sandbox_stats(&self, id: &str) -> crate::Result<cri::PodSandboxStats> {
        let sb = self.sandboxes.records().read().resolve(id)?.get();
        Ok(self.pod_stats_of(&sb).await)
    }

    pub async fn list_pod_sandbox_stats(
        &self,
        filter: Option<&cri::PodSandboxStatsFilter>,
    ) -> Vec<cri::PodSandboxStats> {
        let f = filter.cloned().unwrap_or_default();
        let list_filter = cri::PodSandboxFilter {
            id: f.id,
            state: Some(cri::PodSandboxStateValue {
                state: cri::PodSandboxState::SandboxReady as i32,
            }),
            label_selector: HashMap::new(),
        };
        let mut out = Vec::new();
        for sb in self.sandboxes.list(Some(&list_filter)) {
            if labels_match(&sb.config.labels, &f.label_selector) {
                out.push(self.pod_stats_of(&sb).await);
            }
        }
        out
    }
}

impl StatsService {
    /// ListPodSandboxMetrics: the ready pods' stats as cAdvisor-named metrics.
    pub async fn list_pod_sandbox_metrics(&self) -> Vec<cri::PodSandboxMetrics> {
        let list_filter = cri::PodSandboxFilter {
            state: Some(cri::PodSandboxStateValue {
                state: cri::PodSandboxState::SandboxReady as i32,
            }),
            ..Default::default()
        };
        let mut out = Vec::new();
        // Where ImageFsInfo reports the container filesystem (the writable layers).
        let layers_dir = self.images.root().join("containers");
        for sb in self.sandboxes.list(Some(&list_filter)) {
            let stats = self.pod_stats_of(&sb).await;
            let running: Vec<ContainerRecord> = self
                .containers
                .records()
                .of_sandbox(&sb.id)
                .into_iter()
                .map(|c| c.get())
                .filter(|rec| rec.state == ContainerState::Running)
                .collect();
            let pause_pid = (sb.netns.is_some()).then_some(sb.pause_pid);
            let dir = layers_dir.clone();
            // /proc, cgroup files and statvfs: blocking reads, off the async workers.
            let read = tokio::task::spawn_blocking(move || {
                let root = Path::new(CGROUP_ROOT);
                let fs = cadvisor::fs_info(&dir);
                let facts: Vec<cri_metrics::ContainerFacts> = running
                    .into_iter()
                    .map(|rec| cri_metrics::ContainerFacts {
                        name: config_name(&rec.config).to_string(),
                        image: rec.image_name.clone(),
                        started_at_ns: rec.started_at_ns,
                        resources: rec.resources.clone(),
                        extra: cadvisor::read_container(root, rec.pid),
                        fs,
                        id: rec.id,
                    })
                    .collect();
                let net = pause_pid
                    .and_then(|pid| std::fs::read_to_string(format!("/proc/{pid}/net/dev")).ok())
                    .map(|text| cadvisor::parse_net_dev(&text))
                    .unwrap_or_default();
                (facts, net)
            })
            .await;
            let Ok((facts, net)) = read else {
                continue;
            };
            let pod_name = sb
                .config
                .metadata
                .as_ref()
                .map(|m| m.name.as_str())
                .unwrap_or("");
            out.push(cri_metrics::pod_metrics(
                &stats,
                pod_name,
                &net,
                &facts,
                timefmt::now_ns(),
            ));
        }
        out
    }
}

/// The CRI form of a `*.pressure` file.
fn psi(p: Option<cgroup::Psi>) -> Option<cri::PsiStats> {
    let p = p?;
    let data = |l: cgroup::PsiLine| cri::PsiData {
        total: l.total_us.saturating_mul(1000),
        avg10: l.avg10,
        avg60: l.avg60,
        avg300: l.avg300,
    };
    Some(cri::PsiStats {
        full: p.full.map(data),
        some: p.some.map(data),
    })
}

/// Swap usage where the cgroup accounts it; what is available is its limit less that, where
/// it has one.
fn swap(u: &cgroup::Usage, at: i64) -> Option<cri::SwapUsage> {
    u.swap_usage.map(|used| cri::SwapUsage {
        timestamp: at,
        swap_usage_bytes: u64v(Some(used)),
        swap_available_bytes: u64v(u.swap_limit.map(|l| l.saturating_sub(used))),
    })
}

/// IO usage: its one figure is the PSI, so without one there is none.
fn io(pressure: &cgroup::Pressure, at: i64) -> Option<cri::IoUsage> {
    psi(pressure.io).map(|psi| cri::IoUsage {
        timestamp: at,
        psi: Some(psi),
    })
}

fn memory(u: &cgroup::Usage, at: i64) -> cri::MemoryUsage {
    cri::MemoryUsage {
        timestamp: at,
        working_set_bytes: u64v(u.working_set),
        available_bytes: u64v(
            u.memory_limit
                .zip(u.working_set)
                .map(|(l, w)| l.saturating_sub(w)),
        ),
        usage_bytes: u64v(u.memory_usage),
        rss_bytes: u64v(u.rss),
        page_faults: u64v(u.page_faults),
        major_page_faults: u64v(u.major_page_faults),
        psi: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn net_dev_skips_loopback_and_reads_eth0() {
        let text = "Inter-|   Receive                                                |  Transmit\n face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed\n    lo:     100       1    0    0    0     0          0         0      100       1    0    0    0     0       0          0\n  eth0:    5000      40    2    0    0     0          0         0     3000      30    1    0    0     0       0          0\n";
        let ifs = parse_net_dev(text);
        assert_eq!(ifs.len(), 1);
        assert_eq!(ifs[0].name, "eth0");
        assert_eq!(ifs[0].rx_bytes.as_ref().unwrap().value, 5000);
        assert_eq!(ifs[0].rx_errors.as_ref().unwrap().value, 2);
        assert_eq!(ifs[0].tx_bytes.as_ref().unwrap().value, 3000);
        assert_eq!(ifs[0].tx_errors.as_ref().unwrap().value, 1);
    }

    /// A sample a few milliseconds after another says nothing of the usage: the rate is over
    /// at least a second when there are samples that old (the kubelet's summary asked right
    /// after its eviction manager and got 0 for a container busy in a loop with sleeps).
    #[test]
    fn cpu_rate_covers_at_least_a_second() {
        let s = Sampler::default();
        let sec = 1_000_000_000;
        assert_eq!(s.rate("c", 0, 0, None), None);
        // One core for two seconds.
        assert_eq!(s.rate("c", 2 * sec, 2 * sec as u64, None), Some(sec as u64));
        // A millisecond later, with no CPU used in it: still the rate of the last seconds.
        let r = s
            .rate("c", 2 * sec + 1_000_000, 2 * sec as u64, None)
            .unwrap();
        assert!(r > 990_000_000, "{r}");
        // Three seconds on, idle since: the rate since the newest sample a second old.
        assert_eq!(s.rate("c", 5 * sec, 2 * sec as u64, None), Some(0));
        // Other objects' samples are their own; an object not sampled for ten minutes is
        // forgotten when another one starts.
        assert_eq!(s.rate("d", 6 * sec, 5, None), None);
        assert_eq!(s.rate("e", 6 * sec + FORGET_AFTER_NS, 0, None), None);
        assert_eq!(s.rate("c", 7 * sec + FORGET_AFTER_NS, 9, None), None);
    }

    #[test]
    fn cpu_rate_needs_two_samples() {
        let s = Sampler::default();
        assert_eq!(s.rate("c", 1_000_000_000, 0, None), None);
        // Half a core for one second.
        assert_eq!(
            s.rate("c", 2_000_000_000, 500_000_000, None),
            Some(500_000_000)
        );
        // A counter that went backwards (a restarted container) gives no rate.
        assert_eq!(s.rate("c", 3_000_000_000, 100, None), None);
    }

    /// Two clients' samples a few milliseconds apart, while the object is younger than the
    /// window: the rate is its average since it started (its counter was 0 then), not the
    /// CPU of those milliseconds (0 for a container sleeping between two steps).
    #[test]
    fn a_young_objects_rate_is_its_average_since_it_started() {
        let s = Sampler::default();
        let ms = 1_000_000;
        // Made at 100 ms; a quarter of a core over its first 400 ms.
        assert_eq!(
            s.rate("c", 500 * ms, 100 * ms as u64, Some(100 * ms)),
            Some(250_000_000)
        );
        // Two milliseconds on, idle in them: still its average, not 0.
        let r = s
            .rate("c", 502 * ms, 100 * ms as u64, Some(100 * ms))
            .unwrap();
        assert!(r > 240_000_000, "{r}");
        // Once a sample is a second old, the window is the last second.
        assert_eq!(
            s.rate("c", 1_600 * ms, 100 * ms as u64, Some(100 * ms)),
            Some(0)
        );
        // A counter that went backwards no longer counts from the start.
        assert_eq!(s.rate("p", 500 * ms, 50, Some(100 * ms)), Some(125));
        assert_eq!(s.rate("p", 700 * ms, 10, Some(100 * ms)), None);
        assert_eq!(
            s.rate("p", 800 * ms, 10 + 100 * ms as u64, Some(100 * ms)),
            Some(ms as u64 * 1_000)
        );
    }
}
