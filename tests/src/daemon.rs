//! One real `peapod serve` per test, with paths, bridge, subnet and cgroup parent of its own.
//! Dropping it removes every pod through CRI, stops the daemon and sweeps anything left.

use crate::host;
use crate::slot::Slot;
use peapod_proto::v1 as cri;
use peapod_uds::client::Cri;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Where `cargo build` put the binaries: the test executable is target/<profile>/deps/e2e-*.
pub fn bin_dir() -> PathBuf {
    if let Ok(dir) = std::env::var("PEAPOD_BIN_DIR") {
        return dir.into();
    }
    let exe = std::env::current_exe().expect("current exe");
    let deps = exe.parent().expect("deps dir");
    let dir = if deps.ends_with("deps") {
        deps.parent().expect("profile dir").to_path_buf()
    } else {
        deps.to_path_buf()
    };
    assert!(
        dir.join("peapod").is_file() && dir.join("peapod-shim").is_file(),
        "peapod and peapod-shim must be built into {} (run `cargo build --workspace` first)",
        dir.display()
    );
    dir
}

#[derive(Debug, Clone, Default)]
pub struct DaemonOptions {
    /// Replace the generated network configuration with this conflist (JSON); `{bridge}`,
    /// `{subnet}` and `{dir}` are substituted.
    pub conflist: Option<String>,
    /// Extra CNI plugin directory searched before the system ones.
    pub extra_cni_bin: Option<PathBuf>,
    /// The `[cgroup] driver` ("cgroupfs" or "systemd"); none: `PEAPOD_E2E_CGROUP_DRIVER`'s
    /// (the guest runs the native paths' tests under either) unless `extra_config` names one,
    /// else the daemon's default for this host (systemd where systemd is PID 1).
    pub cgroup_driver: Option<&'static str>,
    /// Extra TOML appended to the daemon's configuration file; `{cgroup_parent}` is replaced
    /// by this daemon's cgroup parent and `{dir}` by its directory. Without a `[pods]` table here, one putting pod cgroups
    /// at `{cgroup_parent}/kubepods` is added.
    pub extra_config: String,
    /// The daemon binary to run instead of this build's `peapod` (its shim the `peapod-shim`
    /// beside it): a previous release's, for the upgrade test.
    pub program: Option<PathBuf>,
}

pub struct TestDaemon {
    pub slot: Slot,
    pub dir: PathBuf,
    pub root: PathBuf,
    pub state: PathBuf,
    pub socket: PathBuf,
    pub conf_dir: PathBuf,
    pub bridge: String,
    pub subnet: String,
    pub gateway: String,
    pub cgroup_parent: String,
    /// The daemon's cgroup driver is systemd (its default where systemd is PID 1, or its
    /// configuration's): pods' cgroups are then slices and scopes ([`TestDaemon::cgroup_dir`]).
    pub systemd: bool,
    pub cri: Cri,
    /// `PEAPOD_FAILPOINTS` for the next (re)start (see daemon/src/failpoint.rs): set, the daemon
    /// started is the test daemon `peapod-failpoints`.
    pub failpoints: Option<String>,
    /// The daemon binary of the next (re)start; none: this build's (see
    /// [`DaemonOptions::program`]).
    pub program: Option<PathBuf>,
    child: Option<Child>,
    name: String,
}

const SYSTEM_CNI_DIRS: [&str; 2] = ["/usr/lib/cni", "/opt/cni/bin"];

impl TestDaemon {
    pub async fn start(name: &str) -> TestDaemon {
        Self::start_with(name, DaemonOptions::default()).await
    }

