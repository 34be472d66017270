//! The shim's program never reaches a container as a host file it could change (issue 37; the
//! class of runc's CVE-2019-5736). A natively created container's init is the shim's program
//! until its start execs the entrypoint: a process of another container in the pod's PID
//! namespace sees it, opens its `/proc/<pid>/exe`, and keeps that handle while the init is
//! created, after it started, and after it exited. Reopened for writing, the handle must be
//! refused as a read-only file (EROFS: the shim runs its helpers from a detached overlayfs view
//! of its executable), never "text file busy" (ETXTBSY: the host's file itself, writable the
//! moment no shim runs it), and the host's binary stays as it was. The probe opens for append
//! and writes nothing, so that even a runtime with the hole changes no byte.

use e2e::pods::{busybox, exec_sync_in, in_pod, namespace_options, sh, Images};
use e2e::TestDaemon;
use peapod_proto::v1 as cri;
use std::time::Duration;

/// The watcher: finds a process whose program is the shim's, holds its exe, and at each of
/// the test's marks (files it touches in /tmp through exec) tries to reopen it for writing.
const WATCHER: &str = r#"
while :; do
  for p in /proc/[0-9]*; do
    case "$(readlink $p/exe 2>/dev/null)" in
      *peapod-shim*) exec 3<"$p/exe"; echo "holding $(readlink $p/exe)"; break 2 ;;
    esac
  done
  sleep 0.05
done
try() {
  if err=$( (: >>/proc/self/fd/3) 2>&1); then echo "$1: OPENED FOR WRITING"; else echo "$1: refused: $err"; fi
}
try created
for mark in started exited; do
  while [ ! -e /tmp/$mark ]; do sleep 0.05; done
  try $mark
done
exec sleep 3600
"#;

fn digest(path: &std::path::Path) -> Vec<u8> {
    std::fs::read(path).expect("read the shim's binary")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_container_cannot_open_the_shims_program_for_writing() {
    let shim = e2e::daemon::bin_dir().join("peapod-shim");
    let before = digest(&shim);
    let images = Images::start();
    let image = images.push("busybox:sealed", &busybox());
    let mut d = TestDaemon::start("sealed-program").await;
    d.pull(&image).await;
    let pod = d
        .run_pod_with("sealed", |p| {
            namespace_options(p).pid = cri::NamespaceMode::Pod as i32;
        })
        .await;
    let watcher = d
        .run_container(&pod, in_pod(&pod, sh("watcher", &image, WATCHER)))
        .await;

    // Created, not started: its init is the shim's program, waiting for the start.
    let app = d
        .create(&pod, in_pod(&pod, sh("app", &image, "exec sleep 3600")))
        .await
        .expect("create app");
    d.wait_log(&watcher, "created:", Duration::from_secs(20))
        .await;
    d.start_container(&app).await.expect("start app");
    let started = exec_sync_in(&mut d, &watcher, &["touch", "/tmp/started"]).await;
    assert_eq!(started.exit_code, 0);
    d.wait_log(&watcher, "started:", Duration::from_secs(20))
        .await;
    d.stop_container(&app, 0).await;
    let exited = exec_sync_in(&mut d, &watcher, &["touch", "/tmp/exited"]).await;
    assert_eq!(exited.exit_code, 0);
    let lines = d
        .wait_log(&watcher, "exited:", Duration::from_secs(20))
        .await;
    let text: Vec<&str> = lines.iter().map(|l| l.text.as_str()).collect();

    let held = text.iter().find(|l| l.starts_with("holding ")).unwrap();
    assert!(
        !held.contains(&*shim.to_string_lossy()),
        "the container sees the host's file as the init's program: {held}"
    );
    for stage in ["created", "started", "exited"] {
        let line = text
            .iter()
            .find(|l| l.starts_with(&format!("{stage}:")))
            .unwrap();
        assert!(
            line.contains("Read-only file system"),
            "{stage}: the handle must be refused as read-only: {text:#?}"
        );
    }
    assert!(
        digest(&shim) == before,
        "the host's peapod-shim changed under a container"
    );
    d.remove_pod(&pod).await;
    let left = d.leftovers();
    assert!(left.is_empty(), "left {left:?}");
}
