//! Whole specs: a plain container end to end, deterministic JSON, and the spec under the real runc.

use super::*;

#[test]
fn a_plain_container() {
    let f = Fixture::new();
    let s = f.json();
    assert_eq!(s["ociVersion"], OCI_VERSION);
    assert_eq!(
        s["root"],
        json!({"path": "/var/lib/peapod/containers/c1/rootfs", "readonly": false})
    );
    assert!(
        s.get("hostname").is_none(),
        "containers share the pause's UTS namespace"
    );
    let p = &s["process"];
    assert_eq!(strs(&p["args"]), vec!["sleep", "3600"]);
    assert_eq!(
        strs(&p["env"]),
        vec!["PATH=/usr/bin:/bin", "HOSTNAME=web-host", "MODE=test"]
    );
    assert_eq!(p["cwd"], "/work");
    assert_eq!(p["terminal"], false);
    assert_eq!(
        p["user"],
        json!({"uid": 1000, "gid": 1000, "additionalGids": [10, 1000]})
    );
    assert_eq!(p["noNewPrivileges"], false);
    assert_eq!(p["oomScoreAdj"], 0, "raised to the floor");
    assert!(p.get("rlimits").is_none(), "containerd sets no rlimits");
    assert!(p.get("apparmorProfile").is_none());
    assert!(p.get("selinuxLabel").is_none());
    assert!(p.get("consoleSize").is_none());
    let want_caps = sorted(DEFAULT_CAPABILITIES.iter().map(|c| c.to_string()).collect());
    for set in ["bounding", "effective", "permitted"] {
        assert_eq!(sorted(strs(&p["capabilities"][set])), want_caps, "{set}");
    }
    assert!(p["capabilities"].get("ambient").is_none());
    assert!(p["capabilities"].get("inheritable").is_none());

    let l = &s["linux"];
    assert_eq!(l["cgroupsPath"], "/kubepods/pod1/c1");
    assert_eq!(
        l["resources"],
        json!({
            "devices": [{"allow": false, "access": "rwm"}],
            "cpu": {"period": 100000, "quota": 20000, "shares": 204},
            "memory": {"limit": 33554432, "swap": 33554432},
        })
    );
    // No lists sent (crictl, critest; the kubelet's procMount: Unmasked): nothing masked.
    assert!(strs(&l["maskedPaths"]).is_empty(), "{l}");
    assert!(strs(&l["readonlyPaths"]).is_empty(), "{l}");
    assert!(
        l.get("seccomp").is_none(),
        "no profile asked: unconfined, as the CRI default"
    );
    assert!(l.get("sysctl").is_none());
    assert!(l.get("devices").is_none());
    assert!(l.get("rootfsPropagation").is_none());
    assert!(l.get("uidMappings").is_none());

    let a = &s["annotations"];
    assert_eq!(a["io.kubernetes.cri.container-type"], "container");
    assert_eq!(
        a["io.kubernetes.cri.sandbox-id"], "sb1",
        "not the forged one"
    );
    assert_eq!(a["io.kubernetes.cri.sandbox-name"], "web");
    assert_eq!(a["io.kubernetes.cri.sandbox-namespace"], "default");
    assert_eq!(a["io.kubernetes.cri.sandbox-uid"], "pod-uid-1");
    assert_eq!(a["io.kubernetes.cri.container-name"], "app");
    assert_eq!(
        a["io.kubernetes.cri.image-name"],
        "docker.io/library/busybox:1.36"
    );
    assert_eq!(a["io.kubernetes.container.hash"], "abc");
    assert!(a.get("run.oci.keep_original_groups").is_none());
}

#[test]
fn spec_json_is_deterministic() {
    let f = Fixture::new();
    let spec = f.try_spec().unwrap();
    let a = spec_json(&spec).unwrap();
    let b = spec_json(&f.try_spec().unwrap()).unwrap();
    assert_eq!(a, b);
    let v: Value = serde_json::from_slice(&a).unwrap();
    let caps = strs(&v["process"]["capabilities"]["bounding"]);
    assert_eq!(caps, sorted(caps.clone()));
}

