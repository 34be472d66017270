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
    wait_plugins(rt, |names| names.contains(&full)).await;
    conn
}

/// Waits (up to 5 s) until the registered plugins' names satisfy `ok`.
async fn wait_plugins(rt: &Runtime, ok: impl Fn(&[String]) -> bool) {
    for _ in 0..500 {
        if ok(&rt.plugin_names()) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("plugins are {:?} after 5s", rt.plugin_names());
}

/// A runtime on a socket in a directory of its own (kept as long as the first value lives).
fn started() -> (tempfile::TempDir, Settings, Arc<Runtime>) {
    let dir = tempfile::tempdir().unwrap();
    let s = settings(&dir);
    let rt = Runtime::start(s.clone()).unwrap();
    (dir, s, rt)
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
    let (_dir, s, rt) = started();
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
    let (_dir, s, rt) = started();
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
    let (_dir, s, rt) = started();
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
    let (_dir, s, rt) = started();
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
    let (_dir, s, rt) = started();
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
    let (_dir, s, rt) = started();
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
    let (_dir, s, rt) = started();
    let p = Arc::new(Recorder::default());
    let conn = attach(&rt, &s, "gone", "10", p).await;
    conn.close().await;
    wait_plugins(&rt, |names| names.is_empty()).await;
    rt.run_pod_sandbox(pod("p")).await.unwrap();
    rt.shutdown().await;
    assert!(!s.socket_path.exists());
}

#[tokio::test]
async fn a_pod_stopped_and_removed_with_containers_in_it_ends_them_first() {
    let (_dir, s, rt) = started();
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

#[tokio::test]
async fn a_socket_in_use_is_refused_and_a_stale_one_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let s = settings(&dir);
    let first = Runtime::start(s.clone()).unwrap();
    let err = Runtime::start(s.clone())
        .err()
        .expect("the socket is in use");
    assert!(err.is_in_use(), "{err:?}");
    assert!(
        err.to_string()
            .contains("another runtime is serving NRI on it"),
        "{err}"
    );
    first.shutdown().await;
    // A socket file left behind by a runtime that died is taken over.
    let _stale = std::os::unix::net::UnixListener::bind(&s.socket_path).unwrap();
    drop(_stale);
    let second = Runtime::start(s.clone()).unwrap();
    second.shutdown().await;
}

/// A plugin of an older NRI: no RunPodSandbox/StartContainer/... calls of their own, every
/// such event comes as StateChange. Answers the calls itself (no stub), as such a plugin would.
struct OldPlugin {
    seen: Mutex<Vec<String>>,
}

#[async_trait::async_trait]
impl crate::wire::Handler for OldPlugin {
    async fn handle(&self, call: &crate::wire::Request) -> Result<Vec<u8>, (i32, String)> {
        use prost::Message;
        let payload = &*call.payload;
        match &*call.method {
            "Configure" => Ok(ConfigureResponse { events: 0 }.encode_to_vec()),
            "Synchronize" => Ok(SynchronizeResponse::default().encode_to_vec()),
            "CreateContainer" => Ok(CreateContainerResponse::default().encode_to_vec()),
            "StopContainer" => Ok(StopContainerResponse::default().encode_to_vec()),
            "StateChange" => {
                let ev = StateChangeEvent::decode(payload).map_err(|e| (3, e.to_string()))?;
                let name = Event::try_from(ev.event)
                    .map(|e| e.as_str_name())
                    .unwrap_or("?");
                self.seen.lock().unwrap().push(name.to_string());
                Ok(Empty {}.encode_to_vec())
            }
            _ => Err((
                crate::wire::code::UNIMPLEMENTED,
                format!("{} unknown", call.method),
            )),
        }
    }
}

#[tokio::test]
async fn plugins_of_an_older_nri_get_events_as_state_change() {
    use crate::wire::{Peer, RUNTIME_SERVICE_CONN};
    let (_dir, s, rt) = started();
    let old = Arc::new(OldPlugin {
        seen: Mutex::default(),
    });
    let stream = tokio::net::UnixStream::connect(&s.socket_path)
        .await
        .unwrap();
    let peer = Peer::start(stream, RUNTIME_SERVICE_CONN, old.clone());
    let reg = RegisterPluginRequest {
        plugin_name: "old".into(),
        plugin_idx: "10".into(),
        nri_version: String::new(),
    };
    let _: Empty = peer
        .call(
            crate::runtime::RUNTIME_SERVICE,
            "RegisterPlugin",
            &reg,
            Duration::from_secs(5),
        )
        .await
        .unwrap();
    wait_plugins(&rt, |names| !names.is_empty()).await;
    rt.run_pod_sandbox(pod("p")).await.unwrap();
    rt.create_container(container("c", "p")).await.unwrap();
    rt.start_container("c").await.unwrap();
    rt.remove_pod_sandbox("p").await;
    assert_eq!(
        *old.seen.lock().unwrap(),
        [
            "RUN_POD_SANDBOX",
            "START_CONTAINER",
            "STOP_POD_SANDBOX",
            "REMOVE_CONTAINER",
            "REMOVE_POD_SANDBOX"
        ]
    );
    assert_eq!(
        rt.plugin_names(),
        ["10-old"],
        "Unimplemented is not a failure"
    );
}

/// A validator: rejects adjustments that set env variables it did not set itself, and keeps
/// what it was shown.
#[derive(Default)]
struct Validator {
    shown: Mutex<Option<ValidateContainerAdjustmentRequest>>,
}

#[async_trait::async_trait]
impl stub::Plugin for Validator {
    fn events(&self) -> i32 {
        crate::runtime::event_bit(Event::ValidateContainerAdjustment)
    }
    async fn validate(
        &self,
        req: ValidateContainerAdjustmentRequest,
    ) -> Result<Option<String>, String> {
        *self.shown.lock().unwrap() = Some(req.clone());
        let env_owner = |c: &ContainerAdjustment| !c.env.is_empty();
        let rejected = req.adjust.as_ref().is_some_and(env_owner)
            && req
                .container
                .as_ref()
                .is_some_and(|c| c.name.starts_with("strict"));
        Ok(rejected.then(|| "env adjustments are not allowed here".to_string()))
    }
}

#[tokio::test]
async fn validators_see_the_merged_adjustment_with_owners_and_may_reject_it() {
    let (_dir, s, rt) = started();
    let adjuster = Arc::new(Recorder::default());
    adjuster.adjust.lock().unwrap().env = vec![KeyValue {
        key: "X".into(),
        value: "1".into(),
    }];
    let validator = Arc::new(Validator::default());
    let _a = attach(&rt, &s, "adjuster", "10", adjuster).await;
    let conn = stub::connect(&s.socket_path, "validator", "90", validator.clone())
        .await
        .unwrap();
    wait_plugins(&rt, |names| names.len() == 2).await;
    rt.run_pod_sandbox(pod("p")).await.unwrap();
    let adj = rt.create_container(container("loose", "p")).await.unwrap();
    assert_eq!(adj.env.len(), 1);
    let shown = validator.shown.lock().unwrap().clone().unwrap();
    let owners = &shown.owners.unwrap().owners["loose"];
    assert_eq!(
        owners.compound[&(Field::Env as i32)].owners["X"],
        "10-adjuster"
    );
    let names: Vec<_> = shown
        .plugins
        .iter()
        .map(|p| (p.index.as_str(), p.name.as_str()))
        .collect();
    assert_eq!(names, [("10", "adjuster"), ("90", "validator")]);
    let err = rt
        .create_container(container("strict", "p"))
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "NRI plugin 90-validator rejected the adjustments: env adjustments are not allowed here"
    );
    drop(conn);
}

#[tokio::test]
async fn a_plugin_registering_again_replaces_its_old_connection() {
    let (_dir, s, rt) = started();
    let old = Arc::new(Recorder::default());
    let old_conn = attach(&rt, &s, "again", "10", old.clone()).await;
    let new = Arc::new(Recorder::default());
    let _new_conn = attach(&rt, &s, "again", "10", new.clone()).await;
    // The old connection is closed by the runtime, and its end does not drop the new one.
    old_conn.peer.closed().await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(rt.plugin_names(), ["10-again"]);
    rt.run_pod_sandbox(pod("p")).await.unwrap();
    assert_eq!(new.events(), ["RunPodSandbox p"]);
    assert!(old.events().is_empty());
}
