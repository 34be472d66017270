//! ListMetricDescriptors and ListPodSandboxMetrics: the stats readings (the same cgroup, netns
//! and writable-layer figures as PodSandboxStats) as cAdvisor-named metrics, which the kubelet
//! exports on /metrics/cadvisor when it takes pod and container stats from the runtime.
//!
//! Every metric carries the label keys `id`, `name`, `image` (container id, container name,
//! image reference; for pod-level metrics the sandbox id and pod name, with no image), plus
//! `interface` for network and `device` for filesystem metrics. CRI metric values are
//! integers, so seconds are whole seconds, as containerd and CRI-O report them.

use super::cadvisor::{Extra, FsInfo, NetDev};
use peapod_proto::v1 as cri;
use peapod_proto::v1::LinuxContainerResources;

const BASE: [&str; 3] = ["id", "name", "image"];

#[derive(Clone, Copy, PartialEq, Eq)]
enum Labels {
    None,
    Interface,
    Device,
}

struct Desc {
    name: &'static str,
    help: &'static str,
    labels: Labels,
}

const DESCRIPTORS: &[Desc] = &[
    Desc {
        name: "container_cpu_usage_seconds_total",
        help: "Cumulative cpu time consumed in seconds.",
        labels: Labels::None,
    },
    Desc {
        name: "container_cpu_user_seconds_total",
        help: "Cumulative user cpu time consumed in seconds.",
        labels: Labels::None,
    },
    Desc {
        name: "container_cpu_system_seconds_total",
        help: "Cumulative system cpu time consumed in seconds.",
        labels: Labels::None,
    },
    Desc {
        name: "container_cpu_cfs_periods_total",
        help: "Number of elapsed enforcement period intervals.",
        labels: Labels::None,
    },
    Desc {
        name: "container_cpu_cfs_throttled_periods_total",
        help: "Number of throttled period intervals.",
        labels: Labels::None,
    },
    Desc {
        name: "container_cpu_cfs_throttled_seconds_total",
        help: "Total time duration the container has been throttled.",
        labels: Labels::None,
    },
    Desc {
        name: "container_memory_usage_bytes",
        help: "Current memory usage in bytes, including all memory regardless of when it was accessed.",
        labels: Labels::None,
    },
    Desc {
        name: "container_memory_working_set_bytes",
        help: "Current working set in bytes.",
        labels: Labels::None,
    },
    Desc {
        name: "container_memory_rss",
        help: "Size of RSS in bytes.",
        labels: Labels::None,
    },
    Desc {
        name: "container_memory_cache",
        help: "Number of bytes of page cache memory.",
        labels: Labels::None,
    },
    Desc {
        name: "container_memory_mapped_file",
        help: "Size of memory mapped files in bytes.",
        labels: Labels::None,
    },
    Desc {
        name: "container_memory_swap",
        help: "Container swap usage in bytes.",
        labels: Labels::None,
    },
    Desc {
        name: "container_memory_kernel_usage",
        help: "Size of kernel memory allocated in bytes.",
        labels: Labels::None,
    },
    Desc {
        name: "container_memory_failcnt",
        help: "Number of memory usage hits limits.",
        labels: Labels::None,
    },
    Desc {
        name: "container_memory_max_usage_bytes",
        help: "Maximum memory usage recorded in bytes.",
        labels: Labels::None,
    },
    Desc {
        name: "container_memory_failures_total",
        help: "Cumulative count of page faults (pgfault) of the container.",
        labels: Labels::None,
    },
    Desc {
        name: "container_oom_events_total",
        help: "Count of out of memory events observed for the container.",
        labels: Labels::None,
    },
    Desc {
        name: "container_spec_cpu_shares",
        help: "CPU share of the container.",
        labels: Labels::None,
    },
    Desc {
        name: "container_spec_cpu_quota",
        help: "CPU quota of the container.",
        labels: Labels::None,
    },
    Desc {
        name: "container_spec_cpu_period",
        help: "CPU period of the container.",
        labels: Labels::None,
    },
    Desc {
        name: "container_spec_memory_limit_bytes",
        help: "Memory limit for the container.",
        labels: Labels::None,
    },
    Desc {
        name: "container_spec_memory_swap_limit_bytes",
        help: "Memory swap limit for the container.",
        labels: Labels::None,
    },
    Desc {
        name: "container_start_time_seconds",
        help: "Start time of the container since unix epoch in seconds.",
        labels: Labels::None,
    },
    Desc {
        name: "container_last_seen",
        help: "Last time a container was seen by the exporter.",
        labels: Labels::None,
    },
    Desc {
        name: "container_processes",
        help: "Number of processes running inside the container.",
        labels: Labels::None,
    },
    Desc {
        name: "container_threads",
        help: "Number of threads running inside the container.",
        labels: Labels::None,
    },
    Desc {
        name: "container_threads_max",
        help: "Maximum number of threads allowed inside the container, infinity if value is zero.",
        labels: Labels::None,
    },
    Desc {
        name: "container_file_descriptors",
        help: "Number of open file descriptors for the container.",
        labels: Labels::None,
    },
    Desc {
        name: "container_sockets",
        help: "Number of open sockets for the container.",
        labels: Labels::None,
    },
    Desc {
        name: "container_fs_usage_bytes",
        help: "Number of bytes that are consumed by the container on this filesystem.",
        labels: Labels::Device,
    },
    Desc {
        name: "container_fs_limit_bytes",
        help: "Number of bytes that can be consumed by the container on this filesystem.",
        labels: Labels::Device,
    },
    Desc {
        name: "container_fs_inodes_total",
        help: "Number of inodes of this filesystem.",
        labels: Labels::Device,
    },
    Desc {
        name: "container_fs_inodes_free",
        help: "Number of available inodes of this filesystem.",
        labels: Labels::Device,
    },
    Desc {
        name: "container_fs_reads_bytes_total",
        help: "Cumulative count of bytes read.",
        labels: Labels::Device,
    },
    Desc {
        name: "container_fs_writes_bytes_total",
        help: "Cumulative count of bytes written.",
        labels: Labels::Device,
    },
    Desc {
        name: "container_fs_reads_total",
        help: "Cumulative count of reads completed.",
        labels: Labels::Device,
    },
    Desc {
        name: "container_fs_writes_total",
        help: "Cumulative count of writes completed.",
        labels: Labels::Device,
    },
    Desc {
        name: "container_blkio_device_usage_total",
        help: "Blkio device bytes usage (read and write).",
        labels: Labels::Device,
    },
    Desc {
        name: "container_network_receive_bytes_total",
        help: "Cumulative count of bytes received.",
        labels: Labels::Interface,
    },
    Desc {
        name: "container_network_receive_packets_total",
        help: "Cumulative count of packets received.",
        labels: Labels::Interface,
    },
    Desc {
        name: "container_network_receive_packets_dropped_total",
        help: "Cumulative count of packets dropped while receiving.",
        labels: Labels::Interface,
    },
    Desc {
        name: "container_network_receive_errors_total",
        help: "Cumulative count of errors encountered while receiving.",
        labels: Labels::Interface,
    },
    Desc {
        name: "container_network_transmit_bytes_total",
        help: "Cumulative count of bytes transmitted.",
        labels: Labels::Interface,
    },
    Desc {
        name: "container_network_transmit_packets_total",
        help: "Cumulative count of packets transmitted.",
        labels: Labels::Interface,
    },
    Desc {
        name: "container_network_transmit_packets_dropped_total",
        help: "Cumulative count of packets dropped while transmitting.",
        labels: Labels::Interface,
    },
    Desc {
        name: "container_network_transmit_errors_total",
        help: "Cumulative count of errors encountered while transmitting.",
        labels: Labels::Interface,
    },
];

