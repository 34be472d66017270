//! Start-up right after kill -9: the predecessor is still dying and holds the image store's
//! lock (and a fixed streaming port) for a moment. The new daemon waits for them, bounded,
//! saying once what it waits for; past the bound it fails with an error naming what is held.

use e2e::pods::{busybox, sh, Images};
use e2e::TestDaemon;
use peapod_proto::v1 as cri;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

/// Holds an exclusive flock on `path` until `release` passes, as a dying daemon does.
fn hold_lock(path: &std::path::Path, release: Duration) -> std::thread::JoinHandle<()> {
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .expect("open the store's lock");
    // SAFETY: a valid descriptor.
    let locked = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    assert_eq!(
        locked, 0,
        "the test takes the lock the stopped daemon released"
    );
    std::thread::spawn(move || {
        std::thread::sleep(release);
        drop(file);
    })
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn count(log: &str, needle: &str) -> usize {
    log.lines().filter(|l| l.contains(needle)).count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_and_a_port_still_held_by_a_dying_predecessor_are_waited_for() {
    let port = free_port();
    let mut d = TestDaemon::start_with(
        "swait",
        e2e::DaemonOptions {
            extra_config: format!("[streaming]\naddress = \"127.0.0.1:{port}\"\n"),
            ..Default::default()
        },
    )
    .await;
    let pod = d.run_pod("before").await;
    d.stop_daemon();

    // What a predecessor still exiting holds: the store's flock and the streaming port.
    let lock = hold_lock(
        &d.root.join("image").join("LOCK"),
        Duration::from_millis(1500),
    );
    let listener = std::net::TcpListener::bind(("127.0.0.1", port)).expect("hold the port");
    let port_holder = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(2500));
        drop(listener);
    });
    let started = Instant::now();
    d.restart().await;
    let waited = started.elapsed();
    lock.join().unwrap();
    port_holder.join().unwrap();
    assert!(
        waited >= Duration::from_millis(2500),
        "served after {waited:?}"
    );
    let log = d.log();
    assert_eq!(
        count(&log, "the image store's lock is held by another process"),
        1,
        "one line however long it waits:\n{log}"
    );
    assert_eq!(
        count(&log, "the streaming port is held by another process"),
        1,
        "{log}"
    );
    // And it is the same daemon state: the pod from before is there, ready.
    let status = d
        .cri
        .runtime
        .pod_sandbox_status(cri::PodSandboxStatusRequest {
            pod_sandbox_id: pod.id.clone(),
            verbose: false,
        })
        .await
        .expect("PodSandboxStatus")
        .into_inner();
    assert_eq!(
        status.status.unwrap().state,
        cri::PodSandboxState::SandboxReady as i32
    );
    let url = d
        .cri
        .runtime
        .port_forward(cri::PortForwardRequest {
            pod_sandbox_id: pod.id.clone(),
            port: vec![80],
        })
        .await
        .expect("the streaming server serves on its port")
        .into_inner()
        .url;
    assert!(url.contains(&format!("127.0.0.1:{port}")), "{url}");
    d.remove_pod(&pod).await;
    assert!(d.leftovers().is_empty(), "{:#?}", d.leftovers());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_bound_start_up_fails_naming_what_is_held_and_leaves_no_socket() {
    let mut d = TestDaemon::start("sbound").await;
    d.stop_daemon();
    let config = std::fs::read_to_string(d.config_path()).unwrap();
    std::fs::write(
        d.config_path(),
        format!("startup_wait_seconds = 1\n{config}"),
    )
    .unwrap();
    let lock = hold_lock(&d.root.join("image").join("LOCK"), Duration::from_secs(6));
    let _ = std::fs::remove_file(&d.socket);
    let started = Instant::now();
    d.spawn();
    assert!(
        d.wait_daemon_exit(Duration::from_secs(5)),
        "the daemon gives up after its bound; log:\n{}",
        d.log()
    );
    let took = started.elapsed();
    assert!(took >= Duration::from_millis(900), "gave up after {took:?}");
    let log = d.log();
    assert!(
        log.contains("is still held by another process after waiting 1.0s"),
        "{log}"
    );
    assert!(log.contains("image"), "{log}");
    assert!(
        !d.socket.exists(),
        "no socket is left by a daemon that did not start"
    );
    lock.join().unwrap();
    // Released: the next start works.
    d.restart().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_restarts_right_after_kill_9_without_waiting_all_serve() {
    let mut d = TestDaemon::start("skill9").await;
    let images = Images::start();
    let image = images.push("busybox:swait", &busybox());
    d.pull(&image).await;
    let pod = d.run_pod("steady").await;
    let app = d.run_container(&pod, sh("app", &image, "sleep 3600")).await;
    let mut waits = 0;
    for round in 0..10 {
        // `kill -9 $pid; peapod serve &`: the next daemon starts while this one is dying.
        let dying = d.kill_daemon_without_waiting().expect("a running daemon");
        d.spawn();
        d.wait_serving().await;
        let mut dying = dying;
        let _ = dying.wait();
        let st = d.container_status(&app).await;
        assert_eq!(
            st.state,
            cri::ContainerState::ContainerRunning as i32,
            "round {round}"
        );
        waits = count(&d.log(), "is held by another process");
    }
    println!("restarts right after kill -9 that met a held lock: {waits} of 10");
    d.remove_pod(&pod).await;
    assert!(d.leftovers().is_empty(), "{:#?}", d.leftovers());
}
