//! A real Kubernetes cluster on this machine through `scripts/cluster`: etcd, the API server,
//! controller manager, scheduler and kubelets built from Kubernetes' own module (k8s/), each
//! node over its own peapod. One cluster at a time (fixed node addresses and ports): tests take
//! [`Cluster::lock`] first, and dropping a [`Cluster`] takes it down.

use peapod_host::sync::LockUnpoisoned;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Where the cluster's state and runtime files live (the script's defaults).
pub const DIR: &str = "/var/lib/peapod-cluster";
pub const RUN: &str = "/run/peapod-cluster";

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn script() -> PathBuf {
    repo().join("scripts/cluster")
}

/// Runs `scripts/cluster ARGS`, panicking with its output when it fails.
pub fn run_script(args: &[&str]) -> String {
    run_script_env(args, &[])
}

/// [`run_script`] with these variables in its environment.
pub fn run_script_env(args: &[&str], env: &[(&str, &str)]) -> String {
    let out = Command::new(script())
        .args(args)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .output()
        .expect("run scripts/cluster");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "scripts/cluster {}: {}\n{text}\n{}",
        args.join(" "),
        out.status,
        logs_tail()
    );
    text
}

/// The last lines of each component's log, for failure messages.
pub fn logs_tail() -> String {
    let mut out = String::new();
    if let Ok(rd) = std::fs::read_dir(Path::new(DIR).join("logs")) {
        let mut files: Vec<_> = rd.flatten().map(|e| e.path()).collect();
        files.sort();
        for f in files {
            let text = std::fs::read_to_string(&f).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            let from = lines.len().saturating_sub(15);
            out.push_str(&format!(
                "==> {} <==\n{}\n",
                f.display(),
                lines[from..].join("\n")
            ));
        }
    }
    out
}

pub struct Cluster {
    _guard: MutexGuard<'static, ()>,
    pub nodes: usize,
}

