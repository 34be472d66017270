//! The supervisor and manager against the in-memory CRI: ordering, restarts, back-off,
//! probes, pull policies, admission, apply semantics, deletion and re-adoption.

use crate::fake_cri::FakeCri;
use crate::manager::{Deletion, Manager};
use crate::resources::Amounts;
use crate::settings::Settings;
use k8s_openapi::api::core::v1::Pod;
use serde_json::Value;
use std::sync::Arc;
use std::time::{Duration, Instant};

struct T {
    _dir: tempfile::TempDir,
    settings: Settings,
    cri: Arc<FakeCri>,
    m: Arc<Manager>,
}

fn setup() -> T {
    let dir = tempfile::tempdir().unwrap();
    let cg = dir.path().join("cgroup");
    for c in ["cpu", "cpuacct", "memory", "pids"] {
        std::fs::create_dir_all(cg.join(c)).unwrap();
    }
    let settings = Settings {
        pods_dir: dir.path().join("pods"),
        node_name: "node1".into(),
        node_labels: Settings::node_labels("node1", &Default::default()),
        allocatable: Amounts {
            cpu_milli: 1000,
            memory: 1 << 30,
        },
        memory_capacity: 1 << 30,
        cgroup_parent: "/kubepods".into(),
        cgroups: crate::cgroup::PodCgroups::Fs { root: cg },
        backoff_base: Duration::from_millis(400),
        sync_period: Duration::from_millis(20),
        oom_score_adj_floor: -1000,
        host_ip: "192.0.2.1".into(),
    };
    let cri = Arc::new(FakeCri::default());
    cri.st().images.insert("img:1".into());
    let m = Manager::start(cri.clone(), settings.clone());
    T {
        _dir: dir,
        settings,
        cri,
        m,
    }
}

fn json(p: &Pod) -> Value {
    serde_json::to_value(p).unwrap()
}

