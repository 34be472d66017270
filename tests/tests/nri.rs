//! NRI with a real external plugin process (`nri-test-plugin`) on the daemon's NRI socket:
//! its adjustments reach the container, its refusal fails CreateContainer leaving nothing,
//! it is synchronised with what exists when it connects and hears every event in order
//! (including the exit of a container nobody stopped); NRI is on by default, a socket another
//! runtime serves leaves it off without failing the start, and with NRI off there is no socket.

use e2e::daemon::{bin_dir, DaemonOptions};
use e2e::pods::{busybox, sh, Images, Pod};
use e2e::TestDaemon;
use peapod_proto::v1 as cri;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const NRI_ON: &str = "[nri]\nenabled = true\nsocket_path = \"{dir}/nri.sock\"\n";

/// The plugin process; killed on drop.
struct PluginProcess(Child);

impl Drop for PluginProcess {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts the test plugin as `10-<name>` and waits (bounded) until the daemon registered it.
fn start_plugin(d: &TestDaemon, name: &str, args: &[&str]) -> PluginProcess {
    let child = Command::new(bin_dir().join("nri-test-plugin"))
        .arg("--socket")
        .arg(d.dir.join("nri.sock"))
        .args(["--name", name, "--idx", "10"])
        .args(args)
        .stdout(Stdio::null())
        .spawn()
        .expect("start nri-test-plugin");
    let plugin = PluginProcess(child);
    let needle = format!("NRI plugin registered plugin=10-{name}");
    let deadline = Instant::now() + Duration::from_secs(20);
    while !d.log().contains(&needle) {
        assert!(
            Instant::now() < deadline,
            "plugin {name} not registered:\n{}",
            d.log()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    plugin
}

fn events(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(String::from)
        .collect()
}

/// Waits (bounded) until the events file has `line`.
fn wait_event(path: &Path, line: &str) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let got = events(path);
        if got.iter().any(|l| l == line) {
            return got;
        }
        assert!(Instant::now() < deadline, "no event {line:?} in {got:#?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

async fn nri_daemon(name: &str) -> TestDaemon {
    TestDaemon::start_with(
        name,
        DaemonOptions {
            extra_config: NRI_ON.into(),
            ..Default::default()
        },
    )
    .await
}

async fn pod_with_image(d: &mut TestDaemon, images: &Images, pod: &str) -> (Pod, String) {
    let image = images.push("busybox:nri", &busybox());
    d.pull(&image).await;
    (d.run_pod(pod).await, image)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plugin_adjustments_reach_the_container_and_events_come_in_order() {
    let mut d = nri_daemon("nri-adjust").await;
    let share = d.dir.join("nri-share");
    std::fs::create_dir_all(&share).unwrap();
    std::fs::write(share.join("file"), "shared-by-plugin\n").unwrap();
    let log: PathBuf = d.dir.join("events.log");
    let mount = format!("{}:/nri-share", share.display());
    let plugin = start_plugin(
        &d,
        "adjust",
        &[
            "--events",
            log.to_str().unwrap(),
            "--env",
            "NRI_ENV=from-plugin",
            "--annotation",
            "nri.test/annotation=yes",
            "--mount",
            &mount,
            "--nofile",
            "1234",
        ],
    );
    let images = Images::start();
    let (pod, image) = pod_with_image(&mut d, &images, "nri-pod").await;
    let script =
        "echo env=$NRI_ENV; cat /nri-share/file; echo nofile=$(ulimit -n); sleep 300 & wait";
    let id = d.run_container(&pod, sh("ctr", &image, script)).await;
    let lines = d.wait_log(&id, "nofile=", Duration::from_secs(30)).await;
    let text: Vec<&str> = lines.iter().map(|l| l.text.as_str()).collect();
    assert_eq!(text, ["env=from-plugin", "shared-by-plugin", "nofile=1234"]);
    let spec: serde_json::Value = serde_json::from_slice(
        &std::fs::read(d.state.join("containers").join(&id).join("config.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(spec["annotations"]["nri.test/annotation"], "yes");

    let update = cri::UpdateContainerResourcesRequest {
        container_id: id.clone(),
        linux: Some(cri::LinuxContainerResources {
            cpu_shares: 512,
            ..Default::default()
        }),
        ..Default::default()
    };
    d.cri
        .runtime
        .update_container_resources(update)
        .await
        .unwrap();
    d.remove_pod(&pod).await;
    let got = wait_event(&log, "RemovePodSandbox nri-pod");
    assert_eq!(
        got,
        [
            "RunPodSandbox nri-pod",
            "CreateContainer nri-pod/ctr",
            "PostCreateContainer nri-pod/ctr",
            "StartContainer nri-pod/ctr",
            "PostStartContainer nri-pod/ctr",
            "UpdateContainer nri-pod/ctr",
            "PostUpdateContainer nri-pod/ctr",
            "StopContainer nri-pod/ctr",
            "StopPodSandbox nri-pod",
            "RemoveContainer nri-pod/ctr",
            "RemovePodSandbox nri-pod",
        ]
    );
    drop(plugin);
    assert_eq!(d.leftovers(), Vec::<String>::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_refusal_fails_run_and_create_leaving_nothing_and_the_name_free() {
    let mut d = nri_daemon("nri-deny").await;
    let _plugin = start_plugin(&d, "deny", &["--deny", "deny-", "--deny-pod", "denied-pod"]);
    // RunPodSandbox refused: no sandbox, no netns, no shim, no cgroup; twice (the name is free).
    for attempt in 0..2 {
        let config = e2e::fixtures::sandbox_config("denied-pod", &d.cgroup_parent);
        let err = d
            .cri
            .runtime
            .run_pod_sandbox(cri::RunPodSandboxRequest {
                config: Some(config),
                runtime_handler: String::new(),
            })
            .await
            .expect_err("the plugin refuses the pod");
        assert_eq!(
            err.code(),
            tonic::Code::FailedPrecondition,
            "attempt {attempt}: {err}"
        );
        assert!(
            err.message().contains(
                "NRI plugin 10-deny failed RunPodSandbox: test plugin denies pod denied-pod"
            ),
            "attempt {attempt}: {err}"
        );
        assert_eq!(d.leftovers(), Vec::<String>::new(), "attempt {attempt}");
    }
    let pods = d
        .cri
        .runtime
        .list_pod_sandbox(cri::ListPodSandboxRequest::default())
        .await
        .unwrap()
        .into_inner()
        .items;
    assert!(pods.is_empty(), "{pods:?}");
    let images = Images::start();
    let (pod, image) = pod_with_image(&mut d, &images, "deny-pod").await;
    for attempt in 0..2 {
        // The second attempt with the same name meets the plugin again, not AlreadyExists.
        let err = d
            .create(&pod, sh("deny-me", &image, "sleep 300"))
            .await
            .expect_err("the plugin refuses deny-me");
        assert_eq!(
            err.code(),
            tonic::Code::FailedPrecondition,
            "attempt {attempt}: {err}"
        );
        assert!(
            err.message()
                .contains("NRI plugin 10-deny failed CreateContainer: test plugin denies deny-me"),
            "attempt {attempt}: {err}"
        );
    }
    let listed = d
        .cri
        .runtime
        .list_containers(cri::ListContainersRequest::default())
        .await
        .unwrap()
        .into_inner()
        .containers;
    assert!(listed.is_empty(), "{listed:?}");
    for dir in [d.root.join("containers"), d.state.join("containers")] {
        let left: Vec<_> = std::fs::read_dir(&dir)
            .map(|r| r.flatten().map(|e| e.path()).collect())
            .unwrap_or_default();
        assert!(left.is_empty(), "{}: {left:?}", dir.display());
    }
    let ok = d
        .run_container(
            &pod,
            sh("allowed", &image, "echo allowed; sleep 300 & wait"),
        )
        .await;
    d.wait_log(&ok, "allowed", Duration::from_secs(30)).await;
    d.remove_pod(&pod).await;
    assert_eq!(d.leftovers(), Vec::<String>::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_plugin_is_synchronised_its_updates_applied_and_hears_exits_nobody_asked_for() {
    let mut d = nri_daemon("nri-sync").await;
    let images = Images::start();
    let (pod, image) = pod_with_image(&mut d, &images, "sync-pod").await;
    let before = d
        .run_container(&pod, sh("before", &image, "sleep 300 & wait"))
        .await;
    let log = d.dir.join("events.log");
    let _plugin = start_plugin(
        &d,
        "late",
        &[
            "--events",
            log.to_str().unwrap(),
            "--sync-cpu-shares",
            "321",
        ],
    );
    assert_eq!(
        events(&log),
        ["SyncPod sync-pod", "SyncContainer sync-pod/before"]
    );
    // The update its Synchronize answer asked for is applied to the existing container.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let st = d.container_status(&before).await;
        let shares = st.resources.and_then(|r| r.linux).map(|l| l.cpu_shares);
        if shares == Some(321) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "cpu shares {shares:?}\n{}",
            d.log()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // A container that ends on its own: StopContainer reaches the plugin without a CRI stop.
    let quick = d.run_container(&pod, sh("quick", &image, "exit 3")).await;
    assert_eq!(
        d.wait_exited(&quick, Duration::from_secs(30))
            .await
            .exit_code,
        3
    );
    let got = wait_event(&log, "StopContainer sync-pod/quick");
    assert_eq!(
        got[2..],
        [
            "CreateContainer sync-pod/quick",
            "PostCreateContainer sync-pod/quick",
            "StartContainer sync-pod/quick",
            "PostStartContainer sync-pod/quick",
            "StopContainer sync-pod/quick",
        ]
    );
    d.remove_pod(&pod).await;
    assert_eq!(d.leftovers(), Vec::<String>::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_restart_plugins_are_synchronised_with_what_the_daemon_had() {
    let mut d = nri_daemon("nri-restart").await;
    let images = Images::start();
    let (pod, image) = pod_with_image(&mut d, &images, "kept-pod").await;
    d.run_container(&pod, sh("kept", &image, "sleep 300 & wait"))
        .await;
    d.stop_daemon();
    assert!(
        !d.dir.join("nri.sock").exists(),
        "a stopped daemon removes its NRI socket"
    );
    d.restart().await;
    let log = d.dir.join("events.log");
    let _plugin = start_plugin(&d, "after", &["--events", log.to_str().unwrap()]);
    assert_eq!(
        events(&log),
        ["SyncPod kept-pod", "SyncContainer kept-pod/kept"]
    );
    d.remove_pod(&pod).await;
    let got = wait_event(&log, "RemovePodSandbox kept-pod");
    assert_eq!(
        got[2..],
        [
            "StopContainer kept-pod/kept",
            "StopPodSandbox kept-pod",
            "RemoveContainer kept-pod/kept",
            "RemovePodSandbox kept-pod",
        ]
    );
    assert_eq!(d.leftovers(), Vec::<String>::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_by_default_a_taken_socket_leaves_it_off_and_off_opens_no_socket() {
    // The default configuration serves NRI (each test daemon at a socket of its own).
    let mut on = TestDaemon::start("nri-default").await;
    let socket = on.dir.join("nri.sock");
    assert!(
        std::fs::symlink_metadata(&socket)
            .map(|m| std::os::unix::fs::FileTypeExt::is_socket(&m.file_type()))
            .unwrap_or(false),
        "{} is the default daemon's NRI socket",
        socket.display()
    );
    let _plugin = start_plugin(&on, "default", &[]);

    // A second daemon told to serve the same socket starts without NRI and says why; the
    // first keeps its socket and its plugin.
    let mut second = TestDaemon::start_with(
        "nri-taken",
        DaemonOptions {
            extra_config: format!("[nri]\nsocket_path = \"{}\"\n", socket.display()),
            ..Default::default()
        },
    )
    .await;
    let pod = second.run_pod("taken-pod").await;
    assert!(
        second
            .log()
            .contains("NRI disabled: another runtime serves its socket"),
        "{}",
        second.log()
    );
    second.remove_pod(&pod).await;
    drop(second);
    assert!(socket.exists(), "the first daemon's socket is left alone");
    let pod = on.run_pod("on-pod").await;
    on.remove_pod(&pod).await;

    let mut d = TestDaemon::start_with(
        "nri-off",
        DaemonOptions {
            extra_config: "[nri]\nenabled = false\nsocket_path = \"{dir}/nri.sock\"\n".into(),
            ..Default::default()
        },
    )
    .await;
    let pod = d.run_pod("off-pod").await;
    assert!(!d.dir.join("nri.sock").exists());
    assert!(!d.log().contains("NRI"), "no NRI work when it is off");
    d.remove_pod(&pod).await;
}
