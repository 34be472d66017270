//! The pod supervisor end to end through its gRPC API (`peapod.pods.v1.Pods`) on the daemon's
//! socket: real daemon, runc, CNI, registry; pods as Kubernetes JSON. Every wait is bounded
//! ("within N seconds the pod reaches X"), never a timing assertion.

use e2e::pods::{busybox, Images};
use e2e::{DaemonOptions, TestDaemon};
use peapod_proto::pods as api;
use peapod_proto::pods::pods_client::PodsClient;
use peapod_proto::v1 as cri;
use serde_json::Value;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use tonic::transport::Channel;
use tonic::Code;

const WAIT: Duration = Duration::from_secs(60);

struct Env {
    d: TestDaemon,
    pods: PodsClient<Channel>,
    image: String,
    _images: Images,
}

/// A daemon whose `[pods]` table puts pod cgroups under the test's own parent; `extra` adds
/// keys to that table.
async fn env(name: &str, extra: &str) -> Env {
    let d = TestDaemon::start_with(
        name,
        DaemonOptions {
            extra_config: format!(
                "[pods]\nnode_name = \"e2e-node\"\ncgroup_parent = \"{{cgroup_parent}}/kubepods\"\nrestart_backoff_base_seconds = 1\nsync_period_ms = 250\n{extra}\n"
            ),
            ..Default::default()
        },
    )
    .await;
    let images = Images::start();
    let image = images.push("busybox:pods", &busybox());
    let channel = peapod_uds::client::channel(&d.socket).await.unwrap();
    Env {
        d,
        pods: PodsClient::new(channel),
        image,
        _images: images,
    }
}

impl Env {
    async fn apply(&mut self, yaml: &str) -> Result<Vec<api::ApplyResult>, tonic::Status> {
        self.pods
            .apply(api::ApplyRequest {
                namespace: "default".into(),
                manifest: yaml.replace("IMAGE", &self.image).into_bytes(),
                source: "test.yaml".into(),
            })
            .await
            .map(|r| r.into_inner().results)
    }

    async fn get(&mut self, name: &str) -> Result<Value, tonic::Status> {
        let r = self
            .pods
            .get(api::GetRequest {
                namespace: "default".into(),
                name: name.into(),
            })
            .await?;
        Ok(serde_json::from_str(&r.into_inner().pod_json).unwrap())
    }

    async fn events(&mut self, name: &str) -> Vec<Value> {
        self.pods
            .events(api::EventsRequest {
                namespace: "default".into(),
                name: name.into(),
            })
            .await
            .unwrap()
            .into_inner()
            .event_json
            .iter()
            .map(|e| serde_json::from_str(e).unwrap())
            .collect()
    }

