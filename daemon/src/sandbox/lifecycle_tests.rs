//! RunPodSandbox, StopPodSandbox and RemovePodSandbox against fakes: what each makes, and
//! that every failure path removes it all and frees the name.

use crate::testing::fakes::POD_IP;
use crate::testing::Harness;
use peapod_proto::v1::PodSandboxState;
use tonic::Code;

#[tokio::test]
async fn run_stop_remove_makes_and_removes_every_piece() {
    let h = Harness::new().await;
    let id = h.run_pod("web").await.expect("RunPodSandbox");

    assert_eq!(h.pod_state(&id).await, PodSandboxState::SandboxReady);
    let status = h.pod_status(&id).await.unwrap().status.unwrap();
    assert_eq!(status.network.expect("an IP").ip, POD_IP);
    let just_the_pod = std::collections::BTreeSet::from([id.clone()]);
    assert_eq!(h.shims.live(), just_the_pod);
    assert_eq!(h.shim_tasks(&id), just_the_pod, "the pause container");
    assert!(h.network.attached().contains(&id));
    assert_eq!(h.host.pinned().len(), 1);
    assert_eq!(h.host.mounts().len(), 1, "the pod's /dev/shm");
    assert_eq!(h.host.warmed(), 1, "the pause's cgroup move announced");

    h.stop_pod(&id).await.expect("StopPodSandbox");
    assert_eq!(h.pod_state(&id).await, PodSandboxState::SandboxNotready);
    assert!(h.network.attached().is_empty(), "CNI DEL on stop");
    assert!(h.host.pinned().is_empty(), "netns unpinned on stop");
    assert!(h.host.mounts().is_empty(), "/dev/shm unmounted on stop");
    assert!(h.shims.live().contains(&id), "the shim stays until remove");

    h.stop_pod(&id).await.expect("a second StopPodSandbox");
    h.remove_pod(&id).await.expect("RemovePodSandbox");
    h.assert_nothing_left().await;
    let err = h.pod_status(&id).await.unwrap_err();
    assert_eq!(err.code(), Code::NotFound);

    // Both are idempotent for an unknown id.
    h.stop_pod(&id)
        .await
        .expect("StopPodSandbox of a removed pod");
    h.remove_pod(&id)
        .await
        .expect("RemovePodSandbox of a removed pod");
}

/// Runs a pod with `call` failing: the error names the call, nothing is left, and the same
/// pod runs once the fault is gone.
async fn failure_leaves_nothing(call: &str) -> Harness {
    let h = Harness::new().await;
    h.faults.fail(call);
    let err = h.run_pod("web").await.unwrap_err();
    assert_eq!(err.code(), Code::Internal, "{err:?}");
    assert!(err.message().contains(call), "{call}: {err:?}");
    h.assert_nothing_left().await;

    h.faults.heal(call);
    let id = h.run_pod("web").await.expect("the name is free again");
    h.remove_pod(&id).await.unwrap();
    h.assert_nothing_left().await;
    h
}

#[tokio::test]
async fn cni_failure_unpins_the_netns_and_stops_the_shim() {
    let h = failure_leaves_nothing("cni.add").await;
    assert!(h.faults.count("netns.unpin") >= 1);
    assert!(h.faults.count("shim.shutdown") >= 1);
}

#[tokio::test]
async fn shim_start_failure_deletes_the_network() {
    let h = failure_leaves_nothing("shim.start").await;
    assert!(h.faults.count("cni.del") >= 1);
}

#[tokio::test]
async fn pause_create_failure_stops_the_shim_and_deletes_the_network() {
    let h = failure_leaves_nothing("shim.create").await;
    assert!(h.faults.count("shim.shutdown") >= 1);
    assert!(h.faults.count("cni.del") >= 1);
}

#[tokio::test]
async fn shm_mount_failure_leaves_nothing() {
    failure_leaves_nothing("shm.mount").await;
}

/// The CNI plan is made before the first record is written (it goes into that record): a
/// plan that cannot be made (no network configuration readable) pins, adds and starts
/// nothing, and leaves nothing.
#[tokio::test]
async fn a_cni_plan_failure_starts_nothing() {
    let h = failure_leaves_nothing("cni.plan").await;
    assert_eq!(h.faults.count("netns.pin"), 1, "only the retry pinned");
    assert_eq!(h.faults.count("cni.add"), 1, "only the retry added");
}

#[tokio::test]
async fn netns_failure_starts_nothing() {
    let h = Harness::new().await;
    h.faults.fail("netns.pin");
    let err = h.run_pod("web").await.unwrap_err();
    assert!(err.message().contains("netns.pin"), "{err:?}");
    assert_eq!(h.faults.count("cni.add"), 0);
    assert_eq!(h.faults.count("shim.start"), 0);
    h.assert_nothing_left().await;
}

