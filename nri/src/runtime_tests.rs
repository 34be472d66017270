//! The runtime against real plugin connections (the stub) over a unix socket.

use crate::api::*;
use crate::runtime::{Runtime, Settings};
use crate::stub::{self, Connected};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A plugin that records what it was called with, and can fail or stall on demand.
#[derive(Default)]
struct Recorder {
    events: Mutex<Vec<String>>,
    synced: Mutex<Option<(Vec<String>, Vec<String>)>>,
    fail_create: Mutex<Option<String>>,
    stall_start: Mutex<Option<Duration>>,
    adjust: Mutex<ContainerAdjustment>,
}

impl Recorder {
    fn events(&self) -> Vec<String> {
        self.events.lock().unwrap().clone()
    }
    fn record(&self, what: String) {
        self.events.lock().unwrap().push(what);
    }
}

#[async_trait::async_trait]
impl stub::Plugin for Recorder {
    async fn synchronize(
        &self,
        pods: Vec<PodSandbox>,
        containers: Vec<Container>,
    ) -> Result<Vec<ContainerUpdate>, String> {
        *self.synced.lock().unwrap() = Some((
            pods.into_iter().map(|p| p.id).collect(),
            containers.into_iter().map(|c| c.id).collect(),
        ));
        Ok(Vec::new())
    }
    async fn run_pod_sandbox(&self, pod: PodSandbox) -> Result<(), String> {
        self.record(format!("RunPodSandbox {}", pod.id));
        Ok(())
    }
    async fn stop_pod_sandbox(&self, pod: PodSandbox) -> Result<(), String> {
        self.record(format!("StopPodSandbox {}", pod.id));
        Ok(())
    }
    async fn remove_pod_sandbox(&self, pod: PodSandbox) -> Result<(), String> {
        self.record(format!("RemovePodSandbox {}", pod.id));
        Ok(())
    }
    async fn create_container(
        &self,
        pod: PodSandbox,
        c: Container,
    ) -> Result<ContainerAdjustment, String> {
        self.record(format!("CreateContainer {}/{}", pod.id, c.id));
        if let Some(e) = self.fail_create.lock().unwrap().clone() {
            return Err(e);
        }
        Ok(self.adjust.lock().unwrap().clone())
    }
    async fn container_event(
        &self,
        e: Event,
        _pod: PodSandbox,
        c: Container,
    ) -> Result<(), String> {
        if e == Event::StartContainer {
            let stall = *self.stall_start.lock().unwrap();
            if let Some(d) = stall {
                tokio::time::sleep(d).await;
            }
        }
        self.record(format!("{} {}", e.as_str_name(), c.id));
        Ok(())
    }
    async fn update_container(
        &self,
        _pod: PodSandbox,
        c: Container,
        _r: Option<LinuxResources>,
    ) -> Result<Vec<ContainerUpdate>, String> {
        self.record(format!("UpdateContainer {}", c.id));
        Ok(Vec::new())
    }
}

fn settings(dir: &tempfile::TempDir) -> Settings {
    Settings {
        socket_path: dir.path().join("nri/nri.sock"),
        runtime_name: "peapod".into(),
        runtime_version: "test".into(),
        registration_timeout: Duration::from_secs(5),
        request_timeout: Duration::from_millis(500),
    }
}

