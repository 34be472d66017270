//! peapod under Kubernetes' own components (built from k8s.io/kubernetes by k8s/build.sh):
//! a standalone kubelet with static pods, a one-node cluster running the examples with every
//! kubectl verb that goes through the runtime, and a two-node cluster that schedules the third
//! seed's pod as a whole, routes between nodes and survives its runtime's, its kubelet's and its
//! machine's deaths. Each test brings its cluster up with `scripts/cluster` and takes it down.

use e2e::cluster::{self, container_id, container_status, Cluster};
use serde_json::Value;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

const MINUTE: Duration = Duration::from_secs(60);

/// RuntimeClass "gvisor" (peapod's handler of that name: runsc) and a pod that asks for it.
const SANDBOXED_POD: &str = r#"apiVersion: node.k8s.io/v1
kind: RuntimeClass
metadata:
  name: gvisor
handler: gvisor
---
apiVersion: v1
kind: Pod
metadata:
  name: sandboxed
spec:
  runtimeClassName: gvisor
  containers:
  - name: app
    image: docker.io/library/busybox:latest
    imagePullPolicy: IfNotPresent
    command: ["sh", "-c", "dmesg | head -1; exec sleep 3600"]
"#;

fn examples() -> String {
    cluster::repo().join("examples").display().to_string()
}

/// NODE's pod sandboxes, containers, pinned namespaces, veths on its bridge, IPAM reservations
/// and pod cgroups: what must be gone once its pods are.
fn node_objects(c: &Cluster, node: &str) -> Vec<String> {
    let mut left: Vec<String> = c
        .sandboxes(node)
        .into_iter()
        .map(|s| format!("sandbox {s}"))
        .collect();
    left.extend(
        c.crictl(node, &["ps", "-a", "-q"])
            .lines()
            .filter(|l| !l.is_empty())
            .map(|l| format!("container {l}")),
    );
    let run = Path::new(cluster::RUN).join(node);
    if let Ok(rd) = std::fs::read_dir(run.join("netns")) {
        left.extend(
            rd.flatten()
                .map(|e| format!("netns {}", e.path().display())),
        );
    }
    left.extend(
        e2e::host::bridge_ports(&format!("ppk-{node}"))
            .into_iter()
            .map(|p| format!("veth {p}")),
    );
    let ipam = Path::new(cluster::DIR)
        .join(node)
        .join("peapod/cni/networks/peapod");
    if let Ok(rd) = std::fs::read_dir(&ipam) {
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if name != "lock" && !name.starts_with("last_reserved_ip") {
                left.push(format!("IP reservation {name}"));
            }
        }
    }
    for qos in ["", "burstable", "besteffort"] {
        let dir = Path::new("/sys/fs/cgroup/memory")
            .join(format!("peapod-{node}/kubepods"))
            .join(qos);
        if let Ok(rd) = std::fs::read_dir(&dir) {
            for e in rd.flatten() {
                if e.file_name().to_string_lossy().starts_with("pod") {
                    left.push(format!("cgroup {}", e.path().display()));
                }
            }
        }
    }
    left
}

fn assert_down(c: Cluster) {
    drop(c);
    let left = Cluster::leftovers();
    assert!(left.is_empty(), "after scripts/cluster down: {left:#?}");
}

fn cgroup_value(controller: &str, path: &str, file: &str) -> String {
    std::fs::read_to_string(
        Path::new("/sys/fs/cgroup")
            .join(controller)
            .join(path)
            .join(file),
    )
    .unwrap_or_else(|e| panic!("{controller}:{path}/{file}: {e}"))
    .trim()
    .to_string()
}

// ---- the kubelet on its own --------------------------------------------------------------------

