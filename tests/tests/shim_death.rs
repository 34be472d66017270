//! A pod whose shim dies (kill -9 of `peapod-shim`), end to end: the pod turns NOTREADY and
//! its containers EXITED within 5 s, their processes are killed through runc, and Stop/Remove
//! leave nothing behind. (A reboot, where every shim dies at once, is in faults.rs.)

use e2e::pods::{busybox, sh, Images};
use e2e::{host, TestDaemon};
use peapod_proto::v1 as cri;
use std::time::{Duration, Instant};

/// The bound the issue sets for noticing a dead shim.
const NOTICE: Duration = Duration::from_secs(5);

async fn pod_state(d: &mut TestDaemon, id: &str) -> i32 {
    d.cri
        .runtime
        .pod_sandbox_status(cri::PodSandboxStatusRequest {
            pod_sandbox_id: id.into(),
            verbose: false,
        })
        .await
        .expect("PodSandboxStatus")
        .into_inner()
        .status
        .expect("a status")
        .state
}

/// The pod's shim process (its command line names the pod's id).
fn shim_pids(pod: &str) -> Vec<u32> {
    host::processes_with(&format!("--id {pod}"))
        .into_iter()
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm"))
                .is_ok_and(|c| c.trim() == "peapod-shim")
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_shim_is_noticed_and_what_it_held_is_killed_and_removable() {
    let mut d = TestDaemon::start("shim_death").await;
    let images = Images::start();
    let image = images.push("busybox:shimdeath", &busybox());
    d.pull(&image).await;
    let pod = d.run_pod("shim-death").await;
    // A marker no other process on the machine has in its command line.
    let marker = format!("sleep 7{}", std::process::id() % 1000);
    let app = d
        .run_container(&pod, sh("app", &image, &format!("exec {marker}")))
        .await;
    let created = d
        .create(&pod, sh("later", &image, "true"))
        .await
        .expect("CreateContainer");
    let app_pid = d.container_status(&app).await;
    assert_eq!(app_pid.state, cri::ContainerState::ContainerRunning as i32);
    assert_eq!(host::processes_with(&marker).len(), 1, "the app runs");

    let shims = shim_pids(&pod.id);
    assert_eq!(shims.len(), 1, "one shim for the pod: {shims:?}");
    // SAFETY: kill(2) with a pid and a signal.
    assert_eq!(unsafe { libc::kill(shims[0] as i32, libc::SIGKILL) }, 0);

    let since = Instant::now();
    while pod_state(&mut d, &pod.id).await != cri::PodSandboxState::SandboxNotready as i32 {
        assert!(
            since.elapsed() < NOTICE,
            "pod still ready {NOTICE:?} after its shim died\n{}",
            d.log()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let noticed = since.elapsed();
    eprintln!("dead shim noticed after {} ms", noticed.as_millis());
    for id in [&app, &created] {
        let st = d.container_status(id).await;
        assert_eq!(
            st.state,
            cri::ContainerState::ContainerExited as i32,
            "{st:?}"
        );
        assert_eq!(
            (st.exit_code, st.reason.as_str()),
            (137, "ShimDied"),
            "{st:?}"
        );
    }
    assert!(
        host::processes_with(&marker).is_empty(),
        "the app's process outlived its shim\n{}",
        d.log()
    );

    d.remove_pod(&pod).await;
    let left = d.leftovers();
    assert!(left.is_empty(), "{left:#?}\n{}", d.log());
}