/// Connects `plugin` and waits (bounded) until the runtime has it registered.
async fn attach(
    rt: &Runtime,
    s: &Settings,
    name: &str,
    idx: &str,
    plugin: Arc<Recorder>,
) -> Connected {
    let conn = stub::connect(&s.socket_path, name, idx, plugin)
        .await
        .unwrap();
    let full = format!("{idx}-{name}");
    for _ in 0..500 {
        if rt.plugin_names().contains(&full) {
            return conn;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("plugin {full} not registered within 5s");
}

fn pod(id: &str) -> PodSandbox {
    PodSandbox {
        id: id.into(),
        name: format!("{id}-name"),
        namespace: "ns".into(),
        uid: format!("{id}-uid"),
        ..Default::default()
    }
}

fn container(id: &str, pod: &str) -> Container {
    Container {
        id: id.into(),
        pod_sandbox_id: pod.into(),
        name: format!("{id}-name"),
        ..Default::default()
    }
}

#[tokio::test]
async fn a_late_plugin_is_synchronised_with_existing_pods_and_containers() {
    let dir = tempfile::tempdir().unwrap();
    let s = settings(&dir);
    let rt = Runtime::start(s.clone()).unwrap();
    rt.restore(vec![(pod("old"), true)], vec![container("c0", "old")])
        .await;
    rt.run_pod_sandbox(pod("p1")).await.unwrap();
    rt.create_container(container("c1", "p1")).await.unwrap();
    let plugin = Arc::new(Recorder::default());
    let _conn = attach(&rt, &s, "sync", "10", plugin.clone()).await;
    let (pods, containers) = plugin.synced.lock().unwrap().clone().unwrap();
    assert_eq!(pods, vec!["old".to_string(), "p1".into()]);
    assert_eq!(containers, vec!["c0".to_string(), "c1".into()]);
    assert!(
        plugin.events().is_empty(),
        "nothing before registration is replayed as events"
    );
}

#[tokio::test]
async fn events_arrive_in_lifecycle_order_and_once() {
    let dir = tempfile::tempdir().unwrap();
    let s = settings(&dir);
    let rt = Runtime::start(s.clone()).unwrap();
    let plugin = Arc::new(Recorder::default());
    let _conn = attach(&rt, &s, "order", "10", plugin.clone()).await;
    rt.run_pod_sandbox(pod("p")).await.unwrap();
    rt.create_container(container("c", "p")).await.unwrap();
    rt.post_create_container("c").await;
    rt.start_container("c").await.unwrap();
    rt.post_start_container("c", 42, 1).await;
    rt.update_container("c", LinuxResources::default())
        .await
        .unwrap();
    rt.post_update_container("c").await;
    rt.stop_container("c", 0, 2).await;
    rt.stop_container("c", 0, 3).await; // the exit seen again: no second event
    rt.remove_container("c").await;
    rt.stop_pod_sandbox("p").await;
    rt.stop_pod_sandbox("p").await;
    rt.remove_pod_sandbox("p").await;
    rt.remove_pod_sandbox("p").await;
    assert_eq!(
        plugin.events(),
        [
            "RunPodSandbox p",
            "CreateContainer p/c",
            "POST_CREATE_CONTAINER c",
            "START_CONTAINER c",
            "POST_START_CONTAINER c",
            "UpdateContainer c",
            "POST_UPDATE_CONTAINER c",
            "STOP_CONTAINER c",
            "REMOVE_CONTAINER c",
            "StopPodSandbox p",
            "RemovePodSandbox p",
        ]
    );
}

#[tokio::test]
async fn removal_without_stop_sends_stop_first() {
    let dir = tempfile::tempdir().unwrap();
    let s = settings(&dir);
    let rt = Runtime::start(s.clone()).unwrap();
    let plugin = Arc::new(Recorder::default());
    let _conn = attach(&rt, &s, "rm", "10", plugin.clone()).await;
    rt.run_pod_sandbox(pod("p")).await.unwrap();
    rt.create_container(container("c", "p")).await.unwrap();
    rt.remove_container("c").await;
    rt.remove_pod_sandbox("p").await;
    assert_eq!(
        plugin.events(),
        [
            "RunPodSandbox p",
            "CreateContainer p/c",
            "STOP_CONTAINER c",
            "REMOVE_CONTAINER c",
            "StopPodSandbox p",
            "RemovePodSandbox p",
        ]
    );
}

#[tokio::test]
async fn a_plugin_error_fails_create_and_the_container_stays_unknown() {
    let dir = tempfile::tempdir().unwrap();
    let s = settings(&dir);
    let rt = Runtime::start(s.clone()).unwrap();
    let plugin = Arc::new(Recorder::default());
    *plugin.fail_create.lock().unwrap() = Some("no room".into());
    let _conn = attach(&rt, &s, "deny", "10", plugin.clone()).await;
    rt.run_pod_sandbox(pod("p")).await.unwrap();
    let err = rt.create_container(container("c", "p")).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "NRI plugin 10-deny failed CreateContainer: no room"
    );
    let late = Arc::new(Recorder::default());
    let _late = attach(&rt, &s, "late", "20", late.clone()).await;
    let (_, containers) = late.synced.lock().unwrap().clone().unwrap();
    assert!(
        containers.is_empty(),
        "a refused container is not synchronised: {containers:?}"
    );
}

#[tokio::test]
async fn adjustments_of_two_plugins_merge_and_conflicts_fail() {
    let dir = tempfile::tempdir().unwrap();
    let s = settings(&dir);
    let rt = Runtime::start(s.clone()).unwrap();
    let env = |k: &str, v: &str| KeyValue {
        key: k.into(),
        value: v.into(),
    };
    let a = Arc::new(Recorder::default());
    a.adjust.lock().unwrap().env = vec![env("A", "1")];
    let b = Arc::new(Recorder::default());
    b.adjust.lock().unwrap().env = vec![env("B", "2")];
    // Registered out of order: calls follow the index.
    let _b = attach(&rt, &s, "b", "20", b.clone()).await;
    let _a = attach(&rt, &s, "a", "10", a.clone()).await;
    assert_eq!(rt.plugin_names(), ["10-a", "20-b"]);
    rt.run_pod_sandbox(pod("p")).await.unwrap();
    let adj = rt.create_container(container("c", "p")).await.unwrap();
    assert_eq!(adj.env, vec![env("A", "1"), env("B", "2")]);
    b.adjust.lock().unwrap().env = vec![env("A", "other")];
    let err = rt.create_container(container("c2", "p")).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "NRI adjustment refused: plugins 10-a and 20-b both adjust env A"
    );
}

