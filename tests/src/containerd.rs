//! A private, real containerd for tests of `containerd-shim-peapod-v2`, of either version the
//! shim is tested under ([`Version`]: Debian's 1.6, or the 2.x that `k8s/containerd/build.sh`
//! builds): its own root, state, sockets, CNI configuration and bridge, with
//! `io.containerd.peapod.v2` as the CRI's default runtime and the test's images imported.
//! Dropping it kills containerd and every shim and container it started, and removes their
//! mounts, bridge and cgroups.

use crate::daemon::bin_dir;
use crate::host;
use crate::slot::Slot;
use peapod_image::testsupport::{oci_archive, ImageSpec};
use peapod_uds::client::Cri;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The image names the tests import (containerd's sandbox image is the second).
pub const BUSYBOX: &str = "peapod.test/busybox:1";
pub const PAUSE: &str = "peapod.test/pause:1";
/// The namespace of containerd's CRI plugin.
pub const NAMESPACE: &str = "k8s.io";
/// Where containerd's v2 shims (runc-v2's and ours) keep the OCI runtime's state, one
/// directory per containerd namespace.
pub const RUNTIME_ROOTS: &str = "/run/containerd/runc";

/// Which containerd a test runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    /// Debian 12's package (`/usr/bin/containerd`, 1.6): configuration `version = 2`.
    Debian,
    /// containerd 2.x as pinned in `k8s/containerd/go.mod`: configuration `version = 3`, its own
    /// `ctr` and `containerd-shim-runc-v2`.
    V2,
}

impl Version {
    /// Where this version's `containerd`, `ctr` and `containerd-shim-runc-v2` are (none: on
    /// PATH, Debian's).
    pub fn bin_dir(self) -> Option<PathBuf> {
        match self {
            Version::Debian => None,
            Version::V2 => Some(v2_bin_dir()),
        }
    }
}

/// The bin directory of `k8s/containerd/build.sh` (which `scripts/setup` runs).
fn v2_bin_dir() -> PathBuf {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../k8s/containerd/build.sh");
    let out = Command::new(&script)
        .arg("--print")
        .output()
        .unwrap_or_else(|e| panic!("run {}: {e}", script.display()));
    assert!(
        out.status.success(),
        "containerd 2.x is not built: run scripts/setup (or k8s/containerd/build.sh)"
    );
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

pub struct Containerd {
    _slot: Slot,
    pub version: Version,
    /// Its own bin directory, searched before PATH (none: Debian's, on PATH).
    bin: Option<PathBuf>,
    pub dir: tempfile::TempDir,
    pub socket: PathBuf,
    pub state: PathBuf,
    pub bridge: String,
    pub cgroup_parent: String,
    pub cri: Cri,
    child: Option<Child>,
}

/// The CNI network: a bridge of the test's own, host-local addresses.
fn conflist(bridge: &str, subnet: &str, dir: &Path) -> String {
    format!(
        r#"{{"cniVersion":"1.0.0","name":"ctd-{bridge}","plugins":[
  {{"type":"bridge","bridge":"{bridge}","isGateway":true,"ipMasq":false,
    "ipam":{{"type":"host-local","ranges":[[{{"subnet":"{subnet}"}}]],"dataDir":"{dir}/ipam"}}}},
  {{"type":"loopback"}}]}}"#,
        dir = dir.display()
    )
}

fn config(version: Version, dir: &Path, default_runtime: &str, runtimes: &str) -> String {
    match version {
        Version::Debian => config_v2(dir, default_runtime, runtimes),
        Version::V2 => config_v3(dir, default_runtime, runtimes),
    }
}

/// containerd 1.6's configuration (`version = 2`).
fn config_v2(dir: &Path, default_runtime: &str, runtimes: &str) -> String {
    let d = dir.display();
    let runtimes = runtimes.replace(
        "RUNTIMES",
        r#"plugins."io.containerd.grpc.v1.cri".containerd.runtimes"#,
    );
    format!(
        r#"version = 2
root = "{d}/root"
state = "{d}/state"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.internal.v1.opt", "io.containerd.tracing.processor.v1.otlp"]
[grpc]
  address = "{d}/c.sock"
[debug]
  level = "debug"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{PAUSE}"
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    default_runtime_name = "{default_runtime}"
    snapshotter = "overlayfs"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.peapod]
      runtime_type = "io.containerd.peapod.v2"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
{runtimes}
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "{d}/net.d"
"#
    )
}

