//! `containerd-shim-peapod-v2` under containerd 1.6 (Debian's) and 2.x (k8s/containerd's pin):
//! pods and containers through containerd's own CRI plugin with `io.containerd.peapod.v2` as its
//! default runtime, through `ctr` and through containerd's client API, on real runc, overlay
//! mounts and CNI. Needs `containerd` installed, containerd 2.x built (scripts/setup) and the
//! workspace built.

use e2e::containerd::{Containerd, Version, BUSYBOX};
use e2e::host;
use e2e::pods::{
    container_status_in, exec_sync_in, read_log, remove_pod_in, run_container_in, run_pod_in, sh,
    stdout_text, try_run_pod_in,
};
use peapod_proto::v1 as cri;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Each scenario runs under both containerd versions, as `<scenario>::containerd_1_6` (Debian's
/// package) and `<scenario>::containerd_2` (k8s/containerd's pin).
macro_rules! both_versions {
    ($name:ident) => {
        mod $name {
            use super::*;
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn containerd_1_6() {
                super::$name(Version::Debian).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn containerd_2() {
                super::$name(Version::V2).await
            }
        }
    };
}

/// Bound of every wait for something containerd does asynchronously (not a timed assertion:
/// the wait ends as soon as the thing happens).
const LIMIT: Duration = Duration::from_secs(60);

async fn wait_state(
    ctd: &mut Containerd,
    id: &str,
    state: cri::ContainerState,
) -> cri::ContainerStatus {
    let deadline = Instant::now() + LIMIT;
    loop {
        let st = container_status_in(ctd, id).await;
        if st.state == state as i32 {
            return st;
        }
        assert!(
            Instant::now() < deadline,
            "container {id} not {state:?} within {LIMIT:?}: {st:?}\n{}",
            ctd.log()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn wait_log(ctd: &mut Containerd, id: &str, needle: &str) -> String {
    let path = PathBuf::from(container_status_in(ctd, id).await.log_path);
    let deadline = Instant::now() + LIMIT;
    loop {
        let text = stdout_text(&read_log(&path));
        if text.contains(needle) {
            return text;
        }
        assert!(
            Instant::now() < deadline,
            "log {} of {id} has no {needle:?}: {text:?}",
            path.display()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn remove_container(ctd: &mut Containerd, id: &str) {
    ctd.cri
        .runtime
        .stop_container(cri::StopContainerRequest {
            container_id: id.to_string(),
            timeout: 1,
        })
        .await
        .unwrap_or_else(|e| panic!("StopContainer {id}: {e}\n{}", ctd.log()));
    ctd.cri
        .runtime
        .remove_container(cri::RemoveContainerRequest {
            container_id: id.to_string(),
        })
        .await
        .unwrap_or_else(|e| panic!("RemoveContainer {id}: {e}\n{}", ctd.log()));
}

/// The ttrpc address a bundle's shim serves, as containerd reads it back after a restart:
/// `bootstrap.json`'s `address` (2.x writes it into every bundle, also of a container joining
/// its pod's shim without running `start`), else the `address` file `start` wrote (1.6).
fn shim_address(bundle: &Path) -> String {
    if let Ok(json) = std::fs::read(bundle.join("bootstrap.json")) {
        let params: serde_json::Value = serde_json::from_slice(&json)
            .unwrap_or_else(|e| panic!("{}/bootstrap.json: {e}", bundle.display()));
        let address = params["address"].as_str().unwrap_or_default();
        return format!("unix://{}", address.trim_start_matches("unix://"));
    }
    std::fs::read_to_string(bundle.join("address"))
        .unwrap_or_else(|e| panic!("{}/address: {e}", bundle.display()))
}

/// Waits until no shim of this containerd is left serving (each removes its socket when it
/// exits; the sockets are what containerd would reconnect to).
async fn wait_no_shim_sockets(ctd: &Containerd, sockets: &[PathBuf]) {
    let deadline = Instant::now() + LIMIT;
    while sockets.iter().any(|s| s.exists()) {
        assert!(
            Instant::now() < deadline,
            "shim sockets still there: {sockets:?}\n{}",
            ctd.log()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn socket_of(address: &str) -> PathBuf {
    PathBuf::from(address.trim_start_matches("unix://"))
}

/// Mounts, bridge ports, cgroups and processes this containerd's pods left behind.
fn leftovers(ctd: &Containerd) -> Vec<String> {
    let mut out = Vec::new();
    // containerd's own snapshot mounts are its business; the container root filesystems the
    // shim mounted in the bundles are ours.
    for m in host::mounts_under(&ctd.state) {
        out.push(format!("mount {}", m.display()));
    }
    for port in host::bridge_ports(&ctd.bridge) {
        out.push(format!("veth {port} on {}", ctd.bridge));
    }
    for cg in host::cgroups_under(&ctd.cgroup_parent) {
        out.push(format!("cgroup {}", cg.display()));
    }
    out
}

both_versions!(pods_run_under_containerd_with_the_peapod_shim);
async fn pods_run_under_containerd_with_the_peapod_shim(version: Version) {
    let mut ctd = Containerd::start(version, "peapod").await;
    let pod = run_pod_in(&mut ctd, "ctd-pod", |_| {}).await;

    // The pod's shim is ours: containerd started containerd-shim-peapod-v2, which is
    // peapod-shim under its containerd name.
    let sandbox_bundle = ctd.bundle(&pod.id);
    let address = shim_address(&sandbox_bundle);
    let shim_pid: u32 = std::fs::read_to_string(sandbox_bundle.join("shim.pid"))
        .expect("shim.pid")
        .trim()
        .parse()
        .expect("a pid in shim.pid");
    let cmdline = std::fs::read(format!("/proc/{shim_pid}/cmdline")).expect("shim cmdline");
    let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
    assert!(
        cmdline.starts_with("containerd-shim-peapod-v2 ") && cmdline.contains(" serve"),
        "{cmdline}"
    );
    let exe = std::fs::read_link(format!("/proc/{shim_pid}/exe")).expect("shim exe");
    assert!(exe.ends_with("peapod-shim"), "{}", exe.display());

    // A container: its output reaches containerd's CRI log; it joins the pod's shim.
    let app = run_container_in(
        &mut ctd,
        &pod,
        sh(
            "app",
            BUSYBOX,
            "echo hello-from-peapod; echo to-stderr >&2; exec sleep 100000",
        ),
    )
    .await;
    assert_eq!(shim_address(&ctd.bundle(&app)), address, "one shim per pod");
    assert_eq!(ctd.shims(), vec![shim_pid], "one shim process for the pod");
    let text = wait_log(&mut ctd, &app, "hello-from-peapod").await;
    assert!(text.contains("hello-from-peapod\n"), "{text:?}");
    let log = read_log(Path::new(
        &container_status_in(&mut ctd, &app).await.log_path,
    ));
    assert!(
        log.iter()
            .any(|l| l.stream == "stderr" && l.text == "to-stderr"),
        "{log:?}"
    );
    // The root filesystem is the overlay the shim mounted from containerd's snapshot.
    let rootfs = ctd.bundle(&app).join("rootfs");
    assert!(
        host::mounts_under(&rootfs).contains(&rootfs),
        "rootfs not mounted"
    );

    // Exec: output and exit code.
    let out = exec_sync_in(
        &mut ctd,
        &app,
        &["sh", "-c", "echo exec-out; echo exec-err >&2; exit 3"],
    )
    .await;
    assert_eq!(String::from_utf8_lossy(&out.stdout), "exec-out\n");
    assert_eq!(String::from_utf8_lossy(&out.stderr), "exec-err\n");
    assert_eq!(out.exit_code, 3);
    // The exec joined the pod's namespaces (the pod's hostname).
    let out = exec_sync_in(&mut ctd, &app, &["hostname"]).await;
    assert_eq!(String::from_utf8_lossy(&out.stdout), "ctd-pod\n");

    // Stats: containerd decodes the shim's cgroup metrics.
    let stats = ctd
        .cri
        .runtime
        .container_stats(cri::ContainerStatsRequest {
            container_id: app.clone(),
        })
        .await
        .unwrap_or_else(|e| panic!("ContainerStats: {e}\n{}", ctd.log()))
        .into_inner()
        .stats
        .expect("stats");
    let memory = stats.memory.expect("memory stats");
    assert!(
        memory.working_set_bytes.map(|v| v.value).unwrap_or(0) > 0,
        "{memory:?}"
    );

    // Update: new limits reach the container's cgroup through the shim and runc.
    ctd.cri
        .runtime
        .update_container_resources(cri::UpdateContainerResourcesRequest {
            container_id: app.clone(),
            linux: Some(cri::LinuxContainerResources {
                memory_limit_in_bytes: 96 << 20,
                ..Default::default()
            }),
            ..Default::default()
        })
        .await
        .unwrap_or_else(|e| panic!("UpdateContainerResources: {e}\n{}", ctd.log()));
    let out = exec_sync_in(
        &mut ctd,
        &app,
        // cgroup v1's file, else v2's (the container's own cgroup namespace either way).
        &[
            "sh",
            "-c",
            "cat /sys/fs/cgroup/memory/memory.limit_in_bytes 2>/dev/null || cat /sys/fs/cgroup/memory.max",
        ],
    )
    .await;
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        (96u64 << 20).to_string()
    );

    // A container that exits on its own: its exit code reaches containerd.
    let done = run_container_in(&mut ctd, &pod, sh("done", BUSYBOX, "exit 7")).await;
    let st = wait_state(&mut ctd, &done, cri::ContainerState::ContainerExited).await;
    assert_eq!(st.exit_code, 7, "{st:?}");
    assert_eq!(st.reason, "Error", "{st:?}");

    // OOM: the memory cgroup kills it, and containerd reports OOMKilled.
    let mut oom = sh("oom", BUSYBOX, "exec tail /dev/zero");
    oom.linux = Some(cri::LinuxContainerConfig {
        resources: Some(cri::LinuxContainerResources {
            memory_limit_in_bytes: 16 << 20,
            ..Default::default()
        }),
        ..Default::default()
    });
    let oom = run_container_in(&mut ctd, &pod, oom).await;
    let st = wait_state(&mut ctd, &oom, cri::ContainerState::ContainerExited).await;
    assert_eq!(st.reason, "OOMKilled", "{st:?}");
    assert_eq!(st.exit_code, 137, "{st:?}");

    // Stop: SIGTERM ends the sleep (not PID 1: the pod shares the pause's PID namespace).
    ctd.cri
        .runtime
        .stop_container(cri::StopContainerRequest {
            container_id: app.clone(),
            timeout: 1,
        })
        .await
        .unwrap_or_else(|e| panic!("StopContainer: {e}\n{}", ctd.log()));
    let st = wait_state(&mut ctd, &app, cri::ContainerState::ContainerExited).await;
    assert_eq!(st.exit_code, 128 + 15, "{st:?}");
    for id in [&app, &done, &oom] {
        remove_container(&mut ctd, id).await;
    }
    assert!(
        !host::mounts_under(&rootfs).contains(&rootfs),
        "rootfs still mounted after removal"
    );
    remove_pod_in(&mut ctd, &pod).await;
    wait_no_shim_sockets(&ctd, &[socket_of(&address)]).await;
    assert_eq!(leftovers(&ctd), Vec::<String>::new());
}

/// The host pid of a container's main process, from containerd's verbose status.
async fn container_pid(ctd: &mut Containerd, id: &str) -> i32 {
    let resp = ctd
        .cri
        .runtime
        .container_status(cri::ContainerStatusRequest {
            container_id: id.to_string(),
            verbose: true,
        })
        .await
        .unwrap_or_else(|e| panic!("ContainerStatus {id}: {e}"))
        .into_inner();
    let info: serde_json::Value =
        serde_json::from_str(resp.info.get("info").expect("verbose info")).expect("info JSON");
    info["pid"].as_i64().expect("pid in the verbose info") as i32
}

both_versions!(pods_survive_containerd_killed_and_restarted);
async fn pods_survive_containerd_killed_and_restarted(version: Version) {
    let mut ctd = Containerd::start(version, "peapod").await;
    let pod = run_pod_in(&mut ctd, "ctd-crash", |_| {}).await;
    let keep = run_container_in(
        &mut ctd,
        &pod,
        sh("keep", BUSYBOX, "echo before; exec sleep 100000"),
    )
    .await;
    let quit = run_container_in(
        &mut ctd,
        &pod,
        sh(
            "quit",
            BUSYBOX,
            "trap 'exit 7' TERM; echo ready; while :; do sleep 1; done",
        ),
    )
    .await;
    // Writes all the time, also while containerd is down: the shim holds its FIFOs open, so
    // the writes do not meet a FIFO without readers (SIGPIPE) meanwhile.
    let ticker = run_container_in(
        &mut ctd,
        &pod,
        sh(
            "ticker",
            BUSYBOX,
            "i=0; while :; do i=$((i+1)); echo tick-$i; sleep 0.1; done",
        ),
    )
    .await;
    wait_log(&mut ctd, &keep, "before").await;
    wait_log(&mut ctd, &quit, "ready").await;
    wait_log(&mut ctd, &ticker, "tick-1\n").await;
    let quit_pid = container_pid(&mut ctd, &quit).await;
    let shims = ctd.shims();
    assert_eq!(shims.len(), 1, "one shim for the pod: {shims:?}");
    let address = shim_address(&ctd.bundle(&pod.id));

    // containerd dies; the shim and the containers do not.
    ctd.kill();
    assert_eq!(ctd.shims(), shims, "the shim outlives containerd");
    // An exit while containerd is down: the shim records it (durably, in the bundle).
    // SAFETY: kill has no memory-safety preconditions.
    assert_eq!(unsafe { libc::kill(quit_pid, libc::SIGTERM) }, 0);
    let exit_file = ctd.bundle(&quit).join("exit");
    let deadline = Instant::now() + LIMIT;
    while !exit_file.exists() {
        assert!(
            Instant::now() < deadline,
            "no exit recorded in {}",
            exit_file.display()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // The ticker writes on while containerd is down.
    let ticks_log = ctd.dir.path().join("logs/ctd-crash/ticker/0.log");
    let ticks_before = stdout_text(&read_log(&ticks_log)).lines().count();
    std::thread::sleep(Duration::from_millis(500));
    ctd.restart().await;
    assert_eq!(
        ctd.shims(),
        shims,
        "containerd reconnected to the same shim"
    );
    assert_eq!(
        container_status_in(&mut ctd, &ticker).await.state,
        cri::ContainerState::ContainerRunning as i32,
        "the ticker died while containerd was down"
    );
    // Its output flows into the log again, through the restarted containerd.
    let next = format!("tick-{}\n", ticks_before + 20);
    wait_log(&mut ctd, &ticker, &next).await;
    assert_eq!(
        container_status_in(&mut ctd, &keep).await.state,
        cri::ContainerState::ContainerRunning as i32
    );
    let st = wait_state(&mut ctd, &quit, cri::ContainerState::ContainerExited).await;
    assert_eq!(
        st.exit_code,
        7,
        "the exit during the outage is reported: {st:?}\n{}",
        ctd.log()
    );
    // The running container is fully usable through the restarted containerd.
    let out = exec_sync_in(&mut ctd, &keep, &["echo", "after"]).await;
    assert_eq!(String::from_utf8_lossy(&out.stdout), "after\n");

    for id in [&keep, &quit, &ticker] {
        remove_container(&mut ctd, id).await;
    }
    remove_pod_in(&mut ctd, &pod).await;
    wait_no_shim_sockets(&ctd, &[socket_of(&address)]).await;
    assert_eq!(leftovers(&ctd), Vec::<String>::new());
}

both_versions!(stop_kills_a_container_that_ignores_sigterm_at_its_timeout);
async fn stop_kills_a_container_that_ignores_sigterm_at_its_timeout(version: Version) {
    let mut ctd = Containerd::start(version, "peapod").await;
    let pod = run_pod_in(&mut ctd, "ctd-stubborn", |_| {}).await;
    let address = shim_address(&ctd.bundle(&pod.id));
    let app = run_container_in(
        &mut ctd,
        &pod,
        sh(
            "stubborn",
            BUSYBOX,
            "trap '' TERM; echo ready; while :; do sleep 1; done",
        ),
    )
    .await;
    wait_log(&mut ctd, &app, "ready").await;
    // SIGTERM is ignored, so containerd sends SIGKILL after 2 s and waits for the exit: the
    // kubelet's StopContainer returns once it is seen (a hang here is the failure; the bound
    // only keeps it from hanging the run).
    let started = Instant::now();
    let stop = ctd.cri.runtime.stop_container(cri::StopContainerRequest {
        container_id: app.clone(),
        timeout: 2,
    });
    match tokio::time::timeout(Duration::from_secs(30), stop).await {
        Ok(Ok(_)) => {}
        Ok(Err(e)) => panic!("StopContainer: {e}\n{}", ctd.log()),
        Err(_) => panic!(
            "StopContainer with timeout 2 s still running after 30 s\n{}",
            ctd.log()
        ),
    }
    assert!(
        started.elapsed() >= Duration::from_secs(2),
        "stopped before its timeout: SIGTERM was not ignored"
    );
    let st = wait_state(&mut ctd, &app, cri::ContainerState::ContainerExited).await;
    assert_eq!(st.exit_code, 128 + 9, "killed by SIGKILL: {st:?}");
    remove_container(&mut ctd, &app).await;
    remove_pod_in(&mut ctd, &pod).await;
    wait_no_shim_sockets(&ctd, &[socket_of(&address)]).await;
    assert_eq!(leftovers(&ctd), Vec::<String>::new());
}

/// A runc wrapper that logs each command line to `log` and runs runc without
/// `--systemd-cgroup` (this host has no systemd to make scopes; what is tested is that the shim
/// asks for them).
fn logging_runc(dir: &Path, log: &Path) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join("runc-logged");
    std::fs::write(
        &path,
        format!(
            // Without systemd as PID 1 runc cannot make a scope: there the flag is only logged.
            "#!/bin/sh\necho \"$*\" >> {}\nif [ ! -d /run/systemd/system ]; then for a; do shift; [ \"$a\" = --systemd-cgroup ] || set -- \"$@\" \"$a\"; done; fi\nexec runc \"$@\"\n",
            log.display()
        ),
    )
    .expect("write the runc wrapper");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    path
}

both_versions!(the_cri_runtimes_options_choose_the_runtime_binary_and_systemd_cgroups);
async fn the_cri_runtimes_options_choose_the_runtime_binary_and_systemd_cgroups(version: Version) {
    let tools = tempfile::tempdir().expect("tempdir");
    let calls = tools.path().join("calls.log");
    let wrapper = logging_runc(tools.path(), &calls);
    // The runtime's options table, as kubeadm-made nodes write it for runc. containerd 2.x
    // hands the table to the shim (config_body); 1.6 only its ConfigPath, a file of the keys.
    let keys = format!(
        "BinaryName = \"{}\"\nSystemdCgroup = true\n",
        wrapper.display()
    );
    let options = match version {
        Version::Debian => {
            let file = tools.path().join("logged.toml");
            std::fs::write(&file, &keys).expect("write the options file");
            format!("ConfigPath = \"{}\"\n", file.display())
        }
        Version::V2 => keys,
    };
    let runtimes = format!(
        "    [RUNTIMES.logged]\n      runtime_type = \"io.containerd.peapod.v2\"\n    \
         [RUNTIMES.logged.options]\n{options}"
    );
    let mut ctd = Containerd::start_with(version, "peapod", &runtimes).await;
    // Where systemd is PID 1 (the guest of scripts/vm), the parent a kubelet with the systemd
    // driver gives: a slice, which containerd's CRI turns into runc's `slice:prefix:name`.
    let systemd = Path::new("/run/systemd/system").is_dir();
    let slice = format!("peapod_ctd_logged_{}.slice", std::process::id());
    let pod = try_run_pod_in(&mut ctd, "ctd-logged", "logged", |p| {
        if systemd {
            p.linux.get_or_insert_with(Default::default).cgroup_parent = slice.clone();
        }
    })
    .await
    .unwrap_or_else(|e| panic!("RunPodSandbox with handler logged: {e}\n{}", ctd.log()));
    let address = shim_address(&ctd.bundle(&pod.id));
    let app = run_container_in(
        &mut ctd,
        &pod,
        sh("app", BUSYBOX, "echo up; exec sleep 1000"),
    )
    .await;
    wait_log(&mut ctd, &app, "up").await;

    // The pause and the container were made by the binary the options name, with systemd's
    // cgroup driver.
    let log = std::fs::read_to_string(&calls).unwrap_or_default();
    for id in [&pod.id, &app] {
        assert!(
            log.lines().any(|l| l.contains("--systemd-cgroup")
                && (l.contains(" create ") || l.contains(" run "))
                && l.ends_with(id.as_str())),
            "no `{} --systemd-cgroup … create (or run) … {id}` in:\n{log}",
            wrapper.display()
        );
    }
    assert!(
        log.lines().all(|l| l.contains("--systemd-cgroup")),
        "a runtime command without --systemd-cgroup:\n{log}"
    );
    // With systemd, the container is a scope of its own in the pod's slice.
    if systemd {
        let pid = container_pid(&mut ctd, &app).await;
        let cgroup = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap_or_default();
        assert!(
            cgroup
                .trim_end()
                .ends_with(&format!("/{slice}/cri-containerd-{app}.scope")),
            "the container's cgroup is not its scope in {slice}: {cgroup}"
        );
    }

    remove_container(&mut ctd, &app).await;
    remove_pod_in(&mut ctd, &pod).await;
    wait_no_shim_sockets(&ctd, &[socket_of(&address)]).await;
    assert_eq!(leftovers(&ctd), Vec::<String>::new());
    if systemd {
        // The scopes went with their containers; the slice is the caller's (the kubelet's).
        let _ = std::process::Command::new("systemctl")
            .args(["stop", &slice])
            .status();
    }
}

both_versions!(a_killed_shim_is_cleaned_up_by_its_delete_action);
async fn a_killed_shim_is_cleaned_up_by_its_delete_action(version: Version) {
    let mut ctd = Containerd::start(version, "peapod").await;
    let pod = run_pod_in(&mut ctd, "ctd-shimkill", |_| {}).await;
    let app = run_container_in(&mut ctd, &pod, sh("app", BUSYBOX, "exec sleep 100000")).await;
    let app_pid = container_pid(&mut ctd, &app).await;
    let socket = socket_of(&shim_address(&ctd.bundle(&pod.id)));
    let shims = ctd.shims();
    assert_eq!(shims.len(), 1, "{shims:?}");
    // SAFETY: kill has no memory-safety preconditions.
    assert_eq!(unsafe { libc::kill(shims[0] as i32, libc::SIGKILL) }, 0);

    // containerd notices the lost connection and runs `containerd-shim-peapod-v2 … delete`
    // for each task: the container is killed through runc and reported exited.
    let st = wait_state(&mut ctd, &app, cri::ContainerState::ContainerExited).await;
    // The CRI plugin's own Wait breaks with the connection and records "unknown" (255) unless
    // the TaskExit of the cleanup (SIGKILL: 137) arrives first.
    assert!([128 + 9, 255].contains(&st.exit_code), "{st:?}");
    // containerd's cleanup of each dead task runs in the background: the delete action, then
    // the bundle's removal.
    let deadline = Instant::now() + LIMIT;
    while ctd.bundle(&pod.id).exists() || ctd.bundle(&app).exists() {
        assert!(
            Instant::now() < deadline,
            "containerd did not finish its cleanup:\n{}",
            ctd.log()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let log = ctd.log();
    assert!(
        log.contains("cleaning up after shim disconnected")
            && !log.contains("failed to clean up after shim disconnected"),
        "containerd did not clean up after the shim:\n{log}"
    );
    assert!(
        !socket.exists(),
        "the dead shim's socket {} was not removed",
        socket.display()
    );
    let stat = std::fs::read_to_string(format!("/proc/{app_pid}/stat")).unwrap_or_default();
    assert!(
        stat.is_empty() || stat.contains(") Z "),
        "the container's process still runs: {stat}"
    );
    remove_container(&mut ctd, &app).await;
    remove_pod_in(&mut ctd, &pod).await;
    assert_eq!(leftovers(&ctd), Vec::<String>::new());
}

/// The containerd namespace of the `ctr` test (not the CRI's).
fn ctr_ns(ctd: &Containerd) -> String {
    ctd.api_namespace(e2e::containerd::API_NAMESPACES[0])
}

/// Polls `check` on `ctr task ls` output until it holds.
async fn wait_tasks(ctd: &Containerd, what: &str, check: impl Fn(&str) -> bool) {
    let deadline = Instant::now() + LIMIT;
    loop {
        let ls = ctd.ctr(&ctr_ns(ctd), &["task", "ls"]);
        if check(&ls) {
            return;
        }
        assert!(Instant::now() < deadline, "tasks not {what}: {ls}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn wait_file_contains(path: &Path, needle: &str) -> String {
    let deadline = Instant::now() + LIMIT;
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        if text.contains(needle) {
            return text;
        }
        assert!(
            Instant::now() < deadline,
            "{} has no {needle:?}: {text:?}",
            path.display()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn task_line<'a>(ls: &'a str, id: &str) -> &'a str {
    ls.lines()
        .find(|l| l.split_whitespace().next() == Some(id))
        .unwrap_or("")
}

both_versions!(containerds_own_api_drives_the_peapod_runtime);
async fn containerds_own_api_drives_the_peapod_runtime(version: Version) {
    let ctd = Containerd::start(version, "peapod").await;
    let ns = ctr_ns(&ctd);
    ctd.import(
        &ns,
        BUSYBOX,
        &peapod_image::testsupport::ImageSpec::busybox(),
    );
    let dir = ctd.dir.path().to_path_buf();
    // containerd's event stream, from before the first task.
    let events_file = dir.join("events.txt");
    let mut events = std::process::Command::new(ctd.program("ctr"))
        .arg("--address")
        .arg(&ctd.socket)
        .arg("events")
        .stdout(std::fs::File::create(&events_file).expect("events file"))
        .spawn()
        .expect("ctr events");
    // Subscribed once an event of our own shows up on it.
    let mut n = 0;
    loop {
        n += 1;
        ctd.ctr(&ns, &["namespaces", "create", &format!("sync-{n}")]);
        let text = std::fs::read_to_string(&events_file).unwrap_or_default();
        if text.contains("/namespaces/create") {
            break;
        }
        assert!(n < 600, "ctr events shows nothing");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // A task with its output in a file (a file:// log URI).
    let log = dir.join("c1.log");
    ctd.ctr(
        &ns,
        &[
            "run",
            "-d",
            "--runtime",
            "io.containerd.peapod.v2",
            "--log-uri",
            &format!("file://{}", log.display()),
            BUSYBOX,
            "c1",
            "sh",
            "-c",
            "echo hello-log; exec sleep 100000",
        ],
    );
    wait_file_contains(&log, "hello-log\n").await;
    wait_tasks(&ctd, "running", |ls| {
        task_line(ls, "c1").contains("RUNNING")
    })
    .await;

    // Exec, pause and resume.
    let out = ctd.ctr(
        &ns,
        &[
            "task",
            "exec",
            "--exec-id",
            "e1",
            "c1",
            "sh",
            "-c",
            "echo exec-out",
        ],
    );
    assert_eq!(out, "exec-out\n");
    ctd.ctr(&ns, &["task", "pause", "c1"]);
    wait_tasks(&ctd, "paused", |ls| task_line(ls, "c1").contains("PAUSED")).await;
    ctd.ctr(&ns, &["task", "resume", "c1"]);
    wait_tasks(&ctd, "resumed", |ls| {
        task_line(ls, "c1").contains("RUNNING")
    })
    .await;

    // A task whose output goes to a logging program (a binary:// log URI).
    let logger = dir.join("logger.sh");
    let logged = dir.join("logged.txt");
    std::fs::write(
        &logger,
        format!(
            "#!/bin/sh\nexec 5>&-\n{{ echo \"$CONTAINER_NAMESPACE/$CONTAINER_ID\"; cat <&3; }} > {}\n",
            logged.display()
        ),
    )
    .expect("write logger");
    std::fs::set_permissions(&logger, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("chmod logger");
    ctd.ctr(
        &ns,
        &[
            "run",
            "-d",
            "--runtime",
            "io.containerd.peapod.v2",
            "--log-uri",
            &format!("binary://{}", logger.display()),
            BUSYBOX,
            "c2",
            "sh",
            "-c",
            "echo via-logger; exec sleep 100000",
        ],
    );
    let text = wait_file_contains(&logged, "via-logger\n").await;
    assert!(text.starts_with(&format!("{ns}/c2\n")), "{text:?}");

    // An OOM kill in a container that lives on is reported when it happens.
    let c3_log = dir.join("c3.log");
    ctd.ctr(
        &ns,
        &[
            "run",
            "-d",
            "--runtime",
            "io.containerd.peapod.v2",
            "--memory-limit",
            &(16u64 << 20).to_string(),
            "--log-uri",
            &format!("file://{}", c3_log.display()),
            BUSYBOX,
            "c3",
            "sh",
            "-c",
            "tail /dev/zero; echo survived; exec sleep 100000",
        ],
    );
    wait_file_contains(&c3_log, "survived\n").await;
    let text = wait_file_contains(&events_file, "/tasks/oom").await;
    assert!(
        text.lines()
            .any(|l| l.contains("/tasks/oom") && l.contains("\"c3\"")),
        "no TaskOOM for c3:\n{text}"
    );
    assert!(
        task_line(&ctd.ctr(&ns, &["task", "ls"]), "c3").contains("RUNNING"),
        "c3 should live on after its child's OOM kill"
    );

    // Kill, wait for the exit, delete.
    for id in ["c1", "c2", "c3"] {
        ctd.ctr(&ns, &["task", "kill", "-s", "SIGKILL", id]);
        wait_tasks(&ctd, "stopped", |ls| task_line(ls, id).contains("STOPPED")).await;
        ctd.ctr(&ns, &["task", "delete", id]);
        ctd.ctr(&ns, &["container", "delete", id]);
    }
    wait_tasks(&ctd, "deleted", |ls| ls.lines().count() <= 1).await;

    // Every task event reached containerd's event stream, the exit with its status.
    ctd.ctr(&ns, &["namespaces", "create", "sync-end"]);
    let text = wait_file_contains(&events_file, "sync-end").await;
    let _ = events.kill();
    let _ = events.wait();
    for topic in [
        "/tasks/create",
        "/tasks/start",
        "/tasks/exec-added",
        "/tasks/exec-started",
        "/tasks/paused",
        "/tasks/resumed",
        "/tasks/oom",
        "/tasks/exit",
        "/tasks/delete",
    ] {
        assert!(text.contains(topic), "no {topic} in the events:\n{text}");
    }
    assert!(
        text.lines()
            .any(|l| l.contains("/tasks/exit") && l.contains("c1") && l.contains("137")),
        "no exit status 137 for c1:\n{text}"
    );
    // The shims left when their last task was deleted.
    let deadline = Instant::now() + LIMIT;
    while !ctd.shims().is_empty() {
        assert!(
            Instant::now() < deadline,
            "shims still running: {:?}",
            ctd.shims()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(leftovers(&ctd), Vec::<String>::new());
}

/// A root filesystem of busybox-static (the applets the test runs) in `dir`.
fn busybox_rootfs(dir: &Path) {
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).expect("create rootfs/bin");
    for d in ["proc", "dev", "tmp"] {
        std::fs::create_dir_all(dir.join(d)).expect("create rootfs dir");
    }
    std::fs::copy("/bin/busybox", bin.join("busybox")).expect("copy busybox-static");
    for applet in ["sh", "echo", "sleep", "cat"] {
        std::os::unix::fs::symlink("busybox", bin.join(applet)).expect("link applet");
    }
}

/// An OCI runtime spec for a container whose root is the bundle's `rootfs`.
fn runtime_spec(args: &[&str], cgroups_path: &str) -> serde_json::Value {
    serde_json::json!({
        "ociVersion": "1.0.2",
        "process": {
            "args": args,
            "env": ["PATH=/bin"],
            "cwd": "/",
            "user": {"uid": 0, "gid": 0},
            "capabilities": {
                "bounding": ["CAP_KILL"], "effective": ["CAP_KILL"], "permitted": ["CAP_KILL"]
            },
            "noNewPrivileges": true
        },
        "root": {"path": "rootfs"},
        "hostname": "client",
        "mounts": [
            {"destination": "/proc", "type": "proc", "source": "proc"},
            {"destination": "/dev", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "mode=755"]}
        ],
        "linux": {
            "cgroupsPath": cgroups_path,
            "namespaces": [
                {"type": "pid"}, {"type": "ipc"}, {"type": "uts"}, {"type": "mount"}, {"type": "network"}
            ]
        }
    })
}

both_versions!(the_containerd_client_crate_drives_the_peapod_runtime);
async fn the_containerd_client_crate_drives_the_peapod_runtime(version: Version) {
    use containerd_client::services::v1::{
        container::Runtime, Container, CreateContainerRequest, CreateNamespaceRequest,
        CreateTaskRequest, DeleteContainerRequest, DeleteProcessRequest, DeleteTaskRequest,
        ExecProcessRequest, KillRequest, Namespace, StartRequest, SubscribeRequest, WaitRequest,
    };
    use containerd_client::{events::TaskExit, types::Mount, with_namespace};
    use prost::Message;
    use tonic::Request;
    const ID: &str = "client1";

    let ctd = Containerd::start(version, "peapod").await;
    let ns = ctd.api_namespace(e2e::containerd::API_NAMESPACES[1]);
    let ns = ns.as_str();
    let client = containerd_client::Client::from_path(&ctd.socket)
        .await
        .expect("connect to containerd");
    // containerd's event stream, from before the first task. containerd answers Subscribe
    // only with the first event, so the subscription runs on its own and is known to be
    // live once a namespace created for the purpose shows up on it.
    let (events_tx, mut events_rx) = tokio::sync::mpsc::unbounded_channel();
    let mut events = client.events();
    tokio::spawn(async move {
        let Ok(stream) = events.subscribe(SubscribeRequest::default()).await else {
            return;
        };
        let mut stream = stream.into_inner();
        while let Ok(Some(envelope)) = stream.message().await {
            if events_tx.send(envelope).is_err() {
                break;
            }
        }
    });
    let mut n = 0;
    'subscribed: loop {
        n += 1;
        client
            .namespaces()
            .create(with_namespace!(
                CreateNamespaceRequest {
                    namespace: Some(Namespace {
                        name: format!("sync-{n}"),
                        ..Default::default()
                    }),
                },
                ns
            ))
            .await
            .expect("create a namespace");
        let deadline = Instant::now() + Duration::from_millis(200);
        while let Ok(Some(envelope)) =
            tokio::time::timeout_at(deadline.into(), events_rx.recv()).await
        {
            if envelope.topic == "/namespaces/create" {
                break 'subscribed;
            }
        }
        assert!(n < 300, "containerd's event stream shows nothing");
    }

    let dir = ctd.dir.path().join("client");
    let rootfs = dir.join("rootfs");
    busybox_rootfs(&rootfs);
    let spec = runtime_spec(
        &["sh", "-c", "echo hello-client; exec sleep 100000"],
        &format!("{}/{ID}", ctd.cgroup_parent),
    );
    let container = Container {
        id: ID.into(),
        image: "none".into(),
        runtime: Some(Runtime {
            name: "io.containerd.peapod.v2".into(),
            options: None,
        }),
        spec: Some(prost_types::Any {
            type_url: "types.containerd.io/opencontainers/runtime-spec/1/Spec".into(),
            value: spec.to_string().into_bytes(),
        }),
        ..Default::default()
    };
    client
        .containers()
        .create(with_namespace!(
            CreateContainerRequest {
                container: Some(container)
            },
            ns
        ))
        .await
        .expect("create container");

    // The task, its root filesystem a bind mount the shim makes from the request.
    let stdout = dir.join("stdout");
    std::fs::write(&stdout, "").expect("create stdout file");
    let mut tasks = client.tasks();
    let created = tasks
        .create(with_namespace!(
            CreateTaskRequest {
                container_id: ID.into(),
                rootfs: vec![Mount {
                    r#type: "bind".into(),
                    source: rootfs.display().to_string(),
                    options: vec!["rbind".into(), "rw".into()],
                    ..Default::default()
                }],
                stdout: stdout.display().to_string(),
                ..Default::default()
            },
            ns
        ))
        .await
        .unwrap_or_else(|e| panic!("create task: {e}\n{}", ctd.log()))
        .into_inner();
    assert!(created.pid > 0);
    tasks
        .start(with_namespace!(
            StartRequest {
                container_id: ID.into(),
                ..Default::default()
            },
            ns
        ))
        .await
        .expect("start task");
    wait_file_contains(&stdout, "hello-client\n").await;

    // Exec: its exit status through Wait.
    let exec_out = dir.join("exec-stdout");
    std::fs::write(&exec_out, "").expect("create exec stdout file");
    let process = serde_json::json!({
        "args": ["sh", "-c", "echo exec-client; exit 5"], "env": ["PATH=/bin"], "cwd": "/",
        "user": {"uid": 0, "gid": 0}
    });
    tasks
        .exec(with_namespace!(
            ExecProcessRequest {
                container_id: ID.into(),
                exec_id: "e1".into(),
                stdout: exec_out.display().to_string(),
                spec: Some(prost_types::Any {
                    type_url: "types.containerd.io/opencontainers/runtime-spec/1/Process".into(),
                    value: process.to_string().into_bytes(),
                }),
                ..Default::default()
            },
            ns
        ))
        .await
        .expect("exec");
    tasks
        .start(with_namespace!(
            StartRequest {
                container_id: ID.into(),
                exec_id: "e1".into(),
            },
            ns
        ))
        .await
        .expect("start exec");
    let waited = tasks
        .wait(with_namespace!(
            WaitRequest {
                container_id: ID.into(),
                exec_id: "e1".into(),
            },
            ns
        ))
        .await
        .expect("wait exec")
        .into_inner();
    assert_eq!(waited.exit_status, 5);
    assert_eq!(std::fs::read_to_string(&exec_out).unwrap(), "exec-client\n");
    tasks
        .delete_process(with_namespace!(
            DeleteProcessRequest {
                container_id: ID.into(),
                exec_id: "e1".into(),
            },
            ns
        ))
        .await
        .expect("delete exec");

    // Kill, wait, delete.
    tasks
        .kill(with_namespace!(
            KillRequest {
                container_id: ID.into(),
                signal: 9,
                ..Default::default()
            },
            ns
        ))
        .await
        .expect("kill");
    let waited = tasks
        .wait(with_namespace!(
            WaitRequest {
                container_id: ID.into(),
                ..Default::default()
            },
            ns
        ))
        .await
        .expect("wait task")
        .into_inner();
    assert_eq!(waited.exit_status, 137);
    let deleted = tasks
        .delete(with_namespace!(
            DeleteTaskRequest {
                container_id: ID.into()
            },
            ns
        ))
        .await
        .expect("delete task")
        .into_inner();
    assert_eq!(deleted.exit_status, 137);
    client
        .containers()
        .delete(with_namespace!(
            DeleteContainerRequest { id: ID.into() },
            ns
        ))
        .await
        .expect("delete container");

    // The task's events, as containerd's event stream carries them.
    let wanted = [
        "/tasks/create",
        "/tasks/start",
        "/tasks/exec-added",
        "/tasks/exec-started",
        "/tasks/exit",
        "/tasks/delete",
    ];
    let mut seen: Vec<String> = Vec::new();
    let mut init_exit = None;
    while !wanted.iter().all(|t| seen.iter().any(|s| s == t)) || init_exit.is_none() {
        let envelope = tokio::time::timeout(LIMIT, events_rx.recv())
            .await
            .unwrap_or_else(|_| panic!("events seen: {seen:?}"))
            .expect("event stream");
        if envelope.namespace != ns {
            continue;
        }
        if envelope.topic == "/tasks/exit" {
            let any = envelope.event.clone().expect("event body");
            let exit = TaskExit::decode(any.value.as_slice()).expect("TaskExit");
            if exit.id == ID {
                init_exit = Some(exit.exit_status);
            }
        }
        seen.push(envelope.topic);
    }
    assert_eq!(init_exit, Some(137));
    // Nothing left: the shim gone, the bind mount undone.
    let deadline = Instant::now() + LIMIT;
    while !ctd.shims().is_empty() {
        assert!(Instant::now() < deadline, "shim still running");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(leftovers(&ctd), Vec::<String>::new());
}