/// Runs a generated spec under the real runc: `busybox true` in a bundle whose rootfs holds
/// only /bin/busybox, with a new network namespace instead of a pod's. Needs root, runc and
/// Debian's busybox-static at /bin/busybox:
/// `cargo test -p peapod-spec -- --ignored runc_accepts`.
#[test]
#[ignore = "needs root and runc; scripts/test runs it"]
fn runc_accepts_the_generated_spec() {
    use std::process::Command;
    let busybox = Path::new("/bin/busybox");
    if !busybox.exists() || Command::new("runc").arg("--version").output().is_err() {
        eprintln!("skipped: needs runc and /bin/busybox");
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let bundle = work.path().join("bundle");
    let rootfs = bundle.join("rootfs");
    for d in ["bin", "etc", "proc", "sys", "dev", "tmp"] {
        std::fs::create_dir_all(rootfs.join(d)).unwrap();
    }
    std::fs::copy(busybox, rootfs.join("bin/busybox")).unwrap();
    std::os::unix::fs::symlink("busybox", rootfs.join("bin/sh")).unwrap();
    std::fs::write(rootfs.join("etc/passwd"), "root:x:0:0:root:/root:/bin/sh\n").unwrap();
    let sandbox_dir = work.path().join("sandbox");
    std::fs::create_dir_all(&sandbox_dir).unwrap();
    std::fs::write(sandbox_dir.join("hostname"), "peapod-test\n").unwrap();
    std::fs::write(sandbox_dir.join("hosts"), "127.0.0.1 localhost\n").unwrap();
    std::fs::write(sandbox_dir.join("resolv.conf"), "nameserver 127.0.0.1\n").unwrap();
    let data = work.path().join("data");

    let host = HostFacts::detect(false);
    // A CDI device with one edit of each kind, its hook leaving the container's state behind.
    let hook_out = work.path().join("hook-state.json");
    let cdi_spec = json!({
        "cdiVersion": "0.7.0",
        "kind": "peapod.test/dev",
        "devices": [{"name": "all", "containerEdits": {
            "env": ["CDI_X=1"],
            "deviceNodes": [{"path": "/dev/cdi-null", "hostPath": "/dev/null"}],
            "mounts": [{"hostPath": sandbox_dir, "containerPath": "/cdi", "options": ["rbind", "ro"]}],
            "hooks": [{"hookName": "createRuntime", "path": "/bin/sh",
                       "args": ["sh", "-c", format!("cat > {}", hook_out.display())]}],
            "additionalGids": [4242],
        }}],
    });
    let cdi = CdiRegistry::new(
        vec![crate::cdi::CdiSpec::parse(
            Path::new("/etc/cdi/peapod-test.json"),
            0,
            cdi_spec.to_string().as_bytes(),
        )
        .unwrap()],
        Vec::new(),
    );
    let run_as =
        |name: &str, config: ContainerConfig, user: ResolvedUser| -> std::process::Output {
            // A privileged container needs a privileged pod.
            let privileged = config
                .linux
                .as_ref()
                .and_then(|l| l.security_context.as_ref())
                .is_some_and(|s| s.privileged);
            let sandbox = PodSandboxConfig {
                linux: Some(LinuxPodSandboxConfig {
                    security_context: Some(LinuxSandboxSecurityContext {
                        privileged,
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            };
            let image = ImageConfig::default();
            let spec = container_spec(&ContainerInputs {
                id: name,
                config: &config,
                sandbox: SandboxRef {
                    id: "sb-test",
                    config: &sandbox,
                    pause_pid: std::process::id(),
                    netns: None,
                    dir: &sandbox_dir,
                    shm: None,
                },
                image: &image,
                user: &user,
                rootfs: &rootfs,
                cgroups_path: "",
                target_pid: None,
                host: &host,
                paths: &RealHost,
                cdi: &cdi,
            })
            .unwrap();
            // No pod here: new network, IPC, UTS and PID namespaces instead of the pause's.
            let mut v: Value = serde_json::from_slice(&spec_json(&spec).unwrap()).unwrap();
            for n in v["linux"]["namespaces"].as_array_mut().unwrap() {
                if ["network", "ipc", "uts", "pid"].contains(&n["type"].as_str().unwrap()) {
                    n.as_object_mut().unwrap().remove("path");
                }
            }
            std::fs::write(
                bundle.join("config.json"),
                serde_json::to_vec_pretty(&v).unwrap(),
            )
            .unwrap();
            let root = work.path().join("runc");
            let out = Command::new("runc")
                .arg("--root")
                .arg(&root)
                .args(["run", "-b"])
                .arg(&bundle)
                .arg(name)
                .stdin(std::process::Stdio::null())
                .output()
                .unwrap();
            let _ = Command::new("runc")
                .arg("--root")
                .arg(&root)
                .args(["delete", "-f", name])
                .output();
            out
        };
    let run = |name: &str, config: ContainerConfig| run_as(name, config, ResolvedUser::default());
    let show = |o: &std::process::Output| {
        format!(
            "status {:?}\nstdout: {}\nstderr: {}",
            o.status,
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        )
    };

    let base = || ContainerConfig {
        command: vec!["/bin/busybox".into()],
        args: vec!["true".into()],
        linux: Some(LinuxContainerConfig {
            resources: Some(LinuxContainerResources {
                memory_limit_in_bytes: 64 << 20,
                cpu_shares: 256,
                oom_score_adj: 100,
                ..Default::default()
            }),
            security_context: Some(LinuxContainerSecurityContext {
                seccomp: Some(SecurityProfile {
                    profile_type: ProfileType::RuntimeDefault as i32,
                    localhost_ref: String::new(),
                }),
                namespace_options: Some(NamespaceOption {
                    pid: NamespaceMode::Container as i32,
                    ..Default::default()
                }),
                ..Default::default()
            }),
        }),
        mounts: vec![Mount {
            container_path: "/data".into(),
            host_path: data.display().to_string(),
            readonly: true,
            ..Default::default()
        }],
        ..Default::default()
    };
    let out = run("peapod-spec-true", base());
    assert!(out.status.success(), "{}", show(&out));

    // unshare(2) without CAP_SYS_ADMIN fails.
    let mut blocked = base();
    blocked.args = vec!["unshare".into(), "-m".into(), "true".into()];
    let out = run("peapod-spec-unshare", blocked);
    assert!(!out.status.success(), "{}", show(&out));

    // Seccomp itself, not a missing capability: with CAP_SYS_ADMIN granted, swapoff(2) is
    // still outside the default profile (EPERM), while unconfined it reaches the kernel
    // (which refuses a directory as a swap area with another error).
    let swapoff = |seccomp: ProfileType| {
        let mut c = base();
        c.args = vec!["swapoff".into(), "/data".into()];
        let sc = c.linux.as_mut().unwrap().security_context.as_mut().unwrap();
        sc.capabilities = Some(Capability {
            add_capabilities: vec!["SYS_ADMIN".into()],
            ..Default::default()
        });
        sc.seccomp.as_mut().unwrap().profile_type = seccomp as i32;
        c
    };
    let out = run("peapod-spec-swapoff", swapoff(ProfileType::RuntimeDefault));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("Operation not permitted"),
        "{}",
        show(&out)
    );
    let out = run("peapod-spec-swapoff2", swapoff(ProfileType::Unconfined));
    assert!(
        !String::from_utf8_lossy(&out.stderr).contains("Operation not permitted"),
        "{}",
        show(&out)
    );

    // What the container sees: its hostname file, a read-only /data, masked kcore, root.
    let mut look = base();
    look.args = vec![
        "sh".into(),
        "-c".into(),
        "cat /etc/hostname; touch /data/x 2>/dev/null || echo ro; \
         test -s /proc/kcore || echo masked; id -u"
            .into(),
    ];
    let out = run("peapod-spec-look", look);
    assert!(out.status.success(), "{}", show(&out));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "peapod-test\nro\nmasked\n0\n"
    );

    // Another user with supplementary groups, under the default seccomp profile.
    let mut user = base();
    user.args = vec!["sh".into(), "-c".into(), "id -u; id -g; id -G".into()];
    user.linux
        .as_mut()
        .unwrap()
        .security_context
        .as_mut()
        .unwrap()
        .supplemental_groups = vec![3000];
    let out = run_as(
        "peapod-spec-user",
        user,
        ResolvedUser {
            uid: 1000,
            gid: 1001,
            additional_gids: vec![44],
        },
    );
    assert!(out.status.success(), "{}", show(&out));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "1000\n1001\n1001 44 3000\n"
    );

    // A CDI device: its env, a node made from the host's /dev/null, a read-only mount, a
    // hook that ran in the runtime's namespace, a group.
    let mut with_cdi = base();
    with_cdi.cdi_devices = vec![peapod_proto::v1::CdiDevice {
        name: "peapod.test/dev=all".into(),
    }];
    with_cdi.args = vec![
        "sh".into(),
        "-c".into(),
        "echo $CDI_X; test -c /dev/cdi-null && echo x > /dev/cdi-null && echo node; \
         test -s /cdi/hostname && ! touch /cdi/x 2>/dev/null && echo ro-mount; id -G"
            .into(),
    ];
    let out = run("peapod-spec-cdi", with_cdi);
    assert!(out.status.success(), "{}", show(&out));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "1\nnode\nro-mount\n0 4242\n"
    );
    let state = std::fs::read_to_string(&hook_out).expect("the hook ran");
    assert!(state.contains("\"peapod-spec-cdi\""), "{state}");

    // Privileged: every capability of the daemon's bounding set, the host's devices,
    // a writable /sys.
    let mut privileged = base();
    privileged.args = vec![
        "sh".into(),
        "-c".into(),
        "test -c /dev/null && test -e /dev/kmsg && grep CapEff /proc/self/status; \
         grep -q ' /sys sysfs rw' /proc/mounts && echo sys-rw"
            .into(),
    ];
    let sc = privileged
        .linux
        .as_mut()
        .unwrap()
        .security_context
        .as_mut()
        .unwrap();
    sc.privileged = true;
    let out = run("peapod-spec-privileged", privileged);
    assert!(out.status.success(), "{}", show(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let eff = stdout
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .map(|m| u64::from_str_radix(m.trim(), 16).unwrap())
        .unwrap();
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let own = status
        .lines()
        .find_map(|l| l.strip_prefix("CapBnd:"))
        .map(|m| u64::from_str_radix(m.trim(), 16).unwrap())
        .unwrap();
    assert_eq!(eff, own, "{}", show(&out));
    assert!(stdout.contains("sys-rw"), "{}", show(&out));
    assert!(
        data.is_dir(),
        "a missing host path is created, as containerd does"
    );

    // mount_options: the program on a noexec bind does not run; on the same bind without
    // the option it does.
    std::fs::copy(busybox, data.join("busybox")).unwrap();
    let exec_from_data = |options: &[&str]| {
        let mut c = base();
        c.args = vec!["sh".into(), "-c".into(), "/data/busybox true".into()];
        c.mounts[0].mount_options = options.iter().map(|s| s.to_string()).collect();
        c
    };
    let out = run("peapod-spec-exec", exec_from_data(&[]));
    assert!(out.status.success(), "{}", show(&out));
    let out = run(
        "peapod-spec-noexec",
        exec_from_data(&["noexec", "nosuid", "nodev"]),
    );
    assert!(!out.status.success(), "{}", show(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("Permission denied"),
        "{}",
        show(&out)
    );
}
