//! The Debian package (`scripts/package`). Here, what it holds, from dpkg-deb's own account:
//! the three binaries, the unit (KillMode=process, Delegate=yes, Type=notify), the
//! configuration as a conffile, the crictl example, the maintainer scripts. On a host whose
//! init is systemd (the Debian guest: `scripts/vm test`, which packages target/debug before it
//! boots; `#[ignore]`d here, and failing, not skipping, elsewhere), installed by dpkg and run
//! by systemd: `systemctl enable --now peapod`; a pod through crictl with the packaged crictl
//! configuration across `systemctl restart peapod`, then a static pod of a standalone kubelet
//! across an upgrade by dpkg (the same package again: the postinst restarts the daemon), each
//! changing nothing for the pod (the same shim, pause and container processes, no restart by
//! the kubelet, logs still written, exec still answered); no scope or shim left once they are
//! removed, `dpkg -r` keeping /var/lib/peapod and `dpkg -P` removing it.

use e2e::daemon::bin_dir;
use e2e::installed::{
    journal, log_lines, package_status, property, repo, run, said, unit_processes, wait_until,
    Client, Crictl, Kubelet, Uninstall, ROOT, SOCKET, UNIT,
};
use e2e::pods::{busybox, Images};
use peapod_proto::v1 as cri;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// `scripts/package --bin-dir <the tests' binaries> --out out`: the package's path.
fn package_into(out: &Path) -> PathBuf {
    let bins = bin_dir();
    let printed = run(
        repo().join("scripts/package"),
        &[
            "--bin-dir",
            bins.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ],
    );
    let deb = PathBuf::from(printed.lines().last().expect("the package's path").trim());
    assert!(deb.is_file(), "{}", deb.display());
    deb
}

/// A systemd unit file's keys by section (`Section.Key`), values of repeated keys joined by a
/// space as systemd joins list settings.
fn unit_keys(text: &str) -> BTreeMap<String, String> {
    let mut keys = BTreeMap::new();
    let mut section = String::new();
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if let Some(s) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            section = s.to_string();
        } else if let Some((k, v)) = line.split_once('=') {
            let entry: &mut String = keys.entry(format!("{section}.{k}")).or_default();
            if !entry.is_empty() {
                entry.push(' ');
            }
            entry.push_str(v);
        }
    }
    keys
}

