//! ContainerStats, ListContainerStats, PodSandboxStats, ListPodSandboxStats.
//!
//! CPU and memory come from the cgroups of the container's process (see [`cgroup`]), the
//! writable layer's usage from the image store, a pod's network from its pause process's
//! `/proc/<pid>/net/dev` (the pod's netns). `usage_nano_cores` is the rate between this
//! sample and the previous one of the same object, as containerd computes it.

pub mod cadvisor;
pub mod cgroup;
pub mod cri_metrics;
#[cfg(test)]
mod service_tests;

use crate::container::ContainerService;
use crate::sandbox::SandboxService;
use crate::store::container::{ContainerRecord, ContainerState};
use crate::store::sandbox::{SandboxRecord, SandboxState};
use crate::store::to_cri::labels_match;
use peapod_proto::v1 as cri;
use peapod_shim::timefmt;
use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

const CGROUP_ROOT: &str = "/sys/fs/cgroup";

/// The previous CPU sample of each object, for rates.
#[derive(Default)]
pub struct Sampler {
    last: Mutex<HashMap<String, (i64, u64)>>,
}

impl Sampler {
    /// Nanocores used since the previous sample of `key` (None on the first).
    fn rate(&self, key: &str, at_ns: i64, cpu_ns: u64) -> Option<u64> {
        let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        let prev = last.insert(key.to_string(), (at_ns, cpu_ns));
        let (t0, c0) = prev?;
        let dt = at_ns.checked_sub(t0).filter(|d| *d > 0)? as u128;
        let dc = cpu_ns.checked_sub(c0)? as u128;
        Some((dc * 1_000_000_000 / dt) as u64)
    }

    pub fn forget(&self, key: &str) {
        self.last
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(key);
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
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Sample {
    pub usage: cgroup::Usage,
    pub processes: u64,
}

/// What the stats read from the host about a process: its cgroups' figures and the
/// interfaces of its network namespace. Behind a trait so that the stats calls are
/// unit-tested with a fake (`crate::testing`).
pub trait ProcessStats: Send + Sync {
    /// The figures of the cgroups of `pid` (none for pid 0 or a process that is gone).
    fn sample(&self, pid: u32) -> Sample;
    /// The text of `/proc/<pid>/net/dev`.
    fn net_dev(&self, pid: u32) -> Option<String>;
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
        }
    }

    fn net_dev(&self, pid: u32) -> Option<String> {
        std::fs::read_to_string(format!("/proc/{pid}/net/dev")).ok()
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
        }
    }

    /// CPU and memory messages for a usage; `key` names the object for the CPU rate.
    fn cpu_mem(
        &self,
        key: &str,
        u: &cgroup::Usage,
        at: i64,
    ) -> (Option<cri::CpuUsage>, Option<cri::MemoryUsage>) {
        let cpu = u.cpu_ns.map(|ns| cri::CpuUsage {
            timestamp: at,
            usage_core_nano_seconds: u64v(Some(ns)),
            usage_nano_cores: u64v(self.sampler.rate(key, at, ns)),
        });
        (cpu, u.memory_usage.map(|_| memory(u, at)))
    }

    async fn container_stats_of(&self, rec: &ContainerRecord) -> (cri::ContainerStats, Sample) {
        let at = timefmt::now_ns();
        let sample = if rec.state == ContainerState::Running {
            self.host.sample(rec.pid)
        } else {
            Sample::default()
        };
        let (cpu, memory) = self.cpu_mem(&rec.id, &sample.usage, at);
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
            swap: None,
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
        let (cpu, memory) = if ready {
            self.cpu_mem(&format!("pod-{}", sb.id), &total.usage, at)
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
                        name: rec
                            .config
                            .metadata
                            .as_ref()
                            .map(|m| m.name.clone())
                            .unwrap_or_default(),
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

    #[test]
    fn cpu_rate_needs_two_samples() {
        let s = Sampler::default();
        assert_eq!(s.rate("c", 1_000_000_000, 0), None);
        // Half a core for one second.
        assert_eq!(s.rate("c", 2_000_000_000, 500_000_000), Some(500_000_000));
        // A counter that went backwards (a restarted container) gives no rate.
        assert_eq!(s.rate("c", 3_000_000_000, 100), None);
    }
}