/// cAdvisor's pressure stall metrics (PSI totals: `waiting` the `some` line, `stalled` the
/// `full` one), described where the host has PSI of containers' cgroups (a unified hierarchy
/// and a kernel with PSI), from each container's own `*.pressure` files.
const PRESSURE: &[Desc] = &[
    Desc {
        name: "container_pressure_cpu_waiting_seconds_total",
        help: "Total time duration tasks in the container have waited due to CPU congestion.",
        labels: Labels::None,
    },
    Desc {
        name: "container_pressure_cpu_stalled_seconds_total",
        help: "Total time duration no tasks in the container could make progress due to CPU congestion.",
        labels: Labels::None,
    },
    Desc {
        name: "container_pressure_memory_waiting_seconds_total",
        help: "Total time duration tasks in the container have waited due to memory congestion.",
        labels: Labels::None,
    },
    Desc {
        name: "container_pressure_memory_stalled_seconds_total",
        help: "Total time duration no tasks in the container could make progress due to memory congestion.",
        labels: Labels::None,
    },
    Desc {
        name: "container_pressure_io_waiting_seconds_total",
        help: "Total time duration tasks in the container have waited due to IO congestion.",
        labels: Labels::None,
    },
    Desc {
        name: "container_pressure_io_stalled_seconds_total",
        help: "Total time duration no tasks in the container could make progress due to IO congestion.",
        labels: Labels::None,
    },
];

