//! The fault points of the fakes that no other unit test fails, each failed here: the call
//! that meets it gets a clear error (or, where the step is best-effort, succeeds without it),
//! nothing is left half-made, and a retry once the fault is gone finishes the job.

use crate::testing::Harness;
use peapod_proto::v1 as cri;
use peapod_proto::v1::runtime_service_server::RuntimeService;
use peapod_proto::v1::{ContainerState, PodSandboxState};
use tonic::{Code, Request};

/// StopPodSandbox asks the shim for the pause's state before killing it: a failing answer
/// fails the stop (its pause still running; the pod NOTREADY, as the CNI DEL beside the kill
/// took its network), and a retry stops it.
#[tokio::test]
async fn shim_state_failing_fails_the_stop_and_a_retry_stops() {
    let h = Harness::new().await;
    let pod = h.run_pod("web").await.unwrap();
    h.faults.fail("shim.state");
    let err = h.stop_pod(&pod).await.unwrap_err();
    assert!(err.message().contains("shim.state"), "{err:?}");
    assert_eq!(h.pod_state(&pod).await, PodSandboxState::SandboxNotready);
    assert!(!h.network.attached().contains(&pod), "the network is gone");
    assert!(
        h.shim_tasks(&pod).contains(&pod),
        "the pause is still there"
    );

    h.faults.heal("shim.state");
    h.stop_pod(&pod).await.expect("StopPodSandbox, retried");
    assert_eq!(h.pod_state(&pod).await, PodSandboxState::SandboxNotready);
    h.remove_pod(&pod).await.unwrap();
    h.assert_nothing_left().await;
}

/// RemovePodSandbox unpins the network namespace: a failure keeps the pod listed (NOTREADY)
/// with its namespace still pinned, and the retry removes both.
#[tokio::test]
async fn netns_unpin_failing_keeps_the_pod_for_a_retry() {
    let h = Harness::new().await;
    let pod = h.run_pod("web").await.unwrap();
    h.faults.fail("netns.unpin");
    let err = h.remove_pod(&pod).await.unwrap_err();
    assert!(err.message().contains("netns.unpin"), "{err:?}");
    assert_eq!(h.pods().await.len(), 1, "kept for a retry");
    assert_eq!(h.pod_state(&pod).await, PodSandboxState::SandboxNotready);
    assert_eq!(h.host.pinned().len(), 1, "the namespace is still pinned");

    h.faults.heal("netns.unpin");
    h.remove_pod(&pod).await.expect("RemovePodSandbox, retried");
    h.assert_nothing_left().await;
}

/// StopPodSandbox unmounts the pod's /dev/shm: a failure fails the stop with the mount still
/// there, and the retry unmounts it; RemovePodSandbox the same.
#[tokio::test]
async fn unmount_failing_fails_stop_and_remove_until_it_works() {
    let h = Harness::new().await;
    let pod = h.run_pod("web").await.unwrap();
    assert_eq!(h.host.mounts().len(), 1, "the pod's /dev/shm");
    h.faults.fail("unmount");
    let err = h.stop_pod(&pod).await.unwrap_err();
    assert!(err.message().contains("unmount"), "{err:?}");
    assert_eq!(h.host.mounts().len(), 1, "still mounted");
    let err = h.remove_pod(&pod).await.unwrap_err();
    assert!(err.message().contains("unmount"), "{err:?}");
    assert_eq!(h.pods().await.len(), 1, "kept for a retry");

    h.faults.heal("unmount");
    h.stop_pod(&pod).await.expect("StopPodSandbox, retried");
    assert!(h.host.mounts().is_empty());
    h.remove_pod(&pod).await.expect("RemovePodSandbox, retried");
    h.assert_nothing_left().await;
}

/// Registering the built-in pause under the configured image name is a convenience (so that
/// it lists): when the image store refuses it, the pod still runs on the built-in pause.
#[tokio::test]
async fn image_add_local_failing_still_runs_the_pod_on_the_builtin_pause() {
    let h = Harness::new().await;
    h.faults.fail("image.add_local");
    let pod = h.run_pod("web").await.expect("RunPodSandbox");
    assert_eq!(h.faults.count("image.add_local"), 1);
    assert_eq!(h.pod_state(&pod).await, PodSandboxState::SandboxReady);
    assert!(
        h.images.rootfs_owners().is_empty(),
        "the built-in pause needs no root filesystem from the store"
    );
    h.faults.heal("image.add_local");
    let second = h.run_pod("db").await.unwrap();
    assert_eq!(
        h.faults.count("image.add_local"),
        2,
        "tried again for the next pod"
    );
    for id in [pod, second] {
        h.remove_pod(&id).await.unwrap();
    }
    h.assert_nothing_left().await;
}

async fn exec_sync(h: &Harness, id: &str) -> Result<cri::ExecSyncResponse, tonic::Status> {
    let req = cri::ExecSyncRequest {
        container_id: id.into(),
        cmd: vec!["true".into()],
        timeout: 5,
    };
    Ok(h.cri.exec_sync(Request::new(req)).await?.into_inner())
}

