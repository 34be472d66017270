//! The calls and fields cri-api v0.37 added, against fakes: the Stream* lists against their
//! List calls (at the default batch size, with more items than one message), the sandbox
//! resources, the checkpoint calls, stop signals, mount options, env bytes, PSI, features.

use crate::stats::cgroup::{Pressure, Psi, PsiLine};
use crate::testing::Harness;
use peapod_proto::v1 as cri;
use peapod_proto::v1::runtime_service_server::RuntimeService;
use std::collections::HashMap;
use tokio_stream::StreamExt;
use tonic::{Code, Request};

/// Every message of a stream (each must arrive whole, none empty), then its end.
async fn messages<T>(stream: impl tokio_stream::Stream<Item = Result<T, tonic::Status>>) -> Vec<T> {
    let got: Vec<Result<T, tonic::Status>> = stream.collect().await;
    got.into_iter()
        .map(|m| m.expect("a message, not an error"))
        .collect()
}

fn labeled(h: &Harness, name: &str, tier: &str) -> cri::PodSandboxConfig {
    let mut config = h.pod_config(name);
    config.labels = HashMap::from([("tier".to_string(), tier.to_string())]);
    config
}

#[tokio::test]
async fn stream_pods_and_containers_are_their_list_in_batches() {
    let h = Harness::new().await;
    // More than one message (200 items) of each.
    let mut pods = Vec::new();
    for i in 0..230 {
        let tier = if i % 3 == 0 { "db" } else { "web" };
        let pod = h
            .run_pod_with(labeled(&h, &format!("p{i}"), tier))
            .await
            .expect("RunPodSandbox");
        pods.push(pod);
    }
    let first = pods[0].clone();
    for i in 0..205 {
        let c = h
            .create_container(&first, &format!("c{i}"))
            .await
            .expect("CreateContainer");
        if i % 2 == 0 {
            h.start_container(&c).await.expect("StartContainer");
        }
    }
    h.stop_pod(&pods[1]).await.expect("StopPodSandbox");

    let pod_filters = [
        None,
        Some(cri::PodSandboxFilter {
            label_selector: HashMap::from([("tier".to_string(), "web".to_string())]),
            ..Default::default()
        }),
        Some(cri::PodSandboxFilter {
            state: Some(cri::PodSandboxStateValue {
                state: cri::PodSandboxState::SandboxNotready as i32,
            }),
            ..Default::default()
        }),
        Some(cri::PodSandboxFilter {
            id: pods[7].clone(),
            ..Default::default()
        }),
        Some(cri::PodSandboxFilter {
            id: "no-such-pod".into(),
            ..Default::default()
        }),
    ];
    for filter in pod_filters {
        let list = h
            .cri
            .list_pod_sandbox(Request::new(cri::ListPodSandboxRequest {
                filter: filter.clone(),
            }))
            .await
            .expect("ListPodSandbox")
            .into_inner()
            .received()
            .expect("decode")
            .items;
        let stream = h
            .cri
            .stream_pod_sandboxes(Request::new(cri::StreamPodSandboxesRequest {
                filter: filter.clone(),
            }))
            .await
            .expect("StreamPodSandboxes")
            .into_inner();
        let msgs: Vec<_> = messages(stream)
            .await
            .iter()
            .map(|m| m.received().expect("decode"))
            .collect();
        assert!(msgs
            .iter()
            .all(|m| !m.pod_sandboxes.is_empty() && m.pod_sandboxes.len() <= 200));
        assert_eq!(msgs.len(), list.len().div_ceil(200), "{filter:?}");
        let streamed: Vec<cri::PodSandbox> =
            msgs.into_iter().flat_map(|m| m.pod_sandboxes).collect();
        assert_eq!(streamed, list, "{filter:?}");
    }

    let container_filters = [
        None,
        Some(cri::ContainerFilter {
            pod_sandbox_id: first.clone(),
            state: Some(cri::ContainerStateValue {
                state: cri::ContainerState::ContainerRunning as i32,
            }),
            ..Default::default()
        }),
        Some(cri::ContainerFilter {
            pod_sandbox_id: pods[2].clone(),
            ..Default::default()
        }),
    ];
    for filter in container_filters {
        let list = h
            .cri
            .list_containers(Request::new(cri::ListContainersRequest {
                filter: filter.clone(),
            }))
            .await
            .expect("ListContainers")
            .into_inner()
            .received()
            .expect("decode")
            .containers;
        let stream = h
            .cri
            .stream_containers(Request::new(cri::StreamContainersRequest {
                filter: filter.clone(),
            }))
            .await
            .expect("StreamContainers")
            .into_inner();
        let msgs: Vec<_> = messages(stream)
            .await
            .iter()
            .map(|m| m.received().expect("decode"))
            .collect();
        assert_eq!(msgs.len(), list.len().div_ceil(200), "{filter:?}");
        let streamed: Vec<cri::Container> = msgs.into_iter().flat_map(|m| m.containers).collect();
        assert_eq!(streamed, list, "{filter:?}");
    }
    assert_eq!(h.containers().await.len(), 205);

    // Stats: the same objects in the same order (the figures are sampled anew).
    let ids = |stats: &[cri::ContainerStats]| -> Vec<String> {
        stats
            .iter()
            .map(|s| {
                s.attributes
                    .as_ref()
                    .map(|a| a.id.clone())
                    .unwrap_or_default()
            })
            .collect()
    };
    let list = h
        .cri
        .list_container_stats(Request::new(cri::ListContainerStatsRequest {
            filter: None,
        }))
        .await
        .expect("ListContainerStats")
        .into_inner()
        .stats;
    assert_eq!(list.len(), 103);
    let stream = h
        .cri
        .stream_container_stats(Request::new(cri::StreamContainerStatsRequest {
            filter: None,
        }))
        .await
        .expect("StreamContainerStats")
        .into_inner();
    let streamed: Vec<cri::ContainerStats> = messages(stream)
        .await
        .into_iter()
        .flat_map(|m| m.container_stats)
        .collect();
    assert_eq!(ids(&streamed), ids(&list));

    let pod_ids = |stats: &[cri::PodSandboxStats]| -> Vec<String> {
        stats
            .iter()
            .map(|s| {
                s.attributes
                    .as_ref()
                    .map(|a| a.id.clone())
                    .unwrap_or_default()
            })
            .collect()
    };
    let filter = Some(cri::PodSandboxStatsFilter {
        label_selector: HashMap::from([("tier".to_string(), "db".to_string())]),
        ..Default::default()
    });
    let list = h
        .cri
        .list_pod_sandbox_stats(Request::new(cri::ListPodSandboxStatsRequest {
            filter: filter.clone(),
        }))
        .await
        .expect("ListPodSandboxStats")
        .into_inner()
        .stats;
    assert_eq!(list.len(), 77);
    let stream = h
        .cri
        .stream_pod_sandbox_stats(Request::new(cri::StreamPodSandboxStatsRequest { filter }))
        .await
        .expect("StreamPodSandboxStats")
        .into_inner();
    let streamed: Vec<cri::PodSandboxStats> = messages(stream)
        .await
        .into_iter()
        .flat_map(|m| m.pod_sandbox_stats)
        .collect();
    assert_eq!(pod_ids(&streamed), pod_ids(&list));

    let list = h
        .cri
        .list_pod_sandbox_metrics(Request::new(cri::ListPodSandboxMetricsRequest {}))
        .await
        .expect("ListPodSandboxMetrics")
        .into_inner()
        .pod_metrics;
    assert_eq!(list.len(), 229, "the ready pods");
    let stream = h
        .cri
        .stream_pod_sandbox_metrics(Request::new(cri::StreamPodSandboxMetricsRequest {}))
        .await
        .expect("StreamPodSandboxMetrics")
        .into_inner();
    let msgs = messages(stream).await;
    assert_eq!(msgs.len(), 2);
    let streamed: Vec<String> = msgs
        .into_iter()
        .flat_map(|m| m.pod_sandbox_metrics)
        .map(|m| m.pod_sandbox_id)
        .collect();
    let listed: Vec<String> = list.into_iter().map(|m| m.pod_sandbox_id).collect();
    assert_eq!(streamed, listed);
}

