//! The Debian package (`scripts/package`). Here, what it holds, from dpkg-deb's own account:
//! the three binaries, the unit (KillMode=process, Delegate=yes, Type=notify), the
//! configuration as a conffile, the crictl example, the maintainer scripts. On a host whose
//! init is systemd (the Debian guest: `scripts/vm test`, which packages target/debug before it
//! boots; `#[ignore]`d here, and failing, not skipping, elsewhere), installed by dpkg and run
//! by systemd: `systemctl enable --now peapod`, a pod through crictl with the packaged crictl
//! configuration, `systemctl restart peapod` changing nothing for it (the same shim, pause and
//! container processes, its log still written, exec still answered), no unit, cgroup or shim
//! left once it is removed, `dpkg -r` keeping /var/lib/peapod and `dpkg -P` removing it.

use e2e::daemon::bin_dir;
use e2e::pods::{busybox, Images};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace")
        .to_path_buf()
}

/// Runs `program args`; its stdout, or a panic with what it said.
fn run(program: impl AsRef<std::ffi::OsStr>, args: &[&str]) -> String {
    let program = program.as_ref();
    let out = Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{program:?}: {e}"));
    assert!(out.status.success(), "{program:?} {args:?}: {}", said(&out));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn said(out: &Output) -> String {
    format!(
        "{}\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

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

const UNIT: &str = "peapod.service";
const ROOT: &str = "/var/lib/peapod";
const CRICTL_CONFIG: &str = "/usr/share/doc/peapod/examples/crictl.yaml";
const LOGS: &str = "/var/log/pods/default_pkg-pod_pkg-pod-uid";

/// `systemctl show -p PROP --value peapod.service`.
fn unit_property(prop: &str) -> String {
    run("systemctl", &["show", "-p", prop, "--value", UNIT])
        .trim()
        .to_string()
}

fn journal() -> String {
    let out = Command::new("journalctl")
        .args(["-u", UNIT, "--no-pager", "-n", "80"])
        .output();
    out.map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default()
}

/// The processes in the unit's cgroup (the daemon and, with KillMode=process, the shims).
fn unit_processes() -> Vec<u32> {
    let cgroup = unit_property("ControlGroup");
    std::fs::read_to_string(format!("/sys/fs/cgroup{cgroup}/cgroup.procs"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.parse().ok())
        .collect()
}

fn package_status() -> String {
    Command::new("dpkg-query")
        .args(["-W", "-f", "${Status}", "peapod"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default()
}

/// Polls `done` every 200 ms for at most `limit` (scaled), then fails with `what`.
fn wait_until(limit: Duration, what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + e2e::scaled(limit);
    while !done() {
        assert!(
            Instant::now() < deadline,
            "{what}: not within {limit:?}\n{}",
            journal()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// crictl with the package's example configuration, as an operator would run it.
struct Crictl {
    bin: PathBuf,
    timeout: String,
}

impl Crictl {
    /// The crictl `k8s/build.sh` built (shared into the guest read-only).
    fn find() -> Crictl {
        let dir = run(repo().join("k8s/build.sh"), &["--print"]);
        Crictl {
            bin: PathBuf::from(dir.trim()).join("crictl"),
            timeout: format!("{}s", e2e::scaled(Duration::from_secs(20)).as_secs()),
        }
    }

    fn try_run(&self, args: &[&str]) -> Output {
        Command::new(&self.bin)
            .args(["--config", CRICTL_CONFIG, "--timeout", &self.timeout])
            .args(args)
            .output()
            .expect("crictl")
    }

    fn run(&self, args: &[&str]) -> String {
        let out = self.try_run(args);
        assert!(
            out.status.success(),
            "crictl {args:?}: {}\n{}",
            said(&out),
            journal()
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    fn json(&self, args: &[&str]) -> serde_json::Value {
        let text = self.run(args);
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("crictl {args:?}: {e}: {text}"))
    }

    fn pid(&self, verb: &str, id: &str) -> u32 {
        let v = self.json(&[verb, id]);
        v["info"]["pid"]
            .as_u64()
            .unwrap_or_else(|| panic!("no pid in crictl {verb}: {v}")) as u32
    }
}

/// Whatever the test ends with, the guest is left without the package, its data, the pod's
/// logs and the built-in network's bridge, for the tests that run after it.
struct Uninstall<'a>(&'a Crictl);

impl Drop for Uninstall<'_> {
    fn drop(&mut self) {
        // (Nothing here may panic: it runs while a failed assertion unwinds.)
        if package_status() == "install ok installed" {
            let _ = self.0.try_run(&["rmp", "-fa"]);
        }
        let _ = Command::new("dpkg").args(["-P", "peapod"]).output();
        let _ = Command::new("ip").args(["link", "del", "peapod0"]).output();
        let _ = std::fs::remove_dir_all(LOGS);
        let _ = std::fs::remove_dir_all(ROOT);
    }
}

fn write_json(path: &Path, value: serde_json::Value) {
    std::fs::write(path, serde_json::to_vec_pretty(&value).unwrap()).unwrap();
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
    let deb = match std::env::var("PEAPOD_E2E_DEB") {
        Ok(path) => PathBuf::from(path),
        Err(_) => panic!("PEAPOD_E2E_DEB: the package to install (scripts/vm test makes it)"),
    };
    assert!(deb.is_file(), "{}", deb.display());
    let crictl = Crictl::find();
    let images = Images::start();
    let image = images.push("busybox:pkg", &busybox());
    let tmp = tempfile::tempdir().unwrap();
    let _uninstall = Uninstall(&crictl);
    let started = Instant::now();

    // Installed: systemd knows the unit, which is neither enabled nor started.
    run("dpkg", &["-i", deb.to_str().unwrap()]);
    assert_eq!(package_status(), "install ok installed");
    assert_eq!(unit_property("LoadState"), "loaded");
    assert_eq!(unit_property("UnitFileState"), "disabled");
    assert_eq!(unit_property("ActiveState"), "inactive");
    for (prop, value) in [
        ("Type", "notify"),
        ("KillMode", "process"),
        ("Delegate", "yes"),
        ("Restart", "on-failure"),
    ] {
        assert_eq!(unit_property(prop), value, "{prop}");
    }

    // Started: with Type=notify, `systemctl start` returns once the socket answers.
    run("systemctl", &["enable", "--now", UNIT]);
    assert_eq!(unit_property("ActiveState"), "active", "{}", journal());
    assert!(Path::new("/run/peapod/peapod.sock").exists());
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

    // A pod through crictl: pull, runp, create, start.
    crictl.run(&["pull", &image]);
    let pod_json = tmp.path().join("pod.json");
    write_json(
        &pod_json,
        serde_json::json!({
            "metadata": {"name": "pkg-pod", "namespace": "default", "uid": "pkg-pod-uid"},
            "hostname": "pkg-pod",
            "log_directory": LOGS,
            "linux": {}
        }),
    );
    let ctr_json = tmp.path().join("ctr.json");
    write_json(
        &ctr_json,
        serde_json::json!({
            "metadata": {"name": "app"},
            "image": {"image": image},
            "command": ["sh", "-c", "i=0; while :; do i=$((i+1)); echo line-$i; sleep 1; done"],
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
    let app_pid = crictl.pid("inspect", &ctr);
    let pause_pid = crictl.pid("inspectp", &pod);
    let log_lines = || {
        std::fs::read_to_string(format!("{LOGS}/app/0.log"))
            .unwrap_or_default()
            .lines()
            .count()
    };
    wait_until(Duration::from_secs(30), "the container logs", || {
        log_lines() >= 2
    });
    assert_eq!(
        crictl.run(&["exec", "-s", &ctr, "echo", "synced"]),
        "synced"
    );

    // What the restart must leave alone: the shims (in the unit's cgroup beside the
    // daemon), the pause and the container.
    let daemon = unit_property("MainPID");
    let shims: Vec<u32> = unit_processes()
        .into_iter()
        .filter(|p| p.to_string() != daemon)
        .collect();
    assert!(!shims.is_empty(), "no shim in the unit's cgroup");
    run("systemctl", &["restart", UNIT]);
    assert_eq!(unit_property("ActiveState"), "active", "{}", journal());
    assert_ne!(
        unit_property("MainPID"),
        daemon,
        "the daemon did not restart"
    );
    let after = unit_processes();
    for shim in &shims {
        assert!(after.contains(shim), "shim {shim} gone: {after:?}");
    }
    assert_eq!(crictl.pid("inspect", &ctr), app_pid);
    assert_eq!(crictl.pid("inspectp", &pod), pause_pid);
    let status = crictl.json(&["inspect", &ctr]);
    assert_eq!(status["status"]["state"], "CONTAINER_RUNNING", "{status}");
    let pod_status = crictl.json(&["inspectp", &pod]);
    assert_eq!(
        pod_status["status"]["state"], "SANDBOX_READY",
        "{pod_status}"
    );
    // The new daemon answers for the pod: exec through its streaming server and ExecSync,
    // and the shim still writes the container's log, which crictl reads.
    assert_eq!(crictl.run(&["exec", &ctr, "echo", "streamed"]), "streamed");
    assert_eq!(
        crictl.run(&["exec", "-s", &ctr, "echo", "synced"]),
        "synced"
    );
    let seen = log_lines();
    wait_until(
        Duration::from_secs(30),
        "more log after the restart",
        || log_lines() >= seen + 2,
    );
    assert!(crictl.run(&["logs", &ctr]).contains("line-1"));
    assert_eq!(unit_property("NRestarts"), "0");

    // Removed: no scope, no shim, no pod left; the daemon alone in its cgroup.
    crictl.run(&["stopp", &pod]);
    crictl.run(&["rmp", &pod]);
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
    wait_until(Duration::from_secs(60), "the pod's scopes to go", || {
        scopes().trim().is_empty()
    });
    let daemon = unit_property("MainPID");
    wait_until(Duration::from_secs(60), "the shim to exit", || {
        unit_processes()
            .iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            == [daemon.clone()]
    });
    for pid in [app_pid, pause_pid].iter().chain(&shims) {
        assert!(!Path::new(&format!("/proc/{pid}")).exists(), "{pid} runs");
    }

    // dpkg -r: the daemon stopped and its unit gone, the pods' data and the configuration
    // kept.
    let cgroup = format!("/sys/fs/cgroup{}", unit_property("ControlGroup"));
    run("dpkg", &["-r", "peapod"]);
    assert_eq!(package_status(), "deinstall ok config-files");
    assert_eq!(unit_property("LoadState"), "not-found");
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
    eprintln!(
        "package: installed, a pod across a restart, removed and purged in {:.1} s",
        started.elapsed().as_secs_f64()
    );
}