/// The kubelet's own single-machine mode: the WAR example as a static pod from a manifest
/// directory, no API server; the kubelet's /pods shows it; removing the manifest removes it.
#[test]
fn a_standalone_kubelet_runs_the_war_pod_as_a_static_pod() {
    let c = Cluster::standalone();
    let manifests = Path::new(cluster::DIR).join("manifests");
    std::fs::copy(
        Path::new(&examples()).join("war-pod.yaml"),
        manifests.join("war-pod.yaml"),
    )
    .expect("copy the manifest");
    let kubelet_pods = || -> Value {
        let out = Command::new("curl")
            .args(["-fsSk", "--max-time", "5", "https://10.200.0.11:10250/pods"])
            .output()
            .expect("curl");
        serde_json::from_slice(&out.stdout).unwrap_or(Value::Null)
    };
    // A static pod is named after its node.
    let war = c.wait(
        "the static pod war-node-1 Running and Ready",
        3 * MINUTE,
        || {
            let pods = kubelet_pods();
            pods["items"].as_array()?.iter().find_map(|p| {
                (p["metadata"]["name"] == "war-node-1"
                    && p["status"]["phase"] == "Running"
                    && cluster::ready(p))
                .then(|| p.clone())
            })
        },
    );
    let init = container_status(&war, "initContainerStatuses", "deploy-war");
    assert_eq!(init["state"]["terminated"]["reason"], "Completed", "{init}");
    assert_eq!(init["state"]["terminated"]["exitCode"], 0);
    // The sidecar read what the init container wrote into the shared emptyDir.
    let shipper = container_id(container_status(&war, "containerStatuses", "log-shipper"));
    let log = c.crictl("node-1", &["logs", &shipper]);
    assert!(log.contains("sample.war deployed"), "{log}");
    assert_eq!(c.sandboxes("node-1").len(), 1);

    std::fs::remove_file(manifests.join("war-pod.yaml")).expect("remove the manifest");
    c.wait("the static pod gone from /pods", 2 * MINUTE, || {
        let pods = kubelet_pods();
        // An empty list is `"items": null`.
        let gone = pods.is_object() && pods["items"].as_array().is_none_or(|i| i.is_empty());
        gone.then_some(())
    });
    c.wait("nothing of the pod left on the node", 3 * MINUTE, || {
        node_objects(&c, "node-1").is_empty().then_some(())
    });
    assert_down(c);
}

// ---- one node ----------------------------------------------------------------------------------