    /// Polls until `ok(pod)` holds; on timeout panics with the pod, its events and the log.
    async fn wait_for(&mut self, name: &str, what: &str, ok: impl Fn(&Value) -> bool) -> Value {
        let t0 = Instant::now();
        loop {
            let pod = self.get(name).await.unwrap();
            if ok(&pod) {
                return pod;
            }
            if t0.elapsed() > WAIT {
                let ev = self.events(name).await;
                let log = self.d.log();
                let tail: String = log.lines().rev().take(60).collect::<Vec<_>>().join("\n");
                panic!(
                    "pod {name} did not become {what} within {WAIT:?}:\n{}\nevents: {}\nlog (last lines, newest first):\n{tail}",
                    serde_json::to_string_pretty(&pod).unwrap(),
                    serde_json::to_string_pretty(&ev).unwrap()
                );
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    async fn delete(&mut self, name: &str) {
        self.pods
            .delete(api::DeleteRequest {
                namespace: "default".into(),
                name: name.into(),
                grace_period_seconds: -1,
                wait: true,
            })
            .await
            .unwrap();
        let e = self.get(name).await.unwrap_err();
        assert_eq!(e.code(), Code::NotFound, "{e:?}");
    }

    async fn sandboxes_of(&mut self, uid: &str) -> Vec<cri::PodSandbox> {
        self.d
            .cri
            .runtime
            .list_pod_sandbox(cri::ListPodSandboxRequest {
                filter: Some(cri::PodSandboxFilter {
                    label_selector: HashMap::from([(
                        "io.kubernetes.pod.uid".to_string(),
                        uid.to_string(),
                    )]),
                    ..Default::default()
                }),
            })
            .await
            .unwrap()
            .into_inner()
            .items
    }

    async fn containers_of(&mut self, uid: &str) -> Vec<cri::Container> {
        self.d
            .cri
            .runtime
            .list_containers(cri::ListContainersRequest {
                filter: Some(cri::ContainerFilter {
                    label_selector: HashMap::from([(
                        "io.kubernetes.pod.uid".to_string(),
                        uid.to_string(),
                    )]),
                    ..Default::default()
                }),
            })
            .await
            .unwrap()
            .into_inner()
            .containers
    }

    async fn exec(&mut self, container_id: &str, cmd: &str) -> String {
        let r = self
            .d
            .cri
            .runtime
            .exec_sync(cri::ExecSyncRequest {
                container_id: container_id.into(),
                cmd: vec!["sh".into(), "-c".into(), cmd.into()],
                timeout: 10,
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(
            r.exit_code,
            0,
            "{cmd}: {}",
            String::from_utf8_lossy(&r.stderr)
        );
        String::from_utf8_lossy(&r.stdout).trim().to_string()
    }

    fn pod_cgroup(&self, controller: &str, pod: &Value) -> PathBuf {
        let uid = pod["metadata"]["uid"].as_str().unwrap();
        let qos = match pod["status"]["qosClass"].as_str().unwrap() {
            "Guaranteed" => "".to_string(),
            other => format!("{}/", other.to_lowercase()),
        };
        Path::new("/sys/fs/cgroup")
            .join(controller)
            .join(self.d.cgroup_parent.trim_start_matches('/'))
            .join(format!("kubepods/{qos}pod{uid}"))
    }
}

fn condition(pod: &Value, t: &str) -> String {
    pod["status"]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == t))
        .and_then(|c| c["status"].as_str())
        .unwrap_or("")
        .to_string()
}

fn status_of<'a>(pod: &'a Value, list: &str, name: &str) -> &'a Value {
    pod["status"][list]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["name"] == name))
        .unwrap_or_else(|| panic!("no {list} entry {name} in {pod}"))
}

fn cri_id(status: &Value) -> String {
    status["containerID"]
        .as_str()
        .unwrap()
        .trim_start_matches("peapod://")
        .to_string()
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p)
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
        .trim()
        .to_string()
}

const WAR_POD: &str = r#"
apiVersion: v1
kind: Pod
metadata:
  name: war
  labels: {app: war}
