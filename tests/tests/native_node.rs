//! The native paths on each kind of node: this machine (cgroup v1 hybrid, no systemd, no
//! AppArmor) and the Debian guest of `scripts/vm test` (cgroup v2, systemd 252 as PID 1,
//! AppArmor enforcing), under the test daemon's cgroup driver (`PEAPOD_E2E_CGROUP_DRIVER`'s,
//! else the host's default: systemd where it is PID 1; the systemd driver where a test says
//! so). What the equality tests (native_create,
//! native_pause, native_exec) do not show: the device rules deny what the spec does not
//! allow (on v2 a BPF program), a container frozen and thawed through its shim, an update
//! resizing it in place, an exec's process in its container's cgroup from its first
//! instruction (on v2 cloned into it: its resident helper stays outside), and a pod's whole
//! life without one runtime call. Guest only (`#[ignore]`d here): each container a systemd
//! scope in its pod's slice, none left after removal; AppArmor applied by a native create
//! and exec.

use containerd_shim_protos::api;
use containerd_shim_protos::shim_async::{Client, TaskClient};
use e2e::pods::{busybox, exec_sync_in, in_pod, sh, Images, Pod};
use e2e::{host, DaemonOptions, TestDaemon};
use peapod_proto::v1 as cri;
use std::path::Path;
use std::time::{Duration, Instant};

/// A daemon whose runtime is a runc that logs its calls (under `dir`), with the cgroup
/// driver `driver` (`None`: the run's, see [`DaemonOptions::cgroup_driver`]).
async fn daemon(name: &str, dir: &Path, driver: Option<&'static str>) -> TestDaemon {
    let runc = host::logging_runc(dir);
    TestDaemon::start_with(
        name,
        DaemonOptions {
            extra_config: format!("[runtime]\npath = \"{}\"\n", runc.display()),
            cgroup_driver: driver,
            ..Default::default()
        },
    )
    .await
}

/// A directory of the test's own for its logging runc, removed when the test ends (after its
/// daemon, declared later, is dropped).
fn scratch(name: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("peapod-native-node-{name}-"))
        .tempdir()
        .expect("a scratch directory")
}

/// The runtime calls that made or ran something: none is wanted from a native path.
fn making_calls(dir: &Path) -> Vec<String> {
    host::runtime_calls(dir)
        .into_iter()
        .filter(|c| {
            [
                "create", "run", "exec", "start", "update", "pause", "resume", "kill", "delete",
            ]
            .iter()
            .any(|verb| c.split_whitespace().any(|w| w == *verb))
        })
        .collect()
}

async fn image(d: &mut TestDaemon, images: &Images, name: &str) -> String {
    let image = images.push(&format!("node/{name}:1"), &busybox());
    d.pull(&image).await;
    image
}

/// A running container of `pod` whose init runs `script`; its id and init's host pid.
async fn running(d: &mut TestDaemon, pod: &Pod, config: cri::ContainerConfig) -> (String, u32) {
    let id = d.run_container(pod, in_pod(pod, config)).await;
    let pid = d.container_info(&id).await["pid"].as_u64().expect("pid") as u32;
    (id, pid)
}

