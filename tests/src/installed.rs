//! peapod installed system-wide by its Debian package and run by systemd (the guest's package
//! test): the unit's properties and processes, crictl with the packaged crictl configuration,
//! a CRI client for what the test reads (a crictl process costs about 2 s under TCG), a
//! standalone kubelet running static pods, and a guard that leaves the host without any of it.

use peapod_proto::v1 as cri;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

pub const UNIT: &str = "peapod.service";
pub const ROOT: &str = "/var/lib/peapod";
pub const SOCKET: &str = "/run/peapod/peapod.sock";
pub const CRICTL_CONFIG: &str = "/usr/share/doc/peapod/examples/crictl.yaml";

/// The workspace's root (scripts/, k8s/).
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace")
        .to_path_buf()
}

/// What a finished command said, for failure messages.
pub fn said(out: &Output) -> String {
    format!(
        "{}\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Runs `program args`; its stdout, or a panic with what it said.
pub fn run(program: impl AsRef<std::ffi::OsStr>, args: &[&str]) -> String {
    let program = program.as_ref();
    let out = Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{program:?}: {e}"));
    assert!(out.status.success(), "{program:?} {args:?}: {}", said(&out));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `systemctl show -p PROP --value UNIT`.
pub fn property(unit: &str, prop: &str) -> String {
    run("systemctl", &["show", "-p", prop, "--value", unit])
        .trim()
        .to_string()
}

/// The last lines of peapod.service's journal.
pub fn journal() -> String {
    Command::new("journalctl")
        .args(["-u", UNIT, "--no-pager", "-n", "80"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default()
}

/// The processes in peapod.service's cgroup: the daemon and, with KillMode=process, the
/// shims it started.
pub fn unit_processes() -> Vec<u32> {
    let cgroup = property(UNIT, "ControlGroup");
    std::fs::read_to_string(format!("/sys/fs/cgroup{cgroup}/cgroup.procs"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.parse().ok())
        .collect()
}

/// dpkg's status of the peapod package ("install ok installed"; empty when unknown).
pub fn package_status() -> String {
    Command::new("dpkg-query")
        .args(["-W", "-f", "${Status}", "peapod"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default()
}

/// Polls `done` every 200 ms for at most `limit` (scaled), then fails with `what` and the
/// daemon's journal.
pub fn wait_until(limit: Duration, what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + crate::scaled(limit);
    while !done() {
        assert!(
            Instant::now() < deadline,
            "{what}: not within {limit:?}\n{}",
            journal()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The directory of the Kubernetes tools `k8s/build.sh` built (shared into the guest).
fn k8s_bin() -> PathBuf {
    PathBuf::from(run(repo().join("k8s/build.sh"), &["--print"]).trim())
}

/// crictl with the package's example configuration, as an operator would run it.
pub struct Crictl {
    bin: PathBuf,
    timeout: String,
}

impl Crictl {
    pub fn find() -> Crictl {
        Crictl {
            bin: k8s_bin().join("crictl"),
            timeout: format!("{}s", crate::scaled(Duration::from_secs(20)).as_secs()),
        }
    }

    pub fn try_run(&self, args: &[&str]) -> std::io::Result<Output> {
        Command::new(&self.bin)
            .args(["--config", CRICTL_CONFIG, "--timeout", &self.timeout])
            .args(args)
            .output()
    }

    /// crictl's trimmed stdout; a failure panics with what it and the daemon said.
    pub fn run(&self, args: &[&str]) -> String {
        let out = self.try_run(args).expect("crictl");
        assert!(
            out.status.success(),
            "crictl {args:?}: {}\n{}",
            said(&out),
            journal()
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    pub fn json(&self, args: &[&str]) -> serde_json::Value {
        let text = self.run(args);
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("crictl {args:?}: {e}: {text}"))
    }
}

/// A container as the test compares it across a restart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    pub state: i32,
    pub pid: u32,
    pub attempt: u32,
    pub log_path: String,
}

/// A CRI client of the installed daemon, on a runtime of its own (the test is synchronous).
pub struct Client {
    rt: tokio::runtime::Runtime,
    cri: crate::Cri,
}

impl Client {
    pub fn connect() -> Client {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let cri = rt
            .block_on(crate::Cri::connect(SOCKET))
            .unwrap_or_else(|e| panic!("connect to {SOCKET}: {e}"));
        Client { rt, cri }
    }

    pub fn container(&mut self, id: &str) -> Seen {
        let resp = self
            .rt
            .block_on(
                self.cri
                    .runtime
                    .container_status(cri::ContainerStatusRequest {
                        container_id: id.into(),
                        verbose: true,
                    }),
            )
            .unwrap_or_else(|e| panic!("ContainerStatus {id}: {e}\n{}", journal()))
            .into_inner();
        let info = crate::fixtures::verbose_info(&resp.info);
        let status = resp.status.expect("status");
        Seen {
            state: status.state,
            pid: info["pid"].as_u64().unwrap_or(0) as u32,
            attempt: status.metadata.map_or(0, |m| m.attempt),
            log_path: status.log_path,
        }
    }

    /// A pod's state and its pause's pid.
    pub fn pod(&mut self, id: &str) -> (i32, u32) {
        let resp = self
            .rt
            .block_on(
                self.cri
                    .runtime
                    .pod_sandbox_status(cri::PodSandboxStatusRequest {
                        pod_sandbox_id: id.into(),
                        verbose: true,
                    }),
            )
            .unwrap_or_else(|e| panic!("PodSandboxStatus {id}: {e}\n{}", journal()))
            .into_inner();
        let info = crate::fixtures::verbose_info(&resp.info);
        (
            resp.status.expect("status").state,
            info["pid"].as_u64().unwrap_or(0) as u32,
        )
    }

    /// The ready pod whose name starts with `prefix` and its running containers.
    pub fn ready_pod(&mut self, prefix: &str) -> Option<(String, Vec<String>)> {
        let pods = self
            .rt
            .block_on(
                self.cri
                    .runtime
                    .list_pod_sandbox(cri::ListPodSandboxRequest { filter: None }),
            )
            .ok()?
            .into_inner()
            .items;
        let pod = pods.into_iter().find(|p| {
            p.state == cri::PodSandboxState::SandboxReady as i32
                && p.metadata
                    .as_ref()
                    .is_some_and(|m| m.name.starts_with(prefix))
        })?;
        let containers = self
            .rt
            .block_on(
                self.cri
                    .runtime
                    .list_containers(cri::ListContainersRequest {
                        filter: Some(cri::ContainerFilter {
                            pod_sandbox_id: pod.id.clone(),
                            state: Some(cri::ContainerStateValue {
                                state: cri::ContainerState::ContainerRunning as i32,
                            }),
                            ..Default::default()
                        }),
                    }),
            )
            .ok()?
            .into_inner()
            .containers;
        Some((pod.id, containers.into_iter().map(|c| c.id).collect()))
    }
}

/// The number of lines of a CRI log file.
pub fn log_lines(path: &str) -> usize {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .count()
}

/// A standalone kubelet (no API server: static pods from a directory) on the installed
/// peapod, as a transient unit; its directories under `dir`.
pub struct Kubelet {
    dir: PathBuf,
}

pub const KUBELET_UNIT: &str = "kubelet-peapod-test.service";

impl Kubelet {
    /// Starts it with one static pod, `manifest` (YAML).
    pub fn start(dir: &Path, manifest: &str) -> Kubelet {
        let manifests = dir.join("manifests");
        std::fs::create_dir_all(&manifests).unwrap();
        std::fs::write(manifests.join("pod.yaml"), manifest).unwrap();
        // What a kubelet without an API server needs, and peapod's socket; its own
        // directories, so that nothing of it outlives the test.
        let config = format!(
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
             cgroupDriver: systemd\ncontainerRuntimeEndpoint: unix://{SOCKET}\n\
             staticPodPath: {}\nfailSwapOn: false\n\
             authentication:\n  anonymous: {{enabled: true}}\n  webhook: {{enabled: false}}\n\
             authorization:\n  mode: AlwaysAllow\n",
            manifests.display()
        );
        let config_path = dir.join("kubelet.yaml");
        std::fs::write(&config_path, config).unwrap();
        let kubelet = k8s_bin().join("kubelet");
        run(
            "systemd-run",
            &[
                "--unit",
                KUBELET_UNIT,
                "--collect",
                kubelet.to_str().unwrap(),
                "--config",
                config_path.to_str().unwrap(),
                "--root-dir",
                dir.join("root").to_str().unwrap(),
                "--cert-dir",
                dir.join("pki").to_str().unwrap(),
            ],
        );
        Kubelet {
            dir: dir.to_path_buf(),
        }
    }
}

impl Drop for Kubelet {
    fn drop(&mut self) {
        let _ = Command::new("systemctl")
            .args(["stop", KUBELET_UNIT])
            .output();
        crate::host::unmount_all_under(&self.dir);
    }
}

/// Whatever the test ends with, the host is left without the package, its data, the pods'
/// logs, the kubelet's slices and the built-in network's bridge, for the tests after it.
/// Nothing here may panic: it runs while a failed assertion unwinds.
pub struct Uninstall<'a> {
    pub crictl: &'a Crictl,
    /// Pod log directories the test made (the kubelet's are found by their pod's name).
    pub logs: Vec<PathBuf>,
    /// Static pods' name prefix, for their log directories under /var/log/pods.
    pub kubelet_pods: &'a str,
}

impl Drop for Uninstall<'_> {
    fn drop(&mut self) {
        let _ = Command::new("systemctl")
            .args(["stop", KUBELET_UNIT])
            .output();
        if package_status() == "install ok installed" {
            let _ = self.crictl.try_run(&["rmp", "-fa"]);
        }
        let _ = Command::new("dpkg").args(["-P", "peapod"]).output();
        // The kubelet's QoS slices, empty once the pods are gone.
        let _ = Command::new("systemctl")
            .args(["stop", "kubepods.slice"])
            .output();
        let _ = Command::new("ip").args(["link", "del", "peapod0"]).output();
        for dir in &self.logs {
            let _ = std::fs::remove_dir_all(dir);
        }
        for base in ["/var/log/pods", "/var/log/containers"] {
            if let Ok(entries) = std::fs::read_dir(base) {
                for e in entries.flatten() {
                    let name = e.file_name().to_string_lossy().into_owned();
                    if name.contains(self.kubelet_pods) {
                        let _ = std::fs::remove_dir_all(e.path());
                        let _ = std::fs::remove_file(e.path());
                    }
                }
            }
        }
        let _ = std::fs::remove_dir_all(ROOT);
    }
}
