//! CreateContainer, StartContainer, StopContainer and RemoveContainer against fakes: what
//! each makes, and that every failure path removes it all and frees the name.

use crate::testing::Harness;
use peapod_proto::v1::ContainerState;
use std::collections::BTreeSet;
use tonic::Code;

fn set(items: &[&str]) -> BTreeSet<String> {
    items.iter().map(|s| s.to_string()).collect()
}

#[tokio::test]
async fn create_start_stop_remove() {
    let h = Harness::new().await;
    let pod = h.run_pod("web").await.unwrap();
    let c = h
        .create_container(&pod, "app")
        .await
        .expect("CreateContainer");
    assert_eq!(
        h.container_state(&c).await,
        ContainerState::ContainerCreated
    );
    assert_eq!(h.images.rootfs_owners(), set(&[&c]));
    assert_eq!(h.shim_tasks(&pod), set(&[&pod, &c]));
    assert_eq!(
        h.host.warmed(),
        2,
        "the pause's and the container's cgroup moves announced"
    );

    h.start_container(&c).await.expect("StartContainer");
    assert_eq!(
        h.container_state(&c).await,
        ContainerState::ContainerRunning
    );
    // A retry of a start (its first call's deadline expired after the start) is fine.
    h.start_container(&c)
        .await
        .expect("StartContainer of a running container");

    h.stop_container(&c, 10).await.expect("StopContainer");
    let status = h.container_status(&c).await.unwrap();
    assert_eq!(status.state, ContainerState::ContainerExited as i32);
    assert_eq!(
        status.exit_code,
        128 + libc::SIGTERM,
        "the stop signal killed it"
    );
    assert_eq!(status.reason, "Error");
    h.stop_container(&c, 10).await.expect("stopping it again");
    let err = h.start_container(&c).await.unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition, "{err:?}");

    h.remove_container(&c).await.expect("RemoveContainer");
    assert!(h.containers().await.is_empty());
    assert!(h.images.rootfs_owners().is_empty(), "rootfs released");
    assert_eq!(h.shim_tasks(&pod), set(&[&pod]), "task deleted");
    assert_eq!(
        h.container_status(&c).await.unwrap_err().code(),
        Code::NotFound
    );
    h.stop_container(&c, 0)
        .await
        .expect("StopContainer of an unknown id");
    h.remove_container(&c)
        .await
        .expect("RemoveContainer of an unknown id");

    h.remove_pod(&pod).await.unwrap();
    h.assert_nothing_left().await;
}

/// Creates a container with `call` failing: the error names it, nothing of the container is
/// left, and the same name is free once the fault is gone.
async fn create_failure_leaves_nothing(call: &str) -> Harness {
    let h = Harness::new().await;
    let pod = h.run_pod("web").await.unwrap();
    h.faults.fail(call);
    let err = h.create_container(&pod, "app").await.unwrap_err();
    assert!(err.message().contains(call), "{call}: {err:?}");
    assert!(h.containers().await.is_empty(), "no record");
    assert!(h.images.rootfs_owners().is_empty(), "no rootfs");
    assert_eq!(h.shim_tasks(&pod), set(&[&pod]), "no task");
    let dirs = h.container_dirs();
    assert!(dirs.is_empty(), "container directories left: {dirs:?}");

    h.faults.heal(call);
    let c = h
        .create_container(&pod, "app")
        .await
        .expect("the name is free again");
    h.remove_container(&c).await.unwrap();
    h.remove_pod(&pod).await.unwrap();
    h.assert_nothing_left().await;
    h
}

#[tokio::test]
async fn shim_create_failure_releases_the_rootfs() {
    let h = create_failure_leaves_nothing("shim.create").await;
    assert!(h.faults.count("rootfs.remove") >= 1);
}

#[tokio::test]
async fn rootfs_failure_leaves_nothing() {
    let h = create_failure_leaves_nothing("rootfs.create").await;
    // The pause's create and the second (healed) container's create only.
    assert_eq!(h.faults.count("shim.create"), 2);
}

#[tokio::test]
async fn shim_unreachable_at_create_leaves_nothing() {
    create_failure_leaves_nothing("shim.get").await;
}