#[tokio::test]
async fn an_empty_stream_has_no_message() {
    let h = Harness::new().await;
    let stream = h
        .cri
        .stream_containers(Request::new(cri::StreamContainersRequest::default()))
        .await
        .expect("StreamContainers")
        .into_inner();
    assert!(messages(stream).await.is_empty());
    let stream = h
        .cri
        .stream_pod_sandboxes(Request::new(cri::StreamPodSandboxesRequest::default()))
        .await
        .expect("StreamPodSandboxes")
        .into_inner();
    assert!(messages(stream).await.is_empty());
}

#[tokio::test]
async fn update_pod_sandbox_resources_keeps_them_in_the_pod_config() {
    let mut h = Harness::new().await;
    let pod = h.run_pod("web").await.unwrap();
    let resources = cri::LinuxContainerResources {
        cpu_shares: 512,
        cpu_quota: 50_000,
        cpu_period: 100_000,
        memory_limit_in_bytes: 256 << 20,
        ..Default::default()
    };
    let overhead = cri::LinuxContainerResources {
        cpu_shares: 2,
        memory_limit_in_bytes: 16 << 20,
        ..Default::default()
    };
    h.cri
        .update_pod_sandbox_resources(Request::new(cri::UpdatePodSandboxResourcesRequest {
            pod_sandbox_id: pod.clone(),
            overhead: Some(overhead.clone()),
            resources: Some(resources.clone()),
        }))
        .await
        .expect("UpdatePodSandboxResources");
    let linux = |h: &Harness| {
        h.rt.sandboxes
            .records()
            .resolve(&pod)
            .unwrap()
            .get()
            .config
            .linux
            .unwrap_or_default()
    };
    assert_eq!(linux(&h).resources.as_ref(), Some(&resources));
    assert_eq!(linux(&h).overhead.as_ref(), Some(&overhead));
    // Kept across a restart: it is in the record.
    h.restart().await;
    assert_eq!(linux(&h).resources.as_ref(), Some(&resources));

    let missing = h
        .cri
        .update_pod_sandbox_resources(Request::new(cri::UpdatePodSandboxResourcesRequest {
            pod_sandbox_id: String::new(),
            resources: Some(resources.clone()),
            ..Default::default()
        }))
        .await
        .unwrap_err();
    assert_eq!(missing.code(), Code::InvalidArgument);
    assert!(missing.message().contains("pod_sandbox_id"), "{missing:?}");
    let unknown = h
        .cri
        .update_pod_sandbox_resources(Request::new(cri::UpdatePodSandboxResourcesRequest {
            pod_sandbox_id: "0123456789abcdef".into(),
            resources: Some(resources),
            ..Default::default()
        }))
        .await
        .unwrap_err();
    assert_eq!(unknown.code(), Code::NotFound, "{unknown:?}");
}