#[tokio::test]
async fn a_taken_name_is_already_exists_and_changes_nothing() {
    let h = Harness::new().await;
    let id = h.run_pod("web").await.unwrap();
    let mut other = h.pod_config("web");
    other.hostname = "other".into();
    let err = h.run_pod_with(other).await.unwrap_err();
    assert_eq!(err.code(), Code::AlreadyExists);
    assert!(err.message().contains(&id), "{err:?}");
    assert_eq!(h.pods().await.len(), 1);
    assert_eq!(h.shims.live().len(), 1);
    assert_eq!(h.pod_state(&id).await, PodSandboxState::SandboxReady);
    let again = h.run_pod("web").await.unwrap();
    assert_eq!(again, id, "an identical request gets the first sandbox");
    assert_eq!(h.pods().await.len(), 1);
}

#[tokio::test]
async fn invalid_config_names_the_field_and_makes_nothing() {
    let h = Harness::new().await;
    let mut config = h.pod_config("web");
    config.metadata.as_mut().unwrap().uid.clear();
    let err = h.run_pod_with(config).await.unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(err.message().contains("config.metadata.uid"), "{err:?}");
    assert_eq!(h.faults.count("shim.start"), 0);
    h.assert_nothing_left().await;
}

#[tokio::test]
async fn a_failed_cni_del_on_stop_is_retried_on_remove() {
    let h = Harness::new().await;
    let id = h.run_pod("web").await.unwrap();
    h.faults.fail("cni.del");
    h.stop_pod(&id)
        .await
        .expect("StopPodSandbox succeeds; DEL is retried later");
    assert!(h.network.attached().contains(&id));
    assert_eq!(h.host.pinned().len(), 1, "kept for the retry");

    h.faults.heal("cni.del");
    h.remove_pod(&id).await.expect("RemovePodSandbox");
    h.assert_nothing_left().await;
}

#[tokio::test]
async fn remove_fails_while_the_shim_cannot_be_stopped_and_keeps_the_record() {
    let h = Harness::new().await;
    let id = h.run_pod("web").await.unwrap();
    h.faults.fail("shim.shutdown");
    let err = h.remove_pod(&id).await.unwrap_err();
    assert!(err.message().contains("shim.shutdown"), "{err:?}");
    assert_eq!(h.pods().await.len(), 1, "the record stays for a retry");

    h.faults.heal("shim.shutdown");
    h.remove_pod(&id).await.expect("the retry");
    h.assert_nothing_left().await;
}

#[tokio::test]
async fn stop_and_remove_take_the_pods_containers_with_them() {
    let h = Harness::new().await;
    let pod = h.run_pod("web").await.unwrap();
    let c = h.run_container(&pod, "app").await;

    h.stop_pod(&pod).await.unwrap();
    assert_eq!(
        h.container_state(&c).await,
        peapod_proto::v1::ContainerState::ContainerExited
    );
    h.remove_pod(&pod).await.unwrap();
    h.assert_nothing_left().await;
}

#[tokio::test]
async fn a_pause_that_cannot_be_killed_fails_stop_and_the_pod_without_network_is_not_ready() {
    let h = Harness::new().await;
    let id = h.run_pod("web").await.unwrap();
    h.faults.fail("shim.kill");
    let err = h.stop_pod(&id).await.unwrap_err();
    assert!(err.message().contains("shim.kill"), "{err:?}");
    // CNI DEL runs beside the kills: it is done, so the pod is not READY, and the failed
    // call is for the kubelet to retry.
    assert!(
        !h.network.attached().contains(&id),
        "the network went beside the kill"
    );
    assert_eq!(h.pod_state(&id).await, PodSandboxState::SandboxNotready);

    h.faults.heal("shim.kill");
    h.stop_pod(&id).await.expect("the retry");
    assert_eq!(h.pod_state(&id).await, PodSandboxState::SandboxNotready);
    h.remove_pod(&id).await.unwrap();
    h.assert_nothing_left().await;
}

#[tokio::test]
async fn remove_after_a_lost_shim_still_cleans_up() {
    let h = Harness::new().await;
    let id = h.run_pod("web").await.unwrap();
    // The shim is unreachable (gone, or its socket removed): what the daemon holds is still
    // removed, and the pod with it.
    h.faults.fail("shim.get");
    h.remove_pod(&id).await.expect("RemovePodSandbox");
    assert!(h.pods().await.is_empty());
    assert!(h.network.attached().is_empty());
    assert!(h.host.pinned().is_empty());
    assert!(h.host.mounts().is_empty());
    assert!(h.object_dirs().is_empty());
}