#[tokio::test]
async fn an_unknown_image_is_not_found_and_makes_nothing() {
    let h = Harness::new().await;
    let pod = h.run_pod("web").await.unwrap();
    let mut config = h.container_config("app");
    config.image.as_mut().unwrap().image = "nosuch:1".into();
    let err = h.create_container_with(&pod, config).await.unwrap_err();
    assert_eq!(err.code(), Code::NotFound, "{err:?}");
    assert!(err.message().contains("nosuch:1"), "{err:?}");
    assert_eq!(h.faults.count("rootfs.create"), 0);
    assert!(h.containers().await.is_empty());
}

#[tokio::test]
async fn a_taken_name_is_already_exists() {
    let h = Harness::new().await;
    let pod = h.run_pod("web").await.unwrap();
    let c = h.create_container(&pod, "app").await.unwrap();
    let mut other = h.container_config("app");
    other.command = vec!["/bin/other".into()];
    let err = h.create_container_with(&pod, other).await.unwrap_err();
    assert_eq!(err.code(), Code::AlreadyExists);
    assert!(err.message().contains(&c), "{err:?}");
    let again = h.create_container(&pod, "app").await.unwrap();
    assert_eq!(again, c, "an identical request gets the first container");
    assert_eq!(h.containers().await.len(), 1);
    assert_eq!(
        h.images.rootfs_owners(),
        set(&[&c]),
        "the first keeps its rootfs"
    );
}

#[tokio::test]
async fn create_needs_a_ready_pod() {
    let h = Harness::new().await;
    let pod = h.run_pod("web").await.unwrap();
    h.stop_pod(&pod).await.unwrap();
    let err = h.create_container(&pod, "app").await.unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition, "{err:?}");
    let err = h.create_container("nosuchpod", "app").await.unwrap_err();
    assert_eq!(err.code(), Code::NotFound, "{err:?}");
    assert!(h.images.rootfs_owners().is_empty());
}

#[tokio::test]
async fn a_failed_start_is_exited_with_128_and_keeps_the_record() {
    let h = Harness::new().await;
    let pod = h.run_pod("web").await.unwrap();
    let c = h.create_container(&pod, "app").await.unwrap();
    h.faults.fail("shim.start_task");
    let err = h.start_container(&c).await.unwrap_err();
    assert!(err.message().contains("shim.start_task"), "{err:?}");
    let status = h.container_status(&c).await.unwrap();
    assert_eq!(status.state, ContainerState::ContainerExited as i32);
    assert_eq!(status.exit_code, 128);
    assert_eq!(status.reason, "StartError");

    h.remove_container(&c).await.expect("RemoveContainer");
    assert!(h.images.rootfs_owners().is_empty());
}

#[tokio::test]
async fn remove_kills_a_running_container() {
    let h = Harness::new().await;
    let pod = h.run_pod("web").await.unwrap();
    let c = h.run_container(&pod, "app").await;
    h.remove_container(&c).await.expect("RemoveContainer");
    assert_eq!(h.faults.count("shim.kill"), 1);
    assert_eq!(h.shim_tasks(&pod), set(&[&pod]));
    assert!(h.containers().await.is_empty());
    assert!(h.images.rootfs_owners().is_empty());
}

#[tokio::test]
async fn a_failed_rootfs_release_keeps_the_record_for_a_retry() {
    let h = Harness::new().await;
    let pod = h.run_pod("web").await.unwrap();
    let c = h.create_container(&pod, "app").await.unwrap();
    h.faults.fail("rootfs.remove");
    let err = h.remove_container(&c).await.unwrap_err();
    assert!(err.message().contains("rootfs.remove"), "{err:?}");
    assert_eq!(h.containers().await.len(), 1);

    h.faults.heal("rootfs.remove");
    h.remove_container(&c).await.expect("the retry");
    assert!(h.containers().await.is_empty());
    assert!(h.images.rootfs_owners().is_empty());
}

