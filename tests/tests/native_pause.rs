//! The pause started by the shim itself (`[sandbox] native_pause`, the default) against the
//! pause `runc run` starts (`native_pause = false`): the same pod on both daemons, and the
//! two processes compared as the kernel shows them. Then a dead shim's native pause, which
//! the OCI runtime does not know, is found by its cgroup and killed. And the runtime calls
//! of a pod's life, counted by a runc that logs them: none for the pause, none for a
//! container created natively, one (create) for a container runc creates, whose start, kill
//! and delete the shim does.

use e2e::pods::{self, Images, Pod};
use e2e::{host, DaemonOptions, TestDaemon};
use peapod_proto::v1 as cri;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// A pod sharing its PID namespace, with a sysctl of each kind the pause sets.
fn shared_pid_and_sysctls(config: &mut cri::PodSandboxConfig) {
    let linux = config.linux.get_or_insert_with(Default::default);
    linux.sysctls = [
        ("net.ipv4.ip_unprivileged_port_start", "81"),
        ("kernel.shm_rmid_forced", "1"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let ns = linux
        .security_context
        .get_or_insert_with(Default::default)
        .namespace_options
        .get_or_insert_with(Default::default);
    ns.pid = cri::NamespaceMode::Pod as i32;
}

/// That pod, running; and its pause's pid.
async fn run(d: &mut TestDaemon, name: &str) -> (Pod, u32) {
    let pod = d.run_pod_with(name, shared_pid_and_sysctls).await;
    let pid = d.pod_info(&pod.id).await["pid"].as_u64().expect("pid") as u32;
    assert!(pid > 0);
    (pod, pid)
}

/// What a pause is, as the kernel shows it: ids, capabilities, no_new_privs, seccomp, its
/// namespaces (which differ from the host's, and the PID namespace it is init of), its root,
/// hostname, sysctls, cgroup (`cgroup`: below the pod's parent, named by the sandbox id, or
/// its systemd scope) and its limits there, and program.
fn portrait(pid: u32, cgroup: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    for line in status.lines() {
        let (key, value) = line.split_once(':').unwrap_or((line, ""));
        let wanted = [
            "Uid",
            "Gid",
            "Groups",
            "CapInh",
            "CapPrm",
            "CapEff",
            "CapBnd",
            "CapAmb",
            "NoNewPrivs",
            "Seccomp",
        ];
        if wanted.contains(&key) {
            out.insert(key.to_string(), value.trim().to_string());
        }
        if key == "NSpid" {
            // The host's pid, then 1: the init of a PID namespace of its own.
            let last = value.split_whitespace().last().unwrap_or("").to_string();
            out.insert("pid in its namespace".into(), last);
        }
    }
    for ns in ["pid", "ipc", "uts", "mnt", "net"] {
        let theirs = std::fs::read_link(format!("/proc/{pid}/ns/{ns}")).expect("ns");
        let ours = std::fs::read_link(format!("/proc/self/ns/{ns}")).expect("ns");
        out.insert(format!("own {ns} namespace"), (theirs != ours).to_string());
    }
    // Through the magic link: a path that works whichever mount namespace the root is in.
    let pause = std::path::PathBuf::from(format!("/proc/{pid}/root/pause"));
    out.insert("root holds pause".into(), pause.exists().to_string());
    let bin = std::path::PathBuf::from(format!("/proc/{pid}/root/bin"));
    out.insert("root holds bin".into(), bin.exists().to_string());
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).expect("comm");
    out.insert("program".into(), comm.trim().to_string());
    let run_in = |args: &[&str]| {
        let o = host::in_namespaces_of(pid, &["--uts", "--ipc", "--net"], args);
        String::from_utf8_lossy(&o.stdout).trim().to_string()
    };
    out.insert("hostname".into(), run_in(&["hostname"]));
    out.insert(
        "net sysctl".into(),
        run_in(&["cat", "/proc/sys/net/ipv4/ip_unprivileged_port_start"]),
    );
    out.insert(
        "ipc sysctl".into(),
        run_in(&["cat", "/proc/sys/kernel/shm_rmid_forced"]),
    );
    let cgroups = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).expect("cgroup");
    for line in cgroups.lines() {
        let mut parts = line.splitn(3, ':');
        let (_, controllers, path) = (parts.next(), parts.next().unwrap_or(""), parts.next());
        out.insert(
            format!("cgroup {controllers}"),
            (path == Some(cgroup)).to_string(),
        );
    }
    // Its CPU weight and, on v2, the controllers it has and its own files (the device
    // filter's effect is the exec-free pause's to keep: it opens nothing).
    let (file, dir) = if host::unified_cgroups() {
        ("cpu.weight", host::cgroup_fs_dir(cgroup, "cpu"))
    } else {
        ("cpu.shares", host::cgroup_fs_dir(cgroup, "cpu"))
    };
    let read = |f: &str| {
        std::fs::read_to_string(dir.join(f))
            .map(|t| t.trim().to_string())
            .unwrap_or_else(|e| e.to_string())
    };
    out.insert(file.into(), read(file));
    if host::unified_cgroups() {
        for f in ["cgroup.controllers", "memory.max", "pids.max", "cpu.max"] {
            out.insert(f.into(), read(f));
        }
    }
    out.insert(
        "oom_score_adj".into(),
        std::fs::read_to_string(format!("/proc/{pid}/oom_score_adj"))
            .expect("oom_score_adj")
            .trim()
            .to_string(),
    );
    out
}