/// ExecSync registers the process with the shim: a failure there is the call's error, and
/// nothing of the exec is left (no task in the shim, no FIFOs), so the next exec works.
#[tokio::test]
async fn shim_exec_failing_fails_exec_sync_and_leaves_nothing() {
    let h = Harness::new().await;
    let pod = h.run_pod("web").await.unwrap();
    let app = h.run_container(&pod, "app").await;
    h.faults.fail("shim.exec");
    let err = exec_sync(&h, &app).await.unwrap_err();
    assert!(err.message().contains("shim.exec"), "{err:?}");
    let shim = h.shims.shim(&pod).unwrap();
    assert!(shim.exec_ids().is_empty(), "no exec left in the shim");
    let rec = h.rt.containers.records().resolve(&app).unwrap().get();
    let execs = rec.bundle.join("exec");
    let fifos: Vec<_> = std::fs::read_dir(&execs)
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    assert!(fifos.is_empty(), "FIFOs left: {fifos:?}");
    assert_eq!(
        h.container_state(&app).await,
        ContainerState::ContainerRunning
    );
    h.remove_pod(&pod).await.unwrap();
    h.assert_nothing_left().await;
}

async fn reopen_log(h: &Harness, id: &str) -> Result<(), tonic::Status> {
    let req = cri::ReopenContainerLogRequest {
        container_id: id.into(),
    };
    h.cri
        .reopen_container_log(Request::new(req))
        .await
        .map(drop)
}

/// ReopenContainerLog is the shim's job: its failure is the call's error (the kubelet's log
/// rotation retries), and the container keeps running.
#[tokio::test]
async fn shim_reopen_log_failing_is_the_calls_error() {
    let h = Harness::new().await;
    let pod = h.run_pod("web").await.unwrap();
    let app = h.run_container(&pod, "app").await;
    h.faults.fail("shim.reopen_log");
    let err = reopen_log(&h, &app).await.unwrap_err();
    assert_eq!(err.code(), Code::Internal, "{err:?}");
    assert!(err.message().contains("shim.reopen_log"), "{err:?}");
    assert_eq!(
        h.container_state(&app).await,
        ContainerState::ContainerRunning
    );
    h.faults.heal("shim.reopen_log");
    reopen_log(&h, &app)
        .await
        .expect("ReopenContainerLog, retried");
    h.remove_pod(&pod).await.unwrap();
    h.assert_nothing_left().await;
}

/// A terminal resize the shim refuses is not the session's end: the exec'd command runs on
/// and its exit code comes back; the process is removed from the shim after.
#[tokio::test]
async fn shim_resize_failing_leaves_the_exec_session_running() {
    let h = Harness::new().await;
    let pod = h.run_pod("web").await.unwrap();
    let app = h.run_container(&pod, "app").await;
    h.faults.fail("shim.resize");
    let (sizes, resize) = tokio::sync::mpsc::channel(4);
    let io = peapod_streaming::StreamIo {
        stdin: None,
        stdout: None,
        stderr: None,
        tty: true,
        resize: Some(resize),
    };
    let exec = h.rt.exec.clone();
    let (id, cmd) = (app.clone(), vec!["sh".to_string()]);
    let session = tokio::spawn(async move { exec.exec_session(&id, cmd, io).await });
    let shim = h.shims.shim(&pod).unwrap();
    while shim.exec_ids().is_empty() {
        tokio::task::yield_now().await;
    }
    sizes
        .send(peapod_streaming::TerminalSize {
            width: 80,
            height: 24,
        })
        .await
        .unwrap();
    h.faults.reached("shim.resize", 1).await;
    assert!(
        !session.is_finished(),
        "a failed resize does not end the session"
    );
    shim.exit_execs(3);
    let code = session.await.unwrap().expect("the session");
    assert_eq!(code, 3, "the command's exit code");
    assert!(
        shim.exec_ids().is_empty(),
        "the exec was removed from the shim"
    );
    h.remove_pod(&pod).await.unwrap();
    h.assert_nothing_left().await;
}

/// StopContainer waits for the exit after its signal: a wait that fails is the call's error,
/// and with every wait failing (the exit watcher's too) the container is still recorded
/// running, not exited without its exit; the retry stops it.
#[tokio::test]
async fn shim_wait_failing_fails_stop_container_and_a_retry_stops() {
    let h = Harness::new().await;
    let pod = h.run_pod("web").await.unwrap();
    h.faults.fail("shim.wait");
    let app = h.run_container(&pod, "app").await;
    let err = h.stop_container(&app, 5).await.unwrap_err();
    assert!(err.message().contains("shim.wait"), "{err:?}");
    assert_eq!(
        h.container_state(&app).await,
        ContainerState::ContainerRunning,
        "not recorded exited without its exit"
    );
    h.faults.heal("shim.wait");
    h.stop_container(&app, 5)
        .await
        .expect("StopContainer, retried");
    assert_eq!(
        h.container_state(&app).await,
        ContainerState::ContainerExited
    );
    h.remove_pod(&pod).await.unwrap();
    h.assert_nothing_left().await;
}