#[tokio::test]
async fn checkpoint_pod_and_restore_pod_are_unimplemented_by_name() {
    let h = Harness::new().await;
    let pod = h.run_pod("web").await.unwrap();
    let err = h
        .cri
        .checkpoint_pod(Request::new(cri::CheckpointPodRequest {
            pod_sandbox_id: pod,
            output_path: "/tmp/nowhere".into(),
            ..Default::default()
        }))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Unimplemented);
    assert!(err.message().contains("CheckpointPod"), "{err:?}");
    let err = h
        .cri
        .restore_pod(Request::new(cri::RestorePodRequest::default()))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Unimplemented);
    assert!(err.message().contains("RestorePod"), "{err:?}");
}

#[tokio::test]
async fn the_stop_signal_is_the_configs_else_the_images_and_stop_sends_it() {
    let h = Harness::new().await;
    h.images.add(
        "quits:1",
        peapod_image::ImageConfig {
            cmd: vec!["sh".into()],
            stop_signal: "SIGQUIT".into(),
            ..Default::default()
        },
    );
    let pod = h.run_pod("web").await.unwrap();
    let with_image = |name: &str, image: &str, signal: cri::Signal| {
        let mut c = h.container_config(name);
        c.image = Some(cri::ImageSpec {
            image: image.into(),
            ..Default::default()
        });
        c.stop_signal = signal as i32;
        c
    };
    for (name, image, asked, want, number) in [
        (
            "plain",
            "busybox:latest",
            cri::Signal::RuntimeDefault,
            cri::Signal::Sigterm,
            15,
        ),
        (
            "image",
            "quits:1",
            cri::Signal::RuntimeDefault,
            cri::Signal::Sigquit,
            3,
        ),
        (
            "config",
            "quits:1",
            cri::Signal::Sigusr1,
            cri::Signal::Sigusr1,
            10,
        ),
        (
            "rt",
            "busybox:latest",
            cri::Signal::Sigrtminplus2,
            cri::Signal::Sigrtminplus2,
            36,
        ),
    ] {
        let id = h
            .create_container_with(&pod, with_image(name, image, asked))
            .await
            .expect("CreateContainer");
        h.start_container(&id).await.unwrap();
        let status = h.container_status(&id).await.unwrap();
        assert_eq!(status.stop_signal, want as i32, "{name}");
        // The fake shim's process dies of the signal it gets.
        h.stop_container(&id, 10).await.unwrap();
        let status = h.container_status(&id).await.unwrap();
        assert_eq!(status.exit_code, 128 + number, "{name}");
        assert_eq!(
            status.stop_signal, want as i32,
            "{name}: still reported once exited"
        );
    }
    // A Signal value the enum does not have: refused, nothing made.
    let before = h.containers().await.len();
    let mut bad = h.container_config("bad");
    bad.stop_signal = 99;
    let err = h.create_container_with(&pod, bad).await.unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(err.message().contains("config.stop_signal"), "{err:?}");
    assert_eq!(h.containers().await.len(), before);
}

