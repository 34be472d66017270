//! Pods from manifests, end to end through the `peapod` CLI: `peapod apply -f` against a real
//! daemon (its pod supervisor driving real runc, CNI and overlay mounts), checked through
//! `peapod get pod NAME -o json`, `describe`, `logs`, `exec`, `wait` and `delete`, and through
//! CRI and the host (cgroups) for what must not exist.
//!
//! Polling is bounded ("within 90 s it reaches X"); nothing asserts on speed.
//!
//! Known defect on the pod supervisor's side (branch `pod`), which these tests catch:
//! - A pod whose init container failed with restartPolicy Never is Failed with condition
//!   Initialized=True (reason PodCompleted); the kubelet reports Initialized=True/PodCompleted
//!   only for Succeeded pods, so kubectl (and `peapod get pods`) shows `Init:Error` for it.
//!   With Initialized=True the table shows the app container's `PodInitializing` instead.

use e2e::kube::{
    apply, condition, container_status, examples_dir, exec_read, get_pod, int, leftovers, peapod,
    pod_daemon, text, wait_pod,
};
use e2e::{host, TestDaemon};
use peapod_proto::v1 as cri;
use serde_json::Value;
use std::collections::HashMap;
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(90);

fn phase(p: &Value) -> &str {
    text(p, "/status/phase")
}

fn restart_count(p: &Value, container: &str) -> i64 {
    container_status(p, container)
        .map(|s| int(s, "/restartCount"))
        .unwrap_or(-1)
}

/// CRI objects carrying the pod's name label.
async fn cri_objects_of(
    d: &mut TestDaemon,
    pod: &str,
) -> (Vec<cri::PodSandbox>, Vec<cri::Container>) {
    let labels: HashMap<String, String> =
        [("io.kubernetes.pod.name".to_string(), pod.to_string())].into();
    let sandboxes = d
        .cri
        .runtime
        .list_pod_sandbox(cri::ListPodSandboxRequest {
            filter: Some(cri::PodSandboxFilter {
                label_selector: labels.clone(),
                ..Default::default()
            }),
        })
        .await
        .expect("ListPodSandbox")
        .into_inner()
        .items;
    let containers = d
        .cri
        .runtime
        .list_containers(cri::ListContainersRequest {
            filter: Some(cri::ContainerFilter {
                label_selector: labels,
                ..Default::default()
            }),
        })
        .await
        .expect("ListContainers")
        .into_inner()
        .containers;
    (sandboxes, containers)
}

fn container_names(cs: &[cri::Container]) -> Vec<String> {
    cs.iter()
        .map(|c| {
            c.labels
                .get("io.kubernetes.container.name")
                .cloned()
                .unwrap_or_default()
        })
        .collect()
}

