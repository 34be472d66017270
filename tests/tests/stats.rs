//! Container and pod stats from real cgroups, writable layers and network namespaces.

use e2e::pods::{busybox, sh, Images};
use e2e::TestDaemon;
use peapod_proto::v1 as cri;
use std::time::Duration;
use tonic::Code;

const WAIT: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn container_and_pod_stats_report_cpu_memory_disk_network_and_processes() {
    let mut d = TestDaemon::start("stats").await;
    let images = Images::start();
    let image = images.push("busybox:stats", &busybox());
    d.pull(&image).await;
    let pod = d.run_pod("stats-pod").await;
    let gateway = d.gateway.clone();
    // 20 MB in the pod's /dev/shm (tmpfs pages are charged to the writer's memory cgroup and
    // cannot be reclaimed without swap), 5 MB written to the writable layer, some CPU burnt,
    // some packets sent.
    let script = format!(
        "dd if=/dev/zero of=/dev/shm/fill bs=1M count=20 2>/dev/null; dd if=/dev/zero of=/blob bs=1M count=5 2>/dev/null; \
         i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done; ping -c 2 -W 1 {gateway} >/dev/null; echo ready; sleep 300 & wait"
    );
    let id = d.run_container(&pod, sh("worker", &image, &script)).await;
    d.wait_log(&id, "ready", WAIT).await;

    let stats = |d: &mut TestDaemon, id: String| {
        let mut c = d.cri.runtime.clone();
        async move {
            c.container_stats(cri::ContainerStatsRequest { container_id: id })
                .await
                .map(|r| r.into_inner().stats.expect("stats"))
        }
    };
    let first = stats(&mut d, id.clone()).await.unwrap();
    assert_eq!(first.attributes.as_ref().unwrap().id, id);
    assert_eq!(
        first.attributes.as_ref().unwrap().labels["container"],
        "worker"
    );
    let cpu = first.cpu.as_ref().expect("cpu");
    assert!(
        cpu.usage_core_nano_seconds.as_ref().unwrap().value > 1_000_000,
        "{cpu:?}"
    );
    let mem = first.memory.as_ref().expect("memory");
    let working_set = mem.working_set_bytes.as_ref().unwrap().value;
    assert!(working_set > 15 << 20, "working set {working_set}");
    let layer = first.writable_layer.as_ref().expect("writable layer");
    assert!(
        layer.used_bytes.as_ref().unwrap().value >= 5 << 20,
        "{layer:?}"
    );
    assert!(layer.inodes_used.as_ref().unwrap().value >= 1);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let second = stats(&mut d, id.clone()).await.unwrap();
    assert!(
        second.cpu.unwrap().usage_nano_cores.is_some(),
        "a rate after two samples"
    );

    let listed = d
        .cri
        .runtime
        .list_container_stats(cri::ListContainerStatsRequest {
            filter: Some(cri::ContainerStatsFilter {
                pod_sandbox_id: pod.id.clone(),
                ..Default::default()
            }),
        })
        .await
        .unwrap()
        .into_inner()
        .stats;
    assert_eq!(listed.len(), 1);

    let pod_stats = d
        .cri
        .runtime
        .pod_sandbox_stats(cri::PodSandboxStatsRequest {
            pod_sandbox_id: pod.id.clone(),
        })
        .await
        .unwrap()
        .into_inner()
        .stats
        .unwrap();
    assert_eq!(pod_stats.attributes.as_ref().unwrap().id, pod.id);
    let linux = pod_stats.linux.unwrap();
    assert_eq!(linux.containers.len(), 1);
    let pod_ws = linux.memory.unwrap().working_set_bytes.unwrap().value;
    assert!(
        pod_ws >= working_set / 2,
        "pod {pod_ws} vs container {working_set}"
    );
    let net = linux.network.unwrap();
    let eth0 = net.default_interface.expect("eth0");
    assert_eq!(eth0.name, "eth0");
    assert!(eth0.tx_bytes.unwrap().value > 0 && eth0.rx_bytes.unwrap().value > 0);
    // pause, the shell and its sleep.
    assert!(linux.process.unwrap().process_count.unwrap().value >= 3);
    let all = d
        .cri
        .runtime
        .list_pod_sandbox_stats(cri::ListPodSandboxStatsRequest { filter: None })
        .await
        .unwrap()
        .into_inner()
        .stats;
    assert_eq!(all.len(), 1);

    let missing = stats(&mut d, "7".repeat(64)).await.unwrap_err();
    assert_eq!(missing.code(), Code::NotFound);
    d.remove_pod(&pod).await;
    assert!(d.leftovers().is_empty(), "{:#?}", d.leftovers());
}