#[tokio::test]
async fn exec_uses_the_process_kept_from_create_not_config_json() {
    let h = Harness::new().await;
    let pod = h.run_pod("web").await.unwrap();
    let mut config = h.container_config("app");
    config.working_dir = "/srv".into();
    let c = h.create_container_with(&pod, config).await.unwrap();
    let rec = h.rt.containers.records().resolve(&c).unwrap().get();
    // Were it read again, exec would fail now.
    std::fs::remove_file(rec.bundle.join("config.json")).unwrap();

    let cmd = vec!["true".to_string()];
    let json =
        h.rt.containers
            .exec_process_json(&rec, &cmd, false)
            .unwrap();
    let process: serde_json::Value = serde_json::from_slice(&json).unwrap();
    assert_eq!(process["args"], serde_json::json!(["true"]));
    assert_eq!(
        process["cwd"], "/srv",
        "the container's own process, args replaced"
    );

    h.remove_container(&c).await.unwrap();
    let err =
        h.rt.containers
            .exec_process_json(&rec, &cmd, false)
            .unwrap_err();
    assert!(
        err.message().contains("config.json"),
        "forgotten on remove: {err}"
    );
}

async fn update_cpu_shares(h: &Harness, id: &str, shares: i64) -> Result<(), tonic::Status> {
    use peapod_proto::v1::runtime_service_server::RuntimeService;
    let req = peapod_proto::v1::UpdateContainerResourcesRequest {
        container_id: id.into(),
        linux: Some(peapod_proto::v1::LinuxContainerResources {
            cpu_shares: shares,
            ..Default::default()
        }),
        ..Default::default()
    };
    h.cri
        .update_container_resources(tonic::Request::new(req))
        .await
        .map(drop)
}

async fn cpu_shares(h: &Harness, id: &str) -> Option<i64> {
    let status = h.container_status(id).await.unwrap();
    Some(status.resources?.linux?.cpu_shares)
}

#[tokio::test]
async fn update_resources_is_recorded_only_when_the_shim_applied_it() {
    let h = Harness::new().await;
    let pod = h.run_pod("web").await.unwrap();
    let c = h.run_container(&pod, "app").await;

    update_cpu_shares(&h, &c, 512)
        .await
        .expect("UpdateContainerResources");
    assert_eq!(cpu_shares(&h, &c).await, Some(512));

    h.faults.fail("shim.update");
    let err = update_cpu_shares(&h, &c, 1024).await.unwrap_err();
    assert!(err.message().contains("shim.update"), "{err:?}");
    assert_eq!(cpu_shares(&h, &c).await, Some(512), "unchanged");

    h.faults.heal("shim.update");
    h.stop_container(&c, 0).await.unwrap();
    let err = update_cpu_shares(&h, &c, 1024).await.unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition, "{err:?}");
}

#[tokio::test]
async fn reopen_log_needs_a_running_container() {
    use peapod_proto::v1::runtime_service_server::RuntimeService;
    let h = Harness::new().await;
    let pod = h.run_pod("web").await.unwrap();
    let c = h.create_container(&pod, "app").await.unwrap();
    let reopen = |id: &str| {
        let req = peapod_proto::v1::ReopenContainerLogRequest {
            container_id: id.into(),
        };
        h.cri.reopen_container_log(tonic::Request::new(req))
    };
    let err = reopen(&c).await.unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition, "{err:?}");
    h.start_container(&c).await.unwrap();
    reopen(&c).await.expect("ReopenContainerLog");
    assert_eq!(h.faults.count("shim.reopen_log"), 1);
    assert_eq!(reopen("nosuch").await.unwrap_err().code(), Code::NotFound);
}