spec:
  # sleep as PID 1 ignores SIGTERM: keep deletion short.
  terminationGracePeriodSeconds: 2
  initContainers:
  - name: deploy
    image: IMAGE
    command: [sh, -c, "echo 'the app' > /work/app.war"]
    volumeMounts: [{name: work, mountPath: /work}]
    # Init containers count for QoS too: without limits here the pod would be Burstable.
    resources:
      limits: {cpu: 500m, memory: 64Mi}
  containers:
  - name: server
    image: IMAGE
    command: [sh, -c, "cat /work/app.war > /tmp/served; exec sleep 3600"]
    env:
    - {name: POD_NAME, valueFrom: {fieldRef: {fieldPath: metadata.name}}}
    resources:
      requests: {cpu: 500m, memory: 64Mi}
      limits: {cpu: 500m, memory: 64Mi}
    readinessProbe:
      exec: {command: [cat, /tmp/served]}
      periodSeconds: 1
    volumeMounts: [{name: work, mountPath: /work}]
  volumes:
  - name: work
    emptyDir: {}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn init_container_fills_an_emptydir_guaranteed_cgroups_and_delete_removes_everything() {
    let mut e = env("pods-war", "").await;
    let r = e.apply(WAR_POD).await.unwrap();
    assert_eq!(r[0].action, "created");
    let pod = e
        .wait_for("war", "Ready", |p| condition(p, "Ready") == "True")
        .await;
    assert_eq!(pod["status"]["phase"], "Running");
    assert_eq!(pod["status"]["qosClass"], "Guaranteed");
    assert_eq!(pod["spec"]["restartPolicy"], "Always");
    assert_eq!(pod["spec"]["terminationGracePeriodSeconds"], 2);
    assert_eq!(
        pod["spec"]["containers"][0]["imagePullPolicy"],
        "IfNotPresent"
    );
    assert_eq!(
        pod["spec"]["containers"][0]["resources"]["requests"]["cpu"],
        "500m"
    );
    assert_eq!(pod["spec"]["nodeName"], "e2e-node");
    assert!(
        pod["status"]["podIP"]
            .as_str()
            .unwrap()
            .starts_with("10.123."),
        "{pod}"
    );
    let init = status_of(&pod, "initContainerStatuses", "deploy");
    assert_eq!(init["state"]["terminated"]["reason"], "Completed");
    assert_eq!(init["state"]["terminated"]["exitCode"], 0);
    assert_eq!(condition(&pod, "Initialized"), "True");
    let server = status_of(&pod, "containerStatuses", "server");
    assert_eq!(server["ready"], true);
    assert!(server["state"]["running"]["startedAt"].is_string());
    let id = cri_id(server);

    // The app reads what the init container wrote into the shared emptyDir.
    assert_eq!(e.exec(&id, "cat /tmp/served").await, "the app");
    assert_eq!(e.exec(&id, "echo $POD_NAME").await, "war");
    // The kubelet's cgroup values, read inside the container: 500m -> 512 shares, 50000 quota.
    assert_eq!(
        e.exec(&id, "cat /sys/fs/cgroup/cpu/cpu.shares").await,
        "512"
    );
    assert_eq!(
        e.exec(&id, "cat /sys/fs/cgroup/cpu/cpu.cfs_quota_us").await,
        "50000"
    );
    assert_eq!(
        e.exec(&id, "cat /sys/fs/cgroup/cpu/cpu.cfs_period_us")
            .await,
        "100000"
    );
    assert_eq!(
        e.exec(&id, "cat /sys/fs/cgroup/memory/memory.limit_in_bytes")
            .await,
        (64u64 << 20).to_string()
    );
    // The pod cgroup holds the pod-level values.
    let cpu = e.pod_cgroup("cpu", &pod);
    assert_eq!(read(&cpu.join("cpu.shares")), "512");
    assert_eq!(read(&cpu.join("cpu.cfs_quota_us")), "50000");
    assert_eq!(
        read(&e.pod_cgroup("memory", &pod).join("memory.limit_in_bytes")),
        (64u64 << 20).to_string()
    );

    // The kubelet's labels on every CRI object.
    let uid = pod["metadata"]["uid"].as_str().unwrap().to_string();
    let sbs = e.sandboxes_of(&uid).await;
    assert_eq!(sbs.len(), 1);
    assert_eq!(sbs[0].labels["io.kubernetes.pod.name"], "war");
    assert_eq!(sbs[0].labels["io.kubernetes.pod.namespace"], "default");
    let cs = e.containers_of(&uid).await;
    let mut names: Vec<&str> = cs
        .iter()
        .map(|c| c.labels["io.kubernetes.container.name"].as_str())
        .collect();
    names.sort();
    assert_eq!(names, ["deploy", "server"]);

    let events = e.events("war").await;
    let reasons: Vec<&str> = events.iter().filter_map(|e| e["reason"].as_str()).collect();
    for want in ["Scheduled", "Pulled", "Created", "Started"] {
        assert!(reasons.contains(&want), "{want} missing from {reasons:?}");
    }
    let started = events
        .iter()
        .find(|e| {
            e["reason"] == "Started"
                && e["involvedObject"]["fieldPath"] == "spec.initContainers{deploy}"
        })
        .expect("Started event of the init container");
    assert_eq!(started["source"]["component"], "kubelet");
    assert_eq!(started["involvedObject"]["kind"], "Pod");

    // Applying the same manifest again changes nothing.
    assert_eq!(e.apply(WAR_POD).await.unwrap()[0].action, "unchanged");
    assert_eq!(
        e.get("war").await.unwrap()["metadata"]["uid"],
        pod["metadata"]["uid"]
    );

    let pod_dir = e.d.root.join("pods").join(&uid);
    assert!(pod_dir.join("volumes").is_dir());
    e.delete("war").await;
    assert!(e.sandboxes_of(&uid).await.is_empty());
    assert!(e.containers_of(&uid).await.is_empty());
    assert!(!cpu.exists(), "pod cgroup {} left behind", cpu.display());
    assert!(!e.pod_cgroup("memory", &pod).exists());
    assert!(!pod_dir.exists(), "{} left behind", pod_dir.display());
    assert!(!e.d.root.join("pods/default/war").exists());
    let left = e.d.leftovers();
    assert!(left.is_empty(), "left behind: {left:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_once_pods_succeed_or_fail_and_a_failed_init_container_stops_the_app() {
    let mut e = env("pods-never", "").await;
    e.apply(
        r#"
apiVersion: v1
kind: Pod
metadata: {name: once}
spec:
  restartPolicy: Never
  containers:
  - {name: job, image: IMAGE, command: [sh, -c, "echo done"]}
---
apiVersion: v1
kind: Pod
metadata: {name: broken}
spec:
  restartPolicy: Never
  initContainers:
  - {name: setup, image: IMAGE, command: [sh, -c, "echo 'no config found' > /dev/termination-log; exit 3"]}
  containers:
  - {name: app, image: IMAGE, command: [sleep, "3600"]}
"#,
    )
    .await
    .unwrap();
    let once = e
        .wait_for("once", "Succeeded", |p| p["status"]["phase"] == "Succeeded")
        .await;
    let job = status_of(&once, "containerStatuses", "job");
    assert_eq!(job["state"]["terminated"]["reason"], "Completed");
    assert_eq!(once["status"]["qosClass"], "BestEffort");
    assert_eq!(condition(&once, "Ready"), "False");

    let broken = e
        .wait_for("broken", "Failed", |p| p["status"]["phase"] == "Failed")
        .await;
    let setup = status_of(&broken, "initContainerStatuses", "setup");
    assert_eq!(setup["state"]["terminated"]["exitCode"], 3);
    assert_eq!(setup["state"]["terminated"]["reason"], "Error");
    // The termination message file, as the kubelet mounts and reads it.
    assert_eq!(setup["state"]["terminated"]["message"], "no config found\n");
    let app = status_of(&broken, "containerStatuses", "app");
    assert!(app["state"]["waiting"].is_object(), "{app}");
    let uid = broken["metadata"]["uid"].as_str().unwrap().to_string();
    let made: Vec<String> = e
        .containers_of(&uid)
        .await
        .iter()
        .map(|c| c.labels["io.kubernetes.container.name"].clone())
        .collect();
    assert_eq!(made, ["setup"], "no app container may be created");
    e.delete("once").await;
    e.delete("broken").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_manifests_and_a_pod_too_big_for_the_node_create_nothing() {
    let mut e = env(
        "pods-admit",
        "allocatable_cpu = \"2\"\nallocatable_memory = \"1Gi\"",
    )
    .await;
    let dup = r#"
apiVersion: v1
kind: Pod
metadata: {name: ok-pod}
spec:
  containers: [{name: a, image: IMAGE, command: [sleep, "60"]}]
---
apiVersion: v1
kind: Pod
metadata: {name: dup}
spec:
  containers:
  - {name: web, image: IMAGE}
  - {name: web, image: IMAGE}
"#;
    let err = e.apply(dup).await.unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(
        err.message()
            .contains("spec.containers[1].name: Duplicate value \"web\""),
        "{}",
        err.message()
    );
    // All documents are validated first: the valid one was not created either.
    assert_eq!(e.get("ok-pod").await.unwrap_err().code(), Code::NotFound);
    let err = e
        .apply("apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d}\n")
        .await
        .unwrap_err();
    assert!(err.message().contains("only kind Pod"), "{}", err.message());
    let err = e
        .apply("apiVersion: v1\nkind: Pod\nmetadata: {name: x}\nspec:\n  containers: [{name: a, imagee: IMAGE}]\n")
        .await
        .unwrap_err();
    assert!(
        err.message()
            .contains("unknown field \"spec.containers[0].imagee\""),
        "{}",
        err.message()
    );

    e.apply(
        r#"
apiVersion: v1
kind: Pod
metadata: {name: huge}
spec:
  containers:
  - name: a
    image: IMAGE
    resources: {requests: {cpu: "4"}}
"#,
    )
    .await
    .unwrap();
    let pod = e
        .wait_for("huge", "Failed", |p| p["status"]["phase"] == "Failed")
        .await;
    assert_eq!(pod["status"]["reason"], "OutOfcpu");
    assert!(
        pod["status"]["message"]
            .as_str()
            .unwrap()
            .contains("requested: 4000"),
        "{pod}"
    );
    let uid = pod["metadata"]["uid"].as_str().unwrap().to_string();
    assert!(
        e.sandboxes_of(&uid).await.is_empty(),
        "nothing may run for a refused pod"
    );
    assert!(e.containers_of(&uid).await.is_empty());
    assert!(!e.d.root.join("pods").join(&uid).exists());
    e.delete("huge").await;
}

const LIVENESS_POD: &str = r#"
apiVersion: v1
kind: Pod
metadata: {name: liveness}
spec:
  terminationGracePeriodSeconds: 2
  containers:
  - name: app
    image: IMAGE
    command: [sh, -c, "touch /tmp/healthy; sleep 2; rm /tmp/healthy; exec sleep 3600"]
    livenessProbe:
      exec: {command: [cat, /tmp/healthy]}
      periodSeconds: 1
      failureThreshold: 1
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_liveness_probe_restarts_the_container_and_keeps_doing_so_after_a_daemon_kill() {
    let mut e = env("pods-live", "").await;
    e.apply(LIVENESS_POD).await.unwrap();
    let pod = e
        .wait_for("liveness", "restarted", |p| {
            p["status"]["containerStatuses"][0]["restartCount"]
                .as_i64()
                .unwrap_or(0)
                >= 1
        })
        .await;
    let app = status_of(&pod, "containerStatuses", "app");
    let last = &app["lastState"]["terminated"];
    assert!(
        last["containerID"]
            .as_str()
            .unwrap()
            .starts_with("peapod://"),
        "{app}"
    );
    assert_ne!(last["containerID"], app["containerID"]);
    let events = e.events("liveness").await;
    let find = |reason: &str| events.iter().find(|e| e["reason"] == reason).cloned();
    let unhealthy = find("Unhealthy").expect("Unhealthy event");
    assert_eq!(unhealthy["type"], "Warning");
    assert!(
        unhealthy["message"]
            .as_str()
            .unwrap()
            .starts_with("Liveness probe failed:"),
        "{unhealthy}"
    );
    let killing = find("Killing").expect("Killing event");
    assert_eq!(
        killing["message"],
        "Container app failed liveness probe, will be restarted"
    );
    assert_eq!(
        killing["involvedObject"]["fieldPath"],
        "spec.containers{app}"
    );
    // The previous attempt is kept for `logs --previous`.
    let uid = pod["metadata"]["uid"].as_str().unwrap().to_string();
    assert!(e.containers_of(&uid).await.len() >= 2);

    // kill -9 of the daemon, then a restart: the pod is re-adopted and still supervised.
    let before = app["restartCount"].as_i64().unwrap();
    kill_daemon(&e.d);
    e.d.restart().await;
    e.pods = PodsClient::new(peapod_uds::client::channel(&e.d.socket).await.unwrap());
    let again = e.get("liveness").await.unwrap();
    assert_eq!(again["metadata"]["uid"], pod["metadata"]["uid"]);
    e.wait_for(
        "liveness",
        "restarted again after the daemon restart",
        |p| {
            p["status"]["containerStatuses"][0]["restartCount"]
                .as_i64()
                .unwrap_or(0)
                > before
        },
    )
    .await;
    e.delete("liveness").await;
    assert!(e.containers_of(&uid).await.is_empty());
}

/// SIGKILL of the daemon process (not of the pods).
fn kill_daemon(d: &TestDaemon) {
    let needle = format!("serve --config {}", d.dir.join("config.toml").display());
    let pids = e2e::host::processes_with(&needle);
    assert!(!pids.is_empty(), "no daemon process found");
    for pid in pids {
        // SAFETY: kill has no memory-safety preconditions.
        unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    }
}

const WEB_POD: &str = r#"
apiVersion: v1
kind: Pod
metadata: {name: web}
spec:
  terminationGracePeriodSeconds: 2
  initContainers:
  - name: content
    image: IMAGE
    command: [sh, -c, "echo hello > /www/index.html"]
    volumeMounts: [{name: www, mountPath: /www}]
  - name: shipper
    image: IMAGE
    restartPolicy: Always
    command: [sh, -c, "touch /tmp/started; while true; do cat /www/index.html > /tmp/shipped; sleep 1; done"]
    startupProbe: {exec: {command: [cat, /tmp/started]}, periodSeconds: 1}
    volumeMounts: [{name: www, mountPath: /www}]
  containers:
  - name: server
    image: IMAGE
    command: [httpd, -f, -p, "8080", -h, /www]
    ports: [{name: http, containerPort: 8080}]
    readinessProbe: {httpGet: {path: /index.html, port: http}, periodSeconds: 1, failureThreshold: 1}
    livenessProbe: {tcpSocket: {port: 8080}, periodSeconds: 1}
    volumeMounts: [{name: www, mountPath: /www}]
  volumes:
  - name: www
    emptyDir: {medium: Memory, sizeLimit: 16Mi}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sidecar_http_readiness_toggles_ready_and_tcp_liveness_holds() {
    let mut e = env("pods-web", "").await;
    e.apply(WEB_POD).await.unwrap();
    let pod = e
        .wait_for("web", "Ready", |p| condition(p, "Ready") == "True")
        .await;
    let shipper = status_of(&pod, "initContainerStatuses", "shipper");
    assert_eq!(shipper["started"], true, "{shipper}");
    assert!(shipper["state"]["running"].is_object(), "{shipper}");
    let content = status_of(&pod, "initContainerStatuses", "content");
    assert_eq!(content["state"]["terminated"]["reason"], "Completed");
    let shipper_id = cri_id(shipper);
    let server_id = cri_id(status_of(&pod, "containerStatuses", "server"));
    // The sidecar reads what the init container wrote, on a memory-backed emptyDir.
    let t0 = Instant::now();
    while e
        .exec(&shipper_id, "cat /tmp/shipped 2>/dev/null || true")
        .await
        != "hello"
    {
        assert!(t0.elapsed() < WAIT, "the sidecar never shipped the content");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let uid = pod["metadata"]["uid"].as_str().unwrap();
    let vol =
        e.d.root
            .join("pods")
            .join(uid)
            .join("volumes/kubernetes.io~empty-dir/www");
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let line = mounts
        .lines()
        .find(|l| l.split_whitespace().nth(4) == Some(vol.to_str().unwrap()))
        .unwrap_or_else(|| panic!("{} is not a mount point", vol.display()));
    assert!(
        line.contains(" - tmpfs ") && line.contains("size=16384k"),
        "{line}"
    );

    // Readiness both ways: a 404 makes the pod unready, the file back makes it ready.
    e.exec(&server_id, "rm /www/index.html").await;
    e.wait_for("web", "not Ready", |p| condition(p, "Ready") == "False")
        .await;
    let events = e.events("web").await;
    assert!(
        events.iter().any(|ev| ev["reason"] == "Unhealthy"
            && ev["message"]
                .as_str()
                .unwrap_or("")
                .contains("Readiness probe failed: HTTP probe failed with statuscode: 404")),
        "{events:?}"
    );
    e.exec(&server_id, "echo back > /www/index.html").await;
    let pod = e
        .wait_for("web", "Ready again", |p| condition(p, "Ready") == "True")
        .await;
    // The tcpSocket liveness probe passed all along.
    assert_eq!(
        status_of(&pod, "containerStatuses", "server")["restartCount"],
        0
    );
    e.delete("web").await;
    assert!(!vol.exists());
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(
        !mounts.contains(vol.to_str().unwrap()),
        "tmpfs left mounted"
    );
}

const QOS_PODS: &str = r#"
apiVersion: v1
kind: Pod
metadata: {name: burst}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: limited
    image: IMAGE
    command: [sleep, "3600"]
    resources: {requests: {cpu: 250m, memory: 32Mi}, limits: {cpu: 500m}}
  - name: free
    image: IMAGE
    command: [sleep, "3600"]
---
apiVersion: v1
kind: Pod
metadata: {name: besteffort}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - {name: c, image: IMAGE, command: [sleep, "3600"]}
"#;

/// What this host lets the daemon give: never below its own oom_score_adj (no
/// CAP_SYS_RESOURCE here); the daemon inherits the test's.
fn oom_floor(v: i64) -> i64 {
    let own: i64 = read(Path::new("/proc/self/oom_score_adj")).parse().unwrap();
    v.max(own)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn burstable_and_besteffort_pods_get_the_kubelets_cgroup_values() {
    let mut e = env("pods-qos", "").await;
    e.apply(QOS_PODS).await.unwrap();
    let burst = e
        .wait_for("burst", "Ready", |p| condition(p, "Ready") == "True")
        .await;
    let be = e
        .wait_for("besteffort", "Ready", |p| condition(p, "Ready") == "True")
        .await;
    assert_eq!(burst["status"]["qosClass"], "Burstable");
    assert_eq!(be["status"]["qosClass"], "BestEffort");

    let limited = cri_id(status_of(&burst, "containerStatuses", "limited"));
    let free = cri_id(status_of(&burst, "containerStatuses", "free"));
    let only = cri_id(status_of(&be, "containerStatuses", "c"));
    // shares from the request (250m -> 256), quota from the limit, no memory limit.
    assert_eq!(
        e.exec(&limited, "cat /sys/fs/cgroup/cpu/cpu.shares").await,
        "256"
    );
    assert_eq!(
        e.exec(&limited, "cat /sys/fs/cgroup/cpu/cpu.cfs_quota_us")
            .await,
        "50000"
    );
    let unlimited: u64 = e
        .exec(&limited, "cat /sys/fs/cgroup/memory/memory.limit_in_bytes")
        .await
        .parse()
        .unwrap();
    assert!(unlimited > 1 << 60, "{unlimited}");
    let mem_total: i64 = read(Path::new("/proc/meminfo"))
        .lines()
        .find(|l| l.starts_with("MemTotal:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .unwrap()
        .parse::<i64>()
        .unwrap()
        * 1024;
    let burstable_adj = (1000 - 1000 * (32i64 << 20) / mem_total).clamp(3, 999);
    assert_eq!(
        e.exec(&limited, "cat /proc/1/oom_score_adj").await,
        oom_floor(burstable_adj).to_string()
    );
    // A container without requests in a Burstable pod: minimum shares, no quota, 999.
    assert_eq!(
        e.exec(&free, "cat /sys/fs/cgroup/cpu/cpu.shares").await,
        "2"
    );
    assert_eq!(
        e.exec(&free, "cat /sys/fs/cgroup/cpu/cpu.cfs_quota_us")
            .await,
        "-1"
    );
    assert_eq!(
        e.exec(&free, "cat /proc/1/oom_score_adj").await,
        oom_floor(999).to_string()
    );
    // BestEffort: minimum shares, oom_score_adj 1000.
    assert_eq!(
        e.exec(&only, "cat /sys/fs/cgroup/cpu/cpu.shares").await,
        "2"
    );
    assert_eq!(e.exec(&only, "cat /proc/1/oom_score_adj").await, "1000");

    // Pod cgroups: burstable/ with the summed request and no quota (not every container has a
    // cpu limit); besteffort/ with minimum shares.
    let pod_cpu = e.pod_cgroup("cpu", &burst);
    assert!(
        pod_cpu
            .to_str()
            .unwrap()
            .contains("/kubepods/burstable/pod"),
        "{}",
        pod_cpu.display()
    );
    assert_eq!(read(&pod_cpu.join("cpu.shares")), "256");
    assert_eq!(read(&pod_cpu.join("cpu.cfs_quota_us")), "-1");
    // The QoS level: burstable/ carries the sum of its pods' requests (the QoS manager updates
    // it within seconds), besteffort/ the minimum, kubepods the node's allocatable CPU.
    let burstable = pod_cpu.parent().unwrap().to_path_buf();
    let t0 = Instant::now();
    while read(&burstable.join("cpu.shares")) != "256" {
        assert!(
            t0.elapsed() < WAIT,
            "burstable cpu.shares {}",
            read(&burstable.join("cpu.shares"))
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let kubepods = burstable.parent().unwrap().to_path_buf();
    let cpus = std::thread::available_parallelism().unwrap().get();
    assert_eq!(
        read(&kubepods.join("cpu.shares")),
        (cpus * 1024).to_string()
    );
    assert_eq!(read(&kubepods.join("besteffort/cpu.shares")), "2");
    let be_cpu = e.pod_cgroup("cpu", &be);
    assert!(
        be_cpu
            .to_str()
            .unwrap()
            .contains("/kubepods/besteffort/pod"),
        "{}",
        be_cpu.display()
    );
    assert_eq!(read(&be_cpu.join("cpu.shares")), "2");
    e.delete("burst").await;
    e.delete("besteffort").await;
    assert!(!pod_cpu.exists() && !be_cpu.exists());
    let left = e.d.leftovers();
    assert!(left.is_empty(), "left behind: {left:?}");
}

const SANDBOX_POD: &str = r#"
apiVersion: v1
kind: Pod
metadata: {name: phoenix}
spec:
  terminationGracePeriodSeconds: 2
  initContainers:
  - name: count
    image: IMAGE
    command: [sh, -c, "echo run >> /data/runs"]
    volumeMounts: [{name: data, mountPath: /data}]
  containers:
  - name: app
    image: IMAGE
    command: [sleep, "3600"]
    volumeMounts: [{name: data, mountPath: /data}]
  volumes:
  - {name: data, emptyDir: {}}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_sandbox_is_recreated_and_the_pod_runs_again_in_it() {
    let mut e = env("pods-sandbox", "").await;
    e.apply(SANDBOX_POD).await.unwrap();
    let pod = e
        .wait_for("phoenix", "Ready", |p| condition(p, "Ready") == "True")
        .await;
    let uid = pod["metadata"]["uid"].as_str().unwrap().to_string();
    let old = e.sandboxes_of(&uid).await;
    assert_eq!(old.len(), 1);
    // Kill the pause process: the sandbox is no longer ready.
    let procs = e
        .pod_cgroup("pids", &pod)
        .join(&old[0].id)
        .join("cgroup.procs");
    let pids = read(&procs);
    for pid in pids.split_whitespace() {
        // SAFETY: kill has no memory-safety preconditions.
        unsafe { libc::kill(pid.parse().unwrap(), libc::SIGKILL) };
    }
    let pod = e
        .wait_for("phoenix", "running again in a new sandbox", |p| {
            condition(p, "Ready") == "True"
                && p["status"]["containerStatuses"][0]["restartCount"].as_i64() == Some(1)
        })
        .await;
    assert_eq!(
        status_of(&pod, "initContainerStatuses", "count")["restartCount"],
        1
    );
    let now = e.sandboxes_of(&uid).await;
    assert_eq!(now.len(), 1, "the dead sandbox is removed");
    assert_ne!(now[0].id, old[0].id);
    assert!(pod["status"]["podIP"].is_string());
    let events = e.events("phoenix").await;
    assert!(
        events.iter().any(|ev| ev["reason"] == "SandboxChanged"),
        "{events:?}"
    );
    // The emptyDir outlived the sandbox; the init container ran once in each.
    let app = cri_id(status_of(&pod, "containerStatuses", "app"));
    assert_eq!(e.exec(&app, "cat /data/runs").await, "run\nrun");
    e.delete("phoenix").await;
    let left = e.d.leftovers();
    assert!(left.is_empty(), "left behind: {left:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_port_reaches_the_pod() {
    let mut e = env("pods-hostport", "").await;
    let host_port = 18080 + e.d.slot.n as u16;
    let manifest = format!(
        r#"
apiVersion: v1
kind: Pod
metadata: {{name: hp}}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: server
    image: IMAGE
    command: [sh, -c, "mkdir -p /www && echo through-the-host > /www/index.html && exec httpd -f -p 8080 -h /www"]
    ports: [{{containerPort: 8080, hostPort: {host_port}}}]
    readinessProbe: {{tcpSocket: {{port: 8080}}, periodSeconds: 1}}
"#
    );
    e.apply(&manifest).await.unwrap();
    e.wait_for("hp", "Ready", |p| condition(p, "Ready") == "True")
        .await;
    // The host port on one of the host's own addresses (the bridge's gateway).
    let addr = format!("{}:{host_port}", e.d.gateway);
    let mut s = tokio::net::TcpStream::connect(&addr)
        .await
        .unwrap_or_else(|err| panic!("connect {addr}: {err}"));
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    s.write_all(b"GET /index.html HTTP/1.0\r\n\r\n")
        .await
        .unwrap();
    let mut body = String::new();
    s.read_to_string(&mut body).await.unwrap();
    assert!(
        body.starts_with("HTTP/1.") && body.contains("through-the-host"),
        "{body}"
    );
    e.delete("hp").await;
    let left = e.d.leftovers();
    assert!(left.is_empty(), "left behind: {left:?}");
}
