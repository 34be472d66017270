//! NRI against a fake plugin: the events each call sends, in order; a plugin's refusal of
//! RunPodSandbox, CreateContainer, StartContainer or UpdateContainerResources fails the call
//! with FailedPrecondition and rolls back what it made; a create that fails after the plugins
//! saw it is undone for them.

use crate::testing::Harness;
use peapod_proto::v1 as cri;
use peapod_proto::v1::runtime_service_server::RuntimeService;
use peapod_proto::v1::ContainerState;
use tonic::{Code, Request};

#[tokio::test]
async fn each_call_tells_the_plugins_in_order() {
    let h = Harness::new().await;
    let pod = h.run_pod("web").await.unwrap();
    let app = h.run_container(&pod, "app").await;
    h.stop_container(&app, 0).await.unwrap();
    h.remove_container(&app).await.unwrap();
    h.stop_pod(&pod).await.unwrap();
    h.remove_pod(&pod).await.unwrap();
    assert_eq!(
        h.nri.events_of(&app),
        [
            "CreateContainer",
            "PostCreateContainer",
            "StartContainer",
            "PostStartContainer",
            "StopContainer",
            "RemoveContainer"
        ]
    );
    assert_eq!(
        h.nri.events_of(&pod),
        ["RunPodSandbox", "StopPodSandbox", "RemovePodSandbox"]
    );
    h.assert_nothing_left().await;
}

#[tokio::test]
async fn a_refused_run_pod_sandbox_leaves_nothing_and_frees_the_name() {
    let h = Harness::new().await;
    h.faults.fail("nri.run_pod_sandbox");
    let err = h.run_pod("web").await.unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition, "{err:?}");
    assert!(err.message().contains("refused RunPodSandbox"), "{err:?}");
    h.assert_nothing_left().await;
    // The plugins heard of the pod, so its removal is theirs too.
    let refused = h.nri.events();
    assert!(
        refused.iter().any(|e| e.starts_with("RemovePodSandbox ")),
        "{refused:?}"
    );

    h.faults.heal("nri.run_pod_sandbox");
    let pod = h.run_pod("web").await.expect("the name is free again");
    h.remove_pod(&pod).await.unwrap();
    h.assert_nothing_left().await;
}

#[tokio::test]
async fn a_refused_create_container_leaves_nothing_and_is_undone() {
    let h = Harness::new().await;
    let pod = h.run_pod("web").await.unwrap();
    h.faults.fail("nri.create_container");
    let err = h.create_container(&pod, "app").await.unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition, "{err:?}");
    assert!(h.containers().await.is_empty(), "no record");
    assert!(h.images.rootfs_owners().is_empty(), "no rootfs");
    assert_eq!(
        h.faults.count("shim.create"),
        1,
        "only the pause was created"
    );
    let events = h.nri.events();
    let id = events
        .iter()
        .find_map(|e| e.strip_prefix("CreateContainer "))
        .expect("the plugins were asked")
        .to_string();
    assert_eq!(
        h.nri.events_of(&id),
        ["CreateContainer", "UndoCreateContainer"]
    );

    h.faults.heal("nri.create_container");
    let c = h
        .create_container(&pod, "app")
        .await
        .expect("the name is free");
    h.remove_container(&c).await.unwrap();
    h.remove_pod(&pod).await.unwrap();
    h.assert_nothing_left().await;
}

/// A create that fails after the plugins adjusted it (the runtime's create fails) is undone
/// for them and rolled back like any failed create.
#[tokio::test]
async fn a_create_failing_after_the_plugins_is_undone_for_them() {
    let h = Harness::new().await;
    let pod = h.run_pod("web").await.unwrap();
    h.faults.fail("shim.create");
    h.create_container(&pod, "app").await.unwrap_err();
    let events = h.nri.events();
    let id = events
        .iter()
        .find_map(|e| e.strip_prefix("CreateContainer "))
        .unwrap()
        .to_string();
    assert_eq!(
        h.nri.events_of(&id),
        ["CreateContainer", "UndoCreateContainer"],
        "no PostCreateContainer for a container that was never made"
    );
    assert!(h.containers().await.is_empty());
    assert!(h.images.rootfs_owners().is_empty());
    h.faults.heal("shim.create");
    h.remove_pod(&pod).await.unwrap();
    h.assert_nothing_left().await;
}

#[tokio::test]
async fn the_plugins_adjustments_reach_the_runtime_spec() {
    let h = Harness::new().await;
    let pod = h.run_pod("web").await.unwrap();
    h.nri.adjust_env("FROM_PLUGIN=yes");
    let c = h.create_container(&pod, "app").await.unwrap();
    let rec = h.rt.containers.records().resolve(&c).unwrap().get();
    let spec: serde_json::Value =
        serde_json::from_slice(&std::fs::read(rec.bundle.join("config.json")).unwrap()).unwrap();
    let env = spec["process"]["env"].as_array().unwrap();
    assert!(env.iter().any(|e| e == "FROM_PLUGIN=yes"), "{env:?}");
    h.remove_pod(&pod).await.unwrap();
    h.assert_nothing_left().await;
}

#[tokio::test]
async fn a_refused_start_leaves_the_container_created_and_not_started() {
    let h = Harness::new().await;
    let pod = h.run_pod("web").await.unwrap();
    let c = h.create_container(&pod, "app").await.unwrap();
    h.faults.fail("nri.start_container");
    let err = h.start_container(&c).await.unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition, "{err:?}");
    assert_eq!(
        h.faults.count("shim.start_task"),
        0,
        "the process never started"
    );
    assert_eq!(
        h.container_state(&c).await,
        ContainerState::ContainerCreated
    );
    assert!(!h
        .nri
        .events_of(&c)
        .contains(&"PostStartContainer".to_string()));

    h.faults.heal("nri.start_container");
    h.start_container(&c)
        .await
        .expect("StartContainer, retried");
    assert_eq!(
        h.container_state(&c).await,
        ContainerState::ContainerRunning
    );
    h.remove_pod(&pod).await.unwrap();
    h.assert_nothing_left().await;
}

#[tokio::test]
async fn a_refused_update_changes_nothing() {
    let h = Harness::new().await;
    let pod = h.run_pod("web").await.unwrap();
    let c = h.run_container(&pod, "app").await;
    h.faults.fail("nri.update_container");
    let req = cri::UpdateContainerResourcesRequest {
        container_id: c.clone(),
        linux: Some(cri::LinuxContainerResources {
            cpu_shares: 512,
            ..Default::default()
        }),
        ..Default::default()
    };
    let err = h
        .cri
        .update_container_resources(Request::new(req))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition, "{err:?}");
    assert_eq!(h.faults.count("shim.update"), 0, "the shim was not asked");
    let rec = h.rt.containers.records().resolve(&c).unwrap().get();
    assert_ne!(
        rec.resources.map(|r| r.cpu_shares),
        Some(512),
        "the record keeps the old resources"
    );
    assert!(!h
        .nri
        .events_of(&c)
        .contains(&"PostUpdateContainer".to_string()));
    h.remove_pod(&pod).await.unwrap();
    h.assert_nothing_left().await;
}
