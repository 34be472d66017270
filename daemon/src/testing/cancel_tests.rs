//! Lifecycle calls whose caller goes away half-way (tonic drops the handler's future when
//! the client's deadline expires): the work finishes or is rolled back, and an identical retry
//! gets the first call's object.

use super::Harness;
use peapod_proto::v1::{ContainerState, PodSandboxState};
use std::time::Duration;
use tonic::Code;

/// Calls `call` and drops it once the fake step `step` has been reached (as an expired
/// client deadline would).
async fn cancel_at<T>(h: &Harness, step: &str, call: impl std::future::Future<Output = T>) {
    let before = h.faults.count(step);
    tokio::select! {
        _ = call => panic!("the call finished although {step} is held"),
        _ = h.faults.reached(step, before + 1) => {}
    }
}

#[tokio::test]
async fn a_cancelled_run_pod_sandbox_finishes_and_its_retry_gets_the_same_pod() {
    let h = Harness::new().await;
    h.faults.hold("cni.add");
    cancel_at(&h, "cni.add", h.run_pod("web")).await;

    // A different request for the same name is refused at once, even while the first runs.
    let mut other = h.pod_config("web");
    other.hostname = "other".into();
    let err = h.run_pod_with(other).await.unwrap_err();
    assert_eq!(err.code(), Code::AlreadyExists, "{err:?}");

    // The identical retry waits for the first call and gets its pod.
    let (retry, ()) = tokio::join!(h.run_pod("web"), async {
        tokio::time::sleep(Duration::from_millis(20)).await;
        h.faults.open("cni.add");
    });
    let id = retry.expect("the retry");
    assert_eq!(h.faults.count("cni.add"), 1, "one CNI ADD: one pod");
    assert_eq!(h.pods().await.len(), 1);
    assert_eq!(h.pod_state(&id).await, PodSandboxState::SandboxReady);
    assert_eq!(h.run_pod("web").await.unwrap(), id, "and after it finished");

    h.stop_pod(&id).await.unwrap();
    h.remove_pod(&id).await.unwrap();
    h.assert_nothing_left().await;
}

