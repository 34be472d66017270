//! A pod whose shim dies (kill -9 of `peapod-shim`), end to end: the pod turns NOTREADY and
//! its containers EXITED within 5 s, their processes are killed through runc, and Stop/Remove
//! leave nothing behind.

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

fn kill9(pids: &[u32]) {
    for pid in pids {
        // SAFETY: kill(2) with a pid and a signal.
        unsafe { libc::kill(*pid as i32, libc::SIGKILL) };
    }
}

/// What a reboot does to this daemon's pods: the daemon, every shim and every container
/// process die at once, everything mounted under --state (netns pins, /dev/shm, root
/// filesystems) and the state directory itself vanish (it is a tmpfs), as do the pods'
/// cgroups and veths. The root directory (records, IPAM reservations) survives.
fn simulate_reboot(d: &TestDaemon) {
    kill9(&host::processes_with(&format!(
        "serve --config {}",
        d.dir.join("config.toml").display()
    )));
    kill9(&host::processes_with(&format!("{}/", d.state.display())));
    // Every container process (and the cgroups they were in).
    host::remove_cgroup_tree(&d.cgroup_parent);
    host::unmount_all_under(&d.state);
    std::fs::remove_dir_all(&d.state).expect("empty the state directory");
    // The pods' network namespaces are gone with their pins and processes; the kernel
    // deletes their veths with them (waited for below, so the check after removal is fair).
    for _ in 0..250 {
        if host::bridge_ports(&d.bridge).is_empty() {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// IP reservations host-local holds for this daemon's network.
fn reservations(d: &TestDaemon) -> Vec<String> {
    d.leftovers()
        .into_iter()
        .filter(|l| l.starts_with("IP reservation"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_reboot_pods_are_not_ready_their_containers_exited_and_removal_releases_all() {
    let mut d = TestDaemon::start("reboot").await;
    let images = Images::start();
    let image = images.push("busybox:reboot", &busybox());
    d.pull(&image).await;
    let pod = d.run_pod("reboot").await;
    let app = d
        .run_container(&pod, sh("app", &image, "exec sleep 600"))
        .await;
    assert_eq!(reservations(&d).len(), 1, "the pod's IP is reserved");

    simulate_reboot(&d);
    d.restart().await;

    let since = Instant::now();
    while pod_state(&mut d, &pod.id).await != cri::PodSandboxState::SandboxNotready as i32 {
        assert!(
            since.elapsed() < NOTICE,
            "pod still ready after a reboot\n{}",
            d.log()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let st = d.container_status(&app).await;
    assert_eq!(
        st.state,
        cri::ContainerState::ContainerExited as i32,
        "{st:?}"
    );
    assert_eq!(st.exit_code, 137, "{st:?}");

    d.remove_pod(&pod).await;
    assert!(reservations(&d).is_empty(), "CNI DEL released the IP");
    let left = d.leftovers();
    assert!(left.is_empty(), "{left:#?}\n{}", d.log());
}