/// Every metric ListPodSandboxMetrics can report; the pressure ones where `psi` (the host
/// has PSI of containers' cgroups).
pub fn descriptors(psi: bool) -> Vec<cri::MetricDescriptor> {
    let pressure = if psi { PRESSURE } else { &[] };
    DESCRIPTORS
        .iter()
        .chain(pressure)
        .map(|d| {
            let mut keys: Vec<String> = BASE.iter().map(|s| s.to_string()).collect();
            match d.labels {
                Labels::None => {}
                Labels::Interface => keys.push("interface".into()),
                Labels::Device => keys.push("device".into()),
            }
            cri::MetricDescriptor {
                name: d.name.into(),
                help: d.help.into(),
                label_keys: keys,
            }
        })
        .collect()
}

/// What a container's metrics need beyond its stats.
pub struct ContainerFacts {
    pub id: String,
    pub name: String,
    pub image: String,
    pub started_at_ns: i64,
    pub resources: Option<LinuxContainerResources>,
    /// What cAdvisor reads beyond the CRI stats (cgroups and /proc of its processes).
    pub extra: Extra,
    /// The filesystem of its writable layer.
    pub fs: Option<FsInfo>,
}

/// Collects metrics of one object (a container, or the pod itself).
struct Emitter {
    at: i64,
    labels: Vec<String>,
    out: Vec<cri::Metric>,
}

impl Emitter {
    fn gauge(&mut self, name: &str, v: Option<u64>) {
        self.push(name, cri::MetricType::Gauge, None, v);
    }

    fn counter(&mut self, name: &str, v: Option<u64>) {
        self.push(name, cri::MetricType::Counter, None, v);
    }

    fn push(&mut self, name: &str, kind: cri::MetricType, extra: Option<&str>, v: Option<u64>) {
        let Some(value) = v else { return };
        let mut label_values = self.labels.clone();
        if let Some(e) = extra {
            label_values.push(e.to_string());
        }
        self.out.push(cri::Metric {
            name: name.into(),
            timestamp: self.at,
            metric_type: kind as i32,
            label_values,
            value: Some(cri::UInt64Value { value }),
        });
    }
}

fn val(v: &Option<cri::UInt64Value>) -> Option<u64> {
    v.as_ref().map(|v| v.value)
}

