//! A pod whose shim dies, against fakes: the pod turns not ready, its containers exited
//! (137, `ShimDied`) after the OCI runtime killed them (and the pause's cgroup went), and
//! Stop/Remove clean up the rest.

use crate::testing::Harness;
use peapod_proto::v1::{ContainerState, PodSandboxState};
use std::time::Duration;

/// Waits (up to 5 s, the bound the issue sets) for the pod to be not ready.
async fn until_not_ready(h: &Harness, pod: &str) {
    for _ in 0..500 {
        if h.pod_state(pod).await == PodSandboxState::SandboxNotready {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("pod {pod} still ready 5 s after its shim died");
}

async fn assert_killed_by_shim_death(h: &Harness, id: &str) {
    let status = h.container_status(id).await.unwrap();
    assert_eq!(
        status.state,
        ContainerState::ContainerExited as i32,
        "{status:?}"
    );
    assert_eq!(status.exit_code, 137, "{status:?}");
    assert_eq!(status.reason, "ShimDied", "{status:?}");
    assert!(status.message.contains("shim"), "{status:?}");
}

#[tokio::test]
async fn a_dead_shim_makes_the_pod_not_ready_and_its_containers_exited() {
    let h = Harness::new().await;
    let pod = h.run_pod("web").await.unwrap();
    let running = h.run_container(&pod, "app").await;
    let created = h.create_container(&pod, "later").await.unwrap();

    h.shims.crash(&pod);
    until_not_ready(&h, &pod).await;
    assert_killed_by_shim_death(&h, &running).await;
    assert_killed_by_shim_death(&h, &created).await;
    assert!(h.shims.orphans().is_empty(), "the OCI runtime killed them");
    assert!(h.faults.count("shim.reap_orphans") >= 1);
    // A pause the shim started itself is unknown to the runtime: its cgroup is removed
    // (which kills it) before Stop or Remove are asked for.
    assert!(
        h.host.cgroups_removed().iter().any(|p| p.ends_with(&pod)),
        "{:?}",
        h.host.cgroups_removed()
    );

    // A container of a dead pod cannot be started; Stop and Remove work.
    assert!(h.start_container(&created).await.is_err());
    h.stop_pod(&pod).await.expect("StopPodSandbox");
    h.remove_pod(&pod).await.expect("RemovePodSandbox");
    h.assert_nothing_left().await;
}

#[tokio::test]
async fn a_shim_that_died_while_the_daemon_was_down_is_settled_at_start() {
    let mut h = Harness::new().await;
    let pod = h.run_pod("web").await.unwrap();
    let app = h.run_container(&pod, "app").await;

    h.shims.crash(&pod);
    h.restart().await;
    until_not_ready(&h, &pod).await;
    assert_killed_by_shim_death(&h, &app).await;

    h.remove_pod(&pod).await.expect("RemovePodSandbox");
    h.assert_nothing_left().await;
}

#[tokio::test]
async fn stop_before_the_watch_notices_still_kills_through_the_runtime() {
    let h = Harness::new().await;
    let pod = h.run_pod("web").await.unwrap();
    let app = h.run_container(&pod, "app").await;

    h.shims.crash(&pod);
    // No wait for the watch: StopPodSandbox itself finds the shim gone.
    h.stop_pod(&pod).await.expect("StopPodSandbox");
    assert_eq!(h.pod_state(&pod).await, PodSandboxState::SandboxNotready);
    assert_killed_by_shim_death(&h, &app).await;
    assert!(h.shims.orphans().is_empty());
    h.remove_pod(&pod).await.unwrap();
    h.assert_nothing_left().await;
}

#[tokio::test]
async fn a_failed_kill_keeps_the_containers_unknown_and_remove_retries_it() {
    let h = Harness::new().await;
    let pod = h.run_pod("web").await.unwrap();
    let app = h.run_container(&pod, "app").await;
    h.faults.fail("shim.reap_orphans");

    h.shims.crash(&pod);
    until_not_ready(&h, &pod).await;
    let status = h.container_status(&app).await.unwrap();
    assert_eq!(
        status.state,
        ContainerState::ContainerUnknown as i32,
        "{status:?}"
    );
    assert!(!h.shims.orphans().is_empty());

    let err = h.remove_pod(&pod).await.unwrap_err();
    assert!(err.message().contains("shim.reap_orphans"), "{err:?}");
    assert_eq!(
        h.pods().await.len(),
        1,
        "a failed removal keeps the pod visible"
    );

    h.faults.heal("shim.reap_orphans");
    h.remove_pod(&pod).await.expect("RemovePodSandbox, retried");
    h.assert_nothing_left().await;
}
