//! The stats calls against fakes: what each reports for running and stopped containers and
//! for a pod, from the figures the fake host gives.

use crate::testing::Harness;
use peapod_proto::v1 as cri;
use peapod_proto::v1::runtime_service_server::RuntimeService;
use tonic::Request;

async fn container_stats(h: &Harness, id: &str) -> cri::ContainerStats {
    let req = cri::ContainerStatsRequest {
        container_id: id.into(),
    };
    let resp = h.cri.container_stats(Request::new(req)).await.unwrap();
    resp.into_inner().stats.expect("stats")
}

async fn pod_stats(h: &Harness, id: &str) -> cri::LinuxPodSandboxStats {
    let req = cri::PodSandboxStatsRequest {
        pod_sandbox_id: id.into(),
    };
    let resp = h.cri.pod_sandbox_stats(Request::new(req)).await.unwrap();
    resp.into_inner()
        .stats
        .expect("stats")
        .linux
        .expect("linux")
}

fn pid_of(h: &Harness, container: &str) -> u32 {
    h.rt.containers
        .records()
        .resolve(container)
        .unwrap()
        .get()
        .pid
}

fn pause_pid(h: &Harness, pod: &str) -> u32 {
    h.rt.sandboxes
        .records()
        .resolve(pod)
        .unwrap()
        .get()
        .pause_pid
}

fn value(v: &Option<cri::UInt64Value>) -> Option<u64> {
    v.as_ref().map(|v| v.value)
}

#[tokio::test]
async fn a_running_container_reports_cpu_memory_and_a_rate_from_its_first_sample() {
    let h = Harness::new().await;
    let pod = h.run_pod("web").await.unwrap();
    let c = h.run_container(&pod, "app").await;
    let pid = pid_of(&h, &c);
    h.process_stats.set(pid, 1_000_000_000, 50 << 20, 3);

    let first = container_stats(&h, &c).await;
    assert_eq!(first.attributes.unwrap().id, c);
    let cpu = first.cpu.expect("cpu");
    assert_eq!(value(&cpu.usage_core_nano_seconds), Some(1_000_000_000));
    // Younger than the rate's window: its average since it was made (its counter's zero).
    assert!(
        value(&cpu.usage_nano_cores).is_some_and(|r| r > 0),
        "a rate from its first sample: {cpu:?}"
    );
    let memory = first.memory.expect("memory");
    assert_eq!(value(&memory.working_set_bytes), Some(50 << 20));

    h.process_stats.set(pid, 3_000_000_000, 50 << 20, 3);
    let second = container_stats(&h, &c).await;
    assert!(value(&second.cpu.unwrap().usage_nano_cores).is_some_and(|r| r > 0));
}

#[tokio::test]
async fn a_container_that_is_not_running_reports_no_usage() {
    let h = Harness::new().await;
    let pod = h.run_pod("web").await.unwrap();
    let c = h.create_container(&pod, "app").await.unwrap();
    h.process_stats.set(pid_of(&h, &c), 1, 1, 1);
    let stats = container_stats(&h, &c).await;
    assert!(stats.cpu.is_none() && stats.memory.is_none(), "{stats:?}");
    let req = cri::ContainerStatsRequest {
        container_id: "nosuch".into(),
    };
    let err = h.cri.container_stats(Request::new(req)).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::NotFound);
}

#[tokio::test]
async fn a_pod_sums_its_pause_and_running_containers_and_reads_its_network() {
    let h = Harness::new().await;
    let pod = h.run_pod("web").await.unwrap();
    let running = h.run_container(&pod, "app").await;
    let created = h.create_container(&pod, "idle").await.unwrap();
    h.process_stats.set(pause_pid(&h, &pod), 10, 1_000, 1);
    h.process_stats.set(pid_of(&h, &running), 20, 2_000, 2);
    h.process_stats.set(pid_of(&h, &created), 40, 4_000, 4);
    h.process_stats.set_net_dev(
        pause_pid(&h, &pod),
        "h1\nh2\n    lo: 1 1 0 0 0 0 0 0 1 1 0 0 0 0 0 0\n  eth0: 500 4 2 0 0 0 0 0 300 3 1 0 0 0 0 0\n",
    );

    let stats = pod_stats(&h, &pod).await;
    assert_eq!(value(&stats.cpu.unwrap().usage_core_nano_seconds), Some(30));
    assert_eq!(value(&stats.memory.unwrap().usage_bytes), Some(3_000));
    assert_eq!(value(&stats.process.unwrap().process_count), Some(3));
    assert_eq!(stats.containers.len(), 1, "only the running container");
    let network = stats.network.expect("the pod's network");
    let eth0 = network.default_interface.expect("eth0");
    assert_eq!(value(&eth0.rx_bytes), Some(500));
    assert_eq!(network.interfaces.len(), 1, "loopback is left out");
}

/// A pod in a cgroup of its own (the kubelet's pod<uid>, its config's cgroup parent) reports
/// that cgroup's CPU and memory: with its limit, so available bytes (the node conformance
/// Summary spec found them missing), and cumulative over restarts of its containers.
#[tokio::test]
async fn a_pod_with_its_own_cgroup_reports_that_cgroups_figures() {
    let h = Harness::new().await;
    let mut config = h.pod_config("own");
    config.linux = Some(cri::LinuxPodSandboxConfig {
        cgroup_parent: "/kubepods/burstable/podown".into(),
        ..Default::default()
    });
    let pod = h.run_pod_with(config).await.unwrap();
    let running = h.run_container(&pod, "app").await;
    h.process_stats.set(pause_pid(&h, &pod), 10, 1_000, 1);
    h.process_stats.set(pid_of(&h, &running), 20, 2_000, 2);
    h.process_stats.set_parent_usage(
        pause_pid(&h, &pod),
        crate::stats::cgroup::Usage {
            cpu_ns: Some(900),
            memory_usage: Some(6_000),
            working_set: Some(5_000),
            memory_limit: Some(80_000),
            ..Default::default()
        },
    );
    let stats = pod_stats(&h, &pod).await;
    assert_eq!(
        value(&stats.cpu.unwrap().usage_core_nano_seconds),
        Some(900)
    );
    let memory = stats.memory.unwrap();
    assert_eq!(value(&memory.working_set_bytes), Some(5_000));
    assert_eq!(value(&memory.available_bytes), Some(75_000));
    assert_eq!(
        value(&stats.process.unwrap().process_count),
        Some(3),
        "still counted per process"
    );

    // Without a cgroup of its own (the harness's other pods), the sum, with no limit.
    let plain = h.run_pod("plain").await.unwrap();
    h.process_stats.set(pause_pid(&h, &plain), 10, 1_000, 1);
    let stats = pod_stats(&h, &plain).await;
    assert_eq!(value(&stats.memory.unwrap().available_bytes), None);
}

#[tokio::test]
async fn list_container_stats_filters_by_pod() {
    let h = Harness::new().await;
    let a = h.run_pod("a").await.unwrap();
    let b = h.run_pod("b").await.unwrap();
    for pod in [&a, &b] {
        h.run_container(pod, "app").await;
    }
    let list = |pod: &str| {
        let req = cri::ListContainerStatsRequest {
            filter: Some(cri::ContainerStatsFilter {
                pod_sandbox_id: pod.into(),
                ..Default::default()
            }),
        };
        h.cri.list_container_stats(Request::new(req))
    };
    let stats = list(&a).await.unwrap().into_inner().stats;
    assert_eq!(stats.len(), 1);
    let all = list("").await.unwrap().into_inner().stats;
    assert_eq!(all.len(), 2);
}