#[tokio::test]
async fn a_cancelled_run_pod_sandbox_that_fails_frees_the_name() {
    let h = Harness::new().await;
    h.faults.hold("cni.add");
    h.faults.fail("cni.add");
    cancel_at(&h, "cni.add", h.run_pod("web")).await;
    h.faults.open("cni.add");
    // The first call's rollback runs in the background: wait until its shim is gone.
    for _ in 0..10_000 {
        if h.shims.live().is_empty() && h.object_dirs().is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    h.assert_nothing_left().await;
    h.faults.heal("cni.add");
    let id = h.run_pod("web").await.expect("the name is free again");
    h.remove_pod(&id).await.unwrap();
    h.assert_nothing_left().await;
}

#[tokio::test]
async fn a_cancelled_create_container_finishes_and_its_retry_gets_the_same_container() {
    let h = Harness::new().await;
    let pod = h.run_pod("web").await.unwrap();
    h.faults.hold("rootfs.create");
    cancel_at(&h, "rootfs.create", h.create_container(&pod, "app")).await;

    let mut other = h.container_config("app");
    other.command = vec!["/bin/other".into()];
    let err = h.create_container_with(&pod, other).await.unwrap_err();
    assert_eq!(err.code(), Code::AlreadyExists, "{err:?}");

    let (retry, ()) = tokio::join!(h.create_container(&pod, "app"), async {
        tokio::time::sleep(Duration::from_millis(20)).await;
        h.faults.open("rootfs.create");
    });
    let c = retry.expect("the retry");
    assert_eq!(
        h.faults.count("rootfs.create"),
        1,
        "one rootfs: one container"
    );
    assert_eq!(h.containers().await.len(), 1);
    assert_eq!(
        h.container_state(&c).await,
        ContainerState::ContainerCreated
    );

    h.remove_pod(&pod).await.unwrap();
    h.assert_nothing_left().await;
}

#[tokio::test]
async fn a_cancelled_start_container_starts_it_and_its_retry_succeeds() {
    let h = Harness::new().await;
    let pod = h.run_pod("web").await.unwrap();
    let c = h.create_container(&pod, "app").await.unwrap();
    h.faults.hold("shim.start_task");
    cancel_at(&h, "shim.start_task", h.start_container(&c)).await;
    let (retry, ()) = tokio::join!(h.start_container(&c), async {
        tokio::time::sleep(Duration::from_millis(20)).await;
        h.faults.open("shim.start_task");
    });
    retry.expect("the retry of a start the first call made");
    assert_eq!(h.faults.count("shim.start_task"), 1, "started once");
    assert_eq!(
        h.container_state(&c).await,
        ContainerState::ContainerRunning
    );

    // It is followed (its exit is seen) and can be stopped and removed.
    h.stop_container(&c, 0).await.unwrap();
    assert_eq!(h.container_state(&c).await, ContainerState::ContainerExited);
    h.remove_pod(&pod).await.unwrap();
    h.assert_nothing_left().await;
}

#[tokio::test]
async fn a_cancelled_remove_finishes() {
    let h = Harness::new().await;
    let pod = h.run_pod("web").await.unwrap();
    let c = h.run_container(&pod, "app").await;
    h.faults.hold("shim.delete");
    cancel_at(&h, "shim.delete", h.remove_container(&c)).await;
    h.faults.open("shim.delete");
    h.remove_container(&c).await.expect("a retry of the remove");
    assert!(h.containers().await.is_empty());
    h.faults.hold("cni.del");
    cancel_at(&h, "cni.del", h.remove_pod(&pod)).await;
    h.faults.open("cni.del");
    h.remove_pod(&pod)
        .await
        .expect("a retry of RemovePodSandbox");
    h.assert_nothing_left().await;
}

#[tokio::test]
async fn a_create_racing_the_removal_of_its_pod_leaves_nothing() {
    let h = Harness::new().await;
    let pod = h.run_pod("web").await.unwrap();
    h.faults.hold("rootfs.create");
    let (created, removed, ()) = tokio::join!(
        h.create_container(&pod, "app"),
        async {
            h.faults.reached("rootfs.create", 1).await;
            h.remove_pod(&pod).await
        },
        async {
            h.faults.reached("rootfs.create", 1).await;
            tokio::time::sleep(Duration::from_millis(20)).await;
            h.faults.open("rootfs.create");
        }
    );
    // The create finished before the removal began (it held the pod), so the removal took
    // its container too.
    created.expect("the create");
    removed.expect("the removal");
    h.assert_nothing_left().await;
}

#[tokio::test]
async fn a_failed_cleanup_keeps_the_object_for_a_later_remove() {
    let h = Harness::new().await;
    let pod = h.run_pod("web").await.unwrap();
    h.faults.fail("shim.create");
    h.faults.fail("rootfs.remove");
    let err = h.create_container(&pod, "app").await.unwrap_err();
    assert!(err.message().contains("shim.create"), "{err:?}");
    assert!(err.message().contains("rootfs.remove"), "{err:?}");
    let listed = h.containers().await;
    assert_eq!(listed.len(), 1, "kept for RemoveContainer");
    let c = listed[0].id.clone();
    assert_eq!(h.container_state(&c).await, ContainerState::ContainerExited);
    h.faults.heal("shim.create");
    h.faults.heal("rootfs.remove");
    h.remove_container(&c)
        .await
        .expect("RemoveContainer cleans it");
    h.remove_pod(&pod).await.unwrap();
    h.assert_nothing_left().await;
}

#[tokio::test]
async fn a_failed_sandbox_rollback_keeps_the_pod_not_ready_for_a_later_remove() {
    let h = Harness::new().await;
    h.faults.fail("cni.add");
    h.faults.fail("shim.shutdown");
    let err = h.run_pod("web").await.unwrap_err();
    assert!(err.message().contains("cni.add"), "{err:?}");
    assert!(err.message().contains("shim.shutdown"), "{err:?}");
    let pods = h.pods().await;
    assert_eq!(pods.len(), 1, "kept for RemovePodSandbox");
    let id = pods[0].id.clone();
    assert_eq!(h.pod_state(&id).await, PodSandboxState::SandboxNotready);
    let mut other = h.pod_config("web");
    other.hostname = "other".into();
    let taken = h.run_pod_with(other).await.unwrap_err();
    assert_eq!(
        taken.code(),
        Code::AlreadyExists,
        "its name stays reserved to it"
    );
    h.faults.heal("shim.shutdown");
    h.faults.heal("cni.add");
    h.remove_pod(&id)
        .await
        .expect("RemovePodSandbox finishes it");
    h.assert_nothing_left().await;
}