/// containerd 2.x's configuration (`version = 3`, which 2.4 still reads): the CRI plugin split
/// into `io.containerd.cri.v1.images` and `io.containerd.cri.v1.runtime`. NRI is off: its
/// socket is a fixed host path (/var/run/nri/nri.sock) that two containerds would share.
fn config_v3(dir: &Path, default_runtime: &str, runtimes: &str) -> String {
    let d = dir.display();
    let runtimes = runtimes.replace(
        "RUNTIMES",
        r#"plugins."io.containerd.cri.v1.runtime".containerd.runtimes"#,
    );
    format!(
        r#"version = 3
root = "{d}/root"
state = "{d}/state"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.blockfile",
  "io.containerd.snapshotter.v1.erofs", "io.containerd.internal.v1.opt",
  "io.containerd.tracing.processor.v1.otlp", "io.containerd.nri.v1.nri"]
[grpc]
  address = "{d}/c.sock"
[debug]
  level = "debug"
[plugins."io.containerd.cri.v1.images"]
  snapshotter = "overlayfs"
  [plugins."io.containerd.cri.v1.images".pinned_images]
    sandbox = "{PAUSE}"
[plugins."io.containerd.cri.v1.runtime"]
  restrict_oom_score_adj = true
  [plugins."io.containerd.cri.v1.runtime".containerd]
    default_runtime_name = "{default_runtime}"
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.peapod]
      runtime_type = "io.containerd.peapod.v2"
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
{runtimes}
  [plugins."io.containerd.cri.v1.runtime".cni]
    bin_dirs = ["/usr/lib/cni"]
    conf_dir = "{d}/net.d"
[plugins."io.containerd.grpc.v1.cri"]
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
"#
    )
}

impl Containerd {
    /// Starts containerd `version` with `default_runtime` ("peapod" or "runc") and imports the
    /// images.
    pub async fn start(version: Version, default_runtime: &str) -> Containerd {
        Containerd::start_with(version, default_runtime, "").await
    }

    /// [`Containerd::start`] with more CRI runtimes: `runtimes` is TOML whose table names start
    /// with `RUNTIMES` (replaced by the version's `...containerd.runtimes`), e.g.
    /// `[RUNTIMES.logged]` and its `runtime_type`, `[RUNTIMES.logged.options]`.
    pub async fn start_with(version: Version, default_runtime: &str, runtimes: &str) -> Containerd {
        let bin = version.bin_dir();
        let slot = Slot::acquire();
        let n = slot.n;
        // Short: containerd's bundles and sockets live under it.
        // Named after the slot, so that scripts/clean-test-leftovers finds its cgroups too.
        let dir = tempfile::Builder::new()
            .prefix(&format!("ctd{n}-"))
            .tempdir_in("/tmp")
            .expect("tempdir");
        let bridge = format!("ctd{n}");
        host::delete_link(&bridge);
        let cgroup_parent = format!("/peapod-ctd-{n}");
        host::remove_cgroup_tree(&cgroup_parent);
        let net_d = dir.path().join("net.d");
        std::fs::create_dir_all(&net_d).expect("create net.d");
        let subnet = format!("10.124.{n}.0/24");
        std::fs::write(
            net_d.join("10-ctd.conflist"),
            conflist(&bridge, &subnet, dir.path()),
        )
        .expect("write conflist");
        std::fs::write(
            dir.path().join("config.toml"),
            config(version, dir.path(), default_runtime, runtimes),
        )
        .expect("write config");
        let socket = dir.path().join("c.sock");
        let state = dir.path().join("state");
        let child = spawn(bin.as_deref(), dir.path());
        let cri = wait_for(&socket, dir.path()).await;
        let ctd = Containerd {
            _slot: slot,
            version,
            bin,
            dir,
            socket,
            state,
            bridge,
            cgroup_parent,
            cri,
            child: Some(child),
        };
        ctd.import(NAMESPACE, BUSYBOX, &ImageSpec::busybox());
        ctd.import(
            NAMESPACE,
            PAUSE,
            &ImageSpec::busybox()
                .entrypoint(&["sleep"])
                .cmd(&["2147483647"]),
        );
        ctd
    }

