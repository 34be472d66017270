//! ListMetricDescriptors and ListPodSandboxMetrics: the stats readings (the same cgroup, netns
//! and writable-layer figures as PodSandboxStats) as cAdvisor-named metrics, which the kubelet
//! exports on /metrics/cadvisor when it takes pod and container stats from the runtime.
//!
//! Every metric carries the label keys `id`, `name`, `image` (container id, container name,
//! image reference; for pod-level metrics the sandbox id and pod name, with no image), plus
//! `interface` for network and `device` for filesystem metrics. CRI metric values are
//! integers, so seconds are whole seconds, as containerd and CRI-O report them.

use peapod_proto::v1 as cri;
use peapod_proto::v1::LinuxContainerResources;

const BASE: [&str; 3] = ["id", "name", "image"];

#[derive(Clone, Copy, PartialEq, Eq)]
enum Extra {
    None,
    Interface,
    Device,
}

struct Desc {
    name: &'static str,
    help: &'static str,
    extra: Extra,
}

const DESCRIPTORS: &[Desc] = &[
    Desc {
        name: "container_cpu_usage_seconds_total",
        help: "Cumulative cpu time consumed in seconds.",
        extra: Extra::None,
    },
    Desc {
        name: "container_memory_usage_bytes",
        help: "Current memory usage in bytes, including all memory regardless of when it was accessed.",
        extra: Extra::None,
    },
    Desc {
        name: "container_memory_working_set_bytes",
        help: "Current working set in bytes.",
        extra: Extra::None,
    },
    Desc {
        name: "container_memory_rss",
        help: "Size of RSS in bytes.",
        extra: Extra::None,
    },
    Desc {
        name: "container_memory_failures_total",
        help: "Cumulative count of page faults (pgfault) of the container.",
        extra: Extra::None,
    },
    Desc {
        name: "container_spec_cpu_shares",
        help: "CPU share of the container.",
        extra: Extra::None,
    },
    Desc {
        name: "container_spec_cpu_quota",
        help: "CPU quota of the container.",
        extra: Extra::None,
    },
    Desc {
        name: "container_spec_cpu_period",
        help: "CPU period of the container.",
        extra: Extra::None,
    },
    Desc {
        name: "container_spec_memory_limit_bytes",
        help: "Memory limit for the container.",
        extra: Extra::None,
    },
    Desc {
        name: "container_start_time_seconds",
        help: "Start time of the container since unix epoch in seconds.",
        extra: Extra::None,
    },
    Desc {
        name: "container_last_seen",
        help: "Last time a container was seen by the exporter.",
        extra: Extra::None,
    },
    Desc {
        name: "container_processes",
        help: "Number of processes running inside the pod (pause included).",
        extra: Extra::None,
    },
    Desc {
        name: "container_fs_usage_bytes",
        help: "Number of bytes that are consumed by the container on this filesystem.",
        extra: Extra::Device,
    },
    Desc {
        name: "container_fs_inodes_total",
        help: "Number of inodes used by the container on this filesystem.",
        extra: Extra::Device,
    },
    Desc {
        name: "container_network_receive_bytes_total",
        help: "Cumulative count of bytes received.",
        extra: Extra::Interface,
    },
    Desc {
        name: "container_network_receive_errors_total",
        help: "Cumulative count of errors encountered while receiving.",
        extra: Extra::Interface,
    },
    Desc {
        name: "container_network_transmit_bytes_total",
        help: "Cumulative count of bytes transmitted.",
        extra: Extra::Interface,
    },
    Desc {
        name: "container_network_transmit_errors_total",
        help: "Cumulative count of errors encountered while transmitting.",
        extra: Extra::Interface,
    },
];