/// The metrics of one pod from its stats, its network interfaces and the facts of its
/// running containers. Every described metric is reported for every container (the kubelet
/// and critest expect each descriptor to have values), from the readings that exist.
pub fn pod_metrics(
    stats: &cri::PodSandboxStats,
    pod_name: &str,
    net: &[NetDev],
    containers: &[ContainerFacts],
    now_ns: i64,
) -> cri::PodSandboxMetrics {
    use cri::MetricType::{Counter, Gauge};
    let sandbox_id = stats
        .attributes
        .as_ref()
        .map(|a| a.id.clone())
        .unwrap_or_default();
    let linux = stats.linux.clone().unwrap_or_default();
    let mut pod = Emitter {
        at: now_ns,
        labels: vec![sandbox_id.clone(), pod_name.to_string(), String::new()],
        out: Vec::new(),
    };
    for i in net {
        let name = Some(i.name.as_str());
        let mut c = |metric: &str, v: u64| pod.push(metric, Counter, name, Some(v));
        c("container_network_receive_bytes_total", i.rx_bytes);
        c("container_network_receive_packets_total", i.rx_packets);
        c(
            "container_network_receive_packets_dropped_total",
            i.rx_dropped,
        );
        c("container_network_receive_errors_total", i.rx_errors);
        c("container_network_transmit_bytes_total", i.tx_bytes);
        c("container_network_transmit_packets_total", i.tx_packets);
        c(
            "container_network_transmit_packets_dropped_total",
            i.tx_dropped,
        );
        c("container_network_transmit_errors_total", i.tx_errors);
    }
    if let Some(p) = &linux.process {
        pod.push("container_processes", Gauge, None, val(&p.process_count));
    }
    let mut container_metrics = Vec::new();
    for c in &linux.containers {
        let id = c.attributes.as_ref().map(|a| a.id.as_str()).unwrap_or("");
        let Some(facts) = containers.iter().find(|f| f.id == id) else {
            continue;
        };
        let mut e = Emitter {
            at: now_ns,
            labels: vec![facts.id.clone(), facts.name.clone(), facts.image.clone()],
            out: Vec::new(),
        };
        let x = &facts.extra;
        if let Some(cpu) = &c.cpu {
            let secs = val(&cpu.usage_core_nano_seconds).map(|ns| ns / 1_000_000_000);
            e.counter("container_cpu_usage_seconds_total", secs);
        }
        e.counter("container_cpu_user_seconds_total", x.cpu_user_seconds);
        e.counter("container_cpu_system_seconds_total", x.cpu_system_seconds);
        e.counter("container_cpu_cfs_periods_total", x.cfs_periods);
        let periods = x.cfs_throttled_periods;
        e.counter("container_cpu_cfs_throttled_periods_total", periods);
        let seconds = x.cfs_throttled_seconds;
        e.counter("container_cpu_cfs_throttled_seconds_total", seconds);
        if let Some(m) = &c.memory {
            e.gauge("container_memory_usage_bytes", val(&m.usage_bytes));
            e.gauge(
                "container_memory_working_set_bytes",
                val(&m.working_set_bytes),
            );
            e.counter("container_memory_failures_total", val(&m.page_faults));
        }
        let waiting_stalled = |p: &Option<cri::PsiStats>| {
            let seconds = |d: &Option<cri::PsiData>| d.as_ref().map(|d| d.total / 1_000_000_000);
            p.as_ref().map(|p| (seconds(&p.some), seconds(&p.full)))
        };
        let pressures = [
            ("cpu", c.cpu.as_ref().and_then(|c| waiting_stalled(&c.psi))),
            (
                "memory",
                c.memory.as_ref().and_then(|m| waiting_stalled(&m.psi)),
            ),
            ("io", c.io.as_ref().and_then(|io| waiting_stalled(&io.psi))),
        ];
        for (resource, psi) in pressures {
            let Some((waiting, stalled)) = psi else {
                continue;
            };
            let name = |kind: &str| format!("container_pressure_{resource}_{kind}_seconds_total");
            e.counter(&name("waiting"), waiting);
            e.counter(&name("stalled"), stalled);
        }
        e.gauge("container_memory_rss", x.memory_rss);
        e.gauge("container_memory_cache", x.memory_cache);
        e.gauge("container_memory_mapped_file", x.memory_mapped_file);
        e.gauge("container_memory_swap", x.memory_swap);
        e.gauge("container_memory_kernel_usage", x.memory_kernel);
        e.counter("container_memory_failcnt", x.memory_failcnt);
        e.gauge("container_memory_max_usage_bytes", x.memory_max_usage);
        e.counter("container_oom_events_total", x.oom_kills);
        e.gauge("container_threads", x.threads);
        e.gauge("container_threads_max", x.threads_max);
        e.gauge("container_file_descriptors", x.file_descriptors);
        e.gauge("container_sockets", x.sockets);
        if let Some(fs) = &c.writable_layer {
            // Filesystem figures carry the writable layer's mount point as their device.
            let device = fs.fs_id.as_ref().map(|f| f.mountpoint.as_str());
            let mut on_fs = |name: &str, kind, v| e.push(name, kind, device, v);
            on_fs("container_fs_usage_bytes", Gauge, val(&fs.used_bytes));
            if let Some(info) = facts.fs {
                on_fs("container_fs_limit_bytes", Gauge, Some(info.capacity_bytes));
                on_fs("container_fs_inodes_total", Gauge, Some(info.inodes_total));
                on_fs("container_fs_inodes_free", Gauge, Some(info.inodes_free));
            }
            on_fs("container_fs_reads_bytes_total", Counter, x.io_read_bytes);
            on_fs("container_fs_writes_bytes_total", Counter, x.io_write_bytes);
            on_fs("container_fs_reads_total", Counter, x.io_reads);
            on_fs("container_fs_writes_total", Counter, x.io_writes);
            let io = x.io_read_bytes.zip(x.io_write_bytes).map(|(r, w)| r + w);
            on_fs("container_blkio_device_usage_total", Counter, io);
        }
        // The spec figures are reported unset as 0, as cAdvisor does.
        let r = facts.resources.clone().unwrap_or_default();
        let spec = |v: i64| Some(v.max(0) as u64);
        e.gauge("container_spec_cpu_shares", spec(r.cpu_shares));
        e.gauge("container_spec_cpu_quota", spec(r.cpu_quota));
        e.gauge("container_spec_cpu_period", spec(r.cpu_period));
        let mem = spec(r.memory_limit_in_bytes);
        e.gauge("container_spec_memory_limit_bytes", mem);
        let swap = spec(r.memory_swap_limit_in_bytes);
        e.gauge("container_spec_memory_swap_limit_bytes", swap);
        let start = (facts.started_at_ns > 0).then_some(facts.started_at_ns as u64 / 1_000_000_000);
        e.gauge("container_start_time_seconds", start);
        let seen = (now_ns > 0).then_some(now_ns as u64 / 1_000_000_000);
        e.gauge("container_last_seen", seen);
        container_metrics.push(cri::ContainerMetrics {
            container_id: facts.id.clone(),
            metrics: e.out,
        });
    }
    cri::PodSandboxMetrics {
        pod_sandbox_id: sandbox_id,
        metrics: pod.out,
        container_metrics,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn u(v: u64) -> Option<cri::UInt64Value> {
        Some(cri::UInt64Value { value: v })
    }

    fn stats() -> cri::PodSandboxStats {
        cri::PodSandboxStats {
            attributes: Some(cri::PodSandboxAttributes {
                id: "sb1".into(),
                ..Default::default()
            }),
            linux: Some(cri::LinuxPodSandboxStats {
                network: Some(cri::NetworkUsage {
                    timestamp: 1,
                    default_interface: None,
                    interfaces: vec![cri::NetworkInterfaceUsage {
                        name: "eth0".into(),
                        rx_bytes: u(500),
                        rx_errors: u(1),
                        tx_bytes: u(300),
                        tx_errors: u(0),
                    }],
                }),
                process: Some(cri::ProcessUsage {
                    timestamp: 1,
                    process_count: u(3),
                }),
                containers: vec![cri::ContainerStats {
                    attributes: Some(cri::ContainerAttributes {
                        id: "c1".into(),
                        ..Default::default()
                    }),
                    cpu: Some(cri::CpuUsage {
                        timestamp: 1,
                        usage_core_nano_seconds: u(2_500_000_000),
                        usage_nano_cores: None,
                        psi: None,
                    }),
                    memory: Some(cri::MemoryUsage {
                        working_set_bytes: u(4096),
                        usage_bytes: u(8192),
                        page_faults: u(7),
                        ..Default::default()
                    }),
                    writable_layer: Some(cri::FilesystemUsage {
                        fs_id: Some(cri::FilesystemIdentifier {
                            mountpoint: "/var/lib/peapod/image/containers".into(),
                        }),
                        used_bytes: u(12),
                        inodes_used: u(3),
                        timestamp: 1,
                    }),
                    swap: None,
                    io: None,
                }],
                ..Default::default()
            }),
            windows: None,
        }
    }

    fn find<'a>(ms: &'a [cri::Metric], name: &str) -> &'a cri::Metric {
        ms.iter()
            .find(|m| m.name == name)
            .unwrap_or_else(|| panic!("{name} missing"))
    }

    fn net() -> Vec<NetDev> {
        vec![NetDev {
            name: "eth0".into(),
            rx_bytes: 500,
            rx_packets: 5,
            rx_errors: 1,
            ..Default::default()
        }]
    }

    fn facts() -> Vec<ContainerFacts> {
        vec![ContainerFacts {
            id: "c1".into(),
            name: "web".into(),
            image: "busybox:1".into(),
            started_at_ns: 7_000_000_000,
            resources: Some(LinuxContainerResources {
                cpu_shares: 512,
                cpu_quota: 50_000,
                cpu_period: 100_000,
                memory_limit_in_bytes: 1 << 20,
                ..Default::default()
            }),
            extra: Extra {
                cpu_user_seconds: Some(1),
                cpu_system_seconds: Some(1),
                cfs_periods: Some(1),
                cfs_throttled_periods: Some(0),
                cfs_throttled_seconds: Some(0),
                memory_cache: Some(1),
                memory_rss: Some(2),
                memory_mapped_file: Some(3),
                memory_swap: Some(0),
                memory_kernel: Some(4),
                memory_failcnt: Some(0),
                memory_max_usage: Some(9),
                oom_kills: Some(0),
                io_read_bytes: Some(10),
                io_write_bytes: Some(20),
                io_reads: Some(1),
                io_writes: Some(2),
                threads: Some(2),
                threads_max: Some(0),
                file_descriptors: Some(5),
                sockets: Some(1),
            },
            fs: Some(FsInfo {
                capacity_bytes: 1 << 30,
                inodes_total: 1000,
                inodes_free: 900,
            }),
        }]
    }

    #[test]
    fn every_descriptor_has_values_with_its_label_keys() {
        let descs = descriptors(false);
        let m = pod_metrics(&stats(), "pod-a", &net(), &facts(), 9_500_000_000);
        assert_eq!(m.pod_sandbox_id, "sb1");
        let all: Vec<&cri::Metric> = m
            .metrics
            .iter()
            .chain(m.container_metrics.iter().flat_map(|c| c.metrics.iter()))
            .collect();
        // With every reading present, every descriptor is reported (as critest checks).
        for d in &descs {
            let found: Vec<&&cri::Metric> = all.iter().filter(|m| m.name == d.name).collect();
            assert!(!found.is_empty(), "no value for {}", d.name);
            for metric in found {
                assert_eq!(d.label_keys.len(), metric.label_values.len(), "{}", d.name);
            }
        }
        for metric in &all {
            assert!(
                descs.iter().any(|d| d.name == metric.name),
                "{}",
                metric.name
            );
        }
        // Pod level: network by interface, processes.
        let rx = find(&m.metrics, "container_network_receive_bytes_total");
        assert_eq!(rx.label_values, ["sb1", "pod-a", "", "eth0"]);
        assert_eq!(rx.value.as_ref().unwrap().value, 500);
        assert_eq!(rx.metric_type, cri::MetricType::Counter as i32);
        let packets = find(&m.metrics, "container_network_receive_packets_total");
        assert_eq!(packets.value.as_ref().unwrap().value, 5);
        assert_eq!(
            find(&m.metrics, "container_processes")
                .value
                .as_ref()
                .unwrap()
                .value,
            3
        );
        // Container level.
        assert_eq!(m.container_metrics.len(), 1);
        let c = &m.container_metrics[0].metrics;
        let cpu = find(c, "container_cpu_usage_seconds_total");
        assert_eq!(cpu.label_values, ["c1", "web", "busybox:1"]);
        assert_eq!(cpu.value.as_ref().unwrap().value, 2);
        let ws = find(c, "container_memory_working_set_bytes");
        assert_eq!(ws.value.as_ref().unwrap().value, 4096);
        assert_eq!(ws.metric_type, cri::MetricType::Gauge as i32);
        let fs = find(c, "container_fs_usage_bytes");
        assert_eq!(fs.label_values[3], "/var/lib/peapod/image/containers");
        assert_eq!(
            find(c, "container_fs_inodes_free")
                .value
                .as_ref()
                .unwrap()
                .value,
            900
        );
        assert_eq!(
            find(c, "container_spec_cpu_quota")
                .value
                .as_ref()
                .unwrap()
                .value,
            50_000
        );
        let swap = find(c, "container_spec_memory_swap_limit_bytes");
        assert_eq!(swap.value.as_ref().unwrap().value, 0);
        assert_eq!(
            find(c, "container_start_time_seconds")
                .value
                .as_ref()
                .unwrap()
                .value,
            7
        );
        assert_eq!(find(c, "container_last_seen").timestamp, 9_500_000_000);
        let io = find(c, "container_blkio_device_usage_total");
        assert_eq!(io.value.as_ref().unwrap().value, 30);
    }

    #[test]
    fn readings_that_are_missing_are_not_reported() {
        let mut f = facts();
        f[0].extra = Extra::default();
        f[0].fs = None;
        let m = pod_metrics(&stats(), "pod-a", &[], &f, 1);
        let c = &m.container_metrics[0].metrics;
        for gone in [
            "container_memory_rss",
            "container_threads",
            "container_fs_limit_bytes",
        ] {
            assert!(c.iter().all(|m| m.name != gone), "{gone}");
        }
        assert!(m
            .metrics
            .iter()
            .all(|m| !m.name.starts_with("container_network")));
    }

    #[test]
    fn containers_without_facts_are_left_out() {
        let m = pod_metrics(&stats(), "pod-a", &net(), &[], 1);
        assert!(m.container_metrics.is_empty());
        assert!(!m.metrics.is_empty());
    }

    #[test]
    fn descriptor_names_are_unique() {
        let mut names: Vec<String> = descriptors(true).into_iter().map(|d| d.name).collect();
        let n = names.len();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), n);
    }

    /// A container's PSI totals (nanoseconds in its stats) become cAdvisor's pressure
    /// counters in whole seconds, `waiting` from `some` and `stalled` from `full`; they are
    /// described only where the host has PSI.
    #[test]
    fn pressure_totals_become_the_pressure_counters() {
        let mut st = stats();
        let linux = st.linux.as_mut().unwrap();
        let data = |total| cri::PsiData {
            total,
            ..Default::default()
        };
        linux.containers[0].cpu = Some(cri::CpuUsage {
            timestamp: 1,
            psi: Some(cri::PsiStats {
                some: Some(data(7_500_000_000)),
                full: Some(data(2_000_000_000)),
            }),
            ..Default::default()
        });
        let m = pod_metrics(&st, "pod-a", &[], &facts(), 1);
        let c = &m.container_metrics[0].metrics;
        let value = |name| find(c, name).value.as_ref().unwrap().value;
        assert_eq!(value("container_pressure_cpu_waiting_seconds_total"), 7);
        assert_eq!(value("container_pressure_cpu_stalled_seconds_total"), 2);
        assert!(c
            .iter()
            .all(|m| !m.name.starts_with("container_pressure_io")));
        let described = |psi| {
            descriptors(psi)
                .iter()
                .filter(|d| d.name.starts_with("container_pressure_"))
                .count()
        };
        assert_eq!((described(true), described(false)), (6, 0));
    }
}