    /// Imports `spec` as `name` into containerd namespace `namespace`.
    pub fn import(&self, namespace: &str, name: &str, spec: &ImageSpec) {
        let archive = self.dir.path().join("image.tar");
        oci_archive(&archive, name, spec).expect("build image archive");
        let out = Command::new(self.program("ctr"))
            .arg("--address")
            .arg(&self.socket)
            .args(["-n", namespace, "images", "import"])
            .arg(&archive)
            .output()
            .expect("run ctr");
        assert!(
            out.status.success(),
            "ctr import {name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let _ = std::fs::remove_file(archive);
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("containerd.log")).unwrap_or_default()
    }

    /// containerd's bundle of a task (sandbox or container).
    pub fn bundle(&self, id: &str) -> PathBuf {
        self.state
            .join("io.containerd.runtime.v2.task")
            .join(NAMESPACE)
            .join(id)
    }

    /// Runs `ctr` against this containerd in `namespace`; its output, or a panic naming it.
    pub fn ctr(&self, namespace: &str, args: &[&str]) -> String {
        let out = Command::new(self.program("ctr"))
            .arg("--address")
            .arg(&self.socket)
            .args(["-n", namespace])
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("run ctr");
        assert!(
            out.status.success(),
            "ctr {args:?}: {}{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
            self.log()
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Kills containerd with SIGKILL, as a crash would, leaving shims and containers running.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// The containerd namespace `base` of this containerd (`base-<slot>`): runc's state
    /// (`/run/containerd/runc/<namespace>`) and the cgroups of tasks made through containerd's
    /// own API (`/<namespace>/<id>`) are the host's, shared by every containerd, so two tests
    /// running at once must not use one namespace.
    pub fn api_namespace(&self, base: &str) -> String {
        format!("{base}-{}", self._slot.n)
    }

    /// This version's `name` (`ctr`, `containerd`): from its bin directory, or PATH's.
    pub fn program(&self, name: &str) -> PathBuf {
        match &self.bin {
            Some(dir) => dir.join(name),
            None => PathBuf::from(name),
        }
    }

    /// Starts containerd again on the same directories.
    pub async fn restart(&mut self) {
        self.kill();
        self.child = Some(spawn(self.bin.as_deref(), self.dir.path()));
        self.cri = wait_for(&self.socket, self.dir.path()).await;
    }

    /// The live shims started for this containerd (their command line names its socket).
    pub fn shims(&self) -> Vec<u32> {
        host::processes_with(&format!("-address {}", self.socket.display()))
    }
}

/// containerd (from `bin`, else PATH's) on the configuration in `dir`; its shims are looked up
/// on a PATH with peapod's binaries first, then `bin` (its own runc shim).
fn spawn(bin: Option<&Path>, dir: &Path) -> Child {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("containerd.log"))
        .expect("open containerd.log");
    let mut path = format!("{}:", bin_dir().display());
    if let Some(bin) = bin {
        path.push_str(&format!("{}:", bin.display()));
    }
    path.push_str(&std::env::var("PATH").unwrap_or_default());
    let program = bin.map_or(PathBuf::from("containerd"), |b| b.join("containerd"));
    Command::new(program)
        .arg("--config")
        .arg(dir.join("config.toml"))
        .env("PATH", path)
        .stdin(Stdio::null())
        .stdout(log.try_clone().expect("dup log"))
        .stderr(log)
        .spawn()
        .expect("start containerd (apt-get install containerd)")
}

async fn wait_for(socket: &Path, dir: &Path) -> Cri {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if socket.exists() {
            if let Ok(mut cri) = Cri::connect(&socket.display().to_string()).await {
                // The CRI plugin answers once it has loaded.
                let version = cri
                    .runtime
                    .version(peapod_proto::v1::VersionRequest::default())
                    .await;
                if version.is_ok() {
                    return cri;
                }
            }
        }
        if Instant::now() > deadline {
            panic!(
                "containerd did not serve CRI on {} within 60s:\n{}",
                socket.display(),
                std::fs::read_to_string(dir.join("containerd.log")).unwrap_or_default()
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// What the bundles of this containerd point at outside its directory: the shims' sockets
/// (from `address`) and the pods' network namespaces (from config.json).
fn outside_paths(task_dir: &Path) -> (Vec<PathBuf>, Vec<PathBuf>) {
    let (mut sockets, mut netns) = (Vec::new(), Vec::new());
    // <task_dir>/<namespace>/<id>, for every containerd namespace the test used.
    let bundles = std::fs::read_dir(task_dir)
        .into_iter()
        .flatten()
        .flatten()
        .flat_map(|ns| std::fs::read_dir(ns.path()).into_iter().flatten().flatten());
    for bundle in bundles.map(|e| e.path()) {
        if let Ok(address) = std::fs::read_to_string(bundle.join("address")) {
            sockets.push(PathBuf::from(address.trim().trim_start_matches("unix://")));
        }
        let spec: serde_json::Value = std::fs::read(bundle.join("config.json"))
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default();
        for ns in spec["linux"]["namespaces"].as_array().into_iter().flatten() {
            match ns["path"].as_str() {
                Some(path) if ns["type"] == "network" && path.starts_with("/var/run/netns/") => {
                    netns.push(PathBuf::from(path))
                }
                _ => {}
            }
        }
    }
    (sockets, netns)
}

impl Drop for Containerd {
    fn drop(&mut self) {
        self.kill();
        let (sockets, netns) = outside_paths(&self.state.join("io.containerd.runtime.v2.task"));
        for pid in self.shims() {
            // SAFETY: kill has no memory-safety preconditions.
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
        }
        // Containers whose bundles are ours, in the runtime state (of every namespace) shared
        // with runc-v2.
        let roots = std::fs::read_dir(RUNTIME_ROOTS)
            .into_iter()
            .flatten()
            .flatten();
        for root in roots.map(|e| e.path()) {
            let Ok(out) = Command::new("runc")
                .arg("--root")
                .arg(&root)
                .args(["list", "--format", "json"])
                .output()
            else {
                continue;
            };
            let listed: Vec<serde_json::Value> =
                serde_json::from_slice(&out.stdout).unwrap_or_default();
            for c in listed {
                let bundle = c["bundle"].as_str().unwrap_or_default();
                if Path::new(bundle).starts_with(self.dir.path()) {
                    let id = c["id"].as_str().unwrap_or_default();
                    let _ = Command::new("runc")
                        .arg("--root")
                        .arg(&root)
                        .args(["delete", "--force", id])
                        .output();
                }
            }
        }
        for socket in sockets {
            let _ = std::fs::remove_file(&socket);
            let _ = std::fs::remove_file(socket.with_extension("lock"));
        }
        for ns in netns {
            let _ = nix::mount::umount2(&ns, nix::mount::MntFlags::MNT_DETACH);
            let _ = std::fs::remove_file(&ns);
        }
        host::unmount_all_under(self.dir.path());
        host::delete_link(&self.bridge);
        host::remove_cgroup_tree(&self.cgroup_parent);
        // Containers made through containerd's own API (ctr, containerd-client) get the cgroup
        // `/<namespace>/<id>`; runc removes `<id>`, the namespace's directory stays. Only an
        // empty one goes (rmdir), so a concurrent test's containers are never touched.
        let hierarchies = std::fs::read_dir("/sys/fs/cgroup")
            .into_iter()
            .flatten()
            .flatten();
        let namespaces = API_NAMESPACES.map(|base| self.api_namespace(base));
        for h in hierarchies.map(|e| e.path()) {
            for ns in &namespaces {
                let _ = std::fs::remove_dir(h.join(ns));
            }
        }
        // The namespaces' runtime state directories, once empty.
        for ns in &namespaces {
            let _ = std::fs::remove_dir(Path::new(RUNTIME_ROOTS).join(ns));
        }
    }
}

/// The containerd namespaces (before [`Containerd::api_namespace`] makes them this
/// containerd's) the tests run containers in through containerd's own API.
pub const API_NAMESPACES: [&str; 2] = ["peapod-ctr", "peapod-client"];

impl crate::pods::CriServer for Containerd {
    fn cri(&mut self) -> &mut Cri {
        &mut self.cri
    }

    fn cgroup_parent(&self) -> &str {
        &self.cgroup_parent
    }

    fn logs_root(&self) -> PathBuf {
        self.dir.path().join("logs")
    }

    fn server_log(&self) -> String {
        self.log()
    }
}