/// Every metric ListPodSandboxMetrics can report.
pub fn descriptors() -> Vec<cri::MetricDescriptor> {
    DESCRIPTORS
        .iter()
        .map(|d| {
            let mut keys: Vec<String> = BASE.iter().map(|s| s.to_string()).collect();
            match d.extra {
                Extra::None => {}
                Extra::Interface => keys.push("interface".into()),
                Extra::Device => keys.push("device".into()),
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
}

/// Collects metrics of one object (a container, or the pod itself).
struct Emitter {
    at: i64,
    labels: Vec<String>,
    out: Vec<cri::Metric>,
}

impl Emitter {
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

/// The metrics of one pod from its stats and the facts of its running containers.
pub fn pod_metrics(
    stats: &cri::PodSandboxStats,
    pod_name: &str,
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
    if let Some(net) = &linux.network {
        for i in &net.interfaces {
            let name = Some(i.name.as_str());
            pod.push(
                "container_network_receive_bytes_total",
                Counter,
                name,
                val(&i.rx_bytes),
            );
            pod.push(
                "container_network_receive_errors_total",
                Counter,
                name,
                val(&i.rx_errors),
            );
            pod.push(
                "container_network_transmit_bytes_total",
                Counter,
                name,
                val(&i.tx_bytes),
            );
            pod.push(
                "container_network_transmit_errors_total",
                Counter,
                name,
                val(&i.tx_errors),
            );
        }
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
        if let Some(cpu) = &c.cpu {
            let secs = val(&cpu.usage_core_nano_seconds).map(|ns| ns / 1_000_000_000);
            e.push("container_cpu_usage_seconds_total", Counter, None, secs);
        }
        if let Some(m) = &c.memory {
            e.push(
                "container_memory_usage_bytes",
                Gauge,
                None,
                val(&m.usage_bytes),
            );
            e.push(
                "container_memory_working_set_bytes",
                Gauge,
                None,
                val(&m.working_set_bytes),
            );
            e.push("container_memory_rss", Gauge, None, val(&m.rss_bytes));
            e.push(
                "container_memory_failures_total",
                Counter,
                None,
                val(&m.page_faults),
            );
        }
        if let Some(fs) = &c.writable_layer {
            let device = fs.fs_id.as_ref().map(|f| f.mountpoint.as_str());
            e.push(
                "container_fs_usage_bytes",
                Gauge,
                device,
                val(&fs.used_bytes),
            );
            e.push(
                "container_fs_inodes_total",
                Gauge,
                device,
                val(&fs.inodes_used),
            );
        }
        if let Some(r) = &facts.resources {
            let positive = |v: i64| (v > 0).then_some(v as u64);
            e.push(
                "container_spec_cpu_shares",
                Gauge,
                None,
                positive(r.cpu_shares),
            );
            e.push(
                "container_spec_cpu_quota",
                Gauge,
                None,
                positive(r.cpu_quota),
            );
            e.push(
                "container_spec_cpu_period",
                Gauge,
                None,
                positive(r.cpu_period),
            );
            let limit = positive(r.memory_limit_in_bytes);
            e.push("container_spec_memory_limit_bytes", Gauge, None, limit);
        }
        let start = (facts.started_at_ns > 0).then_some(facts.started_at_ns as u64 / 1_000_000_000);
        e.push("container_start_time_seconds", Gauge, None, start);
        let seen = (now_ns > 0).then_some(now_ns as u64 / 1_000_000_000);
        e.push("container_last_seen", Gauge, None, seen);
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
                    }),
                    memory: Some(cri::MemoryUsage {
                        working_set_bytes: u(4096),
                        usage_bytes: u(8192),
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

    #[test]
    fn every_metric_matches_its_descriptor() {
        let descs = descriptors();
        let facts = vec![ContainerFacts {
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
        }];
        let m = pod_metrics(&stats(), "pod-a", &facts, 9_500_000_000);
        assert_eq!(m.pod_sandbox_id, "sb1");
        let all: Vec<&cri::Metric> = m
            .metrics
            .iter()
            .chain(m.container_metrics.iter().flat_map(|c| c.metrics.iter()))
            .collect();
        for metric in &all {
            let d = descs
                .iter()
                .find(|d| d.name == metric.name)
                .unwrap_or_else(|| panic!("no descriptor for {}", metric.name));
            assert_eq!(
                d.label_keys.len(),
                metric.label_values.len(),
                "{}",
                metric.name
            );
        }
        // Pod level: network by interface, processes.
        let rx = find(&m.metrics, "container_network_receive_bytes_total");
        assert_eq!(rx.label_values, ["sb1", "pod-a", "", "eth0"]);
        assert_eq!(rx.value.as_ref().unwrap().value, 500);
        assert_eq!(rx.metric_type, cri::MetricType::Counter as i32);
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
            find(c, "container_spec_cpu_quota")
                .value
                .as_ref()
                .unwrap()
                .value,
            50_000
        );
        assert_eq!(
            find(c, "container_start_time_seconds")
                .value
                .as_ref()
                .unwrap()
                .value,
            7
        );
        assert_eq!(find(c, "container_last_seen").timestamp, 9_500_000_000);
        // Nothing read, nothing reported (no rss in the stats).
        assert!(c.iter().all(|m| m.name != "container_memory_rss"));
    }

    #[test]
    fn containers_without_facts_are_left_out() {
        let m = pod_metrics(&stats(), "pod-a", &[], 1);
        assert!(m.container_metrics.is_empty());
        assert!(!m.metrics.is_empty());
    }

    #[test]
    fn descriptor_names_are_unique() {
        let mut names: Vec<String> = descriptors().into_iter().map(|d| d.name).collect();
        let n = names.len();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), n);
    }
}