    pub async fn start_with(name: &str, opts: DaemonOptions) -> TestDaemon {
        let slot = Slot::acquire();
        let n = slot.n;
        // Short: unix socket paths under `state` must stay far below 108 bytes.
        let dir = PathBuf::from(format!("/tmp/ppe{n}"));
        host::unmount_all_under(&dir);
        let _ = std::fs::remove_dir_all(&dir);
        let root = dir.join("root");
        let state = dir.join("run");
        let conf_dir = dir.join("net.d");
        std::fs::create_dir_all(&conf_dir).expect("create conf dir");
        let bridge = format!("ppe{n}");
        host::delete_link(&bridge);
        let subnet = format!("10.123.{n}.0/24");
        let gateway = format!("10.123.{n}.1");
        let cgroup_parent = format!("/peapod-e2e-{n}");
        let in_config = |d: &str| opts.extra_config.contains(&format!("driver = \"{d}\""));
        let driver = match opts.cgroup_driver {
            Some(d) => Some(d.to_string()),
            None if in_config("systemd") || in_config("cgroupfs") => None,
            None => std::env::var("PEAPOD_E2E_CGROUP_DRIVER").ok(),
        };
        let systemd = match driver.as_deref() {
            Some(d) => d == "systemd",
            None if in_config("systemd") => true,
            None if in_config("cgroupfs") => false,
            None => {
                peapod_daemon::config::CgroupDriver::host_default()
                    == peapod_daemon::config::CgroupDriver::Systemd
            }
        };
        host::remove_cgroups_of(&cgroup_parent, systemd);

        let conflist = opts.conflist.clone().unwrap_or_else(|| {
            r#"{"cniVersion":"1.0.0","name":"e2e-{bridge}","plugins":[
                {"type":"bridge","bridge":"{bridge}","isGateway":true,"ipMasq":false,"hairpinMode":true,
                 "ipam":{"type":"host-local","ranges":[[{"subnet":"{subnet}"}]],"routes":[{"dst":"0.0.0.0/0"}],"dataDir":"{dir}/ipam"}},
                {"type":"portmap","capabilities":{"portMappings":true}}]}"#
                .to_string()
        });
        let conflist = conflist
            .replace("{bridge}", &bridge)
            .replace("{subnet}", &subnet)
            .replace("{dir}", &dir.display().to_string());
        std::fs::write(conf_dir.join("10-e2e.conflist"), conflist).expect("write conflist");

        let mut bin_dirs: Vec<String> = Vec::new();
        if let Some(extra) = &opts.extra_cni_bin {
            bin_dirs.push(extra.display().to_string());
        }
        bin_dirs.extend(SYSTEM_CNI_DIRS.iter().map(|s| s.to_string()));
        // Applied pods' cgroups go under this daemon's parent too (so the sweep on drop finds
        // them), unless the test brings its own [pods] table.
        let mut extra = if opts.extra_config.contains("[pods]") {
            opts.extra_config.clone()
        } else {
            format!(
                "[pods]\ncgroup_parent = \"{{cgroup_parent}}/kubepods\"\n{}",
                opts.extra_config
            )
        };
        // NRI is on by default; each daemon serves it on a socket of its own (the default
        // path is one per host), unless the test brings its own [nri] table.
        if !extra.contains("[nri]") {
            extra.push_str("\n[nri]\nsocket_path = \"{dir}/nri.sock\"\n");
        }
        let config = format!(
            "root = \"{root}\"\nstate = \"{state}\"\nsocket = \"{state}/peapod.sock\"\nlog_level = \"debug\"\n\
             [cgroup]\ndefault_parent = \"{cgroup_parent}\"\n{driver}\
             [cni]\nconf_dir = \"{conf}\"\nbin_dirs = {bins:?}\ndefault_bridge = \"{bridge}\"\ndefault_subnet = \"{subnet}\"\n{extra}\n",
            root = root.display(),
            state = state.display(),
            conf = conf_dir.display(),
            bins = bin_dirs,
            driver = driver
                .map(|d| format!("driver = \"{d}\"\n"))
                .unwrap_or_default(),
            extra = extra
                .replace("{cgroup_parent}", &cgroup_parent)
                .replace("{dir}", &dir.display().to_string()),
        );
        let config_path = dir.join("config.toml");
        std::fs::write(&config_path, config).expect("write config");
        let socket = state.join("peapod.sock");

        let child = spawn_daemon(&dir, None, opts.program.as_deref());
        let mut child = child;
        let cri = wait_for_socket(&socket, &dir, Some(&mut child)).await;
        TestDaemon {
            slot,
            dir,
            root,
            state,
            socket,
            conf_dir,
            bridge,
            subnet,
            gateway,
            cgroup_parent,
            systemd,
            cri,
            failpoints: None,
            program: opts.program.clone(),
            child: Some(child),
            name: name.to_string(),
        }
    }

    /// Starts the daemon again on the same directories (after `stop_daemon`).
    pub async fn restart(&mut self) -> bool {
        self.stop_daemon();
        self.child = Some(spawn_daemon(
            &self.dir,
            self.failpoints.as_deref(),
            self.program.as_deref(),
        ));
        self.cri = wait_for_socket(&self.socket, &self.dir, self.child.as_mut()).await;
        true
    }

    /// Starts the daemon process again on the same directories and returns at once, without
    /// waiting for it to serve (see `wait_serving`, `wait_daemon_exit`).
    pub fn spawn(&mut self) {
        assert!(self.child.is_none(), "the daemon is still running");
        self.child = Some(spawn_daemon(
            &self.dir,
            self.failpoints.as_deref(),
            self.program.as_deref(),
        ));
    }

    /// The daemon process's pid, while it runs.
    pub fn daemon_pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }

    /// Waits for the daemon started by `spawn` to serve.
    pub async fn wait_serving(&mut self) {
        self.cri = wait_for_socket(&self.socket, &self.dir, self.child.as_mut()).await;
    }

    /// SIGKILL, and nothing else: the process may still be dying (holding its locks and
    /// ports) when this returns, as after `kill -9 PID` in a shell. It is reaped later.
    pub fn kill_daemon_without_waiting(&mut self) -> Option<Child> {
        let mut child = self.child.take()?;
        let _ = child.kill();
        Some(child)
    }

    /// The configuration file this daemon reads (tests may edit it between restarts).
    pub fn config_path(&self) -> PathBuf {
        self.dir.join("config.toml")
    }

    /// Waits up to `limit` for the daemon to end by itself (a failpoint's exit); true if it
    /// did.
    pub fn wait_daemon_exit(&mut self, limit: Duration) -> bool {
        let Some(child) = self.child.as_mut() else {
            return true;
        };
        let deadline = Instant::now() + crate::scaled(limit);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = child.try_wait() {
                self.child = None;
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }

    /// Kills the daemon with SIGKILL (no cleanup of any kind), leaving its shims running.
    pub fn kill_daemon(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("daemon.log")).unwrap_or_default()
    }

    /// Stops the daemon (SIGTERM) and waits for it, leaving pods running.
    pub fn stop_daemon(&mut self) {
        if let Some(mut child) = self.child.take() {
            // SAFETY: kill has no memory-safety preconditions.
            unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
            let deadline = Instant::now() + crate::scaled(Duration::from_secs(10));
            while Instant::now() < deadline {
                if let Ok(Some(_)) = child.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Sends SIGTERM and waits up to `bound` for the daemon to exit: its exit status, or None
    /// when it was still running then (it is killed, so the test can go on).
    pub fn terminate(&mut self, bound: Duration) -> Option<std::process::ExitStatus> {
        let mut child = self.child.take()?;
        // SAFETY: kill has no memory-safety preconditions.
        unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
        let deadline = Instant::now() + crate::scaled(bound);
        while Instant::now() < deadline {
            if let Ok(Some(status)) = child.try_wait() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        let _ = child.wait();
        None
    }

    /// Where this daemon's pods' cgroups are in the cgroup tree: its parent, or with the
    /// systemd driver the slice it names (`/peapod-e2e-1` is `/peapod_e2e_1.slice`).
    pub fn cgroup_dir(&self) -> String {
        host::cgroup_dir_of(&self.cgroup_parent, self.systemd)
    }

    /// Everything of this daemon's pods that is still on the machine; empty when clean.
    pub fn leftovers(&self) -> Vec<String> {
        let mut out = Vec::new();
        for m in host::mounts_under(&self.dir) {
            out.push(format!("mount {}", m.display()));
        }
        if let Ok(d) = std::fs::read_dir(self.state.join("netns")) {
            for e in d.flatten() {
                out.push(format!("netns file {}", e.path().display()));
            }
        }
        for port in host::bridge_ports(&self.bridge) {
            out.push(format!("veth {port} on {}", self.bridge));
        }
        if self.systemd {
            // Slices are the caller's (the kubelet makes and removes pods' slices; systemd
            // makes a missing one a scope names): what is ours is a scope or a directory.
            for cg in host::cgroups_below(&self.cgroup_dir()) {
                let name = cg.file_name().unwrap_or_default().to_string_lossy();
                if !name.ends_with(".slice") {
                    out.push(format!("cgroup {}", cg.display()));
                }
            }
        } else {
            for cg in host::cgroups_under(&self.cgroup_dir()) {
                out.push(format!("cgroup {}", cg.display()));
            }
        }
        for pid in host::processes_with(&format!("{}/", self.state.display())) {
            out.push(format!("process {pid} using {}", self.state.display()));
        }
        // The OCI runtime's state of each container, and the shims' sockets.
        for sub in ["runc", "s"] {
            if let Ok(d) = std::fs::read_dir(self.state.join(sub)) {
                for e in d.flatten() {
                    out.push(format!("{sub} entry {}", e.path().display()));
                }
            }
        }
        for sub in ["sandboxes", "containers"] {
            for base in [&self.root, &self.state] {
                if let Ok(d) = std::fs::read_dir(base.join(sub)) {
                    for e in d.flatten() {
                        out.push(format!("directory {}", e.path().display()));
                    }
                }
            }
        }
        if let Ok(d) = std::fs::read_dir(self.dir.join("ipam")) {
            for e in d.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                if let Ok(sub) = std::fs::read_dir(e.path()) {
                    for f in sub.flatten() {
                        let f = f.file_name().to_string_lossy().into_owned();
                        if f != "lock" && !f.starts_with("last_reserved_ip") {
                            out.push(format!("IP reservation {name}/{f}"));
                        }
                    }
                }
            }
        }
        out
    }

    /// The cgroup (from the hierarchy's root) of pod or container `id`, made under this
    /// daemon's parent: `<parent>/<id>`, or with the systemd driver the scope
    /// `<slice path>/peapod-<id>.scope`.
    pub fn cgroup_path(&self, id: &str) -> String {
        if self.systemd {
            format!("{}/peapod-{id}.scope", self.cgroup_dir())
        } else {
            format!("{}/{id}", self.cgroup_parent.trim_end_matches('/'))
        }
    }

    /// Removes every pod through CRI (best effort).
    async fn remove_all_pods(cri: &mut Cri) {
        let Ok(list) = cri
            .runtime
            .list_pod_sandbox(cri::ListPodSandboxRequest { filter: None })
            .await
        else {
            return;
        };
        for sb in list.into_inner().items {
            let _ = cri
                .runtime
                .stop_pod_sandbox(cri::StopPodSandboxRequest {
                    pod_sandbox_id: sb.id.clone(),
                })
                .await;
            let _ = cri
                .runtime
                .remove_pod_sandbox(cri::RemovePodSandboxRequest {
                    pod_sandbox_id: sb.id,
                })
                .await;
        }
    }
}

fn spawn_daemon(dir: &Path, failpoints: Option<&str>, program: Option<&Path>) -> Child {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("daemon.log"))
        .expect("open daemon log");
    // Crash points exist only in the test daemon (tests/src/bin/peapod-failpoints.rs), never
    // in the `peapod` users run.
    let mut cmd = match failpoints {
        Some(f) => {
            let mut cmd = Command::new(bin_dir().join("peapod-failpoints"));
            cmd.env("PEAPOD_FAILPOINTS", f);
            cmd
        }
        None => Command::new(program.map_or_else(|| bin_dir().join("peapod"), Path::to_path_buf)),
    };
    cmd.arg("serve")
        .arg("--config")
        .arg(dir.join("config.toml"))
        .stdin(Stdio::null())
        .stdout(log.try_clone().expect("dup log"))
        .stderr(log)
        .spawn()
        .expect("start peapod")
}

/// Waits for the daemon to answer on `socket`; a daemon that exits meanwhile (`child`) fails
/// the wait at once, with its log, instead of at the deadline.
async fn wait_for_socket(socket: &Path, dir: &Path, mut child: Option<&mut Child>) -> Cri {
    let deadline = Instant::now() + crate::scaled(Duration::from_secs(20));
    loop {
        if socket.exists() {
            if let Ok(mut c) = Cri::connect(&socket.display().to_string()).await {
                if c.runtime
                    .version(cri::VersionRequest::default())
                    .await
                    .is_ok()
                {
                    return c;
                }
            }
        }
        if let Some(status) = child.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
            panic!(
                "peapod exited ({status}) before it served on {}; log:\n{}",
                socket.display(),
                std::fs::read_to_string(dir.join("daemon.log")).unwrap_or_default()
            );
        }
        if Instant::now() > deadline {
            panic!(
                "peapod did not serve on {} within {:?}; log:\n{}",
                socket.display(),
                crate::scaled(Duration::from_secs(20)),
                std::fs::read_to_string(dir.join("daemon.log")).unwrap_or_default()
            );
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

impl Drop for TestDaemon {
    fn drop(&mut self) {
        let panicking = std::thread::panicking();
        // CRI cleanup needs an async runtime; Drop may run inside one, so use a thread.
        if self.child.is_some() {
            let mut cri = self.cri.clone();
            let _ = std::thread::spawn(move || {
                if let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    rt.block_on(async {
                        let _ = tokio::time::timeout(
                            crate::scaled(Duration::from_secs(60)),
                            TestDaemon::remove_all_pods(&mut cri),
                        )
                        .await;
                    });
                }
            })
            .join();
        }
        self.stop_daemon();
        // Sweep what a broken daemon may have left, so one failure does not poison later tests.
        for pid in host::processes_with(&format!("{}/", self.state.display())) {
            // SAFETY: kill has no memory-safety preconditions.
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
        }
        host::unmount_all_under(&self.dir);
        host::delete_link(&self.bridge);
        host::remove_cgroups_of(&self.cgroup_parent, self.systemd);
        if panicking {
            let keep = PathBuf::from(format!("/tmp/peapod-e2e-failed-{}.log", self.name));
            let _ = std::fs::copy(self.dir.join("daemon.log"), &keep);
            eprintln!("daemon log of failed test kept at {}", keep.display());
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
