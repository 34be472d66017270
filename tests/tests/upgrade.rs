//! Upgrades and downgrades (issue 37): the root and the state directory carry the on-disk
//! format they were written in (`peapod-format.json`); a daemon refuses a newer one before
//! it touches anything, saying what to do, and the pods of that root keep running meanwhile.
//! And pods made by the previous release (its daemon and its shim, built from git by
//! scripts/upgrade-from) go on under this build's daemon.

use e2e::pods::{busybox, exec_sync_in, in_pod, read_log, sh, Images};
use e2e::{DaemonOptions, TestDaemon};
use peapod_proto::v1 as cri;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// Every file under `dir` with its content (a directory as its name alone), to show that a
/// refused start changed nothing.
fn snapshot(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            let ty = e.file_type().unwrap();
            let key = p.display().to_string();
            if ty.is_dir() {
                out.insert(key, Vec::new());
                todo.push(p);
            } else if ty.is_file() {
                out.insert(key, std::fs::read(&p).unwrap_or_default());
            } else {
                out.insert(key, b"(special)".to_vec());
            }
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_newer_format_is_refused_unchanged_and_the_pods_run_on() {
    let images = Images::start();
    let image = images.push("busybox:upgrade", &busybox());
    let mut d = TestDaemon::start("format-newer").await;
    d.pull(&image).await;
    let pod = d.run_pod("upgrade").await;
    let app = d
        .run_container(&pod, in_pod(&pod, sh("app", &image, "exec sleep 3600")))
        .await;
    for dir in [&d.root, &d.state] {
        let stamp = std::fs::read_to_string(dir.join("peapod-format.json")).unwrap();
        assert!(stamp.contains("\"format\":1"), "{stamp}");
    }

    // A newer release wrote the root; this daemon must not start on it.
    d.stop_daemon();
    let stamp = d.root.join("peapod-format.json");
    let ours = std::fs::read(&stamp).unwrap();
    std::fs::write(&stamp, "{\"format\":99,\"written_by\":\"9.0.0\"}\n").unwrap();
    let (root_before, state_before) = (snapshot(&d.root), snapshot(&d.state));
    let out = Command::new(e2e::daemon::bin_dir().join("peapod"))
        .args(["serve", "--config"])
        .arg(d.config_path())
        .output()
        .unwrap();
    assert!(!out.status.success(), "started on a newer format");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("on-disk format 99")
            && err.contains("peapod 9.0.0 or newer")
            && err.contains(&d.root.display().to_string()),
        "{err}"
    );
    assert!(
        snapshot(&d.root) == root_before,
        "the refused start changed the root"
    );
    assert!(
        snapshot(&d.state) == state_before,
        "the refused start changed the state"
    );

    // Back on its own format, the daemon finds the pod as it was, still running.
    std::fs::write(&stamp, ours).unwrap();
    assert!(d.restart().await);
    let echo = exec_sync_in(&mut d, &app, &["echo", "still here"]).await;
    assert_eq!(
        (echo.exit_code, echo.stdout.as_slice()),
        (0, &b"still here\n"[..])
    );
    d.remove_pod(&pod).await;
    let left = d.leftovers();
    assert!(left.is_empty(), "left {left:?}");
}

/// The pids of processes whose program is `exe`.
fn running(exe: &Path) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| std::fs::read_link(format!("/proc/{pid}/exe")).is_ok_and(|p| p == exe))
        .collect()
}

/// The previous release made the pod; this build's daemon takes it over with the old shim
/// still running it: the pod and its container are listed as they were, the log goes on,
/// exec, ReopenContainerLog, stop (its TERM trap's exit code) and remove work, and nothing is
/// left. (The previous release reads no format stamp, so a downgrade to it cannot be refused:
/// what this build does with a newer format is the test above.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PEAPOD_UPGRADE_FROM, the previous release's binaries (scripts/upgrade-from); scripts/test runs it"]
async fn the_previous_releases_pods_go_on_under_this_daemon() {
    let old = PathBuf::from(
        std::env::var("PEAPOD_UPGRADE_FROM")
            .expect("PEAPOD_UPGRADE_FROM: the directory scripts/upgrade-from prints"),
    );
    let images = Images::start();
    let image = images.push("busybox:upgrade-from", &busybox());
    let mut d = TestDaemon::start_with(
        "upgrade-from",
        DaemonOptions {
            program: Some(old.join("peapod")),
            ..Default::default()
        },
    )
    .await;
    d.pull(&image).await;
    let pod = d.run_pod("upgraded").await;
    let script =
        "trap 'echo term; exit 7' TERM; i=0; while :; do echo tick $i; i=$((i+1)); sleep 0.2; done";
    let app = d
        .run_container(&pod, in_pod(&pod, sh("app", &image, script)))
        .await;
    d.wait_log(&app, "tick 1", Duration::from_secs(20)).await;
    let old_shims = running(&old.join("peapod-shim"));
    assert_eq!(
        old_shims.len(),
        1,
        "the previous release's shim runs the pod"
    );
    assert!(
        !d.root.join("peapod-format.json").exists(),
        "the previous release wrote a format stamp"
    );

    // The upgrade: the old daemon stops (its pods run on), this build's starts.
    d.program = None;
    assert!(d.restart().await);
    let stamp = std::fs::read_to_string(d.root.join("peapod-format.json")).unwrap();
    assert!(stamp.contains("\"format\":1"), "{stamp}");
    assert_eq!(
        running(&old.join("peapod-shim")),
        old_shims,
        "the old shim still runs the pod"
    );
    let pods = d
        .cri
        .runtime
        .list_pod_sandbox(cri::ListPodSandboxRequest::default())
        .await
        .unwrap()
        .into_inner()
        .items;
    assert!(
        pods.iter()
            .any(|p| p.id == pod.id && p.state == cri::PodSandboxState::SandboxReady as i32),
        "{pods:?}"
    );
    let status = d.container_status(&app).await;
    assert_eq!(status.state, cri::ContainerState::ContainerRunning as i32);
    let log = PathBuf::from(&status.log_path);
    let ticks = read_log(&log).len();
    let deadline = std::time::Instant::now() + e2e::scaled(Duration::from_secs(20));
    while read_log(&log).len() <= ticks + 2 {
        assert!(
            std::time::Instant::now() < deadline,
            "the log stopped at the upgrade"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let echo = exec_sync_in(&mut d, &app, &["echo", "upgraded"]).await;
    assert_eq!(
        (echo.exit_code, echo.stdout.as_slice()),
        (0, &b"upgraded\n"[..])
    );
    // ReopenContainerLog through the old shim: the log moved aside, a new one is written.
    std::fs::rename(&log, log.with_extension("log.1")).unwrap();
    d.cri
        .runtime
        .reopen_container_log(cri::ReopenContainerLogRequest {
            container_id: app.clone(),
        })
        .await
        .unwrap_or_else(|e| panic!("ReopenContainerLog: {e}\n{}", d.log()));
    d.wait_log(&app, "tick", Duration::from_secs(20)).await;

    d.stop_container(&app, 10).await;
    let status = d.container_status(&app).await;
    assert_eq!(
        (status.state, status.exit_code),
        (cri::ContainerState::ContainerExited as i32, 7),
        "{status:?}"
    );
    d.remove_pod(&pod).await;
    assert!(
        running(&old.join("peapod-shim")).is_empty(),
        "the old shim outlived its pod"
    );
    let left = d.leftovers();
    assert!(left.is_empty(), "left {left:?}");
}
