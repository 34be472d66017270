//! Containers end to end: images pulled from a local registry, real runc, real CNI.

use e2e::pods::{
    busybox, container, kubelet_proc_mask, read_log, run_pod_with_app, sh, stdout_text, Images,
};
use e2e::{host, TestDaemon};
use peapod_proto::v1 as cri;
use std::time::{Duration, Instant};
use tonic::Code;

const WAIT: Duration = Duration::from_secs(20);

fn exited(st: &cri::ContainerStatus) -> (i32, String) {
    (st.exit_code, st.reason.clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn init_container_then_server_and_sidecar_share_a_volume_localhost_and_hostname() {
    let mut d = TestDaemon::start("war").await;
    let images = Images::start();
    let image = images.push("busybox:war", &busybox());
    d.pull(&image).await;
    let pod = d.run_pod("war-pod").await;
    // The emptyDir the kubelet would make: a host directory mounted into every container.
    let volume = d.dir.join("emptydir");
    std::fs::create_dir_all(&volume).unwrap();
    let mount = cri::Mount {
        container_path: "/data".into(),
        host_path: volume.display().to_string(),
        ..Default::default()
    };

    let mut init = sh(
        "deploy",
        &image,
        "echo 'the app' > /data/app.war && hostname > /data/init-host",
    );
    init.mounts.push(mount.clone());
    let init_id = d.run_container(&pod, init).await;
    let st = d.wait_exited(&init_id, WAIT).await;
    assert_eq!(exited(&st), (0, "Completed".to_string()), "{st:?}");
    assert_eq!(
        std::fs::read_to_string(volume.join("app.war")).unwrap(),
        "the app\n"
    );

    let mut server = container(
        "server",
        &image,
        &["httpd", "-f", "-p", "8080", "-h", "/data"],
        &[],
    );
    server.mounts.push(mount.clone());
    let server_id = d.run_container(&pod, server).await;
    let mut sidecar = sh(
        "sidecar",
        &image,
        "for i in $(seq 1 100); do wget -q -O - http://127.0.0.1:8080/app.war && break; sleep 0.1; done; echo host=$(hostname); cat /data/init-host",
    );
    sidecar.mounts.push(mount);
    let sidecar_id = d.run_container(&pod, sidecar).await;
    let st = d.wait_exited(&sidecar_id, WAIT).await;
    assert_eq!(st.exit_code, 0, "{st:?}");
    let out = stdout_text(&read_log(std::path::Path::new(&st.log_path)));
    assert_eq!(out, "the app\nhost=war-pod\nwar-pod\n", "sidecar output");
    assert_eq!(
        d.container_status(&server_id).await.state,
        cri::ContainerState::ContainerRunning as i32
    );

    // Listing by pod and by label.
    let list = d.containers_of(&pod).await;
    assert_eq!(list.len(), 3);
    let running = d
        .cri
        .runtime
        .list_containers(cri::ListContainersRequest {
            filter: Some(cri::ContainerFilter {
                state: Some(cri::ContainerStateValue {
                    state: cri::ContainerState::ContainerRunning as i32,
                }),
                ..Default::default()
            }),
        })
        .await
        .unwrap()
        .into_inner()
        .containers;
    assert_eq!(
        running.iter().map(|c| c.id.clone()).collect::<Vec<_>>(),
        vec![server_id.clone()]
    );

    d.remove_pod(&pod).await;
    assert!(d.leftovers().is_empty(), "{:#?}", d.leftovers());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn command_args_env_workdir_and_user_merge_with_the_image() {
    let mut d = TestDaemon::start("merge").await;
    let images = Images::start();
    let spec = busybox()
        .entrypoint(&["/bin/sh", "-c", "echo \"args=$0 $*\"; echo \"pwd=$(pwd)\"; echo \"id=$(id -u):$(id -g):$(id -G)\"; env | sort | grep -E '^(A|B|C)='", "entry"])
        .cmd(&["img-cmd"])
        .env("A=image")
        .env("B=image")
        .workdir("/srv")
        .user("app")
        .passwd_line("app:x:1000:1000::/home/app:/bin/sh")
        .group_line("app:x:1000:")
        .group_line("extra:x:2000:app");
    let image = images.push("busybox:merge", &spec);
    d.pull(&image).await;
    let pod = d.run_pod("merge-pod").await;

    struct Case {
        name: &'static str,
        command: &'static [&'static str],
        args: &'static [&'static str],
        envs: &'static [(&'static str, &'static str)],
        workdir: &'static str,
        run_as_user: Option<i64>,
        want: &'static str,
    }
    let cases = [
        Case {
            name: "image-defaults",
            command: &[],
            args: &[],
            envs: &[],
            workdir: "",
            run_as_user: None,
            want: "args=entry img-cmd\npwd=/srv\nid=1000:1000:1000 2000\nA=image\nB=image\n",
        },
        Case {
            name: "args-replace-cmd",
            command: &[],
            args: &["from-args"],
            envs: &[("B", "config"), ("C", "config")],
            workdir: "/tmp",
            run_as_user: None,
            want: "args=entry from-args\npwd=/tmp\nid=1000:1000:1000 2000\nA=image\nB=config\nC=config\n",
        },
        Case {
            name: "command-replaces-entrypoint-and-cmd",
            command: &["/bin/sh", "-c", "echo \"cmd=$0 $*\"; id -u", "zero"],
            args: &[],
            envs: &[],
            workdir: "",
            run_as_user: Some(4242),
            want: "cmd=zero \n4242\n",
        },
    ];
    for case in cases {
        let mut c = container(case.name, &image, case.command, case.args);
        c.envs = case
            .envs
            .iter()
            .map(|(k, v)| cri::KeyValue {
                key: k.to_string(),
                value: v.as_bytes().to_vec(),
            })
            .collect();
        c.working_dir = case.workdir.to_string();
        if let Some(uid) = case.run_as_user {
            c.linux.as_mut().unwrap().security_context = Some(cri::LinuxContainerSecurityContext {
                run_as_user: Some(cri::Int64Value { value: uid }),
                ..Default::default()
            });
        }
        let id = d.run_container(&pod, c).await;
        let st = d.wait_exited(&id, WAIT).await;
        let out = stdout_text(&read_log(std::path::Path::new(&st.log_path)));
        assert_eq!(out, case.want, "case {}", case.name);
    }
    d.remove_pod(&pod).await;
    assert!(d.leftovers().is_empty(), "{:#?}", d.leftovers());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exit_codes_reasons_oom_and_stop_timeouts() {
    let mut d = TestDaemon::start("exits").await;
    let images = Images::start();
    let image = images.push("busybox:exits", &busybox());
    d.pull(&image).await;
    let pod = d.run_pod("exits-pod").await;

    let ok = d.run_container(&pod, sh("ok", &image, "exit 0")).await;
    let three = d.run_container(&pod, sh("three", &image, "exit 3")).await;
    assert_eq!(
        exited(&d.wait_exited(&ok, WAIT).await),
        (0, "Completed".into())
    );
    let st = d.wait_exited(&three, WAIT).await;
    assert_eq!(exited(&st), (3, "Error".into()));
    assert!(st.finished_at >= st.started_at && st.started_at >= st.created_at && st.created_at > 0);

    let mut hog = sh("hog", &image, "tail /dev/zero");
    hog.linux.as_mut().unwrap().resources = Some(cri::LinuxContainerResources {
        memory_limit_in_bytes: 32 << 20,
        ..Default::default()
    });
    let hog = d.run_container(&pod, hog).await;
    assert_eq!(
        exited(&d.wait_exited(&hog, WAIT).await),
        (137, "OOMKilled".into())
    );

    // Ignores SIGTERM: killed after the timeout.
    let stubborn = d
        .run_container(
            &pod,
            sh(
                "stubborn",
                &image,
                "trap '' TERM; echo ready; while true; do sleep 1; done",
            ),
        )
        .await;
    d.wait_log(&stubborn, "ready", WAIT).await;
    let t = Instant::now();
    d.cri
        .runtime
        .stop_container(cri::StopContainerRequest {
            container_id: stubborn.clone(),
            timeout: 2,
        })
        .await
        .unwrap();
    let took = t.elapsed();
    let st = d.container_status(&stubborn).await;
    assert_eq!(st.state, cri::ContainerState::ContainerExited as i32);
    assert_eq!(st.exit_code, 137);
    assert!(
        took >= Duration::from_secs(2),
        "killed before the timeout: {took:?}"
    );

    // Handles SIGTERM: exits 0 at once.
    let polite = d
        .run_container(
            &pod,
            sh(
                "polite",
                &image,
                "trap 'exit 0' TERM; echo ready; while true; do sleep 0.1; done",
            ),
        )
        .await;
    d.wait_log(&polite, "ready", WAIT).await;
    let t = Instant::now();
    d.cri
        .runtime
        .stop_container(cri::StopContainerRequest {
            container_id: polite.clone(),
            timeout: 30,
        })
        .await
        .unwrap();
    assert!(
        t.elapsed() < Duration::from_secs(10),
        "took {:?}",
        t.elapsed()
    );
    assert_eq!(
        exited(&d.container_status(&polite).await),
        (0, "Completed".into())
    );
    // Stopping again, or an unknown container, is fine.
    for id in [polite.clone(), "0".repeat(64)] {
        d.cri
            .runtime
            .stop_container(cri::StopContainerRequest {
                container_id: id,
                timeout: 1,
            })
            .await
            .unwrap();
    }
    d.remove_pod(&pod).await;
    assert!(d.leftovers().is_empty(), "{:#?}", d.leftovers());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cri_logs_streams_partial_lines_and_rotation() {
    let mut d = TestDaemon::start("logs").await;
    let images = Images::start();
    let image = images.push("busybox:logs", &busybox());
    d.pull(&image).await;
    let pod = d.run_pod("logs-pod").await;
    let id = d
        .run_container(
            &pod,
            sh(
                "talker",
                &image,
                "echo out1; echo err1 >&2; printf 'no newline'; while [ ! -e /tmp/go ]; do sleep 0.05; done; echo after",
            ),
        )
        .await;
    // "no newline" stays in the shim until its line ends.
    let lines = d.wait_log(&id, "err1", WAIT).await;
    let st = d.container_status(&id).await;
    let find = |text: &str| lines.iter().find(|l| l.text == text).cloned();
    assert_eq!(
        find("out1").map(|l| (l.stream, l.tag)),
        Some(("stdout".into(), "F".into()))
    );
    assert_eq!(
        find("err1").map(|l| (l.stream, l.tag)),
        Some(("stderr".into(), "F".into()))
    );
    // Rotate as the kubelet does: rename, then ReopenContainerLog.
    let log = std::path::PathBuf::from(&st.log_path);
    let rotated = log.with_extension("log.20261129");
    std::fs::rename(&log, &rotated).unwrap();
    d.cri
        .runtime
        .reopen_container_log(cri::ReopenContainerLogRequest {
            container_id: id.clone(),
        })
        .await
        .unwrap();
    // Let the container go on (it polls for a file in its own /tmp via the rootfs on the host).
    let rootfs = host_rootfs(&mut d, &id).await;
    std::fs::write(rootfs.join("tmp/go"), "").unwrap();
    let st = d.wait_exited(&id, WAIT).await;
    assert_eq!(st.exit_code, 0);
    let old = read_log(&rotated);
    assert!(old.iter().any(|l| l.text == "out1"));
    // The unterminated line is completed by the later output on the same stream.
    let new = read_log(&log);
    let joined = stdout_text(&old) + &stdout_text(&new);
    assert_eq!(joined, "out1\nno newlineafter\n");
    assert!(new.iter().any(|l| l.text.contains("after")), "{new:#?}");

    // A last line without a newline at exit is a partial line.
    let id = d
        .run_container(&pod, sh("tail", &image, "printf 'a\\nb'"))
        .await;
    let st = d.wait_exited(&id, WAIT).await;
    let lines = read_log(std::path::Path::new(&st.log_path));
    assert_eq!(
        lines
            .iter()
            .map(|l| (l.tag.as_str(), l.text.as_str()))
            .collect::<Vec<_>>(),
        vec![("F", "a"), ("P", "b")]
    );
    // Reopening the log of an exited container is refused.
    let err = d
        .cri
        .runtime
        .reopen_container_log(cri::ReopenContainerLogRequest {
            container_id: id.clone(),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition);
    d.remove_pod(&pod).await;
    assert!(d.leftovers().is_empty(), "{:#?}", d.leftovers());
}

/// The container's root filesystem as seen from the host (from the verbose status).
async fn host_rootfs(d: &mut TestDaemon, id: &str) -> std::path::PathBuf {
    let resp = d
        .cri
        .runtime
        .container_status(cri::ContainerStatusRequest {
            container_id: id.to_string(),
            verbose: true,
        })
        .await
        .unwrap()
        .into_inner();
    let info: serde_json::Value = serde_json::from_str(&resp.info["info"]).unwrap();
    std::path::PathBuf::from(info["rootfs"].as_str().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cgroup_limits_inside_the_container_follow_updates() {
    let mut d = TestDaemon::start("cgroups").await;
    let images = Images::start();
    let image = images.push("busybox:cg", &busybox());
    d.pull(&image).await;
    let pod = d.run_pod("cg-pod").await;
    let mut c = sh(
        "limited",
        &image,
        "while true; do echo \"q=$(cat /sys/fs/cgroup/cpu/cpu.cfs_quota_us) p=$(cat /sys/fs/cgroup/cpu/cpu.cfs_period_us) s=$(cat /sys/fs/cgroup/cpu/cpu.shares) m=$(cat /sys/fs/cgroup/memory/memory.limit_in_bytes)\"; sleep 0.1; done",
    );
    c.linux.as_mut().unwrap().resources = Some(cri::LinuxContainerResources {
        cpu_period: 100_000,
        cpu_quota: 50_000,
        cpu_shares: 512,
        memory_limit_in_bytes: 64 << 20,
        ..Default::default()
    });
    let id = d.run_container(&pod, c).await;
    d.wait_log(
        &id,
        &format!("q=50000 p=100000 s=512 m={}", 64u64 << 20),
        WAIT,
    )
    .await;
    let update = cri::LinuxContainerResources {
        cpu_period: 100_000,
        cpu_quota: 20_000,
        cpu_shares: 256,
        memory_limit_in_bytes: 96 << 20,
        ..Default::default()
    };
    d.cri
        .runtime
        .update_container_resources(cri::UpdateContainerResourcesRequest {
            container_id: id.clone(),
            linux: Some(update.clone()),
            ..Default::default()
        })
        .await
        .unwrap_or_else(|e| panic!("update: {e}\n{}", d.log()));
    d.wait_log(
        &id,
        &format!("q=20000 p=100000 s=256 m={}", 96u64 << 20),
        WAIT,
    )
    .await;
    let st = d.container_status(&id).await;
    assert_eq!(st.resources.unwrap().linux.unwrap(), update);
    d.remove_pod(&pod).await;
    assert!(d.leftovers().is_empty(), "{:#?}", d.leftovers());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn security_settings_take_effect() {
    let mut d = TestDaemon::start("security").await;
    let images = Images::start();
    let image = images.push("busybox:sec", &busybox());
    d.pull(&image).await;
    let pod = d.run_pod("sec-pod").await;

    let script = "id -u; touch /probe 2>/dev/null && echo rw || echo ro; \
                  grep -E '^(CapEff|NoNewPrivs|Seccomp):' /proc/self/status; \
                  stat -c 'masked=%F' /proc/timer_list /proc/keys; \
                  unshare -U true 2>/dev/null && echo userns-ok || echo userns-refused; \
                  ls /dev | wc -l";
    let mut locked = sh("locked", &image, script);
    locked.linux.as_mut().unwrap().security_context = Some(cri::LinuxContainerSecurityContext {
        run_as_user: Some(cri::Int64Value { value: 1234 }),
        readonly_rootfs: true,
        no_new_privs: true,
        capabilities: Some(cri::Capability {
            drop_capabilities: vec!["ALL".into()],
            ..Default::default()
        }),
        seccomp: Some(cri::SecurityProfile {
            profile_type: cri::security_profile::ProfileType::RuntimeDefault as i32,
            ..Default::default()
        }),
        ..Default::default()
    });
    kubelet_proc_mask(
        locked
            .linux
            .as_mut()
            .unwrap()
            .security_context
            .as_mut()
            .unwrap(),
    );
    let id = d.run_container(&pod, locked).await;
    let st = d.wait_exited(&id, WAIT).await;
    let out = stdout_text(&read_log(std::path::Path::new(&st.log_path)));
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], "1234", "{out}");
    assert_eq!(lines[1], "ro", "{out}");
    assert!(out.contains("CapEff:\t0000000000000000"), "{out}");
    assert!(out.contains("NoNewPrivs:\t1"), "{out}");
    assert!(out.contains("Seccomp:\t2"), "{out}");
    // Masked paths get /dev/null bound over them. (This kernel has no /proc/kcore, which runc
    // then skips; /proc/timer_list and /proc/keys are masked the same way.)
    assert_eq!(
        out.matches("masked=character special file").count(),
        2,
        "{out}"
    );
    assert!(out.contains("userns-refused"), "{out}");

    let mut loose = sh("loose", &image, script);
    loose.linux.as_mut().unwrap().security_context = Some(cri::LinuxContainerSecurityContext {
        seccomp: Some(cri::SecurityProfile {
            profile_type: cri::security_profile::ProfileType::Unconfined as i32,
            ..Default::default()
        }),
        ..Default::default()
    });
    kubelet_proc_mask(
        loose
            .linux
            .as_mut()
            .unwrap()
            .security_context
            .as_mut()
            .unwrap(),
    );
    let id = d.run_container(&pod, loose).await;
    let st = d.wait_exited(&id, WAIT).await;
    let out = stdout_text(&read_log(std::path::Path::new(&st.log_path)));
    assert!(out.contains("Seccomp:\t0"), "{out}");
    assert_eq!(
        out.matches("masked=character special file").count(),
        2,
        "masked by default too: {out}"
    );
    assert!(
        out.contains("userns-ok"),
        "the same syscall without seccomp: {out}"
    );
    assert!(out.lines().nth(1) == Some("rw"), "{out}");
    let unprivileged_devs: usize = out.lines().last().unwrap().trim().parse().unwrap();

    let mut privileged = sh(
        "privileged",
        &image,
        "ls /dev | wc -l; grep Seccomp: /proc/self/status",
    );
    privileged.linux.as_mut().unwrap().security_context =
        Some(cri::LinuxContainerSecurityContext {
            privileged: true,
            ..Default::default()
        });
    // A privileged container needs a sandbox that allows them (as the CRI says).
    let priv_pod = d
        .run_pod_with("sec-priv-pod", |c| {
            c.linux
                .as_mut()
                .unwrap()
                .security_context
                .as_mut()
                .unwrap()
                .privileged = true;
        })
        .await;
    let id = d.run_container(&priv_pod, privileged).await;
    let st = d.wait_exited(&id, WAIT).await;
    let out = stdout_text(&read_log(std::path::Path::new(&st.log_path)));
    let privileged_devs: usize = out.lines().next().unwrap().trim().parse().unwrap();
    let host_devs = std::fs::read_dir("/dev").unwrap().count();
    assert!(
        privileged_devs > unprivileged_devs + 10 && privileged_devs + 10 >= host_devs / 2,
        "privileged sees {privileged_devs} devices, unprivileged {unprivileged_devs}, host {host_devs}"
    );
    assert!(out.contains("Seccomp:\t0"), "{out}");
    d.remove_pod(&priv_pod).await;

    // run_as_group without run_as_user is refused, naming the field, and leaves nothing.
    let mut bad = sh("bad", &image, "true");
    bad.linux.as_mut().unwrap().security_context = Some(cri::LinuxContainerSecurityContext {
        run_as_group: Some(cri::Int64Value { value: 5 }),
        ..Default::default()
    });
    let err = d.create(&pod, bad).await.unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "{err}");
    assert!(err.message().contains("run_as_group"), "{err}");
    d.remove_pod(&pod).await;
    assert!(d.leftovers().is_empty(), "{:#?}", d.leftovers());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_container_requests_change_nothing() {
    let mut d = TestDaemon::start("bad_containers").await;
    let images = Images::start();
    let image = images.push("busybox:bad", &busybox());
    d.pull(&image).await;
    let pod = d.run_pod("bad-pod").await;

    let missing_image = d
        .create(&pod, sh("noimg", "127.0.0.1:1/nope:1", "true"))
        .await
        .unwrap_err();
    assert_eq!(missing_image.code(), Code::NotFound, "{missing_image}");
    let mut no_name = sh("x", &image, "true");
    no_name.metadata = None;
    let err = d.create(&pod, no_name).await.unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(err.message().contains("metadata"), "{err}");
    // The image's command does not exist: CreateContainer or StartContainer fails, cleanly.
    let id = d
        .create(&pod, container("ghost", &image, &["/no/such/binary"], &[]))
        .await;
    match id {
        // runc 1.1 finds the binary missing only at start: the container is then EXITED with
        // StartError, as containerd reports it.
        Ok(id) => {
            let err = d.start_container(&id).await.unwrap_err();
            assert!(
                err.message().contains("no/such/binary") || err.message().contains("no such file"),
                "{err}"
            );
            let st = d.container_status(&id).await;
            assert_eq!(st.state, cri::ContainerState::ContainerExited as i32);
            assert_eq!(st.reason, "StartError");
            d.cri
                .runtime
                .remove_container(cri::RemoveContainerRequest { container_id: id })
                .await
                .unwrap();
        }
        // Runtimes that check at create: the create fails and leaves no container behind.
        Err(err) => {
            assert!(err.message().contains("no/such/binary"), "{err}");
            let listed = d
                .cri
                .runtime
                .list_containers(cri::ListContainersRequest { filter: None })
                .await
                .unwrap()
                .into_inner()
                .containers;
            assert!(listed.is_empty(), "{listed:?}");
        }
    }
    assert_eq!(
        std::fs::read_dir(d.root.join("containers"))
            .unwrap()
            .count(),
        0,
        "no container record is left after the failed start or create"
    );
    // Names are reserved per pod.
    let first = d
        .create(&pod, sh("twin", &image, "sleep 10"))
        .await
        .unwrap();
    let dup = d
        .create(&pod, sh("twin", &image, "sleep 20"))
        .await
        .unwrap_err();
    assert_eq!(dup.code(), Code::AlreadyExists, "{dup}");
    let retry = d.create(&pod, sh("twin", &image, "sleep 10")).await;
    assert_eq!(
        retry.unwrap(),
        first,
        "an identical retry gets the first container"
    );
    // A created container can be removed without starting it; removing twice is fine.
    for _ in 0..2 {
        d.cri
            .runtime
            .remove_container(cri::RemoveContainerRequest {
                container_id: first.clone(),
            })
            .await
            .unwrap();
    }
    let status = d
        .cri
        .runtime
        .container_status(cri::ContainerStatusRequest {
            container_id: first.clone(),
            verbose: false,
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::NotFound);
    let again = d.create(&pod, sh("twin", &image, "true")).await.unwrap();
    let containers_dir = d.root.join("containers");
    assert_eq!(
        std::fs::read_dir(&containers_dir).unwrap().count(),
        1,
        "only the new container has a record"
    );
    let _ = again;
    d.remove_pod(&pod).await;
    assert!(d.leftovers().is_empty(), "{:#?}", d.leftovers());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_pods_eight_at_a_time() {
    let mut d = TestDaemon::start("twenty").await;
    let images = Images::start();
    let image = images.push("busybox:twenty", &busybox());
    d.pull(&image).await;
    let sem = std::sync::Arc::new(tokio::sync::Semaphore::new(8));
    let mut tasks = Vec::new();
    for i in 0..20 {
        let mut cri_client = d.cri.clone();
        let sem = sem.clone();
        let image = image.clone();
        let parent = d.cgroup_parent.clone();
        let logs = d.dir.join("logs");
        tasks.push(tokio::spawn(async move {
            let _permit = sem.acquire().await.unwrap();
            let name = format!("p{i}");
            run_pod_with_app(&mut cri_client, &name, &parent, &logs, &image, "sleep 300").await
        }));
    }
    let mut started = Vec::new();
    for t in tasks {
        started.push(
            t.await
                .unwrap()
                .unwrap_or_else(|e| panic!("{e}\n{}", d.log())),
        );
    }
    let mut ips = std::collections::HashSet::new();
    for (pod, cid) in &started {
        assert_eq!(
            d.container_status(cid).await.state,
            cri::ContainerState::ContainerRunning as i32
        );
        let st = d
            .cri
            .runtime
            .pod_sandbox_status(cri::PodSandboxStatusRequest {
                pod_sandbox_id: pod.clone(),
                verbose: false,
            })
            .await
            .unwrap()
            .into_inner();
        ips.insert(st.status.unwrap().network.unwrap().ip);
    }
    assert_eq!(ips.len(), 20, "distinct IPs: {ips:?}");
    assert_eq!(host::bridge_ports(&d.bridge).len(), 20);
    for (pod, _) in &started {
        d.remove_pod(&e2e::pods::Pod {
            id: pod.clone(),
            config: Default::default(),
        })
        .await;
    }
    assert!(d.leftovers().is_empty(), "{:#?}", d.leftovers());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_flow_and_exits_are_kept_while_the_daemon_is_down() {
    let mut d = TestDaemon::start("daemon_down").await;
    let images = Images::start();
    let image = images.push("busybox:down", &busybox());
    d.pull(&image).await;
    let pod = d.run_pod("down-pod").await;
    let ticker = d
        .run_container(
            &pod,
            sh(
                "ticker",
                &image,
                "i=0; while [ $i -lt 30 ]; do echo tick $i; i=$((i+1)); sleep 0.1; done; exit 4",
            ),
        )
        .await;
    d.wait_log(&ticker, "tick 1", WAIT).await;
    let log = d.container_status(&ticker).await.log_path;
    d.stop_daemon();
    let before = read_log(std::path::Path::new(&log)).len();
    // The container finishes (3 s of ticks) while nobody but its shim is there.
    tokio::time::sleep(Duration::from_millis(3500)).await;
    let after = read_log(std::path::Path::new(&log));
    assert!(
        after.len() > before,
        "the log did not grow without the daemon ({before} lines)"
    );
    assert!(after.iter().any(|l| l.text == "tick 29"), "{after:#?}");
    d.restart().await;
    let st = d.wait_exited(&ticker, WAIT).await;
    assert_eq!(exited(&st), (4, "Error".into()));
    assert!(st.finished_at > st.started_at);
    d.remove_pod(&pod).await;
    assert!(d.leftovers().is_empty(), "{:#?}", d.leftovers());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mounts_and_devices_as_the_cri_asks() {
    let mut d = TestDaemon::start("mounts").await;
    let images = Images::start();
    let image = images.push("busybox:mounts", &busybox());
    d.pull(&image).await;
    let pod = d.run_pod("mounts-pod").await;
    let data = d.dir.join("data");
    std::fs::create_dir_all(&data).unwrap();
    std::fs::write(data.join("file"), "through a symlink\n").unwrap();
    let link = d.dir.join("data-link");
    std::os::unix::fs::symlink(&data, &link).unwrap();
    let missing = d.dir.join("made-on-demand");
    let mount = |host: &std::path::Path, at: &str, readonly: bool| cri::Mount {
        container_path: at.into(),
        host_path: host.display().to_string(),
        readonly,
        ..Default::default()
    };
    let mut c = sh(
        "mounter",
        &image,
        "cat /link/file; touch /link/x 2>/dev/null && echo link-rw || echo link-ro; \
         touch /made/x && echo made-rw; ls -l /dev/mynull | cut -c1; echo hi > /dev/mynull && echo dev-ok",
    );
    c.mounts = vec![mount(&link, "/link", true), mount(&missing, "/made", false)];
    c.devices = vec![cri::Device {
        container_path: "/dev/mynull".into(),
        host_path: "/dev/null".into(),
        permissions: "rwm".into(),
    }];
    let id = d.run_container(&pod, c).await;
    let st = d.wait_exited(&id, WAIT).await;
    let out = stdout_text(&read_log(std::path::Path::new(&st.log_path)));
    // A symlinked host path is followed; a missing one is created (as containerd does).
    assert_eq!(
        out, "through a symlink\nlink-ro\nmade-rw\nc\ndev-ok\n",
        "{st:?}"
    );
    assert!(missing.join("x").exists());

    // Recursive read-only ("rro": kernel >= 5.12 and `runc features` lists it, as Debian's
    // runc 1.1.5 does): a mount below the host path is read-only too, where a plain
    // read-only bind leaves it writable. RuntimeStatus advertises it.
    let status = d
        .cri
        .runtime
        .status(cri::StatusRequest { verbose: false })
        .await
        .unwrap()
        .into_inner();
    assert!(status.runtime_handlers[0]
        .features
        .as_ref()
        .is_some_and(|f| f.recursive_read_only_mounts));
    let tree = d.dir.join("rro-tree");
    std::fs::create_dir_all(tree.join("sub")).unwrap();
    nix::mount::mount(
        Some("tmpfs"),
        &tree.join("sub"),
        Some("tmpfs"),
        nix::mount::MsFlags::empty(),
        None::<&str>,
    )
    .expect("mount a tmpfs below the host path");
    let mut rro = sh(
        "rro",
        &image,
        "touch /plain/sub/x && echo plain-sub-writable; touch /rro/sub/y 2>/dev/null || echo rro-sub-readonly",
    );
    let mut recursive = mount(&tree, "/rro", true);
    recursive.recursive_read_only = true;
    rro.mounts = vec![mount(&tree, "/plain", true), recursive];
    let id = d.run_container(&pod, rro).await;
    let st = d.wait_exited(&id, WAIT).await;
    let out = stdout_text(&read_log(std::path::Path::new(&st.log_path)));
    nix::mount::umount2(&tree.join("sub"), nix::mount::MntFlags::MNT_DETACH).unwrap();
    assert_eq!(out, "plain-sub-writable\nrro-sub-readonly\n", "{st:?}");
    // The CRI's own rule: recursive_read_only needs readonly.
    let mut bad = sh("rro-rw", &image, "true");
    let mut m = mount(&data, "/rro", false);
    m.recursive_read_only = true;
    bad.mounts = vec![m];
    let err = d.create(&pod, bad).await.unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "{err}");
    assert!(err.message().contains("readonly"), "{err}");
    d.remove_pod(&pod).await;
    assert!(d.leftovers().is_empty(), "{:#?}", d.leftovers());
}
