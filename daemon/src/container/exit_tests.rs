//! Following a running container's exit against fakes: a wait that fails while the pod's
//! shim lives is waited again (the container stays RUNNING, nothing is reaped); a shim that is
//! gone, or that no longer knows the container, settles it.

use crate::testing::Harness;
use peapod_proto::v1::ContainerState;
use std::time::Duration;

/// Waits (up to 5 s) for the container to leave RUNNING; its status then.
async fn until_not_running(h: &Harness, id: &str) -> peapod_proto::v1::ContainerStatus {
    for _ in 0..500 {
        let status = h.container_status(id).await.unwrap();
        if status.state != ContainerState::ContainerRunning as i32 {
            return status;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("container {id} still running after 5 s");
}

#[tokio::test]
async fn a_failed_wait_while_the_shim_lives_is_waited_again() {
    let h = Harness::new().await;
    let pod = h.run_pod("web").await.unwrap();
    h.faults.fail("shim.wait");
    let app = h.run_container(&pod, "app").await;
    // The watch's wait fails and is made again, more than once.
    h.faults.reached("shim.wait", 3).await;
    assert_eq!(
        h.container_state(&app).await,
        ContainerState::ContainerRunning,
        "a failed wait is not an exit"
    );
    assert_eq!(h.faults.count("shim.reap_orphans"), 0, "nothing reaped");

    // The connection is back, and the container exits: that exit is recorded.
    h.faults.heal("shim.wait");
    let shim = h.shims.shim(&pod).unwrap();
    crate::shim::Shim::kill(shim.as_ref(), &app, "", 9, false)
        .await
        .unwrap();
    let status = until_not_running(&h, &app).await;
    assert_eq!(status.state, ContainerState::ContainerExited as i32);
    assert_eq!(status.exit_code, 137, "{status:?}");
    assert_eq!(h.faults.count("shim.reap_orphans"), 0);

    h.remove_pod(&pod).await.unwrap();
    h.assert_nothing_left().await;
}

#[tokio::test]
async fn a_shim_that_cannot_be_reached_is_left_to_the_pods_watch() {
    let h = Harness::new().await;
    let pod = h.run_pod("web").await.unwrap();
    let app = h.create_container(&pod, "app").await.unwrap();
    // The exit watcher's first wait fails; when it tries again the shim cannot be reached.
    h.faults.fail("shim.wait");
    let waits = h.faults.count("shim.wait");
    h.start_container(&app).await.unwrap();
    h.faults.reached("shim.wait", waits + 1).await;
    h.faults.fail("shim.get");
    let gets = h.faults.count("shim.get");
    h.faults.reached("shim.get", gets + 2).await;
    assert_eq!(
        h.container_state(&app).await,
        ContainerState::ContainerRunning,
        "an unreachable shim is not a dead one"
    );
    h.faults.heal("shim.get");
    h.faults.heal("shim.wait");
    h.stop_container(&app, 0).await.unwrap();
    assert_eq!(
        h.container_state(&app).await,
        ContainerState::ContainerExited
    );
    h.remove_pod(&pod).await.unwrap();
    h.assert_nothing_left().await;
}

#[tokio::test]
async fn a_shim_that_no_longer_knows_the_container_settles_it() {
    let h = Harness::new().await;
    let pod = h.run_pod("web").await.unwrap();
    h.faults.fail("shim.wait");
    let app = h.run_container(&pod, "app").await;
    h.faults.reached("shim.wait", 1).await;
    // The task is deleted behind the daemon's back: the shim answers NotFound.
    let shim = h.shims.shim(&pod).unwrap();
    crate::shim::Shim::delete(shim.as_ref(), &app, "")
        .await
        .unwrap();
    h.faults.heal("shim.wait");
    let status = until_not_running(&h, &app).await;
    assert_eq!(
        status.state,
        ContainerState::ContainerUnknown as i32,
        "no exit record: unknown, {status:?}"
    );
    assert!(status.message.contains("not found"), "{status:?}");
    h.remove_pod(&pod).await.unwrap();
    h.assert_nothing_left().await;
}

#[tokio::test]
async fn a_dead_shim_settles_the_container_at_once() {
    let h = Harness::new().await;
    let pod = h.run_pod("web").await.unwrap();
    let app = h.run_container(&pod, "app").await;
    h.faults.fail("shim.reap_orphans");
    h.shims.crash(&pod);
    let status = until_not_running(&h, &app).await;
    assert_eq!(status.state, ContainerState::ContainerUnknown as i32);
    h.faults.heal("shim.reap_orphans");
    h.remove_pod(&pod).await.unwrap();
    h.assert_nothing_left().await;
}
