//! Upgrades and downgrades (issue 37): the root and the state directory carry the on-disk
//! format they were written in (`peapod-format.json`); a daemon refuses a newer one before
//! it touches anything, saying what to do, and the pods of that root keep running meanwhile.

use e2e::pods::{busybox, exec_sync_in, in_pod, sh, Images};
use e2e::TestDaemon;
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

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