#[tokio::test]
async fn bad_mount_options_and_env_bytes_are_refused_before_anything_is_made() {
    let h = Harness::new().await;
    let pod = h.run_pod("web").await.unwrap();
    let dirs = h.object_dirs();
    let mut c = h.container_config("app");
    c.mounts = vec![cri::Mount {
        container_path: "/data".into(),
        host_path: h.dir.path().to_string_lossy().into_owned(),
        mount_options: vec!["noexec".into(), "exec".into()],
        ..Default::default()
    }];
    let err = h.create_container_with(&pod, c).await.unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(
        err.message().contains("config.mounts[0].mount_options[1]"),
        "{err:?}"
    );

    let mut c = h.container_config("app");
    c.envs = vec![cri::KeyValue {
        key: "BINARY".into(),
        value: vec![0xc3, 0x28],
    }];
    let err = h.create_container_with(&pod, c).await.unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(
        err.message().contains("config.envs[0]") && err.message().contains("BINARY"),
        "{err:?}"
    );
    assert!(h.containers().await.is_empty());
    assert_eq!(h.object_dirs(), dirs, "nothing made");
    assert!(
        h.images.rootfs_owners().len() <= 1,
        "only the pause's rootfs, if any"
    );
}

#[tokio::test]
async fn runtime_features_of_cri_1_37() {
    let h = Harness::new().await;
    let status = h
        .cri
        .status(Request::new(cri::StatusRequest { verbose: false }))
        .await
        .unwrap()
        .into_inner();
    let features = status.features.expect("features");
    assert!(features.mount_options);
    assert!(!features.user_namespaces_host_network);
    assert!(features.supplemental_groups_policy);
}