#[tokio::test]
async fn a_restarted_daemon_keeps_records_names_exits_and_exec() {
    let mut h = Harness::new().await;
    let pod = h.run_pod("web").await.unwrap();
    let c = h.run_container(&pod, "app").await;

    h.restart().await;
    assert_eq!(h.pods().await.len(), 1);
    assert_eq!(
        h.container_state(&c).await,
        ContainerState::ContainerRunning
    );
    let mut other = h.container_config("app");
    other.command = vec!["/bin/other".into()];
    let err = h.create_container_with(&pod, other).await.unwrap_err();
    assert_eq!(err.code(), Code::AlreadyExists, "the name stays reserved");
    let again = h.create_container(&pod, "app").await.unwrap();
    assert_eq!(
        again, c,
        "and an identical request still gets the container"
    );

    // The process spec was reloaded at start, not on demand.
    let rec = h.rt.containers.records().resolve(&c).unwrap().get();
    std::fs::remove_file(rec.bundle.join("config.json")).unwrap();
    let cmd = vec!["true".to_string()];
    h.rt.containers
        .exec_process_json(&rec, &cmd, false)
        .expect("the kept process");

    // An exit while this daemon runs is recorded by the resumed watch.
    let mut events = h.rt.events.subscribe();
    let shim = h.shims.shim(&pod).unwrap();
    crate::shim::Shim::kill(shim.as_ref(), &c, "", 9, false)
        .await
        .unwrap();
    loop {
        let event = events.recv().await.expect("an event");
        if event.container_id == c
            && event.container_event_type
                == peapod_proto::v1::ContainerEventType::ContainerStoppedEvent as i32
        {
            break;
        }
    }
    let status = h.container_status(&c).await.unwrap();
    assert_eq!(status.state, ContainerState::ContainerExited as i32);
    assert_eq!(status.exit_code, 137);

    h.remove_pod(&pod).await.unwrap();
    h.assert_nothing_left().await;
}

#[tokio::test]
async fn a_failed_stop_leaves_the_container_running_for_a_retry() {
    let h = Harness::new().await;
    let pod = h.run_pod("web").await.unwrap();
    let c = h.run_container(&pod, "app").await;
    h.faults.fail("shim.kill");
    let err = h.stop_container(&c, 10).await.unwrap_err();
    assert!(err.message().contains("shim.kill"), "{err:?}");
    assert_eq!(
        h.container_state(&c).await,
        ContainerState::ContainerRunning
    );

    h.faults.heal("shim.kill");
    h.stop_container(&c, 10).await.expect("the retry");
    assert_eq!(h.container_state(&c).await, ContainerState::ContainerExited);
}

#[tokio::test]
async fn a_failed_task_delete_keeps_the_record_and_rootfs_for_a_retry() {
    let h = Harness::new().await;
    let pod = h.run_pod("web").await.unwrap();
    let c = h.create_container(&pod, "app").await.unwrap();
    h.faults.fail("shim.delete");
    let err = h.remove_container(&c).await.unwrap_err();
    assert!(err.message().contains("shim.delete"), "{err:?}");
    assert_eq!(h.containers().await.len(), 1);
    assert_eq!(h.images.rootfs_owners(), set(&[&c]));

    h.faults.heal("shim.delete");
    h.remove_container(&c).await.expect("the retry");
    assert!(h.containers().await.is_empty());
    assert!(h.images.rootfs_owners().is_empty());
}

/// The kubelet creates a container with the image's id and the pod spec's image in
/// user_specified_image; ContainerStatus and ListContainers report the latter (the kubelet
/// shows it as the pod's status.containerStatuses[].image, which the node conformance specs
/// that update a container's image compare with the spec's image), the id and the digested
/// reference beside it. Without user_specified_image, the image as given.
#[tokio::test]
async fn the_image_is_reported_as_the_user_named_it() {
    let h = Harness::new().await;
    let pod = h.run_pod("web").await.unwrap();
    let id = format!("sha256:{}", "ab".repeat(32));
    let mut config = h.container_config("by-id");
    config.image = Some(peapod_proto::v1::ImageSpec {
        image: id.clone(),
        user_specified_image: "registry.example/busybox:latest".into(),
        ..Default::default()
    });
    let c = h.create_container_with(&pod, config).await.unwrap();
    let status = h.container_status(&c).await.unwrap();
    assert_eq!(
        status.image.unwrap().image,
        "registry.example/busybox:latest"
    );
    assert_eq!(status.image_id, id);
    let listed = h.containers().await;
    assert_eq!(
        listed[0].image.as_ref().unwrap().image,
        "registry.example/busybox:latest"
    );

    let mut config = h.container_config("by-name");
    config.image = Some(peapod_proto::v1::ImageSpec {
        image: id.clone(),
        ..Default::default()
    });
    let c = h.create_container_with(&pod, config).await.unwrap();
    assert_eq!(
        h.container_status(&c).await.unwrap().image.unwrap().image,
        id
    );
}
