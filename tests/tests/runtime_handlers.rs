//! Runtime handlers (`[runtime.handlers.NAME]`), end to end on real runc: a pod asks for one
//! by RunPodSandbox's `runtime_handler` (the kubelet takes it from the pod's RuntimeClass: the
//! node conformance suite's RuntimeClass specs need `test-handler`), its containers run under
//! that handler's runtime and root, Status lists every handler, an unknown one is refused
//! naming the field and leaves nothing, and a dead shim's containers are killed through the
//! runtime that has them.

use e2e::pods::{busybox, sh, Images};
use e2e::{host, TestDaemon};
use peapod_proto::v1 as cri;
use std::path::Path;
use std::time::{Duration, Instant};

/// The ids `runc --root ROOT list -q` prints.
fn runc_list(root: &Path) -> Vec<String> {
    let out = std::process::Command::new("runc")
        .arg("--root")
        .arg(root)
        .args(["list", "-q"])
        .output()
        .expect("runc list");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

fn runc_path() -> String {
    let out = std::process::Command::new("sh")
        .args(["-c", "command -v runc"])
        .output()
        .expect("sh");
    let path = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert!(path.starts_with('/'), "runc on PATH: {path:?}");
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_run_on_the_handler_they_ask_for() {
    // test-handler: runc, as the default; by-path: runc named by its full path, which is
    // another runtime to peapod (a root of its own). Containers created by runc, whose state
    // under each handler's root shows where they run (the shim's own creates leave none).
    let mut d = TestDaemon::start_with(
        "runtime-handlers",
        e2e::daemon::DaemonOptions {
            extra_config: format!(
                "[runtime]\ncreate = \"runc\"\n\
                 [runtime.handlers.test-handler]\npath = \"runc\"\n\
                 [runtime.handlers.by-path]\npath = \"{}\"\n",
                runc_path()
            ),
            ..Default::default()
        },
    )
    .await;
    let images = Images::start();
    let image = images.push("busybox:handlers", &busybox());
    d.pull(&image).await;

    let status = d
        .cri
        .runtime
        .status(cri::StatusRequest { verbose: false })
        .await
        .unwrap()
        .into_inner();
    let names: Vec<&str> = status
        .runtime_handlers
        .iter()
        .map(|h| h.name.as_str())
        .collect();
    assert_eq!(names, ["", "by-path", "test-handler"]);

    // An unknown handler: refused, naming the field and the handlers there are; nothing made.
    let err = d.run_pod_on("nope", "kata", |_| {}).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    assert!(
        err.message()
            .contains("runtime_handler \"kata\" is not configured")
            && err.message().contains("\"test-handler\""),
        "{err:?}"
    );
    let left = d.leftovers();
    assert!(left.is_empty(), "{left:#?}");

    // test-handler: the default runtime and root.
    let pod = d
        .run_pod_on("on-test-handler", "test-handler", |_| {})
        .await
        .unwrap_or_else(|e| panic!("RunPodSandbox: {e}\n{}", d.log()));
    let app = d
        .run_container(
            &pod,
            sh("app", &image, "echo on-test-handler; exec sleep 1000"),
        )
        .await;
    d.wait_log(&app, "on-test-handler", Duration::from_secs(10))
        .await;
    assert!(runc_list(&d.state.join("runc")).contains(&app));
    assert_eq!(d.pod_status(&pod.id).await.runtime_handler, "test-handler");

    // by-path: its own root, where the default runtime's list does not show it.
    let other = d
        .run_pod_on("on-by-path", "by-path", |_| {})
        .await
        .unwrap_or_else(|e| panic!("RunPodSandbox: {e}\n{}", d.log()));
    let marker = format!("sleep 8{}", std::process::id() % 1000);
    let app2 = d
        .run_container(&other, sh("app", &image, &format!("exec {marker}")))
        .await;
    let own_root = d.state.join("runtimes/by-path");
    assert!(
        runc_list(&own_root).contains(&app2),
        "{:?}",
        runc_list(&own_root)
    );
    assert!(!runc_list(&d.state.join("runc")).contains(&app2));

    // The handler is kept across a restart of the daemon.
    d.restart().await;
    assert_eq!(d.pod_status(&pod.id).await.runtime_handler, "test-handler");
    assert_eq!(d.pod_status(&other.id).await.runtime_handler, "by-path");

    // Its shim dies: its container is killed through the runtime that has it.
    let shims: Vec<u32> = host::processes_with(&format!("--id {}", other.id))
        .into_iter()
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm"))
                .is_ok_and(|c| c.trim() == "peapod-shim")
        })
        .collect();
    assert_eq!(shims.len(), 1, "{shims:?}");
    // SAFETY: kill(2) with a pid and a signal.
    assert_eq!(unsafe { libc::kill(shims[0] as i32, libc::SIGKILL) }, 0);
    let since = Instant::now();
    while d.pod_status(&other.id).await.state != cri::PodSandboxState::SandboxNotready as i32 {
        assert!(since.elapsed() < Duration::from_secs(10), "{}", d.log());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let st = d.container_status(&app2).await;
    assert_eq!(
        (st.exit_code, st.reason.as_str()),
        (137, "ShimDied"),
        "{st:?}"
    );
    assert!(
        host::processes_with(&marker).is_empty(),
        "the container outlived its shim\n{}",
        d.log()
    );
    assert!(
        !runc_list(&own_root).contains(&app2),
        "deleted from its runtime"
    );

    d.remove_pod(&other).await;
    d.remove_pod(&pod).await;
    let left = d.leftovers();
    assert!(left.is_empty(), "{left:#?}\n{}", d.log());
}