fn psi(avg10: f64, total_us: u64) -> Psi {
    let line = PsiLine {
        avg10,
        avg60: avg10 / 2.0,
        avg300: avg10 / 4.0,
        total_us,
    };
    Psi {
        some: Some(line),
        full: Some(PsiLine {
            total_us: total_us / 2,
            ..line
        }),
    }
}

#[tokio::test]
async fn stats_carry_psi_where_the_host_has_it() {
    let h = Harness::new().await;
    let mut config = h.pod_config("web");
    config.linux = Some(cri::LinuxPodSandboxConfig {
        cgroup_parent: "/kubepods/burstable/poduid-web".into(),
        ..Default::default()
    });
    let pod = h.run_pod_with(config).await.unwrap();
    let shared = h.run_pod("shared").await.unwrap();
    let c = h.run_container(&pod, "app").await;
    let pid = h.rt.containers.records().resolve(&c).unwrap().get().pid;
    h.process_stats.set(pid, 1_000, 4096, 1);
    h.process_stats.set_pressure(
        pid,
        Pressure {
            cpu: Some(psi(1.5, 1_000)),
            memory: Some(psi(0.5, 20)),
            io: Some(psi(2.0, 7)),
        },
    );
    let stats = h
        .cri
        .container_stats(Request::new(cri::ContainerStatsRequest {
            container_id: c.clone(),
        }))
        .await
        .unwrap()
        .into_inner()
        .stats
        .unwrap();
    let cpu_psi = stats.cpu.unwrap().psi.expect("cpu psi");
    let some = cpu_psi.some.unwrap();
    assert_eq!((some.avg10, some.avg60, some.avg300), (1.5, 0.75, 0.375));
    // Nanoseconds, the CRI's unit; the kernel counts microseconds.
    assert_eq!(some.total, 1_000_000);
    assert_eq!(cpu_psi.full.unwrap().total, 500_000);
    assert_eq!(
        stats.memory.unwrap().psi.unwrap().some.unwrap().total,
        20_000
    );
    let io = stats.io.expect("io usage");
    assert!(io.timestamp > 0);
    assert_eq!(io.psi.unwrap().some.unwrap().avg10, 2.0);

    // The pod's from its own cgroup (the parent of its pause's).
    let pause = |id: &str| {
        h.rt.sandboxes
            .records()
            .resolve(id)
            .unwrap()
            .get()
            .pause_pid
    };
    for id in [&pod, &shared] {
        h.process_stats.set(pause(id), 10, 10, 1);
        h.process_stats.set_parent_pressure(
            pause(id),
            Pressure {
                io: Some(psi(3.0, 1)),
                ..Default::default()
            },
        );
    }
    let pod_stats = |id: String| async {
        h.cri
            .pod_sandbox_stats(Request::new(cri::PodSandboxStatsRequest {
                pod_sandbox_id: id,
            }))
            .await
            .unwrap()
            .into_inner()
            .stats
            .unwrap()
            .linux
            .unwrap()
    };
    let linux = pod_stats(pod.clone()).await;
    assert_eq!(linux.io.unwrap().psi.unwrap().some.unwrap().avg10, 3.0);
    assert!(linux.cpu.unwrap().psi.is_none(), "no cpu.pressure there");
    // A pod under the shared default parent has no cgroup of its own to read.
    let linux = pod_stats(shared.clone()).await;
    assert!(linux.io.is_none());

    // A host without PSI: no psi, and no io (its only figure).
    h.process_stats.set(pid, 2_000, 4096, 1);
    let stats = h
        .cri
        .container_stats(Request::new(cri::ContainerStatsRequest { container_id: c }))
        .await
        .unwrap()
        .into_inner()
        .stats
        .unwrap();
    assert!(stats.cpu.unwrap().psi.is_none());
    assert!(stats.memory.unwrap().psi.is_none());
    assert!(stats.io.is_none());
}