impl T {
    async fn apply(&self, yaml: &str) -> Vec<&'static str> {
        self.m
            .apply("default", yaml.as_bytes(), "t.yaml")
            .await
            .unwrap()
            .into_iter()
            .map(|a| a.action)
            .collect()
    }

    async fn until(&self, name: &str, what: &str, ok: impl Fn(&Value) -> bool) -> Value {
        let t0 = Instant::now();
        loop {
            let p = json(&self.m.get("default", name).unwrap());
            if ok(&p) {
                return p;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "{name} never became {what}: {p:#}\ncalls: {:?}",
                self.cri.st().calls
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    fn reasons(&self, name: &str) -> Vec<String> {
        self.m
            .events("default", name)
            .unwrap()
            .iter()
            .filter_map(|e| e.reason.clone())
            .collect()
    }

    fn calls(&self) -> Vec<String> {
        self.cri.st().calls.clone()
    }
}

fn phase(p: &Value) -> &str {
    p["status"]["phase"].as_str().unwrap_or("")
}

fn ready(p: &Value) -> bool {
    p["status"]["conditions"].as_array().is_some_and(|cs| {
        cs.iter()
            .any(|c| c["type"] == "Ready" && c["status"] == "True")
    })
}

fn restarts(p: &Value) -> i64 {
    p["status"]["containerStatuses"][0]["restartCount"]
        .as_i64()
        .unwrap_or(0)
}

const ORDERED: &str = "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  initContainers:\n  - {name: a, image: img:1}\n  - {name: b, image: img:1}\n  containers:\n  - {name: x, image: img:1}\n  - {name: z, image: img:1}\n";

#[tokio::test]
async fn init_containers_run_one_at_a_time_then_apps_together() {
    let t = setup();
    assert_eq!(t.apply(ORDERED).await, ["created"]);
    t.until("p", "running init a", |p| {
        p["status"]["initContainerStatuses"][0]["state"]["running"].is_object()
    })
    .await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(t.cri.created(), [("a".to_string(), 0)], "b waits for a");
    t.cri.exit("a", 0);
    t.until("p", "running init b", |p| {
        p["status"]["initContainerStatuses"][1]["state"]["running"].is_object()
    })
    .await;
    let p = json(&t.m.get("default", "p").unwrap());
    assert_eq!(phase(&p), "Pending");
    assert_eq!(
        p["status"]["containerStatuses"][0]["state"]["waiting"]["reason"],
        "PodInitializing"
    );
    t.cri.exit("b", 0);
    let p = t.until("p", "Ready", ready).await;
    assert_eq!(phase(&p), "Running");
    let names: Vec<String> = t.cri.created().into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, ["a", "b", "x", "z"]);
    // Every CRI object carries the kubelet's labels.
    let st = t.cri.st();
    let c = st
        .containers
        .values()
        .find(|c| c.config.metadata.as_ref().unwrap().name == "x")
        .unwrap();
    assert_eq!(c.config.labels["io.kubernetes.pod.name"], "p");
    assert_eq!(c.config.labels["io.kubernetes.container.name"], "x");
    let (sb, _) = st.sandboxes.values().next().unwrap();
    assert_eq!(sb.labels["io.kubernetes.pod.namespace"], "default");
    assert_eq!(
        sb.linux.as_ref().unwrap().cgroup_parent,
        format!(
            "/kubepods/besteffort/pod{}",
            p["metadata"]["uid"].as_str().unwrap()
        )
    );
}

#[tokio::test]
async fn a_failing_init_container_fails_a_never_pod_and_no_app_is_created() {
    let t = setup();
    t.cri.st().exit_on_start.insert("a".into(), 1);
    t.apply(&ORDERED.replace("spec:\n", "spec:\n  restartPolicy: Never\n"))
        .await;
    let p = t.until("p", "Failed", |p| phase(p) == "Failed").await;
    assert_eq!(
        p["status"]["initContainerStatuses"][0]["state"]["terminated"]["exitCode"],
        1
    );
    assert!(
        !t.calls()
            .iter()
            .any(|c| c == "CreateContainer b" || c == "CreateContainer x"),
        "{:?}",
        t.calls()
    );
    t.until("p", "sandbox stopped", |_| {
        t.calls().iter().any(|c| c.starts_with("StopPodSandbox"))
    })
    .await;
}

#[tokio::test]
async fn a_crashing_container_restarts_with_back_off() {
    let t = setup();
    t.cri.st().exit_on_start.insert("x".into(), 2);
    t.apply("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers:\n  - {name: x, image: img:1}\n").await;
    let p = t
        .until("p", "in CrashLoopBackOff", |p| {
            p["status"]["containerStatuses"][0]["state"]["waiting"]["reason"] == "CrashLoopBackOff"
        })
        .await;
    let cs = &p["status"]["containerStatuses"][0];
    assert!(
        cs["state"]["waiting"]["message"]
            .as_str()
            .unwrap()
            .starts_with("back-off 1s restarting failed container=x pod=p_default("),
        "{cs}"
    );
    assert_eq!(cs["lastState"]["terminated"]["exitCode"], 2);
    assert_eq!(cs["lastState"]["terminated"]["reason"], "Error");
    let p = t.until("p", "restarted twice", |p| restarts(p) >= 2).await;
    assert_eq!(phase(&p), "Running", "Always: a crashing pod stays Running");
    assert!(t.reasons("p").contains(&"BackOff".to_string()));
    // Attempts are numbered by restartCount, and one previous attempt is kept.
    let attempts: Vec<u32> = t.cri.created().into_iter().map(|(_, a)| a).collect();
    assert_eq!(attempts.len(), 2, "{attempts:?}");
    assert!(attempts.iter().max().unwrap() >= &2);
}

#[tokio::test]
async fn liveness_failure_kills_and_restarts() {
    let t = setup();
    t.cri.st().exec_exit.insert("x".into(), 1);
    t.apply("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers:\n  - name: x\n    image: img:1\n    livenessProbe: {exec: {command: [check]}, periodSeconds: 1, failureThreshold: 1}\n").await;
    t.until("p", "restarted", |p| restarts(p) >= 1).await;
    let r = t.reasons("p");
    assert!(
        r.contains(&"Unhealthy".into()) && r.contains(&"Killing".into()),
        "{r:?}"
    );
    let events = t.m.events("default", "p").unwrap();
    let k = events
        .iter()
        .find(|e| e.reason.as_deref() == Some("Killing"))
        .unwrap();
    assert_eq!(
        k.message.as_deref(),
        Some("Container x failed liveness probe, will be restarted")
    );
    assert_eq!(
        k.involved_object.field_path.as_deref(),
        Some("spec.containers{x}")
    );
}

#[tokio::test]
async fn readiness_and_startup_probes_gate_ready() {
    let t = setup();
    t.cri.st().exec_exit.insert("x".into(), 1);
    t.apply("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers:\n  - name: x\n    image: img:1\n    readinessProbe: {exec: {command: [check]}, periodSeconds: 1, failureThreshold: 1}\n").await;
    let p = t.until("p", "running", |p| phase(p) == "Running").await;
    assert!(!ready(&p));
    t.cri.st().exec_exit.insert("x".into(), 0);
    t.until("p", "Ready", ready).await;
    t.cri.st().exec_exit.insert("x".into(), 1);
    t.until("p", "unready", |p| !ready(p)).await;
}

#[tokio::test]
async fn pull_policies() {
    let t = setup();
    t.cri.st().pullable.insert("pullable:1".into());
    t.apply("apiVersion: v1\nkind: Pod\nmetadata: {name: never}\nspec:\n  containers:\n  - {name: x, image: absent:1, imagePullPolicy: Never}\n").await;
    t.until("never", "ErrImageNeverPull", |p| {
        p["status"]["containerStatuses"][0]["state"]["waiting"]["reason"] == "ErrImageNeverPull"
    })
    .await;
    t.apply("apiVersion: v1\nkind: Pod\nmetadata: {name: bad}\nspec:\n  containers:\n  - {name: x, image: absent:2}\n").await;
    t.until("bad", "ImagePullBackOff", |p| {
        p["status"]["containerStatuses"][0]["state"]["waiting"]["reason"] == "ImagePullBackOff"
    })
    .await;
    assert!(t.reasons("bad").contains(&"Failed".into()));
    t.apply("apiVersion: v1\nkind: Pod\nmetadata: {name: good}\nspec:\n  containers:\n  - {name: x, image: pullable:1}\n").await;
    t.until("good", "running", |p| phase(p) == "Running").await;
    let r = t.reasons("good");
    assert!(
        r.contains(&"Pulling".into()) && r.contains(&"Pulled".into()),
        "{r:?}"
    );
    assert_eq!(
        t.cri
            .st()
            .pulls
            .iter()
            .filter(|p| *p == "pullable:1")
            .count(),
        1
    );
}

#[tokio::test]
async fn apply_is_all_or_nothing_unchanged_or_replacing_and_admission_counts_pods() {
    let t = setup();
    let pod = |name: &str, cpu: &str| {
        format!("apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}}}\nspec:\n  terminationGracePeriodSeconds: 0\n  containers:\n  - name: x\n    image: img:1\n    resources: {{requests: {{cpu: {cpu}}}}}\n")
    };
    let bad = format!("{}---\napiVersion: v1\nkind: Pod\nmetadata: {{name: b}}\nspec:\n  containers: [{{name: x}}]\n", pod("a", "600m"));
    let e =
        t.m.apply("default", bad.as_bytes(), "t.yaml")
            .await
            .unwrap_err();
    assert!(
        e.to_string()
            .contains("spec.containers[0].image: Required value"),
        "{e}"
    );
    assert!(
        t.m.list(None).is_empty(),
        "nothing is created when one document is bad"
    );
    assert_eq!(t.apply(&pod("a", "600m")).await, ["created"]);
    let uid = t.until("a", "running", |p| phase(p) == "Running").await["metadata"]["uid"].clone();
    assert_eq!(t.apply(&pod("a", "600m")).await, ["unchanged"]);
    // The second pod does not fit next to the first (1000m allocatable).
    t.apply(&pod("c", "600m")).await;
    let c = t.until("c", "refused", |p| phase(p) == "Failed").await;
    assert_eq!(c["status"]["reason"], "OutOfcpu");
    assert!(t.reasons("c").contains(&"OutOfcpu".into()));
    // A changed spec replaces the pod.
    assert_eq!(t.apply(&pod("a", "500m")).await, ["configured"]);
    let a = json(&t.m.get("default", "a").unwrap());
    assert_ne!(a["metadata"]["uid"], uid);
    assert_eq!(
        a["spec"]["containers"][0]["resources"]["requests"]["cpu"],
        "500m"
    );
}

#[tokio::test]
async fn delete_removes_every_object_and_record() {
    let t = setup();
    t.apply("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  terminationGracePeriodSeconds: 1\n  containers:\n  - {name: x, image: img:1}\n  volumes: [{name: v, emptyDir: {}}]\n").await;
    let p = t.until("p", "running", |p| phase(p) == "Running").await;
    let uid = p["metadata"]["uid"].as_str().unwrap().to_string();
    assert!(t.settings.pods_dir.join(&uid).join("volumes").is_dir());
    assert!(t.settings.pods_dir.join("default/p/record.json").is_file());
    t.m.delete(Deletion::waited("default", "p")).await.unwrap();
    assert!(t.m.get("default", "p").is_err());
    {
        let st = t.cri.st();
        assert!(st.containers.is_empty() && st.sandboxes.is_empty());
        assert!(st.calls.iter().any(|c| c.starts_with("StopContainer")));
    }
    assert!(!t.settings.pods_dir.join(&uid).exists());
    assert!(!t.settings.pods_dir.join("default/p").exists());
    assert!(matches!(
        t.m.delete(Deletion::waited("default", "p")).await,
        Err(crate::manager::PodError::NotFound { .. })
    ));
}

#[tokio::test]
async fn a_restarted_manager_adopts_stored_pods_and_keeps_supervising() {
    let t = setup();
    t.apply("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers:\n  - {name: x, image: img:1}\n").await;
    let before = t.until("p", "running", |p| phase(p) == "Running").await;
    let uid = before["metadata"]["uid"].clone();
    // The daemon stops: a new manager loads the records and finds the CRI objects by label.
    t.m.stop();
    let m2 = Manager::start(t.cri.clone(), t.settings.clone());
    let p = json(&m2.get("default", "p").unwrap());
    assert_eq!(p["metadata"]["uid"], uid);
    assert!(m2
        .events("default", "p")
        .unwrap()
        .iter()
        .any(|e| e.reason.as_deref() == Some("Scheduled")));
    let sandboxes = t.cri.st().sandboxes.len();
    assert_eq!(sandboxes, 1, "no second sandbox");
    t.cri.exit("x", 1);
    let t0 = Instant::now();
    loop {
        let p = json(&m2.get("default", "p").unwrap());
        if restarts(&p) >= 1 {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "not restarted after adoption: {p:#}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn a_failed_post_start_hook_kills_the_container() {
    let t = setup();
    t.cri.st().exec_exit.insert("x".into(), 1);
    t.apply("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers:\n  - name: x\n    image: img:1\n    lifecycle: {postStart: {exec: {command: [setup]}}}\n").await;
    t.until("p", "restarted", |p| restarts(p) >= 1).await;
    assert!(t.reasons("p").contains(&"FailedPostStartHook".into()));
}

#[tokio::test]
async fn sidecars_start_before_apps_and_stop_after_them() {
    let t = setup();
    t.apply("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  terminationGracePeriodSeconds: 1\n  initContainers:\n  - {name: s, image: img:1, restartPolicy: Always}\n  containers:\n  - {name: x, image: img:1}\n").await;
    let p = t.until("p", "Ready", ready).await;
    assert_eq!(p["status"]["initContainerStatuses"][0]["started"], true);
    let names: Vec<String> = t.cri.created().into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, ["s", "x"]);
    let id = |list: &str| {
        p["status"][list][0]["containerID"]
            .as_str()
            .unwrap()
            .trim_start_matches("peapod://")
            .to_string()
    };
    let (sidecar, app) = (id("initContainerStatuses"), id("containerStatuses"));
    t.m.delete(Deletion::waited("default", "p")).await.unwrap();
    let calls = t.calls();
    let pos = |c: &str| {
        calls
            .iter()
            .position(|x| x == &format!("StopContainer {c}"))
            .unwrap()
    };
    assert!(pos(&app) < pos(&sidecar), "{calls:?}");
}

#[tokio::test]
async fn a_delete_interrupted_by_a_daemon_stop_is_finished_after_restart() {
    let t = setup();
    t.apply("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers:\n  - {name: x, image: img:1}\n").await;
    t.until("p", "running", |p| phase(p) == "Running").await;
    // As if the daemon died right after persisting the delete request.
    t.m.stop();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut rec: crate::record::PodRecord = serde_json::from_slice(
        &std::fs::read(t.settings.pods_dir.join("default/p/record.json")).unwrap(),
    )
    .unwrap();
    rec.deleting = Some(0);
    crate::store::Store::new(&t.settings.pods_dir)
        .save(&rec)
        .unwrap();
    let m2 = Manager::start(t.cri.clone(), t.settings.clone());
    let t0 = Instant::now();
    while m2.get("default", "p").is_ok() || !t.cri.st().sandboxes.is_empty() {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "the delete was not finished"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(!t.settings.pods_dir.join("default/p").exists());
}

#[tokio::test]
async fn a_dead_sandbox_is_recreated_and_init_containers_run_again() {
    let t = setup();
    t.apply("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  initContainers:\n  - {name: i, image: img:1}\n  containers:\n  - {name: x, image: img:1}\n").await;
    t.cri.st().exit_on_start.insert("i".into(), 0);
    t.until("p", "running", |p| phase(p) == "Running").await;
    // The infra container dies.
    {
        let mut st = t.cri.st();
        for s in st.sandboxes.values_mut() {
            s.1 = peapod_proto::v1::PodSandboxState::SandboxNotready as i32;
        }
    }
    let p = t
        .until("p", "running in a new sandbox", |p| {
            restarts(p) >= 1 && phase(p) == "Running"
        })
        .await;
    assert_eq!(p["status"]["initContainerStatuses"][0]["restartCount"], 1);
    assert!(t.reasons("p").contains(&"SandboxChanged".into()));
    let st = t.cri.st();
    assert_eq!(st.sandboxes.len(), 1, "the dead sandbox is removed");
    let ready = peapod_proto::v1::PodSandboxState::SandboxReady as i32;
    assert!(st.sandboxes.values().all(|s| s.1 == ready));
}

#[tokio::test]
async fn a_failing_startup_probe_kills_and_holds_back_readiness() {
    let t = setup();
    t.cri.st().exec_exit.insert("x".into(), 1);
    t.apply("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers:\n  - name: x\n    image: img:1\n    startupProbe: {exec: {command: [check]}, periodSeconds: 1, failureThreshold: 1}\n").await;
    let p = t.until("p", "running", |p| phase(p) == "Running").await;
    assert_eq!(p["status"]["containerStatuses"][0]["started"], false);
    assert!(!ready(&p), "not ready before the startup probe passes");
    t.until("p", "restarted", |p| restarts(p) >= 1).await;
    let events = t.m.events("default", "p").unwrap();
    assert!(events.iter().any(
        |e| e.message.as_deref() == Some("Container x failed startup probe, will be restarted")
    ));
    t.cri.st().exec_exit.insert("x".into(), 0);
    let p = t.until("p", "started and ready", ready).await;
    assert_eq!(p["status"]["containerStatuses"][0]["started"], true);
}

#[tokio::test]
async fn a_failed_start_is_retried_with_back_off_as_a_new_attempt() {
    let t = setup();
    t.cri.st().fail_start.insert("x".into(), 2);
    t.apply("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers:\n  - {name: x, image: img:1}\n").await;
    t.until("p", "RunContainerError", |p| {
        p["status"]["containerStatuses"][0]["state"]["waiting"]["reason"] == "RunContainerError"
    })
    .await;
    let p = t.until("p", "running", |p| phase(p) == "Running").await;
    assert_eq!(restarts(&p), 2);
    // Only the running attempt and the one before it are kept.
    assert_eq!(t.cri.st().containers.len(), 2);
}

#[tokio::test]
async fn a_failing_sandbox_is_retried_with_back_off() {
    let t = setup();
    t.cri.st().fail_sandbox = 2;
    t.apply("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers:\n  - {name: x, image: img:1}\n").await;
    t.until("p", "running", |p| phase(p) == "Running").await;
    let tries = t.calls().iter().filter(|c| *c == "RunPodSandbox").count();
    // 20 ms syncs over the 400 ms + 800 ms back-off would be ~60 tries without it.
    assert_eq!(tries, 3, "{:?}", t.calls());
    assert!(t.reasons("p").contains(&"FailedCreatePodSandBox".into()));
}

#[tokio::test]
async fn active_deadline_fails_the_pod_and_stops_it() {
    let t = setup();
    t.apply("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  activeDeadlineSeconds: 1\n  containers:\n  - {name: x, image: img:1}\n").await;
    t.until("p", "running", |p| phase(p) == "Running").await;
    let p = t.until("p", "Failed", |p| phase(p) == "Failed").await;
    assert_eq!(p["status"]["reason"], "DeadlineExceeded");
    assert!(t.reasons("p").contains(&"DeadlineExceeded".into()));
    t.until("p", "stopped", |_| {
        t.calls().iter().any(|c| c.starts_with("StopPodSandbox"))
    })
    .await;
    assert!(t.calls().iter().any(|c| c.starts_with("StopContainer")));
}

#[tokio::test]
async fn the_burstable_cgroup_has_the_sum_of_its_pods_requests() {
    let t = setup();
    let pod = |name: &str, cpu: &str| {
        format!("apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}}}\nspec:\n  containers:\n  - name: x\n    image: img:1\n    resources: {{requests: {{cpu: {cpu}}}}}\n")
    };
    t.apply(&pod("a", "250m")).await;
    t.apply(&pod("b", "500m")).await;
    t.until("b", "running", |p| phase(p) == "Running").await;
    t.m.update_qos_cgroups();
    let crate::cgroup::PodCgroups::Fs { root } = &t.settings.cgroups else {
        panic!("the tests' cgroups are directories")
    };
    let shares = root.join("cpu/kubepods/burstable/cpu.shares");
    assert_eq!(std::fs::read_to_string(&shares).unwrap(), "768");
}

#[tokio::test]
async fn after_a_reboot_the_pod_is_made_again() {
    let t = setup();
    t.apply("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers:\n  - {name: x, image: img:1}\n").await;
    t.until("p", "running", |p| phase(p) == "Running").await;
    t.m.stop();
    tokio::time::sleep(Duration::from_millis(50)).await;
    // The runtime forgot everything (its state lives on a tmpfs).
    {
        let mut st = t.cri.st();
        st.sandboxes.clear();
        st.containers.clear();
    }
    let m2 = Manager::start(t.cri.clone(), t.settings.clone());
    let t0 = Instant::now();
    loop {
        let p = json(&m2.get("default", "p").unwrap());
        if phase(&p) == "Running" && restarts(&p) == 1 && !t.cri.st().containers.is_empty() {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "not made again: {p:#}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(t.cri.st().sandboxes.len(), 1);
}
