//! Recovery at start against fakes: records a crash left half-made are rolled back, objects
//! whose shim is gone are shown not ready / exited and stay removable, orphans are removed.

use super::Harness;
use crate::store::container::ContainerState as Recorded;
use crate::store::sandbox::SandboxState;
use peapod_proto::v1::{ContainerState, PodSandboxState};

#[tokio::test]
async fn a_sandbox_left_creating_is_rolled_back_with_cni_del() {
    let mut h = Harness::new().await;
    let pod = h.run_pod("web").await.unwrap();
    // As if the daemon died between CNI ADD and the end of RunPodSandbox.
    let sb = h.rt.sandboxes.records().resolve(&pod).unwrap();
    sb.update(|r| r.state = SandboxState::Creating).unwrap();
    h.restart().await;
    assert_eq!(h.faults.count("cni.del"), 1, "CNI DEL of the recorded ADD");
    // The pause's create was sent: a create cut short leaves cgroups the runtime cannot find.
    assert!(
        h.host.cgroups_removed().iter().any(|p| p.ends_with(&pod)),
        "{:?}",
        h.host.cgroups_removed()
    );
    h.assert_nothing_left().await;
    h.run_pod("web").await.expect("the name is free again");
}

#[tokio::test]
async fn a_container_left_creating_is_rolled_back() {
    let mut h = Harness::new().await;
    let pod = h.run_pod("web").await.unwrap();
    let c = h.create_container(&pod, "app").await.unwrap();
    let entry = h.rt.containers.records().resolve(&c).unwrap();
    entry.update(|r| r.state = Recorded::Creating).unwrap();
    h.restart().await;
    assert!(h.containers().await.is_empty());
    assert!(
        h.host.cgroups_removed().iter().any(|p| p.ends_with(&c)),
        "the cgroups of a create cut short: {:?}",
        h.host.cgroups_removed()
    );
    assert!(
        h.images.rootfs_owners().iter().all(|o| *o != c),
        "rootfs released"
    );
    assert_eq!(h.shim_tasks(&pod).len(), 1, "only the pause task is left");
    assert_eq!(h.pod_state(&pod).await, PodSandboxState::SandboxReady);
    let again = h.create_container(&pod, "app").await.unwrap();
    assert_ne!(again, c, "the name is free for a new container");
}

#[tokio::test]
async fn a_start_cut_short_is_found_running() {
    let mut h = Harness::new().await;
    let pod = h.run_pod("web").await.unwrap();
    let c = h.create_container(&pod, "app").await.unwrap();
    // The runtime started it; the record still says created.
    use crate::shim::Shim;
    h.shims.shim(&pod).unwrap().start(&c, "").await.unwrap();
    h.restart().await;
    assert_eq!(
        h.container_state(&c).await,
        ContainerState::ContainerRunning
    );
    h.stop_container(&c, 0).await.unwrap();
    assert_eq!(h.container_state(&c).await, ContainerState::ContainerExited);
}

#[tokio::test]
async fn after_a_reboot_pods_are_not_ready_containers_exited_and_all_removable() {
    let mut h = Harness::new().await;
    let pod = h.run_pod("web").await.unwrap();
    let running = h.run_container(&pod, "app").await;
    let created = h.create_container(&pod, "side").await.unwrap();
    h.shims.vanish_all();
    h.restart().await;
    assert_eq!(h.pod_state(&pod).await, PodSandboxState::SandboxNotready);
    for c in [&running, &created] {
        let status = h.container_status(c).await.unwrap();
        assert_eq!(status.state, ContainerState::ContainerExited as i32, "{c}");
        assert_eq!(status.exit_code, 137);
        assert!(status.message.contains("shim"), "{status:?}");
    }
    h.stop_pod(&pod).await.expect("StopPodSandbox");
    h.remove_pod(&pod).await.expect("RemovePodSandbox");
    assert_eq!(h.faults.count("cni.del"), 1, "CNI DEL ran");
    h.assert_nothing_left().await;
}

#[tokio::test]
async fn running_pods_keep_running_with_their_start_time() {
    let mut h = Harness::new().await;
    let pod = h.run_pod("web").await.unwrap();
    let c = h.run_container(&pod, "app").await;
    let before = h.container_status(&c).await.unwrap().started_at;
    h.restart().await;
    assert_eq!(h.pod_state(&pod).await, PodSandboxState::SandboxReady);
    let after = h.container_status(&c).await.unwrap();
    assert_eq!(after.state, ContainerState::ContainerRunning as i32);
    assert_eq!(after.started_at, before);
}

#[tokio::test]
async fn orphans_no_record_claims_are_removed() {
    let mut h = Harness::new().await;
    let pod = h.run_pod("web").await.unwrap();
    use crate::images::Images;
    let target = h.dir.path().join("orphan-rootfs");
    h.images
        .create_rootfs(&peapod_image::RootfsRequest {
            image_id: "img",
            container_id: "0rphan",
            target: &target,
            readonly: false,
            userns: None,
        })
        .await
        .unwrap();
    let dir = h.rt.config.root.join("containers").join("0rphan");
    std::fs::create_dir_all(&dir).unwrap();
    let netns = h.rt.config.state.join("netns").join("0rphan");
    std::fs::write(&netns, "").unwrap();
    h.restart().await;
    assert!(!h.images.rootfs_owners().contains("0rphan"));
    assert!(!dir.exists());
    assert_eq!(
        h.faults.count("netns.unpin"),
        1,
        "the orphan namespace unpinned"
    );
    assert_eq!(
        h.pod_state(&pod).await,
        PodSandboxState::SandboxReady,
        "what records claim stays"
    );
}

/// StopPodSandbox records the pod NOTREADY before it kills anything or runs CNI DEL (which
/// runs beside the kills): a stop cut short after DEL, its pause still there, leaves the pod
/// NOTREADY across a restart, and the next stop finishes without a second DEL.
#[tokio::test]
async fn a_stop_cut_short_after_cni_del_leaves_the_pod_not_ready_across_a_restart() {
    let mut h = Harness::new().await;
    let pod = h.run_pod("web").await.unwrap();
    h.faults.fail("shim.kill");
    h.stop_pod(&pod).await.unwrap_err();
    h.faults.heal("shim.kill");
    assert_eq!(h.faults.count("cni.del"), 1);
    h.restart().await;
    assert_eq!(h.pod_state(&pod).await, PodSandboxState::SandboxNotready);
    assert!(
        h.shim_tasks(&pod).contains(&pod),
        "its pause is still there"
    );
    h.stop_pod(&pod).await.expect("StopPodSandbox");
    assert_eq!(h.faults.count("cni.del"), 1, "DEL is not repeated");
    h.remove_pod(&pod).await.unwrap();
    h.assert_nothing_left().await;
}