/// Pod cgroups (`pod<uid>`) anywhere below the daemon's cgroup parent, in any hierarchy.
fn pod_cgroups(d: &TestDaemon, uid: &str) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let mut stack = host::cgroups_under(&d.cgroup_dir());
    while let Some(dir) = stack.pop() {
        if dir
            .file_name()
            .is_some_and(|n| n.to_string_lossy().contains(uid))
        {
            out.push(dir.clone());
        }
        if let Ok(rd) = std::fs::read_dir(&dir) {
            stack.extend(rd.flatten().map(|e| e.path()).filter(|p| p.is_dir()));
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn war_pod_init_then_server_and_sidecar_share_volumes_and_localhost() {
    let mut d = pod_daemon("apply-war").await;
    let file = examples_dir().join("war-pod.yaml");
    let r = peapod(&d, &["apply", "-f", &file.display().to_string()]).ok("apply war");
    assert_eq!(r.stdout, "pod/war created\n");
    // Applying the same manifest again changes nothing.
    let r = peapod(&d, &["apply", "-f", &file.display().to_string()]).ok("apply war again");
    assert_eq!(r.stdout, "pod/war unchanged\n");

    let r = peapod(
        &d,
        &[
            "wait",
            "pod",
            "war",
            "--for",
            "condition=Ready",
            "--timeout",
            "120s",
        ],
    );
    if r.code != 0 {
        wait_pod(&d, "war", Duration::ZERO, "Ready", |_| false);
    }
    assert_eq!(r.stdout, "pod/war condition met\n");

    let pod = get_pod(&d, "war").expect("war exists");
    assert_eq!(phase(&pod), "Running");
    assert_eq!(condition(&pod, "Initialized"), "True");
    assert_eq!(condition(&pod, "ContainersReady"), "True");
    let init = container_status(&pod, "deploy-war").expect("init container status");
    assert_eq!(
        text(init, "/state/terminated/reason"),
        "Completed",
        "{init}"
    );
    assert_eq!(int(init, "/state/terminated/exitCode"), 0);
    // web requests cpu/memory and limits memory only: Burstable.
    assert_eq!(text(&pod, "/status/qosClass"), "Burstable");
    for c in ["web", "log-shipper"] {
        let st = container_status(&pod, c).expect("app container status");
        assert!(st.pointer("/state/running").is_some(), "{c}: {st}");
        assert!(text(st, "/containerID").starts_with("peapod://"), "{st}");
    }

    // The sidecar sees what the init container wrote, in its own log.
    let logs = peapod(&d, &["logs", "war", "-c", "log-shipper"]).ok("logs");
    assert!(logs.stdout.contains("sample.war deployed"), "{logs:#?}");
    // Several app containers: a container must be named, as kubectl says.
    let r = peapod(&d, &["logs", "war"]);
    assert_eq!(r.code, 1);
    assert!(
        r.stderr.contains("choose one of: [web log-shipper]"),
        "{r:#?}"
    );

    // The server answers on the pod IP, from the host.
    let ip = text(&pod, "/status/podIP").to_string();
    assert!(!ip.is_empty(), "{pod}");
    let url = format!("http://{ip}:8080/");
    let fetch = || {
        // busybox 1.35's wget crashes with -T; coreutils' timeout bounds it instead.
        let o = std::process::Command::new("timeout")
            .args(["20", "/bin/busybox", "wget", "-O", "-", &url])
            .output()
            .expect("/bin/busybox wget (busybox-static)");
        (
            String::from_utf8_lossy(&o.stdout).into_owned(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    };
    let (page, err) = fetch();
    assert!(
        page.contains("sample.war, deployed by the init container"),
        "GET {url}: {page:?} {err:?}"
    );
    // ... and the sidecar reaches it over localhost (its requests land in the shared log).
    let shipped = wait_pod(&d, "war", LIMIT, "shipping the server's log", |_| {
        peapod(&d, &["logs", "war", "-c", "log-shipper"])
            .stdout
            .contains("url:/")
    });
    drop(shipped);

    // The table and the description, as kubectl shows them.
    let table = peapod(&d, &["get", "pods", "-o", "wide"]).ok("get pods -o wide");
    let row = table.stdout.lines().nth(1).unwrap_or("").to_string();
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(&cells[..3], ["war", "2/2", "Running"], "{table:#?}");
    assert!(
        cells.contains(&ip.as_str()) && cells.contains(&"e2e-node"),
        "{row}"
    );
    let named = peapod(&d, &["get", "pods", "-l", "app=war", "-o", "name"]).ok("get -l");
    assert_eq!(named.stdout, "pod/war\n");
    let none = peapod(&d, &["get", "pods", "-l", "app!=war"]).ok("get -l none");
    assert_eq!(none.stderr, "No resources found in default namespace.\n");
    let describe = peapod(&d, &["describe", "pod", "war"]).ok("describe");
    for needle in [
        "Init Containers:\n  deploy-war:\n",
        "      Reason:       Completed\n",
        "QoS Class:",
        "Events:",
        "Started",
    ] {
        assert!(
            describe.stdout.contains(needle),
            "{needle:?} in\n{}",
            describe.stdout
        );
    }

    let uid = text(&pod, "/metadata/uid").to_string();
    let r = peapod(&d, &["delete", "pod", "war"]).ok("delete");
    assert_eq!(r.stdout, "pod \"war\" deleted\n");
    let (sandboxes, containers) = cri_objects_of(&mut d, "war").await;
    assert!(
        sandboxes.is_empty() && containers.is_empty(),
        "{sandboxes:?} {containers:?}"
    );
    assert!(
        pod_cgroups(&d, &uid).is_empty(),
        "{:?}",
        pod_cgroups(&d, &uid)
    );
    let r = peapod(&d, &["get", "pod", "war"]);
    assert_eq!(r.code, 1);
    assert_eq!(
        r.stderr,
        "Error from server (NotFound): pods \"war\" not found\n"
    );
    assert!(leftovers(&d).is_empty(), "{:#?}", leftovers(&d));
}

/// Reads cpu.shares, cpu.cfs_quota_us and the memory limit from inside the container.
fn cgroup_values(d: &TestDaemon, pod: &str) -> (String, String, String) {
    (
        exec_read(d, pod, "app", "/sys/fs/cgroup/cpu/cpu.shares"),
        exec_read(d, pod, "app", "/sys/fs/cgroup/cpu/cpu.cfs_quota_us"),
        exec_read(d, pod, "app", "/sys/fs/cgroup/memory/memory.limit_in_bytes"),
    )
}

fn resource_pod(name: &str, resources: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  containers:\n  - name: app\n    \
         image: docker.io/library/busybox:latest\n    imagePullPolicy: IfNotPresent\n    command: [\"sleep\", \"3600\"]\n{resources}"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cgroup_values_follow_the_kubelet_formulas_for_each_qos_class() {
    let d = pod_daemon("apply-qos").await;
    let guaranteed = examples_dir().join("guaranteed-pod.yaml");
    peapod(&d, &["apply", "-f", &guaranteed.display().to_string()]).ok("apply guaranteed");
    apply(
        &d,
        &resource_pod(
            "burstable",
            "    resources:\n      requests:\n        cpu: 100m\n        memory: 32Mi\n      limits:\n        cpu: 500m\n        memory: 128Mi\n",
        ),
    )
    .ok("apply burstable");
    apply(&d, &resource_pod("besteffort", "")).ok("apply besteffort");
    for name in ["guaranteed", "burstable", "besteffort"] {
        wait_pod(&d, name, LIMIT, "Ready", |p| {
            condition(p, "Ready") == "True"
        });
    }
    let qos = |name: &str| text(&get_pod(&d, name).unwrap(), "/status/qosClass").to_string();
    assert_eq!(qos("guaranteed"), "Guaranteed");
    assert_eq!(qos("burstable"), "Burstable");
    assert_eq!(qos("besteffort"), "BestEffort");

    // shares = max(2, milliCPU*1024/1000) of the request; quota = milliCPU*100000/1000 of the
    // limit (period 100000), -1 without one; memory limit in bytes, unlimited without one.
    assert_eq!(
        cgroup_values(&d, "guaranteed"),
        ("256".into(), "25000".into(), (64u64 << 20).to_string())
    );
    assert_eq!(
        cgroup_values(&d, "burstable"),
        ("102".into(), "50000".into(), (128u64 << 20).to_string())
    );
    let (shares, quota, memory) = cgroup_values(&d, "besteffort");
    assert_eq!((shares.as_str(), quota.as_str()), ("2", "-1"));
    let unlimited: u64 = memory.parse().expect("memory limit is a number");
    assert!(unlimited > 1 << 60, "BestEffort memory limit {memory}");
    let period = exec_read(
        &d,
        "guaranteed",
        "app",
        "/sys/fs/cgroup/cpu/cpu.cfs_period_us",
    );
    assert_eq!(period, "100000");

    let r = peapod(&d, &["delete", "-f", &guaranteed.display().to_string()]).ok("delete -f");
    assert_eq!(r.stdout, "pod \"guaranteed\" deleted\n");
    peapod(&d, &["delete", "pod", "burstable", "besteffort"]).ok("delete two");
    let r = peapod(&d, &["get", "pods"]).ok("get pods");
    assert_eq!(r.stderr, "No resources found in default namespace.\n");
    assert!(leftovers(&d).is_empty(), "{:#?}", leftovers(&d));
}

const LIVENESS: &str = r#"apiVersion: v1
kind: Pod
metadata:
  name: flaky
spec:
  terminationGracePeriodSeconds: 2
  containers:
  - name: app
    image: docker.io/library/busybox:latest
    imagePullPolicy: IfNotPresent
    command:
    - sh
    - -c
    - |
      n=$(cat /data/n 2>/dev/null || echo 0); n=$((n+1)); echo $n > /data/n
      echo "instance $n"
      touch /tmp/healthy; sleep 3; rm -f /tmp/healthy; sleep 600
    livenessProbe:
      exec:
        command: ["cat", "/tmp/healthy"]
      initialDelaySeconds: 1
      periodSeconds: 1
      failureThreshold: 2
    volumeMounts:
    - name: data
      mountPath: /data
  volumes:
  - name: data
    emptyDir: {}
"#;

fn instance(log: &str) -> i64 {
    log.lines()
        .filter_map(|l| l.strip_prefix("instance "))
        .filter_map(|n| n.trim().parse().ok())
        .next_back()
        .unwrap_or(-1)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn liveness_failure_restarts_the_container_also_after_a_daemon_kill() {
    let mut d = pod_daemon("apply-liveness").await;
    apply(&d, LIVENESS).ok("apply flaky");
    let pod = wait_pod(&d, "flaky", LIMIT, "restarted by its liveness probe", |p| {
        restart_count(p, "app") >= 1
            && container_status(p, "app").is_some_and(|s| s.pointer("/state/running").is_some())
    });
    let st = container_status(&pod, "app").unwrap();
    assert!(
        text(st, "/lastState/terminated/containerID").starts_with("peapod://"),
        "{st}"
    );
    let describe = peapod(&d, &["describe", "pod", "flaky"])
        .ok("describe")
        .stdout;
    assert!(describe.contains("Unhealthy"), "{describe}");
    assert!(describe.contains("Killing"), "{describe}");
    assert!(
        describe.contains(
            "exec [cat /tmp/healthy] delay=1s timeout=1s period=1s #success=1 #failure=2"
        ),
        "{describe}"
    );

    // logs: the current instance; --previous: the one before the restart.
    let current = wait_pod(&d, "flaky", LIMIT, "logging", |_| {
        instance(&peapod(&d, &["logs", "flaky"]).stdout) >= 2
    });
    drop(current);
    let now = peapod(&d, &["logs", "flaky"]).ok("logs").stdout;
    let before = peapod(&d, &["logs", "flaky", "--previous"])
        .ok("logs --previous")
        .stdout;
    let (n_now, n_before) = (instance(&now), instance(&before));
    assert!(
        n_before >= 1 && n_now > n_before,
        "now {now:?}, previous {before:?}"
    );
    let tail = peapod(&d, &["logs", "flaky", "--tail", "1", "--timestamps"]).ok("logs --tail");
    assert_eq!(tail.stdout.lines().count(), 1, "{tail:#?}");
    assert!(tail.stdout.contains("Z instance "), "{tail:#?}");

    // kill -9 of the daemon, and a new one on the same state: the pod is still supervised.
    let count = restart_count(&get_pod(&d, "flaky").unwrap(), "app");
    for pid in host::processes_with(&format!("{}/config.toml", d.dir.display())) {
        // SAFETY: kill has no memory-safety preconditions.
        unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    }
    d.restart().await;
    wait_pod(
        &d,
        "flaky",
        LIMIT,
        "restarted again after the daemon restart",
        |p| restart_count(p, "app") > count,
    );
    peapod(&d, &["delete", "pod", "flaky", "--grace-period", "1"]).ok("delete");
    assert!(leftovers(&d).is_empty(), "{:#?}", leftovers(&d));
}

const READINESS: &str = r#"apiVersion: v1
kind: Pod
metadata:
  name: gate
spec:
  containers:
  - name: app
    image: docker.io/library/busybox:latest
    imagePullPolicy: IfNotPresent
    command: ["sleep", "3600"]
    readinessProbe:
      exec:
        command: ["cat", "/tmp/ready"]
      periodSeconds: 1
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_toggles_ready_both_ways_and_exec_returns_exit_codes() {
    let d = pod_daemon("apply-ready").await;
    apply(&d, READINESS).ok("apply gate");
    wait_pod(&d, "gate", LIMIT, "running", |p| {
        container_status(p, "app").is_some_and(|s| s.pointer("/state/running").is_some())
    });
    let r = peapod(
        &d,
        &[
            "wait",
            "pod/gate",
            "--for",
            "condition=Ready=false",
            "--timeout",
            "60s",
        ],
    );
    assert_eq!(
        (r.code, r.stdout.as_str()),
        (0, "pod/gate condition met\n"),
        "{r:#?}"
    );
    // A condition that never comes: kubectl's timeout message and status 1.
    let r = peapod(
        &d,
        &[
            "wait",
            "pod",
            "gate",
            "--for",
            "condition=Ready",
            "--timeout",
            "2s",
        ],
    );
    assert_eq!(r.code, 1, "{r:#?}");
    assert_eq!(
        r.stderr,
        "error: timed out waiting for the condition on pods/gate\n"
    );

    peapod(&d, &["exec", "gate", "--", "touch", "/tmp/ready"]).ok("touch");
    peapod(
        &d,
        &[
            "wait",
            "pod",
            "gate",
            "--for",
            "condition=Ready",
            "--timeout",
            "60s",
        ],
    )
    .ok("wait Ready");
    assert_eq!(
        condition(&get_pod(&d, "gate").unwrap(), "ContainersReady"),
        "True"
    );
    let table = peapod(&d, &["get", "pod", "gate"]).ok("get");
    assert!(
        table
            .stdout
            .lines()
            .nth(1)
            .unwrap_or("")
            .starts_with("gate      1/1       Running"),
        "{table:#?}"
    );
    peapod(&d, &["exec", "gate", "--", "rm", "/tmp/ready"]).ok("rm");
    peapod(
        &d,
        &[
            "wait",
            "pod",
            "gate",
            "--for",
            "condition=Ready=false",
            "--timeout",
            "60s",
        ],
    )
    .ok("wait not Ready");

    // exec: the command's exit code is the CLI's, its output comes through.
    let r = peapod(
        &d,
        &[
            "exec",
            "gate",
            "--",
            "sh",
            "-c",
            "echo out; echo err >&2; exit 7",
        ],
    );
    assert_eq!((r.code, r.stdout.as_str()), (7, "out\n"), "{r:#?}");
    assert!(
        r.stderr.contains("err\n") && r.stderr.contains("command terminated with exit code 7"),
        "{r:#?}"
    );
    // -i: stdin through the streaming server.
    let r = e2e::kube::peapod_stdin(
        &d,
        &[
            "exec",
            "-i",
            "gate",
            "--",
            "sh",
            "-c",
            "read x; echo got $x; exit 3",
        ],
        Some("hello\n"),
    );
    assert_eq!((r.code, r.stdout.as_str()), (3, "got hello\n"), "{r:#?}");
    // -it: a terminal of the local terminal's size (script(1) gives the CLI a pseudo-terminal
    // of 40 rows, 100 columns), raw mode, and the exit code back.
    let cli = format!(
        "stty rows 40 cols 100; {} --endpoint {} exec -it gate -- sh -c {}",
        e2e::daemon::bin_dir().join("peapod").display(),
        d.socket.display(),
        // The size arrives on the resize stream, right after the command starts.
        "'for i in $(seq 1 100); do s=$(stty size 2>/dev/null); [ \"$s\" = \"40 100\" ] && break; sleep 0.05; done; echo \"size $s\"; tty; exit 4'"
    );
    let out = std::process::Command::new("script")
        .args(["-qec", &cli, "/dev/null"])
        .stdin(std::process::Stdio::null())
        .output()
        .expect("script(1)");
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(4), "{text}");
    assert!(text.contains("size 40 100"), "{text}");
    assert!(text.contains("/dev/pts/"), "{text}");

    // --for=delete
    let r = peapod(
        &d,
        &[
            "delete",
            "pod",
            "gate",
            "--wait=false",
            "--grace-period",
            "1",
        ],
    )
    .ok("delete");
    assert_eq!(r.stdout, "pod \"gate\" deleted\n");
    let r = peapod(
        &d,
        &["wait", "pod", "gate", "--for=delete", "--timeout", "60s"],
    )
    .ok("wait delete");
    assert_eq!(r.stdout, "pod/gate deleted\n");
    assert!(get_pod(&d, "gate").is_none());
}

fn run_once(name: &str, policy: &str, init: Option<&str>, script: &str) -> String {
    let init = init
        .map(|s| {
            format!(
                "  initContainers:\n  - name: init\n    image: docker.io/library/busybox:latest\n    imagePullPolicy: IfNotPresent\n    command: [\"sh\", \"-c\", \"{s}\"]\n"
            )
        })
        .unwrap_or_default();
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  restartPolicy: {policy}\n{init}  containers:\n  - name: app\n    \
         image: docker.io/library/busybox:latest\n    imagePullPolicy: IfNotPresent\n    command: [\"sh\", \"-c\", \"{script}\"]\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_once_pods_end_and_failures_keep_app_containers_from_being_created() {
    let mut d = pod_daemon("apply-never").await;
    apply(&d, &run_once("ok", "Never", None, "echo done")).ok("apply ok");
    apply(&d, &run_once("bad", "Never", None, "exit 3")).ok("apply bad");
    apply(
        &d,
        &run_once("noinit", "Never", Some("exit 1"), "echo never"),
    )
    .ok("apply noinit");
    let huge = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: huge\nspec:\n  containers:\n  - name: app\n    \
                image: docker.io/library/busybox:latest\n    imagePullPolicy: IfNotPresent\n    command: [\"sleep\", \"3600\"]\n    \
                resources:\n      requests:\n        cpu: \"64\"\n        memory: 1Gi\n";
    apply(&d, huge).ok("apply huge");
    let hungry = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: hungry\nspec:\n  containers:\n  - name: app\n    \
                image: docker.io/library/busybox:latest\n    imagePullPolicy: IfNotPresent\n    command: [\"sleep\", \"3600\"]\n    \
                resources:\n      requests:\n        memory: 100Gi\n";
    apply(&d, hungry).ok("apply hungry");
    apply(
        &d,
        &run_once(
            "counter",
            "Never",
            None,
            "for i in 1 2 3 4; do echo line $i; sleep 1; done",
        ),
    )
    .ok("apply counter");
    // logs -f follows the running container to its exit, then returns.
    wait_pod(&d, "counter", LIMIT, "running", |p| {
        container_status(p, "app").is_some_and(|s| s.pointer("/state/running").is_some())
    });
    let followed = peapod(&d, &["logs", "-f", "counter"]).ok("logs -f");
    assert_eq!(followed.stdout, "line 1\nline 2\nline 3\nline 4\n");

    let ok = wait_pod(&d, "ok", LIMIT, "Succeeded", |p| phase(p) == "Succeeded");
    let st = container_status(&ok, "app").unwrap();
    assert_eq!(text(st, "/state/terminated/reason"), "Completed", "{st}");
    let bad = wait_pod(&d, "bad", LIMIT, "Failed", |p| phase(p) == "Failed");
    let st = container_status(&bad, "app").unwrap();
    assert_eq!(int(st, "/state/terminated/exitCode"), 3, "{st}");
    assert_eq!(text(st, "/state/terminated/reason"), "Error", "{st}");
    assert_eq!(peapod(&d, &["logs", "ok"]).ok("logs ok").stdout, "done\n");

    let noinit = wait_pod(&d, "noinit", LIMIT, "Failed", |p| phase(p) == "Failed");
    let init = container_status(&noinit, "init").unwrap();
    assert_eq!(int(init, "/state/terminated/exitCode"), 1, "{init}");
    let (_, containers) = cri_objects_of(&mut d, "noinit").await;
    assert_eq!(
        container_names(&containers),
        ["init"],
        "only the init container was created"
    );

    let huge = wait_pod(&d, "huge", LIMIT, "Failed", |p| phase(p) == "Failed");
    assert_eq!(text(&huge, "/status/reason"), "OutOfcpu", "{huge}");
    let (sandboxes, containers) = cri_objects_of(&mut d, "huge").await;
    assert!(
        sandboxes.is_empty() && containers.is_empty(),
        "nothing of an unadmitted pod runs"
    );
    let hungry = wait_pod(&d, "hungry", LIMIT, "Failed", |p| phase(p) == "Failed");
    assert_eq!(text(&hungry, "/status/reason"), "OutOfmemory", "{hungry}");
    let (sandboxes, containers) = cri_objects_of(&mut d, "hungry").await;
    assert!(sandboxes.is_empty() && containers.is_empty());

    let table = peapod(&d, &["get", "pods"]).ok("get pods").stdout;
    let status: HashMap<&str, &str> = table
        .lines()
        .skip(1)
        .filter_map(|l| {
            let c: Vec<&str> = l.split_whitespace().collect();
            Some((*c.first()?, *c.get(2)?))
        })
        .collect();
    assert_eq!(status["ok"], "Completed", "{table}");
    assert_eq!(status["bad"], "Error", "{table}");
    assert_eq!(status["noinit"], "Init:Error", "{table}");
    assert_eq!(status["huge"], "OutOfcpu", "{table}");
    peapod(
        &d,
        &[
            "delete", "pod", "ok", "bad", "noinit", "huge", "hungry", "counter",
        ],
    )
    .ok("delete all");
    assert!(leftovers(&d).is_empty(), "{:#?}", leftovers(&d));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_manifests_are_refused_naming_the_field_and_nothing_is_created() {
    let mut d = pod_daemon("apply-bad").await;
    let good = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: fine\nspec:\n  containers:\n  - name: app\n    image: docker.io/library/busybox:latest\n";
    let cases: [(&str, String, &[&str]); 7] = [
        (
            "unknown field",
            good.replace("    image:", "    imagee: x\n    image:"),
            &["imagee"],
        ),
        (
            "missing image",
            good.replace("    image: docker.io/library/busybox:latest\n", ""),
            &["image"],
        ),
        (
            "duplicate names",
            format!("{good}  - name: app\n    image: docker.io/library/busybox:latest\n"),
            &["spec.containers[1].name"],
        ),
        (
            "bad quantity",
            format!("{good}    resources:\n      limits:\n        cpu: lots\n"),
            &["cpu"],
        ),
        (
            "bad name",
            good.replace("name: fine", "name: Not_A_Label"),
            &["metadata.name"],
        ),
        (
            "other kind",
            good.replace("kind: Pod", "kind: Deployment"),
            &["Deployment"],
        ),
        // All or nothing: a valid first document is not created when the second is bad.
        (
            "second document bad",
            format!(
                "{good}---\n{}",
                good.replace("name: fine", "name: other")
                    .replace("    image: docker.io/library/busybox:latest\n", "")
            ),
            &["image"],
        ),
    ];
    for (what, manifest, needles) in &cases {
        let r = apply(&d, manifest);
        assert_eq!(r.code, 1, "{what}: {r:#?}");
        for needle in *needles {
            assert!(
                r.stderr.contains(needle),
                "{what}: {needle:?} not in {:?}",
                r.stderr
            );
        }
        assert!(r.stdout.is_empty(), "{what}: {r:#?}");
        let list = peapod(&d, &["get", "pods", "-A"]).ok("get pods -A");
        assert_eq!(
            list.stderr, "No resources found\n",
            "{what}: something was created"
        );
    }
    let (sandboxes, containers) = cri_objects_of(&mut d, "fine").await;
    assert!(sandboxes.is_empty() && containers.is_empty());
    // Not a Pod manifest at all, given to delete -f: refused before anything is deleted.
    let r = e2e::kube::peapod_stdin(
        &d,
        &["delete", "-f", "-"],
        Some("kind: Service\nmetadata:\n  name: s\n"),
    );
    assert_eq!(r.code, 1, "{r:#?}");
    assert!(r.stderr.contains("Service"), "{r:#?}");
    let r = peapod(&d, &["get", "pod", "nothing-here"]);
    assert_eq!(
        (r.code, r.stderr.as_str()),
        (
            1,
            "Error from server (NotFound): pods \"nothing-here\" not found\n"
        )
    );
    let r = peapod(&d, &["delete", "pod", "nothing-here"]);
    assert_eq!(
        (r.code, r.stderr.as_str()),
        (
            1,
            "Error from server (NotFound): pods \"nothing-here\" not found\n"
        )
    );
}

const TICKER: &str = r#"apiVersion: v1
kind: Pod
metadata:
  name: ticker
spec:
  restartPolicy: Never
  containers:
  - name: app
    image: docker.io/library/busybox:latest
    imagePullPolicy: IfNotPresent
    command:
    - sh
    - -c
    - i=0; while [ ! -e /tmp/stop ]; do i=$((i+1)); echo tick $i; sleep 0.1; done; echo end
"#;

fn ticks(text: &str) -> Vec<u64> {
    text.lines()
        .filter_map(|l| l.strip_prefix("tick "))
        .filter_map(|n| n.parse().ok())
        .collect()
}

/// Tick lines in a CRI log file (`<time> stdout F tick N`).
fn raw_ticks(text: &str) -> usize {
    text.lines()
        .filter(|l| l.contains(" stdout F tick "))
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_follow_across_log_rotation_until_the_container_exits() {
    let mut d = pod_daemon("apply-logs").await;
    // `get pods -w` from before the pod exists: a row each time it changes.
    let watcher = Watcher::start(&d, &["get", "pods", "-w"]);
    apply(&d, TICKER).ok("apply ticker");
    let pod = wait_pod(&d, "ticker", LIMIT, "logging", |_| {
        ticks(&peapod(&d, &["logs", "ticker"]).stdout).len() >= 3
    });
    let id = text(container_status(&pod, "app").unwrap(), "/containerID")
        .trim_start_matches("peapod://")
        .to_string();
    let log_path = d
        .cri
        .runtime
        .container_status(cri::ContainerStatusRequest {
            container_id: id.clone(),
            verbose: false,
        })
        .await
        .expect("ContainerStatus")
        .into_inner()
        .status
        .expect("status")
        .log_path;

    let mut follower = std::process::Command::new(e2e::daemon::bin_dir().join("peapod"))
        .arg("--endpoint")
        .arg(&d.socket)
        .args(["logs", "-f", "ticker"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start logs -f");
    // Its lines, as they come.
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    let stdout = follower.stdout.take().expect("stdout pipe");
    let reader = std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut lines = Vec::new();
    // The follower has the file open once it has printed from it.
    while lines.len() < 3 {
        let line = rx
            .recv_timeout(LIMIT)
            .expect("logs -f prints the log so far");
        lines.push(line);
    }

    // Rotate as the kubelet does: rename the file, then ask the runtime to reopen it.
    let rotated = format!("{log_path}.1");
    std::fs::rename(&log_path, &rotated).expect("rename the log");
    d.cri
        .runtime
        .reopen_container_log(cri::ReopenContainerLogRequest {
            container_id: id.clone(),
        })
        .await
        .expect("ReopenContainerLog");
    // The new file fills: `logs` (which reads the current file) starts again from there.
    wait_pod(&d, "ticker", LIMIT, "logging into the new file", |_| {
        std::fs::read_to_string(&log_path).is_ok_and(|t| raw_ticks(&t) >= 3)
    });
    peapod(&d, &["exec", "ticker", "--", "touch", "/tmp/stop"]).ok("stop the ticker");

    lines.extend(rx.iter());
    reader.join().expect("reader thread");
    let status = follower.wait().expect("logs -f ends");
    assert!(status.success(), "{status:?}");
    let text_out = lines.join("\n") + "\n";
    let seen = ticks(&text_out);
    // Every line, once and in order, across both files, up to the container's last.
    let expected: Vec<u64> = (1..=seen.len() as u64).collect();
    assert_eq!(seen, expected, "{text_out}");
    assert!(text_out.ends_with("end\n"), "{text_out}");
    let rows = watcher.until(|row| row.starts_with("ticker ") && row.contains(" Completed "));
    assert!(
        rows.iter()
            .any(|r| r.starts_with("ticker ") && r.contains(" Running ")),
        "{rows:#?}"
    );
    let old = raw_ticks(&std::fs::read_to_string(&rotated).unwrap_or_default());
    assert!(seen.len() > old && old > 0, "followed past the rotation");
    // Stopped before the leftovers check: its command line names the daemon's socket.
    drop(watcher);
    peapod(&d, &["delete", "pod", "ticker"]).ok("delete");
    assert!(leftovers(&d).is_empty(), "{:#?}", leftovers(&d));
}

/// A CLI command that runs until stopped (`get -w`), its stdout read line by line.
struct Watcher {
    child: std::process::Child,
    lines: std::sync::mpsc::Receiver<String>,
}

impl Watcher {
    fn start(d: &TestDaemon, args: &[&str]) -> Watcher {
        let mut child = std::process::Command::new(e2e::daemon::bin_dir().join("peapod"))
            .arg("--endpoint")
            .arg(&d.socket)
            .args(args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("start the watcher");
        let stdout = child.stdout.take().expect("stdout pipe");
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            use std::io::BufRead;
            for line in std::io::BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Watcher { child, lines }
    }

    /// Every line up to and including the first that `done` accepts (within LIMIT).
    fn until(&self, done: impl Fn(&str) -> bool) -> Vec<String> {
        let mut seen = Vec::new();
        loop {
            match self.lines.recv_timeout(LIMIT) {
                Ok(line) => {
                    let last = done(&line);
                    seen.push(line);
                    if last {
                        return seen;
                    }
                }
                Err(e) => panic!("watch: {e}; so far: {seen:#?}"),
            }
        }
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