#[test]
fn the_package_holds_the_binaries_the_unit_the_config_and_the_examples() {
    let tmp = tempfile::tempdir().unwrap();
    let deb = package_into(tmp.path());
    let deb_s = deb.to_str().unwrap();
    let version = run(bin_dir().join("peapod"), &["--version"]);
    let version = version.split_whitespace().nth(1).expect("peapod VERSION");
    assert_eq!(
        deb.file_name().unwrap().to_string_lossy(),
        format!("peapod_{version}_amd64.deb")
    );

    // Every file, with its mode and owner: exactly these.
    let listing = run("dpkg-deb", &["-c", deb_s]);
    let files: BTreeMap<String, String> = listing
        .lines()
        .filter(|l| l.starts_with('-'))
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let path = f.last().unwrap().trim_start_matches('.').to_string();
            (path, format!("{} {}", f[0], f[1]))
        })
        .collect();
    let exe = "-rwxr-xr-x root/root";
    let file = "-rw-r--r-- root/root";
    let expected: BTreeMap<String, String> = [
        ("/usr/bin/peapod", exe),
        ("/usr/bin/peapod-shim", exe),
        ("/usr/bin/containerd-shim-peapod-v2", exe),
        ("/lib/systemd/system/peapod.service", file),
        ("/etc/peapod/config.toml", file),
        ("/usr/share/doc/peapod/examples/crictl.yaml", file),
        ("/usr/share/doc/peapod/README.md", file),
        ("/usr/share/doc/peapod/copyright", file),
    ]
    .into_iter()
    .map(|(p, m)| (p.to_string(), m.to_string()))
    .collect();
    assert_eq!(files, expected, "{listing}");

    let field = |name: &str| run("dpkg-deb", &["-f", deb_s, name]).trim().to_string();
    assert_eq!(field("Package"), "peapod");
    assert_eq!(field("Version"), version);
    assert_eq!(field("Architecture"), "amd64");
    let depends = field("Depends");
    for dep in [
        "libc6 (>= 2.",
        "runc",
        "containernetworking-plugins",
        "iptables",
    ] {
        assert!(depends.contains(dep), "Depends: {depends}");
    }
    assert_eq!(
        run("dpkg-deb", &["--info", deb_s, "conffiles"]),
        "/etc/peapod/config.toml\n"
    );

    let root = tmp.path().join("root");
    run("dpkg-deb", &["-x", deb_s, root.to_str().unwrap()]);
    // The binaries are the ones given, unchanged.
    for b in ["peapod", "peapod-shim", "containerd-shim-peapod-v2"] {
        assert!(
            std::fs::read(root.join("usr/bin").join(b)).unwrap()
                == std::fs::read(bin_dir().join(b)).unwrap(),
            "{b} differs from {}",
            bin_dir().display()
        );
    }

    // The unit: only the daemon is stopped, the shims and containers stay (KillMode=process),
    // the runtime may make cgroups below its own (Delegate), systemd waits for READY=1.
    let unit = std::fs::read_to_string(root.join("lib/systemd/system/peapod.service")).unwrap();
    let keys = unit_keys(&unit);
    for (key, value) in [
        ("Service.Type", "notify"),
        ("Service.KillMode", "process"),
        ("Service.Delegate", "yes"),
        ("Service.Restart", "on-failure"),
        ("Service.LimitNOFILE", "1048576"),
        ("Service.TasksMax", "infinity"),
        (
            "Service.ExecStart",
            "/usr/bin/peapod serve --config /etc/peapod/config.toml",
        ),
        ("Install.WantedBy", "multi-user.target"),
    ] {
        assert_eq!(keys.get(key).map(String::as_str), Some(value), "{key}");
    }
    for (key, unit) in [
        ("Unit.After", "network-online.target"),
        ("Unit.Wants", "network-online.target"),
    ] {
        assert!(
            keys.get(key)
                .is_some_and(|v| v.split(' ').any(|u| u == unit)),
            "{key} has no {unit}: {keys:?}"
        );
    }

    // The configuration: the portable default, which leaves the cgroup driver to the host
    // the daemon runs on (systemd where systemd is PID 1).
    let config = std::fs::read_to_string(root.join("etc/peapod/config.toml")).unwrap();
    assert_eq!(
        config,
        run(
            bin_dir().join("peapod"),
            &["config", "default", "--portable"]
        )
    );
    assert!(!config.lines().any(|l| l.starts_with("driver")), "{config}");
    assert_eq!(
        peapod_daemon::config::Config::parse(&config).unwrap(),
        peapod_daemon::config::Config::default()
    );
    let crictl =
        std::fs::read_to_string(root.join("usr/share/doc/peapod/examples/crictl.yaml")).unwrap();
    assert!(
        crictl.contains("runtime-endpoint: unix:///run/peapod/peapod.sock"),
        "{crictl}"
    );

    // The maintainer scripts: there, executable, valid sh.
    let control = tmp.path().join("control");
    run("dpkg-deb", &["-e", deb_s, control.to_str().unwrap()]);
    for s in ["postinst", "prerm", "postrm"] {
        let path = control.join(s);
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o755, "{s}");
        run("sh", &["-n", path.to_str().unwrap()]);
    }
}

#[test]
fn packaging_without_the_binaries_or_with_a_bad_argument_says_why() {
    let tmp = tempfile::tempdir().unwrap();
    let script = repo().join("scripts/package");
    let out = Command::new(&script)
        .args(["--bin-dir", tmp.path().to_str().unwrap()])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("peapod missing"), "{}", said(&out));
    assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 0);

    let out = Command::new(&script).arg("--bogus").output().unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("unknown argument --bogus"),
        "{}",
        said(&out)
    );
}

// --- installed, on a host whose init is systemd (the guest) ---

/// The crictl pod's log directory.
const POD_LOGS: &str = "/var/log/pods/default_pkg-pod_pkg-pod-uid";
/// The kubelet's static pod (its sandbox is named `<this>-<node>`).
const STATIC_POD: &str = "pkg-kubelet";
/// What both pods' containers run: a line a second, to their CRI log.
const LINES: &str = "i=0; while :; do i=$((i+1)); echo line-$i; sleep 1; done";
const WAIT: Duration = Duration::from_secs(60);

