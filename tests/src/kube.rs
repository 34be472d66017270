//! Driving the `peapod` CLI's kubectl-shaped verbs (apply, get, describe, wait, logs, exec,
//! delete) against a TestDaemon, as a user would: the real binary, its stdout, stderr and exit
//! status. Pods are checked through `peapod get pod NAME -o json`.

use crate::daemon::{bin_dir, DaemonOptions, TestDaemon};
use peapod_image::testsupport::{docker_archive, ImageSpec};
use serde_json::Value;
use std::io::Write;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The image name the examples use; imported from busybox-static, never pulled.
pub const BUSYBOX: &str = "docker.io/library/busybox:latest";

/// What one CLI run gave back.
#[derive(Debug, Clone)]
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    fn from(o: Output) -> Run {
        Run {
            code: o.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
        }
    }

    /// Panics (with everything printed) unless the run succeeded.
    pub fn ok(self, what: &str) -> Run {
        assert_eq!(self.code, 0, "{what} failed: {self:#?}");
        self
    }
}

/// A daemon for pod tests: its pod cgroups under its own cgroup parent, a fixed node size
/// (4 CPUs, 8 GiB) so admission is the same on every machine, a 1 s restart back-off, and
/// busybox imported as docker.io/library/busybox:latest.
pub async fn pod_daemon(name: &str) -> TestDaemon {
    pod_daemon_with(name, "").await
}

pub async fn pod_daemon_with(name: &str, extra_pods_config: &str) -> TestDaemon {
    let extra = format!(
        "[pods]\nnode_name = \"e2e-node\"\nallocatable_cpu = \"4\"\nallocatable_memory = \"8Gi\"\n\
         cgroup_parent = \"{{cgroup_parent}}/kubepods\"\nrestart_backoff_base_seconds = 1\nsync_period_ms = 200\n{extra_pods_config}\n"
    );
    let d = TestDaemon::start_with(
        name,
        DaemonOptions {
            extra_config: extra,
            ..Default::default()
        },
    )
    .await;
    import_busybox(&d);
    d
}

/// Imports busybox-static as [`BUSYBOX`] through `peapod image import`.
pub fn import_busybox(d: &TestDaemon) {
    let archive = d.dir.join("busybox.tar");
    docker_archive(&archive, &[(&[BUSYBOX], &ImageSpec::busybox())])
        .expect("build busybox archive");
    peapod(d, &["image", "import", &archive.display().to_string()]).ok("image import");
}

/// Runs `peapod --endpoint <socket> ARGS...`.
pub fn peapod(d: &TestDaemon, args: &[&str]) -> Run {
    peapod_stdin(d, args, None)
}

/// Runs the CLI with `stdin` fed to it.
pub fn peapod_stdin(d: &TestDaemon, args: &[&str], stdin: Option<&str>) -> Run {
    let mut child = Command::new(bin_dir().join("peapod"))
        .arg("--endpoint")
        .arg(&d.socket)
        .args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run peapod");
    if let Some(text) = stdin {
        let mut pipe = child.stdin.take().expect("stdin pipe");
        pipe.write_all(text.as_bytes()).expect("write stdin");
    }
    Run::from(child.wait_with_output().expect("wait for peapod"))
}

/// `peapod apply -f -` with `manifest` on stdin.
pub fn apply(d: &TestDaemon, manifest: &str) -> Run {
    peapod_stdin(d, &["apply", "-f", "-"], Some(manifest))
}

/// The pod as `peapod get pod NAME -o json` prints it; None when it does not exist.
pub fn get_pod(d: &TestDaemon, name: &str) -> Option<Value> {
    let r = peapod(d, &["get", "pod", name, "-o", "json"]);
    if r.code != 0 {
        assert!(
            r.stderr.contains("NotFound"),
            "get pod {name} failed other than NotFound: {r:#?}"
        );
        return None;
    }
    Some(serde_json::from_str(&r.stdout).unwrap_or_else(|e| panic!("get -o json: {e}: {r:#?}")))
}

/// Polls the pod (every 250 ms, up to `limit`) until `done` holds; panics with the last pod,
/// its description and the daemon log otherwise.
pub fn wait_pod(
    d: &TestDaemon,
    name: &str,
    limit: Duration,
    what: &str,
    done: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = Instant::now() + limit;
    loop {
        let pod = get_pod(d, name);
        if let Some(p) = &pod {
            if done(p) {
                return p.clone();
            }
        }
        if Instant::now() > deadline {
            let describe = peapod(d, &["describe", "pod", name]);
            panic!(
                "pod {name}: not {what} within {limit:?}\npod: {}\ndescribe:\n{}{}\ndaemon log (tail):\n{}",
                pod.map(|p| serde_json::to_string_pretty(&p).unwrap_or_default()).unwrap_or_else(|| "<none>".into()),
                describe.stdout,
                describe.stderr,
                tail(&d.log(), 80)
            );
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// A string at a JSON pointer, "" when absent.
pub fn text<'a>(v: &'a Value, pointer: &str) -> &'a str {
    v.pointer(pointer).and_then(Value::as_str).unwrap_or("")
}

/// An integer at a JSON pointer, -1 when absent.
pub fn int(v: &Value, pointer: &str) -> i64 {
    v.pointer(pointer).and_then(Value::as_i64).unwrap_or(-1)
}

/// The status of condition `kind` ("True"/"False"), "" when absent.
pub fn condition(pod: &Value, kind: &str) -> String {
    pod.pointer("/status/conditions")
        .and_then(Value::as_array)
        .and_then(|cs| cs.iter().find(|c| text(c, "/type") == kind))
        .map(|c| text(c, "/status").to_string())
        .unwrap_or_default()
}

/// The status entry of container `name` (app or init).
pub fn container_status<'a>(pod: &'a Value, name: &str) -> Option<&'a Value> {
    ["/status/containerStatuses", "/status/initContainerStatuses"]
        .iter()
        .filter_map(|p| pod.pointer(p).and_then(Value::as_array))
        .flatten()
        .find(|s| text(s, "/name") == name)
}

/// Reads one file in a container through `peapod exec` (ExecSync), trimmed.
pub fn exec_read(d: &TestDaemon, pod: &str, container: &str, path: &str) -> String {
    peapod(d, &["exec", pod, "-c", container, "--", "cat", path])
        .ok(&format!("exec cat {path} in {pod}/{container}"))
        .stdout
        .trim()
        .to_string()
}

/// The repository's examples/ directory.
pub fn examples_dir() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples")
}

/// Everything of the daemon's pods still on the machine, as `TestDaemon::leftovers`, less the
/// QoS cgroups (`kubepods`, `kubepods/burstable`, `kubepods/besteffort`), which stay for the
/// node's lifetime as the kubelet's do, plus any pod cgroup (`pod<uid>`) left below them.
pub fn leftovers(d: &TestDaemon) -> Vec<String> {
    let mut out: Vec<String> = d
        .leftovers()
        .into_iter()
        .filter(|l| !l.ends_with("/kubepods"))
        .collect();
    for top in crate::host::cgroups_under(&d.cgroup_dir()) {
        let mut stack = vec![top];
        while let Some(dir) = stack.pop() {
            let name = dir.file_name().map(|n| n.to_string_lossy().into_owned());
            if name.as_deref().is_some_and(|n| n.starts_with("pod")) {
                out.push(format!("pod cgroup {}", dir.display()));
                continue;
            }
            if let Ok(rd) = std::fs::read_dir(&dir) {
                stack.extend(rd.flatten().map(|e| e.path()).filter(|p| p.is_dir()));
            }
        }
    }
    out
}