impl Cluster {
    fn lock() -> MutexGuard<'static, ()> {
        let guard = ONE_AT_A_TIME.lock_unpoisoned();
        // Whatever an interrupted earlier run left.
        run_script(&["down"]);
        guard
    }

    /// `scripts/cluster up --nodes N`.
    pub fn up(nodes: usize) -> Cluster {
        Self::up_with_gates(nodes, "")
    }

    /// `scripts/cluster up --nodes N` with kubelet feature gates (`Name=true,...`).
    pub fn up_with_gates(nodes: usize, gates: &str) -> Cluster {
        let guard = Self::lock();
        let started = Instant::now();
        let out = Command::new(script())
            .args(["up", "--nodes", &nodes.to_string()])
            .env("PEAPOD_CLUSTER_FEATURE_GATES", gates)
            .stdin(Stdio::null())
            .output()
            .expect("run scripts/cluster up");
        assert!(
            out.status.success(),
            "scripts/cluster up: {}\n{}\n{}",
            String::from_utf8_lossy(&out.stderr),
            out.status,
            logs_tail()
        );
        println!("cluster of {nodes} node(s) up in {:?}", started.elapsed());
        Cluster {
            _guard: guard,
            nodes,
        }
    }

    /// `scripts/cluster standalone up`: one kubelet, no API server.
    pub fn standalone() -> Cluster {
        Self::standalone_traced("")
    }

    /// `scripts/cluster standalone up`, the kubelet's and peapod's spans sent to the OTLP/gRPC
    /// collector at `endpoint` (`PEAPOD_CLUSTER_TRACING_ENDPOINT`; empty: no tracing).
    pub fn standalone_traced(endpoint: &str) -> Cluster {
        let guard = Self::lock();
        run_script_env(
            &["standalone", "up"],
            &[("PEAPOD_CLUSTER_TRACING_ENDPOINT", endpoint)],
        );
        Cluster {
            _guard: guard,
            nodes: 1,
        }
    }

    pub fn kubectl(&self, args: &[&str]) -> Output {
        Command::new(script())
            .arg("kubectl")
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("run kubectl")
    }

    /// kubectl ARGS, which must succeed; its stdout.
    pub fn kubectl_ok(&self, args: &[&str]) -> String {
        let out = self.kubectl(args);
        assert!(
            out.status.success(),
            "kubectl {}: {}\n{}{}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    pub fn json(&self, args: &[&str]) -> Value {
        let mut all = args.to_vec();
        all.extend(["-o", "json"]);
        serde_json::from_str(&self.kubectl_ok(&all)).expect("kubectl -o json")
    }

    pub fn pod(&self, name: &str) -> Value {
        self.json(&["get", "pod", name])
    }

    /// crictl ARGS against NODE's peapod; stdout.
    pub fn crictl(&self, node: &str, args: &[&str]) -> String {
        let mut all = vec!["crictl", node];
        all.extend(args);
        let out = Command::new(script())
            .args(&all)
            .stdin(Stdio::null())
            .output()
            .expect("run crictl");
        assert!(
            out.status.success(),
            "crictl {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Ids of the pod sandboxes NODE's peapod holds.
    pub fn sandboxes(&self, node: &str) -> Vec<String> {
        self.crictl(node, &["pods", "-q"])
            .lines()
            .filter(|l| !l.is_empty())
            .map(str::to_string)
            .collect()
    }

    /// Polls `check` every 500 ms until it returns `Some`, or panics after `limit` with `what`
    /// and the components' logs.
    pub fn wait<T>(&self, what: &str, limit: Duration, mut check: impl FnMut() -> Option<T>) -> T {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(v) = check() {
                return v;
            }
            assert!(
                Instant::now() < deadline,
                "{what}: not within {limit:?}\n{}",
                logs_tail()
            );
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    /// Waits until pod NAME is Ready.
    pub fn wait_ready(&self, name: &str, limit: Duration) -> Value {
        self.wait(&format!("pod {name} Ready"), limit, || {
            let pod = self.pod(name);
            ready(&pod).then_some(pod)
        })
    }

    /// Every non-kubelet file, mount, link, cgroup and process of the cluster still there.
    pub fn leftovers() -> Vec<String> {
        let mut left = Vec::new();
        for dir in [DIR, RUN] {
            if Path::new(dir).exists() {
                left.push(format!("directory {dir}"));
            }
            for m in crate::host::mounts_under(Path::new(dir)) {
                left.push(format!("mount {}", m.display()));
            }
            for pid in crate::host::processes_with(dir) {
                // PID 1 here reaps orphans only every second or so: a zombie has ended.
                let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
                let zombie = stat
                    .rsplit_once(')')
                    .and_then(|(_, r)| r.split_whitespace().next())
                    == Some("Z");
                if !zombie {
                    left.push(format!(
                        "process {pid} ({})",
                        stat.split(' ').nth(1).unwrap_or("")
                    ));
                }
            }
        }
        let links = Command::new("ip")
            .args(["-o", "link", "show"])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default();
        for line in links.lines() {
            let name = line.split(':').nth(1).unwrap_or("").trim();
            if name.starts_with("ppk") {
                left.push(format!("link {name}"));
            }
        }
        if let Ok(rd) = std::fs::read_dir("/sys/fs/cgroup") {
            for h in rd.flatten() {
                if let Ok(inner) = std::fs::read_dir(h.path()) {
                    for c in inner.flatten() {
                        // Only the cluster's own node cgroups (peapod-node-N), not those of
                        // scripts/node-e2e or a benchmark that may share the prefix.
                        let name = c.file_name().to_string_lossy().into_owned();
                        let is_node = name.strip_prefix("peapod-node-").is_some_and(|n| {
                            !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit())
                        });
                        if is_node {
                            left.push(format!("cgroup {}", c.path().display()));
                        }
                    }
                }
            }
        }
        // The kubelet's own iptables chains (KUBE-FIREWALL drops packets to loopback from
        // other sources): `down` removes them once no kubelet is left.
        for tool in ["iptables-save", "ip6tables-save"] {
            let Ok(out) = Command::new(tool).output() else {
                continue;
            };
            for line in String::from_utf8_lossy(&out.stdout).lines() {
                if let Some(chain) = line.strip_prefix(":KUBE-") {
                    let chain = chain.split(' ').next().unwrap_or("");
                    left.push(format!("{tool} chain KUBE-{chain}"));
                }
                // A pod's masquerade rule (the bridge plugin's, removed by its DEL; a
                // simulated reboot removes its node's): a pod whose network was not torn down.
                if line.starts_with("-A POSTROUTING -s 10.244.") && line.contains(" -j CNI-") {
                    left.push(format!("{tool} rule {line}"));
                }
            }
        }
        left
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // Down even when the test failed: the next test needs the addresses and ports.
        let _ = Command::new(script())
            .arg("down")
            .stdin(Stdio::null())
            .output();
    }
}

/// The pod's Ready condition is True.
pub fn ready(pod: &Value) -> bool {
    condition(pod, "Ready") == Some("True")
}

pub fn condition<'a>(pod: &'a Value, kind: &str) -> Option<&'a str> {
    pod["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind)?["status"]
        .as_str()
}

/// The container statuses of a pod (`containerStatuses` or `initContainerStatuses`) by name.
pub fn container_status<'a>(pod: &'a Value, list: &str, name: &str) -> &'a Value {
    pod["status"][list]
        .as_array()
        .and_then(|a| a.iter().find(|c| c["name"] == name))
        .unwrap_or(&Value::Null)
}

/// The container's id without the `peapod://` scheme.
pub fn container_id(status: &Value) -> String {
    status["containerID"]
        .as_str()
        .unwrap_or_default()
        .trim_start_matches("peapod://")
        .to_string()
}