fn text(r: &cri::ExecSyncResponse) -> String {
    String::from_utf8_lossy(&r.stdout).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_device_rules_deny_what_the_spec_does_not_allow() {
    let dir = scratch("devices");
    let mut d = daemon("node-devices", dir.path(), None).await;
    let images = Images::start();
    let image = image(&mut d, &images, "devices").await;
    let pod = d.run_pod("devices").await;
    // The host's /dev/fuse given to the container to read, not to write; /dev/loop-control
    // not at all (devices whose opening the kernel checks no capability for: only the device
    // rules decide).
    let mut config = sh("app", &image, "sleep 3600");
    config.devices.push(cri::Device {
        container_path: "/dev/fuse".into(),
        host_path: "/dev/fuse".into(),
        permissions: "r".into(),
    });
    let (id, _) = running(&mut d, &pod, config).await;
    let probe = r#"
(exec 3</dev/fuse) 2>/dev/null && echo "fuse read: yes" || echo "fuse read: no"
(exec 3>/dev/fuse) 2>/dev/null && echo "fuse write: yes" || echo "fuse write: no"
(exec 3<>/dev/null) 2>/dev/null && echo "null: yes" || echo "null: no"
mknod /dev/probe c 10 237 && { (exec 3</dev/probe) 2>/dev/null && echo "loop-control: yes" || echo "loop-control: no"; }
"#;
    let out = exec_sync_in(&mut d, &id, &["sh", "-c", probe]).await;
    assert_eq!(
        text(&out),
        "fuse read: yes\nfuse write: no\nnull: yes\nloop-control: no\n",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    d.remove_pod(&pod).await;
    assert_eq!(making_calls(dir.path()), Vec::<String>::new(), "all native");
}

/// The Task API of the pod's shim, as the daemon reaches it.
async fn shim_of(d: &TestDaemon, pod: &Pod) -> TaskClient {
    let socket = d.state.join("s").join(peapod_daemon::ids::short(&pod.id));
    let client = Client::connect(&format!("unix://{}", socket.display()))
        .await
        .expect("connect to the shim");
    TaskClient::new(client)
}

fn ctx() -> ttrpc::context::Context {
    ttrpc::context::with_timeout(e2e::scaled(Duration::from_secs(30)).as_nanos() as i64)
}

/// The counter the container's loop writes, read through its root from the host (an exec
/// into a frozen container would wait for its thaw).
fn counter(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/root/dev/shm/n"))
        .ok()
        .and_then(|t| t.trim().parse().ok())
        .unwrap_or(0)
}

/// Whether the kernel says the cgroup is frozen.
fn frozen(cgroup: &str) -> bool {
    if host::unified_cgroups() {
        let events = host::cgroup_fs_dir(cgroup, "freezer").join("cgroup.events");
        std::fs::read_to_string(events).is_ok_and(|t| t.lines().any(|l| l == "frozen 1"))
    } else {
        let state = host::cgroup_fs_dir(cgroup, "freezer").join("freezer.state");
        std::fs::read_to_string(state).is_ok_and(|t| t.trim() == "FROZEN")
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_container_is_frozen_and_thawed_through_its_shim() {
    let dir = scratch("freezer");
    let mut d = daemon("node-freezer", dir.path(), None).await;
    let images = Images::start();
    let image = image(&mut d, &images, "freezer").await;
    let pod = d.run_pod("freezer").await;
    let loop_ = "i=0; while :; do i=$((i+1)); echo $i > /dev/shm/n; sleep 0.05; done";
    let (id, pid) = running(&mut d, &pod, sh("app", &image, loop_)).await;
    let cgroup = d.cgroup_path(&id);
    let advancing = |pid| async move {
        let before = counter(pid);
        let deadline = Instant::now() + e2e::scaled(Duration::from_secs(5));
        while counter(pid) == before && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        counter(pid) != before
    };
    assert!(advancing(pid).await, "the loop runs");
    let task = shim_of(&d, &pod).await;
    let mut pause = api::PauseRequest::new();
    pause.id = id.clone();
    task.pause(ctx(), &pause).await.expect("Pause");
    assert!(frozen(&cgroup), "the kernel froze {cgroup}");
    let mut state = api::StateRequest::new();
    state.id = id.clone();
    let st = task.state(ctx(), &state).await.expect("State");
    assert_eq!(st.status.enum_value(), Ok(api::Status::PAUSED));
    let at = counter(pid);
    tokio::time::sleep(e2e::scaled(Duration::from_millis(300))).await;
    assert_eq!(counter(pid), at, "a frozen loop stands still");
    let mut resume = api::ResumeRequest::new();
    resume.id = id.clone();
    task.resume(ctx(), &resume).await.expect("Resume");
    assert!(!frozen(&cgroup));
    assert!(advancing(pid).await, "the loop runs again");
    d.remove_pod(&pod).await;
    assert_eq!(making_calls(dir.path()), Vec::<String>::new(), "all native");
}

/// The files an update changes, as the host reads them: memory limit, CPU quota, CPU share.
fn limits(cgroup: &str) -> [String; 3] {
    let read = |controller: &str, file: &str| {
        std::fs::read_to_string(host::cgroup_fs_dir(cgroup, controller).join(file))
            .map(|t| t.trim().to_string())
            .unwrap_or_else(|e| format!("{file}: {e}"))
    };
    if host::unified_cgroups() {
        [
            read("memory", "memory.max"),
            read("cpu", "cpu.max"),
            read("cpu", "cpu.weight"),
        ]
    } else {
        [
            read("memory", "memory.limit_in_bytes"),
            read("cpu", "cpu.cfs_quota_us"),
            read("cpu", "cpu.shares"),
        ]
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_update_resizes_the_running_container_in_place() {
    let dir = scratch("update");
    let mut d = daemon("node-update", dir.path(), None).await;
    let images = Images::start();
    let image = image(&mut d, &images, "update").await;
    let pod = d.run_pod("update").await;
    let mut config = sh("app", &image, "sleep 3600");
    let r = config
        .linux
        .get_or_insert_with(Default::default)
        .resources
        .get_or_insert_with(Default::default);
    r.memory_limit_in_bytes = 64 << 20;
    r.cpu_quota = 50_000;
    r.cpu_period = 100_000;
    r.cpu_shares = 512;
    let (id, pid) = running(&mut d, &pod, config).await;
    let cgroup = d.cgroup_path(&id);
    let v2 = host::unified_cgroups();
    let want = |mem: u64, quota: u64, shares: u64, weight: u64| {
        if v2 {
            [
                mem.to_string(),
                format!("{quota} 100000"),
                weight.to_string(),
            ]
        } else {
            [mem.to_string(), quota.to_string(), shares.to_string()]
        }
    };
    assert_eq!(limits(&cgroup), want(64 << 20, 50_000, 512, 20));
    d.cri
        .runtime
        .update_container_resources(cri::UpdateContainerResourcesRequest {
            container_id: id.clone(),
            linux: Some(cri::LinuxContainerResources {
                memory_limit_in_bytes: 96 << 20,
                cpu_quota: 20_000,
                cpu_period: 100_000,
                cpu_shares: 1024,
                ..Default::default()
            }),
            ..Default::default()
        })
        .await
        .expect("UpdateContainerResources");
    assert_eq!(limits(&cgroup), want(96 << 20, 20_000, 1024, 39));
    if d.systemd {
        // systemd holds the new values too: its next realisation of the unit keeps them.
        let unit = format!("peapod-{id}.scope");
        // (systemctl prints the properties in its own order, not the order asked for.)
        let mut shown: Vec<String> =
            unit_show(&unit, &["MemoryMax", "CPUWeight", "CPUQuotaPerSecUSec"])
                .lines()
                .map(str::to_string)
                .collect();
        shown.sort();
        assert_eq!(
            shown,
            [
                "CPUQuotaPerSecUSec=200ms".to_string(),
                "CPUWeight=39".to_string(),
                format!("MemoryMax={}", 96 << 20),
            ]
        );
    }
    // In place: the same process, still running.
    let info = d.container_info(&id).await;
    assert_eq!(info["pid"].as_u64(), Some(pid as u64));
    d.remove_pod(&pod).await;
    assert_eq!(making_calls(dir.path()), Vec::<String>::new(), "all native");
}

/// The pids of container `id`'s resident exec helper.
fn resident_of(id: &str) -> Vec<u32> {
    host::processes_with("nsexec --resident --bundle")
        .into_iter()
        .filter(|p| {
            std::fs::read(format!("/proc/{p}/cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains(id))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_execs_process_is_in_its_containers_cgroup_from_its_start() {
    let dir = scratch("exec-cgroup");
    let mut d = daemon("node-exec-cgroup", dir.path(), None).await;
    let images = Images::start();
    let image = image(&mut d, &images, "exec").await;
    let pod = d.run_pod("exec-cgroup").await;
    let (id, pid) = running(&mut d, &pod, sh("app", &image, "sleep 3600")).await;
    // The first thing the exec's program does is read where it is, and where the init is:
    // both as the exec's cgroup namespace shows them (with a namespace of the container's
    // own, as on v2, its cgroup is "/"; read from the host, the init's would be the full
    // path).
    let out = exec_sync_in(&mut d, &id, &["cat", "/proc/self/cgroup", "/proc/1/cgroup"]).await;
    let read = text(&out);
    let lines: Vec<&str> = read.lines().collect();
    assert!(
        !lines.is_empty() && lines.len().is_multiple_of(2),
        "{lines:?} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (own, init) = lines.split_at(lines.len() / 2);
    assert_eq!(own, init, "the exec's cgroups are its init's");
    assert!(
        std::fs::read_to_string(format!("/proc/{pid}/cgroup"))
            .expect("the init's cgroups")
            .contains(&id),
        "the init is in its container's cgroup"
    );
    let helper = resident_of(&id);
    assert_eq!(helper.len(), 1, "one resident helper: {helper:?}");
    let procs = host::cgroup_procs(&d.cgroup_path(&id));
    if host::unified_cgroups() {
        // Cloned into the cgroup: the helper never joined it.
        assert!(!procs.contains(&helper[0]), "{procs:?} holds the helper");
        let own = std::fs::read_to_string(format!("/proc/{}/cgroup", helper[0]))
            .expect("the helper's cgroups");
        assert!(!own.contains(&id), "the helper is in {own}");
    } else {
        // On v1 the helper joins the container's cgroups once, and forks there.
        assert!(procs.contains(&helper[0]), "{procs:?} lacks the helper");
    }
    d.remove_pod(&pod).await;
    assert_eq!(making_calls(dir.path()), Vec::<String>::new(), "all native");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pods_whole_life_makes_no_runtime_call() {
    let dir = scratch("life");
    let mut d = daemon("node-life", dir.path(), None).await;
    let images = Images::start();
    let image = image(&mut d, &images, "life").await;
    let _ = std::fs::remove_file(dir.path().join("runtime-calls"));
    let started = Instant::now();
    let pod = d.run_pod("life").await;
    let pod_ran = started.elapsed();
    let config = in_pod(&pod, sh("app", &image, "sleep 3600"));
    let t = Instant::now();
    let id = d.create(&pod, config).await.expect("CreateContainer");
    let created = t.elapsed();
    let t = Instant::now();
    d.start_container(&id).await.expect("StartContainer");
    let started_ctr = t.elapsed();
    let t = Instant::now();
    let out = exec_sync_in(&mut d, &id, &["true"]).await;
    let exec = t.elapsed();
    assert_eq!(out.exit_code, 0);
    let t = Instant::now();
    d.remove_pod(&pod).await;
    let removed = t.elapsed();
    eprintln!(
        "pod life ({} driver): RunPodSandbox {pod_ran:?}, CreateContainer {created:?}, \
         StartContainer {started_ctr:?}, ExecSync {exec:?}, stop + remove {removed:?}; \
         runtime calls: {:?}",
        if d.systemd { "systemd" } else { "cgroupfs" },
        host::runtime_calls(dir.path())
    );
    assert_eq!(host::runtime_calls(dir.path()), Vec::<String>::new());
    let left = d.leftovers();
    assert!(left.is_empty(), "left {left:?}");
}

/// `systemctl show` of `unit`'s properties, as `Name=value` lines.
fn unit_show(unit: &str, props: &[&str]) -> String {
    let mut c = std::process::Command::new("systemctl");
    c.arg("show");
    for p in props {
        c.args(["-p", p]);
    }
    let out = c.arg(unit).output().expect("systemctl show");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs systemd as PID 1 and cgroup v2: runs in the guest (scripts/vm test)"]
async fn each_container_is_a_systemd_scope_in_its_pods_slice_and_none_is_left() {
    assert!(peapod_host::systemd::booted(), "systemd is not PID 1 here");
    let dir = scratch("scopes");
    let mut d = daemon("node-scopes", dir.path(), Some("systemd")).await;
    let images = Images::start();
    let image = image(&mut d, &images, "scopes").await;
    let pod = d.run_pod("scopes").await;
    let pause = d.pod_info(&pod.id).await["pid"].as_u64().expect("pid") as u32;
    let (id, pid) = running(&mut d, &pod, sh("app", &image, "sleep 3600")).await;
    let slice = peapod_host::systemd::slice_name(&d.cgroup_parent);
    for (unit_id, process) in [(&pod.id, pause), (&id, pid)] {
        let unit = format!("peapod-{unit_id}.scope");
        let cgroup = d.cgroup_path(unit_id);
        assert_eq!(
            unit_show(&unit, &["Slice", "ControlGroup", "Delegate", "ActiveState"]),
            format!("Slice={slice}\nControlGroup={cgroup}\nDelegate=yes\nActiveState=active\n")
        );
        let own = std::fs::read_to_string(format!("/proc/{process}/cgroup")).unwrap();
        assert_eq!(own, format!("0::{cgroup}\n"));
    }
    d.remove_pod(&pod).await;
    for unit_id in [&pod.id, &id] {
        let unit = format!("peapod-{unit_id}.scope");
        assert_eq!(unit_show(&unit, &["LoadState"]), "LoadState=not-found\n");
        assert!(!host::cgroup_path_exists(&d.cgroup_path(unit_id)));
    }
    assert!(host::cgroups_under(&d.cgroup_dir()).is_empty());
    assert_eq!(making_calls(dir.path()), Vec::<String>::new(), "all native");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a kernel with AppArmor: runs in the guest (scripts/vm test)"]
async fn apparmor_confines_what_the_native_paths_create_and_exec() {
    assert!(
        peapod_host::apparmor::kernel_enabled(),
        "this test needs a kernel that enforces AppArmor"
    );
    let dir = scratch("apparmor");
    let mut d = daemon("node-apparmor", dir.path(), None).await;
    let images = Images::start();
    let image = image(&mut d, &images, "apparmor").await;
    let pod = d.run_pod("apparmor").await;
    // The kubelet's default (no profile asked for) is RuntimeDefault: peapod-default.
    let (id, pid) = running(
        &mut d,
        &pod,
        sh(
            "app",
            &image,
            "cat /proc/self/attr/current > /dev/shm/label; sleep 3600",
        ),
    )
    .await;
    let label = || std::fs::read_to_string(format!("/proc/{pid}/root/dev/shm/label"));
    let deadline = Instant::now() + e2e::scaled(Duration::from_secs(10));
    while label().map_or(true, |l| l.is_empty()) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(label().unwrap_or_default(), "peapod-default (enforce)\n");
    let out = exec_sync_in(&mut d, &id, &["cat", "/proc/self/attr/current"]).await;
    assert_eq!(text(&out), "peapod-default (enforce)\n");
    d.remove_pod(&pod).await;
    assert_eq!(making_calls(dir.path()), Vec::<String>::new(), "all native");
}