/// Whether process `pid` runs (a zombie waiting for its reaper does not).
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .map(|s| {
            !s.lines()
                .any(|l| l.starts_with("State:") && l.contains('Z'))
        })
        .unwrap_or(false)
}

/// The ids the daemon's OCI runtime knows.
fn runtime_ids(d: &TestDaemon) -> Vec<String> {
    let out = std::process::Command::new("runc")
        .arg("--root")
        .arg(d.state.join("runc"))
        .args(["list", "-q"])
        .output()
        .expect("runc list");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_native_pause_is_what_runc_makes_of_the_same_spec() {
    let mut native = TestDaemon::start("native_pause").await;
    let mut runc = TestDaemon::start_with(
        "runc_pause",
        DaemonOptions {
            extra_config: "[sandbox]\nnative_pause = false\n".into(),
            ..Default::default()
        },
    )
    .await;
    let (n_pod, n_pid) = run(&mut native, "same-pod").await;
    let (r_pod, r_pid) = run(&mut runc, "same-pod").await;
    let (n_id, r_id) = (n_pod.id.clone(), r_pod.id.clone());

    // Started without the runtime, and with it.
    assert!(
        !runtime_ids(&native).contains(&n_id),
        "runc knows the native pause"
    );
    assert!(
        runtime_ids(&runc).contains(&r_id),
        "runc does not know its pause"
    );

    let n = portrait(n_pid, &native.cgroup_path(&n_id));
    let r = portrait(r_pid, &runc.cgroup_path(&r_id));
    assert_eq!(n, r, "native pause (left) against runc's (right)");
    // And what both are, so that two equally wrong pauses fail too.
    assert_eq!(n["Uid"], "65535\t65535\t65535\t65535");
    assert_eq!(n["CapEff"], "0000000000000000");
    assert_eq!(n["CapBnd"], "0000000000000000");
    assert_eq!(n["NoNewPrivs"], "1");
    assert_eq!(n["pid in its namespace"], "1");
    assert_eq!(n["own pid namespace"], "true");
    assert_eq!(n["own net namespace"], "true");
    assert_eq!(n["hostname"], "same-pod");
    assert_eq!(n["net sysctl"], "81");
    assert_eq!(n["ipc sysctl"], "1");
    assert_eq!(n["root holds pause"], "true");
    assert_eq!(n["root holds bin"], "false");
    assert!(
        n.iter()
            .filter(|(k, _)| k.starts_with("cgroup "))
            .all(|(_, v)| v == "true"),
        "{n:?}"
    );

    assert_eq!(
        n.get("cpu.weight")
            .or(n.get("cpu.shares"))
            .map(String::as_str),
        Some(if host::unified_cgroups() { "1" } else { "2" })
    );

    // Stopped and removed: its process and cgroup are gone.
    native.remove_pod(&n_pod).await;
    assert!(!host::cgroup_path_exists(&native.cgroup_path(&n_id)));
    assert!(!alive(n_pid));
    runc.remove_pod(&r_pod).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_native_pause_dies_with_its_shim() {
    let mut d = TestDaemon::start("native_pause_shim").await;
    let (pod, pid) = run(&mut d, "orphan").await;
    let id = pod.id.clone();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    let shim: i32 = status
        .lines()
        .find_map(|l| l.strip_prefix("PPid:"))
        .and_then(|v| v.trim().parse().ok())
        .expect("PPid");
    // SAFETY: kill with integer arguments.
    assert_eq!(unsafe { libc::kill(shim, libc::SIGKILL) }, 0);
    // The daemon finds the shim dead; the runtime does not know the pause: its cgroup does.
    // (The pause dies of the cgroup's removal, which takes the directories once it has left:
    // a loaded machine can show the dead pause before the last of them is gone.)
    let deadline = Instant::now() + e2e::scaled(Duration::from_secs(20));
    while alive(pid) || host::cgroup_path_exists(&d.cgroup_path(&id)) {
        assert!(
            Instant::now() < deadline,
            "the pause or its cgroup outlived its shim (alive: {})\n{}",
            alive(pid),
            d.log()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    d.remove_pod(&pod).await;
}

/// A pod's life on a daemon whose runtime is a runc that logs its calls, with app containers
/// created `create` ("native" or "runc"); returns the calls that named the app container.
async fn pod_life_calls(create: &str) -> Vec<String> {
    let bin = tempfile::tempdir().expect("tempdir");
    let log = bin.path().join("calls");
    let real = std::process::Command::new("sh")
        .args(["-c", "command -v runc"])
        .output()
        .expect("command -v runc");
    let real = String::from_utf8_lossy(&real.stdout).trim().to_string();
    assert!(!real.is_empty(), "runc is not installed");
    // Named runc, as the shim's start without runc asks of the runtime.
    let wrapper = bin.path().join("runc");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\necho \"$*\" >> {}\nexec {real} \"$@\"\n",
            log.display()
        ),
    )
    .expect("write the wrapper");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let mut d = TestDaemon::start_with(
        &format!("calls_{create}"),
        DaemonOptions {
            extra_config: format!(
                "[runtime]\npath = \"{}\"\ncreate = \"{create}\"\n",
                wrapper.display()
            ),
            ..Default::default()
        },
    )
    .await;
    let images = Images::start();
    let image = images.push("calls/busybox:1", &pods::busybox());
    d.pull(&image).await;
    let _ = std::fs::remove_file(&log);

    let (pod, _) = run(&mut d, "counted").await;
    let pod_id = pod.id.clone();
    let ctr = d
        .run_container(&pod, pods::container("app", &image, &["sleep"], &["1000"]))
        .await;
    let running = d.container_status(&ctr).await;
    assert_eq!(running.state, cri::ContainerState::ContainerRunning as i32);

    let calls = std::fs::read_to_string(&log).unwrap_or_default();
    let calls: Vec<&str> = calls.lines().collect();
    let naming = |id: &str| calls.iter().filter(|c| c.contains(id)).count();
    assert_eq!(
        naming(&pod_id),
        0,
        "the pause cost runtime calls: {calls:?}"
    );
    // Started for real: its process is `sleep` (the start's byte is on the init's pipe or
    // FIFO when StartContainer answers; its exec follows, on a loaded machine a little later).
    let pid = d.container_info(&ctr).await["pid"].as_u64().expect("pid");
    let comm = || std::fs::read_to_string(format!("/proc/{pid}/comm")).expect("comm");
    let deadline = Instant::now() + e2e::scaled(Duration::from_secs(5));
    while comm().trim() != "sleep" && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(comm().trim(), "sleep");
    if create == "runc" {
        // The runtime sees it running.
        let state = std::process::Command::new(&real)
            .arg("--root")
            .arg(d.state.join("runc"))
            .args(["state", &ctr])
            .output()
            .expect("runc state");
        let state: serde_json::Value = serde_json::from_slice(&state.stdout).expect("state json");
        assert_eq!(state["status"], "running", "{state}");
        assert_eq!(state["pid"].as_u64(), Some(pid));
    }
    // A retried start (the daemon answers it as done) makes no call either.
    d.start_container(&ctr).await.expect("StartContainer again");
    let before_removal = std::fs::read_to_string(&log).unwrap_or_default();
    // Stopped and removed: killed and deleted by the shim, leaving nothing of it.
    d.remove_pod(&pod).await;
    let all = std::fs::read_to_string(&log).unwrap_or_default();
    let removal: Vec<&str> = all
        .strip_prefix(before_removal.as_str())
        .expect("the calls' log only grows")
        .lines()
        .collect();
    if create == "runc" && d.systemd {
        // runc started the container's scope, and stops it: the shim deletes only what runc
        // made at a cgroupfs path itself (shim/src/backend/runc_assisted.rs).
        assert_eq!(removal.len(), 2, "{removal:?}");
        assert!(
            removal[0].ends_with(&format!(" kill --all {ctr} 9")),
            "{removal:?}"
        );
        assert!(
            removal[1].ends_with(&format!(" delete --force {ctr}")),
            "{removal:?}"
        );
    } else {
        assert!(
            removal.is_empty(),
            "the removal made runtime calls: {removal:?}"
        );
    }
    assert!(!alive(pid as u32));
    assert!(!host::cgroup_path_exists(&d.cgroup_path(&ctr)));
    assert!(
        !d.state.join("runc").join(&ctr).exists(),
        "runc's state of it is gone"
    );
    assert!(runtime_ids(&d).is_empty(), "{:?}", runtime_ids(&d));
    all.lines()
        .filter(|c| c.contains(&ctr))
        .map(str::to_string)
        .collect()
}

/// With containers created natively (the default) a pod's whole life makes no runtime call;
/// with `create = "runc"`, one: the container's `runc create` (its start, kill and delete are
/// the shim's), and with the systemd driver its kill and delete too (pod_life_calls).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_up_costs_no_runtime_call_or_one_create_per_container() {
    let native = pod_life_calls("native").await;
    assert!(native.is_empty(), "{native:?}");
    let runc = pod_life_calls("runc").await;
    assert!(runc[0].contains(" create "), "{runc:?}");
    assert!(
        runc.len() == 1 || (runc.len() == 3 && runc[1].contains(" kill --all ")),
        "{runc:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_kills_every_process_of_a_container_in_the_pods_pid_namespace() {
    let mut d = TestDaemon::start("native_kill_all").await;
    let images = Images::start();
    let image = images.push("killall/busybox:1", &pods::busybox());
    d.pull(&image).await;
    // The pod's PID namespace: the container's init is not its namespace's init, so killing
    // the init alone would leave its child running.
    let (pod, _) = run(&mut d, "forks").await;
    let ctr = d
        .run_container(
            &pod,
            pods::sh("app", &image, "sleep 1000 & exec sleep 1001"),
        )
        .await;
    let cgroup = d.cgroup_path(&ctr);
    let members = || host::cgroup_procs(&cgroup);
    let deadline = Instant::now() + e2e::scaled(Duration::from_secs(10));
    while members().len() < 2 {
        assert!(Instant::now() < deadline, "{:?}", members());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let both = members();
    d.stop_container(&ctr, 0).await;
    let deadline = Instant::now() + e2e::scaled(Duration::from_secs(10));
    while both.iter().any(|p| alive(*p)) {
        assert!(Instant::now() < deadline, "still running: {both:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let exited = d.container_status(&ctr).await;
    assert_eq!(exited.state, cri::ContainerState::ContainerExited as i32);
    d.cri
        .runtime
        .remove_container(cri::RemoveContainerRequest {
            container_id: ctr.clone(),
        })
        .await
        .expect("RemoveContainer");
    assert!(!host::cgroup_path_exists(&d.cgroup_path(&ctr)));
    assert!(!d.state.join("runc").join(&ctr).exists());
    d.remove_pod(&pod).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pause_neither_way_can_start_leaves_nothing() {
    let mut d = TestDaemon::start("native_pause_fails").await;
    // Well-formed, so the daemon passes it on; no kernel has it, so the helper fails after
    // joining the pause's cgroup and entering its namespaces, and runc fails on it after it.
    let err = d
        .run_pod_on("no-such-sysctl", "", |c| {
            shared_pid_and_sysctls(c);
            let linux = c.linux.get_or_insert_with(Default::default);
            linux
                .sysctls
                .insert("net.ipv4.peapod_no_such_key".into(), "1".into());
        })
        .await
        .expect_err("a sysctl no kernel has");
    assert!(
        err.message().contains("peapod_no_such_key"),
        "{}",
        err.message()
    );
    // No pod, no cgroup (where a pause would be), nothing in the runtime.
    let pods = d
        .cri
        .runtime
        .list_pod_sandbox(cri::ListPodSandboxRequest { filter: None })
        .await
        .expect("ListPodSandbox")
        .into_inner()
        .items;
    assert!(pods.is_empty(), "{pods:?}");
    assert!(
        host::cgroups_under(&d.cgroup_dir()).is_empty(),
        "{:?}",
        host::cgroups_under(&d.cgroup_dir())
    );
    assert!(runtime_ids(&d).is_empty(), "{:?}", runtime_ids(&d));
}