/// With the kubelet's evented PLEG (GetContainerEvents), list streaming (Stream*) and
/// stats-from-CRI (every pod and container figure from peapod, none from cAdvisor) gates on;
/// the two-node test runs with the defaults, which is what most nodes run.
#[test]
fn a_one_node_cluster_runs_the_examples_with_every_kubectl_verb() {
    // The gvisor RuntimeClass below needs runsc (scripts/cluster configures it when built):
    // without it, fail now saying so, not after the pod's two minutes.
    e2e::registry_clients::built_by("runsc", "runsc");
    let c = Cluster::up_with_gates(
        1,
        "EventedPLEG=true,PLEGOnDemandRelist=true,CRIListStreaming=true,PodAndContainerStatsFromCRI=true",
    );
    c.kubectl_ok(&["apply", "-f", &examples()]);
    for pod in ["war", "guaranteed", "liveness"] {
        c.wait_ready(pod, 2 * MINUTE);
    }
    // The init container ran once: with a PodSandboxStatus timestamp, kubelet 1.37's evented
    // path found no init container on the sandbox and ran it again and again.
    let war = c.pod("war");
    let init = container_status(&war, "initContainerStatuses", "deploy-war");
    assert_eq!(init["restartCount"], 0, "{init}");
    assert_eq!(init["state"]["terminated"]["exitCode"], 0, "{init}");
    let metrics = c.kubectl_ok(&["get", "--raw", "/api/v1/nodes/node-1/proxy/metrics"]);
    let connected = metrics
        .lines()
        .find(|l| l.starts_with("kubelet_evented_pleg_connection_success_count"))
        .and_then(|l| l.split_whitespace().last())
        .and_then(|v| v.parse::<f64>().ok())
        .unwrap_or(0.0);
    assert!(
        connected >= 1.0,
        "the kubelet's event stream from peapod: {connected}"
    );
    // With CRIListStreaming the kubelet lists through the Stream* calls (peapod's metrics on
    // 127.0.0.1:19101 count them by method).
    let ours = Command::new("curl")
        .args(["-fsS", "--max-time", "5", "http://127.0.0.1:19101/metrics"])
        .output()
        .expect("curl peapod's metrics");
    let ours = String::from_utf8_lossy(&ours.stdout);
    for method in ["StreamPodSandboxes", "StreamContainers"] {
        let calls: f64 = ours
            .lines()
            .filter(|l| {
                l.starts_with("grpc_server_handled_total")
                    && l.contains(&format!("grpc_method=\"{method}\""))
                    && l.contains("grpc_code=\"OK\"")
            })
            .filter_map(|l| l.split_whitespace().last()?.parse::<f64>().ok())
            .sum();
        assert!(calls >= 1.0, "{method} answered {calls} times\n{ours}");
    }
    // The kubelet's stats provider reads peapod's stats (the summary API that metrics-server,
    // eviction and `kubectl top` use): the pod's memory and network, its container's CPU and
    // writable layer, and the image filesystem (ImageFsInfo).
    let summary = c.wait(
        "the guaranteed pod in the kubelet's stats summary",
        MINUTE,
        || {
            let raw = c.kubectl_ok(&["get", "--raw", "/api/v1/nodes/node-1/proxy/stats/summary"]);
            let v: Value = serde_json::from_str(&raw).ok()?;
            let pod = v["pods"]
                .as_array()?
                .iter()
                .find(|p| p["podRef"]["name"] == "guaranteed")?
                .clone();
            let app = pod["containers"]
                .as_array()?
                .iter()
                .find(|c| c["name"] == "app")?;
            let complete = pod["memory"]["workingSetBytes"].as_u64()? > 0
                && pod["network"]["interfaces"]
                    .as_array()?
                    .iter()
                    .any(|i| i["name"] == "eth0")
                && app["cpu"]["usageCoreNanoSeconds"].as_u64()? > 0
                && app["rootfs"]["usedBytes"].is_u64();
            complete.then_some(v)
        },
    );
    let image_fs = &summary["node"]["runtime"]["imageFs"];
    assert!(
        image_fs["capacityBytes"].as_u64().unwrap_or(0) > 0,
        "{image_fs}"
    );
    assert!(
        image_fs["usedBytes"].as_u64().unwrap_or(0) > 0,
        "{image_fs}"
    );

    // The kubelet's QoS classes and the cgroup values it asked peapod for.
    let guaranteed = c.pod("guaranteed");
    assert_eq!(guaranteed["status"]["qosClass"], "Guaranteed");
    assert_eq!(c.pod("war")["status"]["qosClass"], "Burstable");
    assert_eq!(c.pod("liveness")["status"]["qosClass"], "BestEffort");
    let uid = guaranteed["metadata"]["uid"].as_str().unwrap().to_string();
    let app = container_id(container_status(&guaranteed, "containerStatuses", "app"));
    let cg = format!("peapod-node-1/kubepods/pod{uid}/{app}");
    assert_eq!(
        cgroup_value("cpu", &cg, "cpu.cfs_quota_us"),
        "25000",
        "250m"
    );
    assert_eq!(cgroup_value("cpu", &cg, "cpu.shares"), "256");
    assert_eq!(
        cgroup_value("memory", &cg, "memory.limit_in_bytes"),
        (64 * 1024 * 1024).to_string()
    );
    // Allocatable memory (3 GiB) plus the eviction threshold is the pods' cgroup limit.
    assert_eq!(
        cgroup_value("memory", "peapod-node-1/kubepods", "memory.limit_in_bytes"),
        ((3 * 1024 + 100) * 1024 * 1024_u64).to_string()
    );

    // logs, logs -f
    let logs = c.kubectl_ok(&["logs", "war", "-c", "log-shipper"]);
    assert!(logs.contains("sample.war deployed"), "{logs}");
    let follow = Command::new("timeout")
        .args(["8"])
        .arg(cluster::repo().join("scripts/cluster"))
        .args(["kubectl", "logs", "-f", "war", "-c", "log-shipper"])
        .output()
        .expect("kubectl logs -f");
    let followed = String::from_utf8_lossy(&follow.stdout);
    assert_eq!(follow.status.code(), Some(124), "-f follows until killed");
    assert!(followed.contains("sample.war deployed"), "{followed}");

    // exec: output and exit codes; -i with stdin; -t with a terminal.
    let out = c.kubectl(&["exec", "war", "-c", "web", "--", "cat", "/webapps/DEPLOYED"]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("deployed"));
    let out = c.kubectl(&["exec", "war", "-c", "web", "--", "sh", "-c", "exit 3"]);
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    let mut child = Command::new(cluster::repo().join("scripts/cluster"))
        .args([
            "kubectl",
            "exec",
            "-i",
            "war",
            "-c",
            "web",
            "--",
            "sh",
            "-c",
            "read x; echo got:$x",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("kubectl exec -i");
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().unwrap();
        writeln!(stdin, "abc").unwrap();
    }
    let out = child.wait_with_output().unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "got:abc");
    let tty = Command::new("script")
        .args(["-qec"])
        .arg(format!(
            "{} kubectl exec -it war -c web -- sh -c 'tty; stty size'",
            cluster::repo().join("scripts/cluster").display()
        ))
        .arg("/dev/null")
        .stdin(Stdio::null())
        .output()
        .expect("kubectl exec -it under script(1)");
    let tty_out = String::from_utf8_lossy(&tty.stdout);
    assert!(tty_out.contains("/dev/pts/"), "{tty_out}");

    // attach: kubectl run -i attaches to the new container's stdin and output.
    let mut child = Command::new(cluster::repo().join("scripts/cluster"))
        .args([
            "kubectl",
            "run",
            "attached",
            "--image=docker.io/library/busybox:latest",
            "--image-pull-policy=IfNotPresent",
            "--restart=Never",
            "-i",
            "--command",
            "--",
            "sh",
            "-c",
            "read x; echo attached:$x",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kubectl run -i");
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().unwrap();
        // Give attach a moment: what is written before it connects is not lost (stdinOnce),
        // but a line written at once tests nothing about the stream.
        std::thread::sleep(Duration::from_secs(3));
        writeln!(stdin, "zzz").unwrap();
    }
    let out = child.wait_with_output().unwrap();
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("attached:zzz"),
        "{out:?}"
    );
    c.kubectl_ok(&["delete", "pod", "attached"]);

    // port-forward
    let mut pf = Command::new(cluster::repo().join("scripts/cluster"))
        .args(["kubectl", "port-forward", "pod/war", "18080:8080"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("kubectl port-forward");
    let page = c.wait(
        "a page through port-forward",
        Duration::from_secs(30),
        || {
            let out = Command::new("curl")
                .args(["-fsS", "--max-time", "3", "http://127.0.0.1:18080/"])
                .output()
                .ok()?;
            out.status
                .success()
                .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
        },
    );
    let _ = pf.kill();
    let _ = pf.wait();
    assert!(page.contains("deployed by the init container"), "{page}");

    // cp, both ways (kubectl cp runs tar in the container through exec).
    let tmp = tempfile::tempdir().unwrap();
    let local = tmp.path().join("in.txt");
    std::fs::write(&local, "copied in\n").unwrap();
    c.kubectl_ok(&[
        "cp",
        &local.display().to_string(),
        "war:/tmp/in.txt",
        "-c",
        "log-shipper",
    ]);
    let back = c.kubectl_ok(&[
        "exec",
        "war",
        "-c",
        "log-shipper",
        "--",
        "cat",
        "/tmp/in.txt",
    ]);
    assert_eq!(back, "copied in\n");
    let out_file = tmp.path().join("out.txt");
    c.kubectl_ok(&[
        "cp",
        "war:/webapps/DEPLOYED",
        &out_file.display().to_string(),
        "-c",
        "web",
    ]);
    assert!(std::fs::read_to_string(&out_file)
        .unwrap()
        .contains("deployed"));

    // describe
    let described = c.kubectl_ok(&["describe", "pod", "guaranteed"]);
    assert!(
        described.contains("QoS Class:                   Guaranteed"),
        "{described}"
    );
    assert!(described.contains("Started"), "{described}");

    // A liveness failure (the file goes after 30 s) is restarted and counted by the kubelet.
    let restarted = c.wait(
        "the liveness pod restarted by the kubelet",
        3 * MINUTE,
        || {
            let pod = c.pod("liveness");
            let n =
                container_status(&pod, "containerStatuses", "liveness")["restartCount"].as_u64()?;
            (n >= 1).then_some(pod)
        },
    );
    let events = c.kubectl_ok(&[
        "get",
        "events",
        "--field-selector",
        "involvedObject.name=liveness",
    ]);
    assert!(
        events.contains("failed liveness probe"),
        "{events}\n{restarted}"
    );

    // Log rotation: past containerLogMaxSize (1 MiB here) the kubelet renames the log and
    // asks peapod to reopen it (ReopenContainerLog); the container's output goes on into the
    // new file and kubectl logs reads it.
    let manifest = tmp.path().join("chatty.yaml");
    std::fs::write(
        &manifest,
        r#"apiVersion: v1
kind: Pod
metadata: {name: chatty}
spec:
  containers:
  - name: talk
    image: docker.io/library/busybox:latest
    imagePullPolicy: IfNotPresent
    # About 100 KB a second: a rotation every ten seconds or so.
    command: ["sh", "-c", "trap 'exit 0' TERM; (i=0; while true; do i=$((i+1)); printf 'line %s %0100d\n' $i 0; [ $((i % 100)) = 0 ] && sleep 0.1; done) & wait"]
"#,
    )
    .unwrap();
    c.kubectl_ok(&["apply", "-f", &manifest.display().to_string()]);
    let chatty = c.wait_ready("chatty", MINUTE);
    let uid = chatty["metadata"]["uid"].as_str().unwrap().to_string();
    let log_dir = Path::new(cluster::DIR)
        .join("node-1/pod-logs")
        .join(format!("default_chatty_{uid}/talk"));
    let rotated = c.wait("a rotated log of chatty", MINUTE, || {
        let rd = std::fs::read_dir(&log_dir).ok()?;
        rd.flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .find(|n| n.starts_with("0.log."))
    });
    // Reopened: the live file grows again after the rotation.
    let live = log_dir.join("0.log");
    let size = || std::fs::metadata(&live).map(|m| m.len()).unwrap_or(0);
    let first = size();
    c.wait("the reopened log growing", Duration::from_secs(20), || {
        (size() > first).then_some(())
    });
    let tail = c.kubectl_ok(&["logs", "chatty", "--tail", "1"]);
    assert!(tail.starts_with("line "), "{tail} (rotated: {rotated})");
    c.kubectl_ok(&["delete", "pod", "chatty", "--wait=true"]);

    // A sandboxed RuntimeClass: RuntimeClass "gvisor" names peapod's gvisor handler (runsc,
    // which scripts/cluster configures), and its pod runs in a gVisor sandbox, logs and exec
    // through kubectl included.
    let manifests = tempfile::tempdir().unwrap();
    let sandboxed = manifests.path().join("sandboxed.yaml");
    std::fs::write(&sandboxed, SANDBOXED_POD).unwrap();
    c.kubectl_ok(&["apply", "-f", &sandboxed.display().to_string()]);
    c.wait_ready("sandboxed", 2 * MINUTE);
    let logs = c.kubectl_ok(&["logs", "sandboxed"]);
    assert!(logs.contains("Starting gVisor"), "{logs}");
    let release = c.kubectl_ok(&["exec", "sandboxed", "--", "uname", "-r"]);
    let host_release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    assert_ne!(
        release.trim(),
        host_release.trim(),
        "exec on the host's kernel"
    );
    c.kubectl_ok(&[
        "delete",
        "-f",
        &sandboxed.display().to_string(),
        "--wait=true",
    ]);

    // kubectl delete: the kubelet stops the pods and its garbage collection removes them;
    // nothing is left on the node.
    c.kubectl_ok(&["delete", "-f", &examples(), "--wait=true"]);
    let left = c.wait("nothing of the pods left on the node", 3 * MINUTE, || {
        let left = node_objects(&c, "node-1");
        left.is_empty().then_some(left)
    });
    assert!(left.is_empty());
    assert_down(c);
}

// ---- two nodes ---------------------------------------------------------------------------------

#[test]
fn a_two_node_cluster_schedules_whole_pods_routes_between_nodes_and_survives_deaths() {
    let c = Cluster::up(2);
    let nodes = c.json(&["get", "nodes"]);
    let allocatable = |name: &str| {
        nodes["items"]
            .as_array()
            .unwrap()
            .iter()
            .find(|n| n["metadata"]["name"] == name)
            .map(|n| {
                n["status"]["allocatable"]["memory"]
                    .as_str()
                    .unwrap()
                    .to_string()
            })
            .unwrap()
    };
    assert_eq!(allocatable("node-1"), "3Gi");
    assert_eq!(allocatable("node-2"), "2560Mi");

    c.kubectl_ok(&["apply", "-f", &format!("{}/cluster", examples())]);
    let syslog = c.wait_ready("syslog", 2 * MINUTE);
    // Three 1 GiB containers fit node-1 (3 GiB) as a whole, and not node-2 (2.5 GiB).
    assert_eq!(syslog["spec"]["nodeName"], "node-1");
    for name in ["main", "imklog", "imuxsock"] {
        let st = container_status(&syslog, "containerStatuses", name);
        assert_eq!(st["ready"], true, "{name}: {st}");
    }
    let too_big = c.wait("too-big FailedScheduling", MINUTE, || {
        let events = c.kubectl_ok(&[
            "get",
            "events",
            "--field-selector",
            "involvedObject.name=too-big,reason=FailedScheduling",
            "-o",
            "json",
        ]);
        let v: Value = serde_json::from_str(&events).ok()?;
        v["items"].as_array()?.first().cloned()
    });
    assert!(
        too_big["message"]
            .as_str()
            .unwrap_or("")
            .contains("Insufficient memory"),
        "{too_big}"
    );
    assert_eq!(c.pod("too-big")["status"]["phase"], "Pending");

    // A pod on node-1 reaches a pod on node-2 by its pod IP, and back.
    let p1 = c.wait_ready("pinger-1", 2 * MINUTE);
    let p2 = c.wait_ready("pinger-2", 2 * MINUTE);
    assert_eq!(p2["spec"]["nodeName"], "node-2");
    let ip1 = p1["status"]["podIP"].as_str().unwrap().to_string();
    let ip2 = p2["status"]["podIP"].as_str().unwrap().to_string();
    assert!(
        ip1.starts_with("10.244.1.") && ip2.starts_with("10.244.2."),
        "{ip1} {ip2}"
    );
    // What pod FROM gets from the web server of the pod at IP (busybox's wget -T crashes:
    // timeout(1) bounds it).
    let fetch = |from: &str, ip: &str| {
        let url = format!("http://{ip}:8080/");
        c.kubectl_ok(&["exec", from, "--", "timeout", "5", "wget", "-qO-", &url])
    };
    let got = fetch("pinger-1", &ip2);
    assert_eq!(got.trim(), "pinger-2");
    let got = fetch("pinger-2", &ip1);
    assert_eq!(got.trim(), "pinger-1");

    // What runs on node-1 now: the containers' ids and restart counts.
    let snapshot = || -> Vec<(String, String, u64)> {
        ["syslog", "pinger-1"]
            .iter()
            .flat_map(|pod| {
                let p = c.pod(pod);
                p["status"]["containerStatuses"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|s| {
                        (
                            format!("{pod}/{}", s["name"].as_str().unwrap()),
                            container_id(s),
                            s["restartCount"].as_u64().unwrap(),
                        )
                    })
                    .collect::<Vec<_>>()
            })
            .collect()
    };
    let before = snapshot();
    assert!(before.iter().all(|(_, _, n)| *n == 0), "{before:?}");

    // kill -9 of peapod under a running kubelet: the pods keep running, no restart.
    cluster::run_script(&["kill", "node-1", "peapod"]);
    std::thread::sleep(Duration::from_secs(3));
    cluster::run_script(&["start", "node-1"]);
    // Two kubelet relists and a status update later, nothing has changed.
    std::thread::sleep(Duration::from_secs(12));
    assert_eq!(snapshot(), before, "after kill -9 of node-1's peapod");
    assert!(cluster::ready(&c.pod("syslog")));

    // kill -9 of the kubelet: the pods keep running; the kubelet started again adopts them.
    cluster::run_script(&["kill", "node-1", "kubelet"]);
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(
        c.sandboxes("node-1").len(),
        2,
        "pods run without their kubelet"
    );
    let got = fetch("pinger-2", &ip1);
    assert_eq!(
        got.trim(),
        "pinger-1",
        "node-1's pod serves without its kubelet"
    );
    cluster::run_script(&["start", "node-1"]);
    std::thread::sleep(Duration::from_secs(12));
    assert_eq!(snapshot(), before, "after kill -9 of node-1's kubelet");

    // The machine of node-1 goes down and comes up: the kubelet brings its pods back (new
    // containers, counted as restarts).
    cluster::run_script(&["reboot", "node-1"]);
    c.wait("node-1's pods back after its reboot", 3 * MINUTE, || {
        let after = snapshot();
        let back = after.iter().all(|(_, id, n)| *n >= 1 && !id.is_empty())
            && ["syslog", "pinger-1"]
                .iter()
                .all(|p| cluster::ready(&c.pod(p)));
        back.then_some(after)
    });
    let p1 = c.pod("pinger-1");
    let ip1 = p1["status"]["podIP"].as_str().unwrap().to_string();
    let got = fetch("pinger-2", &ip1);
    assert_eq!(
        got.trim(),
        "pinger-1",
        "node-1's pod reachable after the reboot"
    );

    c.kubectl_ok(&[
        "delete",
        "-f",
        &format!("{}/cluster", examples()),
        "--wait=true",
    ]);
    for node in ["node-1", "node-2"] {
        c.wait(
            &format!("nothing of the pods left on {node}"),
            3 * MINUTE,
            || node_objects(&c, node).is_empty().then_some(()),
        );
    }
    assert_down(c);
}