fn write_json(path: &Path, value: &serde_json::Value) {
    std::fs::write(path, serde_json::to_vec_pretty(value).unwrap()).unwrap();
}

/// Runs a pod with one container through crictl (pull, runp, create, start): their ids.
fn crictl_pod(crictl: &Crictl, image: &str, dir: &Path) -> (String, String) {
    crictl.run(&["pull", image]);
    let pod_json = dir.join("pod.json");
    write_json(
        &pod_json,
        &serde_json::json!({
            "metadata": {"name": "pkg-pod", "namespace": "default", "uid": "pkg-pod-uid"},
            "hostname": "pkg-pod",
            "log_directory": POD_LOGS,
            "linux": {}
        }),
    );
    let ctr_json = dir.join("ctr.json");
    write_json(
        &ctr_json,
        &serde_json::json!({
            "metadata": {"name": "app"},
            "image": {"image": image},
            "command": ["sh", "-c", LINES],
            "log_path": "app/0.log",
            "linux": {}
        }),
    );
    let pod = crictl.run(&["runp", pod_json.to_str().unwrap()]);
    let ctr = crictl.run(&[
        "create",
        &pod,
        ctr_json.to_str().unwrap(),
        pod_json.to_str().unwrap(),
    ]);
    crictl.run(&["start", &ctr]);
    (pod, ctr)
}

/// The static pod's manifest (JSON, which the kubelet reads as YAML): the image crictl
/// pulled, so the kubelet pulls nothing.
fn static_pod(image: &str) -> String {
    serde_json::to_string_pretty(&serde_json::json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": STATIC_POD, "namespace": "default"},
        "spec": {
            "terminationGracePeriodSeconds": 1,
            "containers": [{
                "name": "app",
                "image": image,
                "imagePullPolicy": "IfNotPresent",
                "command": ["sh", "-c", LINES]
            }]
        }
    }))
    .unwrap()
}

/// `restart` (`systemctl restart peapod`, or an upgrade through dpkg) with `pods` (pod and
/// container ids) running: the daemon is a new process; the shims, pauses and containers are
/// the ones they were (same pids, same attempt, still running). Returns a client of the new
/// daemon.
fn restart_changes_nothing_for(
    mut client: Client,
    pods: &[(&str, &str)],
    restart: impl FnOnce(),
) -> Client {
    let before: Vec<_> = pods
        .iter()
        .map(|(p, c)| (client.pod(p), client.container(c)))
        .collect();
    let daemon = property(UNIT, "MainPID");
    let shims: Vec<u32> = unit_processes()
        .into_iter()
        .filter(|p| p.to_string() != daemon)
        .collect();
    assert_eq!(
        shims.len(),
        pods.len(),
        "a shim per pod in the unit's cgroup"
    );
    // Not connected across the restart: a connection nobody polls never answers the old
    // daemon's GOAWAY, which would hold its stop for the whole shutdown grace.
    drop(client);
    restart();
    assert_eq!(property(UNIT, "ActiveState"), "active", "{}", journal());
    assert_ne!(
        property(UNIT, "MainPID"),
        daemon,
        "the daemon did not restart"
    );
    let after = unit_processes();
    for shim in &shims {
        assert!(after.contains(shim), "shim {shim} gone: {after:?}");
    }
    let mut client = Client::connect();
    for ((p, c), (pod_seen, ctr_seen)) in pods.iter().zip(before) {
        assert_eq!(client.pod(p), pod_seen, "pod {p}");
        assert_eq!(client.container(c), ctr_seen, "container {c}");
    }
    client
}

/// Waits for `lines` more lines in a CRI log file: the shim still writes it.
fn log_grows(path: &str, lines: usize) {
    let seen = log_lines(path);
    wait_until(WAIT, "more lines in the container's log", || {
        log_lines(path) >= seen + lines
    });
}