#[tokio::test]
async fn a_plugin_too_slow_is_dropped_and_the_event_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let s = settings(&dir);
    let rt = Runtime::start(s.clone()).unwrap();
    let slow = Arc::new(Recorder::default());
    *slow.stall_start.lock().unwrap() = Some(Duration::from_secs(5));
    let _conn = attach(&rt, &s, "slow", "10", slow.clone()).await;
    rt.run_pod_sandbox(pod("p")).await.unwrap();
    rt.create_container(container("c", "p")).await.unwrap();
    rt.start_container("c").await.unwrap();
    assert!(rt.plugin_names().is_empty(), "the slow plugin is dropped");
}

#[tokio::test]
async fn a_disconnected_plugin_is_forgotten_and_shutdown_removes_the_socket() {
    let dir = tempfile::tempdir().unwrap();
    let s = settings(&dir);
    let rt = Runtime::start(s.clone()).unwrap();
    let p = Arc::new(Recorder::default());
    let conn = attach(&rt, &s, "gone", "10", p).await;
    conn.close().await;
    for _ in 0..500 {
        if rt.plugin_names().is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(rt.plugin_names().is_empty());
    rt.run_pod_sandbox(pod("p")).await.unwrap();
    rt.shutdown().await;
    assert!(!s.socket_path.exists());
}

#[tokio::test]
async fn a_pod_stopped_and_removed_with_containers_in_it_ends_them_first() {
    let dir = tempfile::tempdir().unwrap();
    let s = settings(&dir);
    let rt = Runtime::start(s.clone()).unwrap();
    let plugin = Arc::new(Recorder::default());
    let _conn = attach(&rt, &s, "pod", "10", plugin.clone()).await;
    rt.run_pod_sandbox(pod("p")).await.unwrap();
    rt.create_container(container("c", "p")).await.unwrap();
    rt.stop_pod_sandbox("p").await;
    rt.remove_pod_sandbox("p").await;
    assert_eq!(
        plugin.events(),
        [
            "RunPodSandbox p",
            "CreateContainer p/c",
            "STOP_CONTAINER c",
            "StopPodSandbox p",
            "REMOVE_CONTAINER c",
            "RemovePodSandbox p",
        ]
    );
}
