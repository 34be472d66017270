//! ListMetricDescriptors and ListPodSandboxMetrics: cAdvisor-named metrics from the same
//! cgroup, netns and writable-layer readings as the stats calls.

use e2e::pods::{busybox, sh, Images};
use e2e::TestDaemon;
use peapod_proto::v1 as cri;
use std::collections::HashMap;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pod_metrics_carry_the_containers_cpu_memory_disk_and_the_pods_network() {
    let mut d = TestDaemon::start("crimetrics").await;
    let images = Images::start();
    let image = images.push("busybox:crimetrics", &busybox());
    d.pull(&image).await;
    let pod = d.run_pod("metrics-pod").await;
    let gateway = d.gateway.clone();
    // 10 MB of memory held in /dev/shm, 3 MB on the writable layer, packets sent.
    let script = format!(
        "dd if=/dev/zero of=/dev/shm/fill bs=1M count=10 2>/dev/null; dd if=/dev/zero of=/blob bs=1M count=3 2>/dev/null; \
         ping -c 2 -W 1 {gateway} >/dev/null; echo ready; sleep 300 & wait"
    );
    let id = d.run_container(&pod, sh("worker", &image, &script)).await;
    d.wait_log(&id, "ready", Duration::from_secs(30)).await;

    let descriptors: HashMap<String, cri::MetricDescriptor> = d
        .metric_descriptors()
        .await
        .into_iter()
        .map(|desc| (desc.name.clone(), desc))
        .collect();
    for name in [
        "container_cpu_usage_seconds_total",
        "container_memory_working_set_bytes",
        "container_network_receive_bytes_total",
        "container_network_transmit_bytes_total",
        "container_fs_usage_bytes",
    ] {
        assert!(descriptors.contains_key(name), "{name} not described");
    }

    let pm = d.pod_metrics(&pod.id).await;
    let metrics: Vec<&cri::Metric> = pm
        .metrics
        .iter()
        .chain(pm.container_metrics.iter().flat_map(|c| c.metrics.iter()))
        .collect();
    for m in &metrics {
        let desc = &descriptors[&m.name];
        assert_eq!(desc.label_keys.len(), m.label_values.len(), "{}", m.name);
    }
    // Every described metric has a value for this pod (as the kubelet and critest expect),
    // but block I/O, which a virtual disk may not account per device.
    const MAY_BE_ABSENT: [&str; 5] = [
        "container_blkio_device_usage_total",
        "container_fs_reads_bytes_total",
        "container_fs_reads_total",
        "container_fs_writes_bytes_total",
        "container_fs_writes_total",
    ];
    for name in descriptors.keys() {
        if !MAY_BE_ABSENT.contains(&name.as_str()) {
            assert!(
                metrics.iter().any(|m| &m.name == name),
                "{name} has no value"
            );
        }
    }
    let value = |ms: &[cri::Metric], name: &str| -> u64 {
        ms.iter()
            .find(|m| m.name == name)
            .and_then(|m| m.value.as_ref())
            .unwrap_or_else(|| panic!("{name} missing"))
            .value
    };
    // The pod's eth0 sent the pings.
    let tx = pm
        .metrics
        .iter()
        .find(|m| m.name == "container_network_transmit_bytes_total" && m.label_values[3] == "eth0")
        .expect("eth0 transmit");
    assert!(tx.value.as_ref().unwrap().value > 0);
    let cm = pm
        .container_metrics
        .iter()
        .find(|c| c.container_id == id)
        .expect("the container's metrics");
    let threads = value(&cm.metrics, "container_threads");
    assert!(threads >= 2, "sh and sleep: {threads} threads");
    let fds = value(&cm.metrics, "container_file_descriptors");
    assert!(fds >= 3, "{fds} descriptors");
    let rx_packets = pm
        .metrics
        .iter()
        .find(|m| {
            m.name == "container_network_receive_packets_total" && m.label_values[3] == "eth0"
        })
        .expect("eth0 packets");
    assert!(rx_packets.value.as_ref().unwrap().value > 0);
    let ws = value(&cm.metrics, "container_memory_working_set_bytes");
    assert!(ws > 8 << 20, "working set {ws}");
    let fs = value(&cm.metrics, "container_fs_usage_bytes");
    assert!(fs >= 3 << 20, "writable layer {fs}");
    let name = cm
        .metrics
        .iter()
        .find(|m| m.name == "container_memory_working_set_bytes")
        .unwrap();
    assert_eq!(name.label_values[0], id);
    assert_eq!(name.label_values[1], "worker");
    d.remove_pod(&pod).await;
}