#[test]
#[ignore = "needs systemd as PID 1 and changes the host (dpkg -i): runs in the guest (scripts/vm test)"]
fn installed_by_dpkg_run_by_systemd_pods_outlive_a_restart_and_purge_removes_the_data() {
    assert!(
        peapod_host::systemd::booted(),
        "this test needs systemd as PID 1: it runs in the guest (scripts/vm test)"
    );
    // It installs a package and writes /var/lib/peapod: only where that was asked for.
    assert_eq!(
        std::env::var("PEAPOD_E2E_SYSTEM_WIDE").as_deref(),
        Ok("1"),
        "this test installs peapod on the host it runs on: set PEAPOD_E2E_SYSTEM_WIDE=1 (scripts/vm does, in the guest)"
    );
    assert_eq!(package_status(), "", "peapod is installed here already");
    assert!(!Path::new(ROOT).exists(), "{ROOT} exists already");
    let deb = PathBuf::from(
        std::env::var("PEAPOD_E2E_DEB")
            .expect("PEAPOD_E2E_DEB: the package to install (scripts/vm test makes it)"),
    );
    assert!(deb.is_file(), "{}", deb.display());
    let crictl = Crictl::find();
    let images = Images::start();
    let image = images.push("busybox:pkg", &busybox());
    let tmp = tempfile::tempdir().unwrap();
    let _uninstall = Uninstall {
        crictl: &crictl,
        logs: vec![POD_LOGS.into()],
        kubelet_pods: STATIC_POD,
    };
    let started = Instant::now();
    // Each phase's time, printed as it ends (the guest's share of CI is kept small).
    let mut lap = {
        let mut last = Instant::now();
        move |what: &str| {
            eprintln!("package: {what}: {:.1} s", last.elapsed().as_secs_f64());
            last = Instant::now();
        }
    };

    // Installed: systemd knows the unit, which is neither enabled nor started.
    run("dpkg", &["-i", deb.to_str().unwrap()]);
    assert_eq!(package_status(), "install ok installed");
    assert_eq!(property(UNIT, "LoadState"), "loaded");
    assert_eq!(property(UNIT, "UnitFileState"), "disabled");
    assert_eq!(property(UNIT, "ActiveState"), "inactive");
    for (prop, value) in [
        ("Type", "notify"),
        ("KillMode", "process"),
        ("Delegate", "yes"),
        ("Restart", "on-failure"),
    ] {
        assert_eq!(property(UNIT, prop), value, "{prop}");
    }
    lap("dpkg -i");

    // Started: with Type=notify, `systemctl start` returns once the socket answers.
    run("systemctl", &["enable", "--now", UNIT]);
    assert_eq!(property(UNIT, "ActiveState"), "active", "{}", journal());
    assert!(Path::new(SOCKET).exists());
    // RuntimeReady and NetworkReady (the built-in network: the guest has no CNI config).
    let info = crictl.json(&["info"]);
    let conditions = info["status"]["conditions"].as_array().expect("conditions");
    assert_eq!(conditions.len(), 2, "{info}");
    for c in conditions {
        assert_eq!(c["status"], serde_json::Value::Bool(true), "{info}");
    }
    // The packaged configuration leaves the cgroup driver to the host: systemd here.
    let config = run("/usr/bin/peapod", &["config", "show"]);
    assert!(config.contains("driver = \"systemd\""), "{config}");
    lap("systemctl enable --now, crictl info");

    // A pod through crictl, across a restart.
    let (pod, ctr) = crictl_pod(&crictl, &image, tmp.path());
    let mut client = Client::connect();
    let app = client.container(&ctr);
    assert_eq!(app.state, cri::ContainerState::ContainerRunning as i32);
    assert_eq!(
        client.pod(&pod).0,
        cri::PodSandboxState::SandboxReady as i32
    );
    wait_until(WAIT, "the crictl pod's log", || {
        log_lines(&app.log_path) >= 2
    });
    assert_eq!(
        crictl.run(&["exec", "-s", &ctr, "echo", "synced"]),
        "synced"
    );
    lap("crictl pull, runp, create, start, exec");
    let client = restart_changes_nothing_for(client, &[(&pod, &ctr)], || {
        run("systemctl", &["restart", UNIT]);
    });
    lap("systemctl restart");
    // The new daemon answers for the pod: exec through its streaming server, and the shim
    // still writes the container's log, which crictl reads.
    assert_eq!(crictl.run(&["exec", &ctr, "echo", "streamed"]), "streamed");
    log_grows(&app.log_path, 2);
    assert!(crictl.run(&["logs", &ctr]).contains("line-1"));
    // Removed before the kubelet starts: it kills the pods it did not make.
    crictl.run(&["rmp", "--force", &pod]);
    lap("the crictl pod checked after the restart, removed");

    // A kubelet's static pod, across an upgrade (the same package again: the prerm leaves
    // the daemon running, the postinst restarts it on the new binaries) with the kubelet
    // polling throughout.
    let kubelet = Kubelet::start(&tmp.path().join("kubelet"), &static_pod(&image));
    let mut client = client;
    let mut found = None;
    wait_until(WAIT * 2, "the kubelet's static pod to run", || {
        found = client.ready_pod(STATIC_POD).filter(|(_, c)| c.len() == 1);
        found.is_some()
    });
    let (kpod, kctr) = found.map(|(p, c)| (p, c[0].clone())).unwrap();
    let kapp = client.container(&kctr);
    lap("kubelet started, its static pod running");
    let mut client = restart_changes_nothing_for(client, &[(&kpod, &kctr)], || {
        run("dpkg", &["-i", deb.to_str().unwrap()]);
    });
    assert_eq!(package_status(), "install ok installed");
    assert_eq!(property(UNIT, "UnitFileState"), "enabled");
    lap("upgrade (dpkg -i again) under the kubelet");
    assert_eq!(
        crictl.run(&["exec", "-s", &kctr, "echo", "synced"]),
        "synced"
    );
    log_grows(&kapp.log_path, 2);
    // The kubelet found nothing to act on: its container is the same one, not restarted,
    // not replaced; and the daemon never restarted by itself.
    assert_eq!(client.container(&kctr), kapp);
    assert_eq!(client.ready_pod(STATIC_POD), Some((kpod, vec![kctr])));
    assert_eq!(property(UNIT, "NRestarts"), "0");
    lap("the kubelet's pod checked after the upgrade");

    // Removed (the kubelet first, or it would run its static pod again): no pod, scope or
    // shim left; the daemon alone in its cgroup.
    drop(client);
    drop(kubelet);
    crictl.run(&["rmp", "--force", "--all"]);
    assert_eq!(crictl.run(&["pods", "-q"]), "");
    let scopes = || {
        run(
            "systemctl",
            &[
                "list-units",
                "--all",
                "--plain",
                "--no-legend",
                "peapod-*.scope",
            ],
        )
    };
    wait_until(WAIT, "the pods' scopes to go", || {
        scopes().trim().is_empty()
    });
    let daemon = property(UNIT, "MainPID");
    wait_until(WAIT, "the shims to exit", || {
        unit_processes()
            .iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            == [daemon.clone()]
    });
    for pid in [app.pid, kapp.pid] {
        assert!(!Path::new(&format!("/proc/{pid}")).exists(), "{pid} runs");
    }
    lap("kubelet stopped, rmp -fa, nothing left");

    // dpkg -r: the daemon stopped and its unit gone, the pods' data and the configuration
    // kept.
    let cgroup = format!("/sys/fs/cgroup{}", property(UNIT, "ControlGroup"));
    run("dpkg", &["-r", "peapod"]);
    assert_eq!(package_status(), "deinstall ok config-files");
    assert_eq!(property(UNIT, "LoadState"), "not-found");
    assert!(!Path::new("/usr/bin/peapod").exists());
    assert!(!Path::new(&cgroup).exists(), "{cgroup} is left");
    assert!(Path::new("/etc/peapod/config.toml").exists());
    let images_dir = Path::new(ROOT).join("image");
    assert!(
        std::fs::read_dir(&images_dir)
            .map(|d| d.count())
            .unwrap_or(0)
            > 0,
        "{} is empty or gone",
        images_dir.display()
    );
    lap("dpkg -r");

    // dpkg -P: the data, the configuration and the enablement gone too.
    run("dpkg", &["-P", "peapod"]);
    assert_eq!(package_status(), "");
    for gone in [
        ROOT,
        "/run/peapod",
        "/etc/peapod",
        "/etc/systemd/system/multi-user.target.wants/peapod.service",
    ] {
        assert!(!Path::new(gone).exists(), "{gone} is left");
    }
    lap("dpkg -P");
    eprintln!(
        "package: installed, pods across two restarts, removed and purged in {:.1} s",
        started.elapsed().as_secs_f64()
    );
}
