//! The runtime side of NRI: the socket plugins connect to, their registration, configuration
//! and synchronisation, and the relay of pod and container events to them.
//!
//! Order and consistency, as containerd/nri keeps them:
//! - plugins are called one after another in (index, name) order;
//! - one event at a time: every event, and a new plugin's synchronisation, holds the one
//!   `state` lock, so a plugin sees events in the order they happened and a pod or container
//!   is either in a new plugin's Synchronize or reaches it as an event, never neither;
//! - the runtime keeps its own view of the pods and containers it told plugins about (the
//!   messages it sent, with a state), so Synchronize needs no call back into the daemon and an
//!   event is sent once per transition (a second StopPodSandbox sends nothing);
//! - a plugin that answers an event with an error fails that event (the CRI call); one that
//!   times out or disconnects is dropped and the event goes on without it.

use crate::adjust::{AdjustError, Merged};
use crate::api::*;
use crate::wire::{code, CallError, Handler, Peer, Request, PLUGIN_SERVICE_CONN};
use prost::Message;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;
use tokio::net::{UnixListener, UnixStream};

pub const PLUGIN_SERVICE: &str = "nri.pkg.api.v1alpha1.Plugin";
pub const RUNTIME_SERVICE: &str = "nri.pkg.api.v1alpha1.Runtime";
/// The NRI version whose protocol this is (what plugins are told in Configure).
pub const NRI_VERSION: &str = "v0.12.1";

/// Bit of an event in a subscription mask.
pub fn event_bit(e: Event) -> i32 {
    1 << (e as i32 - 1)
}

/// Every event a plugin may subscribe to.
pub fn valid_events() -> i32 {
    (1 << (Event::Last as i32 - 1)) - 1
}

#[derive(Debug, Clone)]
pub struct Settings {
    pub socket_path: PathBuf,
    pub runtime_name: String,
    pub runtime_version: String,
    /// How long a connected plugin has to register.
    pub registration_timeout: Duration,
    /// How long a plugin has to answer any request.
    pub request_timeout: Duration,
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("NRI plugin {plugin} failed {event}: {message}")]
    Plugin {
        plugin: String,
        event: &'static str,
        message: String,
    },
    #[error("NRI plugin {plugin} rejected the adjustments: {reason}")]
    Rejected { plugin: String, reason: String },
    #[error("NRI adjustment refused: {0}")]
    Adjust(#[from] AdjustError),
    #[error("NRI socket {path}: {source}")]
    Socket {
        path: PathBuf,
        source: std::io::Error,
    },
}

impl Error {
    /// The socket is another live runtime's (a containerd with NRI on, a second peapod).
    pub fn is_in_use(&self) -> bool {
        matches!(self, Error::Socket { source, .. } if source.kind() == std::io::ErrorKind::AddrInUse)
    }
}

/// Applies container updates a plugin asks for (UpdateContainers, or the updates that come
/// with Synchronize, CreateContainer, UpdateContainer and StopContainer answers).
#[async_trait::async_trait]
pub trait Updater: Send + Sync + 'static {
    /// Returns the updates that failed.
    async fn update(&self, updates: Vec<ContainerUpdate>) -> Vec<ContainerUpdate>;
}

struct PodEntry {
    pod: PodSandbox,
    stopped: bool,
}

#[derive(Default)]
struct State {
    pods: BTreeMap<String, PodEntry>,
    containers: BTreeMap<String, Container>,
}

/// One registered plugin.
pub struct Plugin {
    /// `<index>-<name>`, as containerd/nri names it.
    pub name: String,
    idx: String,
    events: i32,
    peer: Arc<Peer>,
}

impl Plugin {
    fn subscribed(&self, e: Event) -> bool {
        self.events & event_bit(e) != 0
    }

    /// Relays one event; `None` when the plugin did not subscribe to it. Plugins built before
    /// an event had its own call get it as StateChange (`fallback`), as containerd/nri does.
    async fn relay<Req: Message, Resp: Message + Default>(
        &self,
        event: Event,
        method: &str,
        req: &Req,
        fallback: Option<StateChangeEvent>,
        timeout: Duration,
    ) -> Result<Option<Resp>, CallError> {
        if !self.subscribed(event) {
            return Ok(None);
        }
        match self.peer.call(PLUGIN_SERVICE, method, req, timeout).await {
            Err(e) if e.is_unimplemented() && fallback.is_some() => {
                let ev = fallback.unwrap_or_default();
                let _: Empty = self
                    .peer
                    .call(PLUGIN_SERVICE, "StateChange", &ev, timeout)
                    .await?;
                Ok(Some(Resp::default()))
            }
            other => other.map(Some),
        }
    }
}

/// The NRI runtime: listens for plugins and relays events to them.
pub struct Runtime {
    settings: Settings,
    state: tokio::sync::Mutex<State>,
    plugins: Mutex<Vec<Arc<Plugin>>>,
    updater: Mutex<Option<Arc<dyn Updater>>>,
    accept: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl Drop for Runtime {
    fn drop(&mut self) {
        if let Ok(mut a) = self.accept.lock() {
            if let Some(task) = a.take() {
                task.abort();
            }
        }
    }
}

fn event_name(e: Event) -> &'static str {
    match e {
        Event::RunPodSandbox => "RunPodSandbox",
        Event::StopPodSandbox => "StopPodSandbox",
        Event::RemovePodSandbox => "RemovePodSandbox",
        Event::CreateContainer => "CreateContainer",
        Event::PostCreateContainer => "PostCreateContainer",
        Event::StartContainer => "StartContainer",
        Event::PostStartContainer => "PostStartContainer",
        Event::UpdateContainer => "UpdateContainer",
        Event::PostUpdateContainer => "PostUpdateContainer",
        Event::StopContainer => "StopContainer",
        Event::RemoveContainer => "RemoveContainer",
        Event::UpdatePodSandbox => "UpdatePodSandbox",
        Event::PostUpdatePodSandbox => "PostUpdatePodSandbox",
        Event::ValidateContainerAdjustment => "ValidateContainerAdjustment",
        Event::Unknown | Event::Last => "unknown event",
    }
}

/// A plugin name and index as containerd/nri accepts them: a two-digit index, a name that is
/// usable in a file name.
fn check_registration(req: &RegisterPluginRequest) -> Result<(), String> {
    let idx_ok = req.plugin_idx.len() == 2 && req.plugin_idx.bytes().all(|b| b.is_ascii_digit());
    if !idx_ok {
        return Err(format!(
            "plugin_idx {:?} must be two digits",
            req.plugin_idx
        ));
    }
    let name_ok = !req.plugin_name.is_empty()
        && req.plugin_name.len() <= 128
        && !req.plugin_name.contains('/')
        && req.plugin_name.chars().all(|c| !c.is_control());
    if !name_ok {
        return Err(format!(
            "plugin_name {:?} is not a valid name",
            req.plugin_name
        ));
    }
    Ok(())
}

/// The runtime's service as one plugin connection sees it.
struct RuntimeService {
    registered: Mutex<Option<tokio::sync::oneshot::Sender<RegisterPluginRequest>>>,
    runtime: Weak<Runtime>,
}

#[async_trait::async_trait]
impl Handler for RuntimeService {
    async fn handle(&self, call: &Request) -> Result<Vec<u8>, (i32, String)> {
        let bad = |e: prost::DecodeError| (code::INVALID_ARGUMENT, e.to_string());
        let (service, method, payload) = (&*call.service, &*call.method, &*call.payload);
        match (service, method) {
            (RUNTIME_SERVICE, "RegisterPlugin") => {
                let req = RegisterPluginRequest::decode(payload).map_err(bad)?;
                check_registration(&req).map_err(|e| (code::INVALID_ARGUMENT, e))?;
                let tx = self.registered.lock().ok().and_then(|mut r| r.take());
                match tx {
                    Some(tx) => {
                        let _ = tx.send(req);
                        Ok(Empty {}.encode_to_vec())
                    }
                    None => Err((code::INVALID_ARGUMENT, "plugin already registered".into())),
                }
            }
            (RUNTIME_SERVICE, "UpdateContainers") => {
                let req = UpdateContainersRequest::decode(payload).map_err(bad)?;
                let Some(rt) = self.runtime.upgrade() else {
                    return Err((code::CANCELLED, "runtime is shutting down".into()));
                };
                warn_evictions("(UpdateContainers)", &req.evict);
                let failed = rt.apply_updates(req.update).await;
                Ok(UpdateContainersResponse { failed }.encode_to_vec())
            }
            _ => Err((
                code::UNIMPLEMENTED,
                format!("{service}/{method} is not served"),
            )),
        }
    }
}

impl Runtime {
    /// Binds the socket (replacing a stale one) and starts accepting plugins.
    pub fn start(settings: Settings) -> Result<Arc<Runtime>, Error> {
        let path = settings.socket_path.clone();
        let sock_err = |source| Error::Socket {
            path: path.clone(),
            source,
        };
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(sock_err)?;
        }
        // A socket someone answers on belongs to a live runtime (a containerd with NRI on, a
        // second peapod): refuse rather than steal it. One nobody answers on is stale.
        if std::os::unix::net::UnixStream::connect(&path).is_ok() {
            return Err(sock_err(std::io::Error::new(
                std::io::ErrorKind::AddrInUse,
                "another runtime is serving NRI on it",
            )));
        }
        match std::fs::remove_file(&path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(sock_err(e)),
            _ => {}
        }
        let listener = UnixListener::bind(&path).map_err(sock_err)?;
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
                .map_err(sock_err)?;
        }
        let rt = Arc::new(Runtime {
            settings,
            state: Default::default(),
            plugins: Default::default(),
            updater: Default::default(),
            accept: Default::default(),
        });
        let weak = Arc::downgrade(&rt);
        let task = tokio::spawn(async move {
            loop {
                let stream = match listener.accept().await {
                    Ok((s, _)) => s,
                    Err(e) => {
                        tracing::warn!(error = %e, "accepting an NRI plugin");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                };
                let Some(rt) = weak.upgrade() else { return };
                tokio::spawn(async move {
                    if let Err(e) = rt.admit(stream).await {
                        tracing::warn!(error = %e, "NRI plugin not admitted");
                    }
                });
            }
        });
        if let Ok(mut a) = rt.accept.lock() {
            *a = Some(task);
        }
        tracing::info!(socket = %rt.settings.socket_path.display(), "NRI listening");
        Ok(rt)
    }

    /// Stops accepting plugins, disconnects them and removes the socket.
    pub async fn shutdown(&self) {
        if let Some(task) = self.accept.lock().ok().and_then(|mut a| a.take()) {
            task.abort();
        }
        for p in self.plugin_list() {
            p.peer.close().await;
        }
        if let Ok(mut list) = self.plugins.lock() {
            list.clear();
        }
        let _ = std::fs::remove_file(&self.settings.socket_path);
    }

    pub fn set_updater(&self, updater: Arc<dyn Updater>) {
        if let Ok(mut u) = self.updater.lock() {
            *u = Some(updater);
        }
    }

    /// The registered plugins' names, in call order.
    pub fn plugin_names(&self) -> Vec<String> {
        self.plugin_list().iter().map(|p| p.name.clone()).collect()
    }

    fn plugin_list(&self) -> Vec<Arc<Plugin>> {
        self.plugins.lock().map(|l| l.clone()).unwrap_or_default()
    }

    /// Forgets one connection's plugin (by connection: a plugin that registered again
    /// under the same name is another one).
    fn drop_plugin(&self, peer: &Arc<Peer>) {
        if let Ok(mut list) = self.plugins.lock() {
            list.retain(|p| !Arc::ptr_eq(&p.peer, peer));
        }
    }

    async fn apply_updates(&self, updates: Vec<ContainerUpdate>) -> Vec<ContainerUpdate> {
        if updates.is_empty() {
            return updates;
        }
        let updater = self.updater.lock().ok().and_then(|u| u.clone());
        match updater {
            Some(u) => u.update(updates).await,
            None => updates,
        }
    }

    fn spawn_updates(&self, updates: Vec<ContainerUpdate>) {
        let updater = self.updater.lock().ok().and_then(|u| u.clone());
        if let Some(u) = updater {
            tokio::spawn(async move {
                let failed = u.update(updates).await;
                if !failed.is_empty() {
                    tracing::warn!(failed = failed.len(), "NRI container updates failed");
                }
            });
        }
    }

    /// What a daemon that restarted knew: pods (with whether they are stopped) and
    /// containers, so that plugins connecting later are synchronised with them.
    pub async fn restore(&self, pods: Vec<(PodSandbox, bool)>, containers: Vec<Container>) {
        let mut st = self.state.lock().await;
        for (pod, stopped) in pods {
            st.pods.insert(pod.id.clone(), PodEntry { pod, stopped });
        }
        for c in containers {
            st.containers.insert(c.id.clone(), c);
        }
    }

    /// Registration, configuration and synchronisation of one connection.
    async fn admit(self: Arc<Self>, stream: UnixStream) -> Result<(), String> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let service = Arc::new(RuntimeService {
            registered: Mutex::new(Some(tx)),
            runtime: Arc::downgrade(&self),
        });
        let peer = Peer::start(stream, PLUGIN_SERVICE_CONN, service);
        let reg = match tokio::time::timeout(self.settings.registration_timeout, rx).await {
            Ok(Ok(reg)) => reg,
            Ok(Err(_)) => return Err("connection closed before registration".into()),
            Err(_) => {
                peer.close().await;
                return Err(format!(
                    "no registration within {:?}",
                    self.settings.registration_timeout
                ));
            }
        };
        let name = format!("{}-{}", reg.plugin_idx, reg.plugin_name);
        let fail = |what: &str, e: CallError| format!("plugin {name}: {what}: {e}");
        let configure = ConfigureRequest {
            config: String::new(),
            runtime_name: self.settings.runtime_name.clone(),
            runtime_version: self.settings.runtime_version.clone(),
            registration_timeout: self.settings.registration_timeout.as_millis() as i64,
            request_timeout: self.settings.request_timeout.as_millis() as i64,
            nri_version: NRI_VERSION.into(),
        };
        let configured: Result<ConfigureResponse, _> = peer
            .call(
                PLUGIN_SERVICE,
                "Configure",
                &configure,
                self.settings.request_timeout,
            )
            .await;
        let events = match configured {
            Ok(r) if r.events & !valid_events() != 0 => {
                peer.close().await;
                return Err(format!("plugin {name}: invalid events 0x{:x}", r.events));
            }
            Ok(r) if r.events == 0 => valid_events(),
            Ok(r) => r.events,
            Err(e) => {
                peer.close().await;
                return Err(fail("Configure", e));
            }
        };
        let plugin = Arc::new(Plugin {
            name: name.clone(),
            idx: reg.plugin_idx.clone(),
            events,
            peer: peer.clone(),
        });
        // Synchronize under the event lock: no event in between is lost or doubled.
        let st = self.state.lock().await;
        let sync = SynchronizeRequest {
            pods: st.pods.values().map(|p| p.pod.clone()).collect(),
            containers: st.containers.values().cloned().collect(),
            more: false,
        };
        // Synchronisation ends the registration handshake (a plugin counts as started only
        // after it) and a plugin may reconcile every container in it: it gets the
        // registration timeout, not the per-event one.
        let synced: Result<SynchronizeResponse, _> = peer
            .call(
                PLUGIN_SERVICE,
                "Synchronize",
                &sync,
                self.settings.registration_timeout,
            )
            .await;
        let updates = match synced {
            Ok(r) => r.update,
            Err(e) => {
                drop(st);
                peer.close().await;
                return Err(fail("Synchronize", e));
            }
        };
        // A plugin registering again under its name (it restarted) replaces the old one.
        let replaced = match self.plugins.lock() {
            Ok(mut list) => {
                let old = list
                    .iter()
                    .position(|p| p.name == name)
                    .map(|i| list.remove(i));
                list.push(plugin);
                list.sort_by(|a, b| (&a.idx, &a.name).cmp(&(&b.idx, &b.name)));
                old
            }
            Err(_) => None,
        };
        drop(st);
        if let Some(old) = replaced {
            tracing::info!(plugin = %name, "NRI plugin registered again; closing its old connection");
            old.peer.close().await;
        }
        tracing::info!(plugin = %name, events = format!("0x{events:x}"), "NRI plugin registered");
        let failed = self.apply_updates(updates).await;
        if !failed.is_empty() {
            tracing::warn!(plugin = %name, failed = failed.len(), "NRI plugin's sync updates failed");
        }
        let weak = Arc::downgrade(&self);
        tokio::spawn(async move {
            peer.closed().await;
            if let Some(rt) = weak.upgrade() {
                rt.drop_plugin(&peer);
                tracing::info!(plugin = %name, "NRI plugin disconnected");
            }
        });
        Ok(())
    }

    /// Relays one event to every plugin in order. A plugin's error fails the event; one that
    /// is gone or too slow is dropped.
    async fn relay_all<Req: Message, Resp: Message + Default>(
        &self,
        event: Event,
        req: &Req,
        fallback: Option<StateChangeEvent>,
    ) -> Result<Vec<(String, Resp)>, Error> {
        let method = event_name(event);
        let mut out = Vec::new();
        for p in self.plugin_list() {
            let timeout = self.settings.request_timeout;
            match p.relay(event, method, req, fallback.clone(), timeout).await {
                Ok(Some(r)) => out.push((p.name.clone(), r)),
                Ok(None) => {}
                Err(e) if e.is_fatal() => self.drop_failed(&p, method, &e).await,
                Err(e) => {
                    let message = match e {
                        CallError::Status { message, .. } => message,
                        other => other.to_string(),
                    };
                    return Err(Error::Plugin {
                        plugin: p.name.clone(),
                        event: method,
                        message,
                    });
                }
            }
        }
        Ok(out)
    }

    /// A plugin that is gone (it disconnected: normal) or broken (too slow, garbled: an
    /// error) is dropped, and the event goes on without it.
    async fn drop_failed(&self, p: &Plugin, event: &str, e: &CallError) {
        match e {
            CallError::Closed => {
                tracing::info!(plugin = %p.name, event, "NRI plugin gone; dropped")
            }
            _ => tracing::error!(plugin = %p.name, error = %e, event, "dropping NRI plugin"),
        }
        p.peer.close().await;
        self.drop_plugin(&p.peer);
    }

    /// Like `relay_all` for events whose failure cannot undo anything (post-events, stops,
    /// removals): errors are logged.
    async fn notify<Req: Message>(
        &self,
        event: Event,
        req: &Req,
        fallback: Option<StateChangeEvent>,
    ) {
        if let Err(e) = self.relay_all::<Req, Empty>(event, req, fallback).await {
            tracing::warn!(error = %e, "NRI plugin failed a notification");
        }
    }

    fn no_plugins(&self) -> bool {
        self.plugins.lock().map(|l| l.is_empty()).unwrap_or(true)
    }

    pub async fn run_pod_sandbox(&self, pod: PodSandbox) -> Result<(), Error> {
        let mut st = self.state.lock().await;
        let req = RunPodSandboxRequest {
            pod: Some(pod.clone()),
        };
        let fallback = state_change(Event::RunPodSandbox, Some(&pod), None);
        self.relay_all::<_, RunPodSandboxResponse>(Event::RunPodSandbox, &req, fallback)
            .await?;
        st.pods.insert(
            pod.id.clone(),
            PodEntry {
                pod,
                stopped: false,
            },
        );
        Ok(())
    }

    /// StopPodSandbox, once per pod; its containers that plugins do not know stopped yet get
    /// StopContainer first.
    pub async fn stop_pod_sandbox(&self, pod_id: &str) {
        let mut st = self.state.lock().await;
        self.stop_pod_locked(&mut st, pod_id).await;
    }

    async fn stop_pod_locked(&self, st: &mut State, pod_id: &str) {
        if st.pods.get(pod_id).is_none_or(|p| p.stopped) {
            return;
        }
        for id in containers_of(st, pod_id) {
            self.stop_container_locked(st, &id, 0, 0).await;
        }
        let Some(entry) = st.pods.get_mut(pod_id) else {
            return;
        };
        entry.stopped = true;
        let pod = entry.pod.clone();
        let req = StopPodSandboxRequest {
            pod: Some(pod.clone()),
        };
        let fallback = state_change(Event::StopPodSandbox, Some(&pod), None);
        self.notify(Event::StopPodSandbox, &req, fallback).await;
    }

    /// RemovePodSandbox, after StopPodSandbox and RemoveContainer of what is left in it if
    /// those were not sent yet.
    pub async fn remove_pod_sandbox(&self, pod_id: &str) {
        let mut st = self.state.lock().await;
        if !st.pods.contains_key(pod_id) {
            return;
        }
        self.stop_pod_locked(&mut st, pod_id).await;
        for id in containers_of(&st, pod_id) {
            self.remove_container_locked(&mut st, &id).await;
        }
        let Some(entry) = st.pods.remove(pod_id) else {
            return;
        };
        let req = RemovePodSandboxRequest {
            pod: Some(entry.pod.clone()),
        };
        let fallback = state_change(Event::RemovePodSandbox, Some(&entry.pod), None);
        self.notify(Event::RemovePodSandbox, &req, fallback).await;
    }

    /// CreateContainer: the plugins' adjustments, merged. The container is known to plugins
    /// from here on (Synchronize includes it) until it is removed.
    pub async fn create_container(
        &self,
        container: Container,
    ) -> Result<ContainerAdjustment, Error> {
        let mut st = self.state.lock().await;
        let pod = st
            .pods
            .get(&container.pod_sandbox_id)
            .map(|p| p.pod.clone());
        let req = CreateContainerRequest {
            pod: pod.clone(),
            container: Some(container.clone()),
        };
        let answers = self
            .relay_all::<_, CreateContainerResponse>(Event::CreateContainer, &req, None)
            .await?;
        let mut merged = Merged::default();
        let mut updates = Vec::new();
        for (plugin, answer) in answers {
            if let Some(adj) = answer.adjust {
                merged.add(&plugin, adj)?;
            }
            warn_evictions(&plugin, &answer.evict);
            updates.extend(answer.update);
        }
        self.validate(pod, &container, &merged, &updates).await?;
        let mut known = container;
        known.state = ContainerState::ContainerCreated as i32;
        st.containers.insert(known.id.clone(), known);
        drop(st);
        self.apply_updates(updates).await;
        Ok(merged.adjust)
    }

    /// ValidateContainerAdjustment: validator plugins see the merged result and who owns what,
    /// and may reject it (the create fails). One that does not implement it has no say.
    async fn validate(
        &self,
        pod: Option<PodSandbox>,
        container: &Container,
        merged: &Merged,
        updates: &[ContainerUpdate],
    ) -> Result<(), Error> {
        let event = Event::ValidateContainerAdjustment;
        let validators: Vec<_> = self
            .plugin_list()
            .into_iter()
            .filter(|p| p.subscribed(event))
            .collect();
        if validators.is_empty() {
            return Ok(());
        }
        let req = ValidateContainerAdjustmentRequest {
            pod,
            container: Some(container.clone()),
            adjust: Some(merged.adjust.clone()),
            update: updates.to_vec(),
            owners: Some(OwningPlugins {
                owners: [(container.id.clone(), merged.field_owners())].into(),
            }),
            plugins: self
                .plugin_list()
                .iter()
                .map(|p| PluginInstance {
                    name: p.name[p.idx.len() + 1..].to_string(),
                    index: p.idx.clone(),
                })
                .collect(),
        };
        for p in validators {
            let timeout = self.settings.request_timeout;
            let answer: Result<ValidateContainerAdjustmentResponse, _> = p
                .peer
                .call(PLUGIN_SERVICE, event_name(event), &req, timeout)
                .await;
            match answer {
                Ok(r) if r.reject => {
                    return Err(Error::Rejected {
                        plugin: p.name.clone(),
                        reason: r.reason,
                    })
                }
                Ok(_) => {}
                Err(e) if e.is_unimplemented() => {}
                Err(e) if e.is_fatal() => self.drop_failed(&p, event_name(event), &e).await,
                Err(e) => {
                    return Err(Error::Plugin {
                        plugin: p.name.clone(),
                        event: event_name(event),
                        message: e.to_string(),
                    })
                }
            }
        }
        Ok(())
    }

    /// A create that failed after CreateContainer: plugins hear RemoveContainer and forget it.
    pub async fn undo_create_container(&self, id: &str) {
        let mut st = self.state.lock().await;
        let Some(c) = st.containers.remove(id) else {
            return;
        };
        let pod = st.pods.get(&c.pod_sandbox_id).map(|p| p.pod.clone());
        self.notify_container(Event::RemoveContainer, pod, c).await;
    }

    /// The pod and the container as plugins know them, with `change` applied to the latter.
    fn known(
        st: &mut State,
        id: &str,
        change: impl FnOnce(&mut Container),
    ) -> Option<(Option<PodSandbox>, Container)> {
        let c = st.containers.get_mut(id)?;
        change(c);
        let c = c.clone();
        let pod = st.pods.get(&c.pod_sandbox_id).map(|p| p.pod.clone());
        Some((pod, c))
    }

    /// Tells the plugins of a container event they cannot refuse.
    async fn notify_container(&self, event: Event, pod: Option<PodSandbox>, c: Container) {
        let (req, fallback) = container_event(event, pod, c);
        self.notify(event, &req, fallback).await;
    }

    /// An event after the fact (PostCreate, PostStart, PostUpdate) for a container the plugins
    /// know, with `change` applied to it first; the state stays locked until it is told.
    async fn post_container_event(
        &self,
        id: &str,
        event: Event,
        change: impl FnOnce(&mut Container) + Send,
    ) {
        let mut st = self.state.lock().await;
        let Some((pod, c)) = Self::known(&mut st, id, change) else {
            return;
        };
        self.notify_container(event, pod, c).await;
    }

    pub async fn post_create_container(&self, id: &str) {
        self.post_container_event(id, Event::PostCreateContainer, |_| {})
            .await;
    }

    /// StartContainer (before the container's process starts): a plugin's error fails it.
    pub async fn start_container(&self, id: &str) -> Result<(), Error> {
        let mut st = self.state.lock().await;
        let Some((pod, c)) = Self::known(&mut st, id, |_| {}) else {
            return Ok(());
        };
        let (req, fallback) = container_event(Event::StartContainer, pod, c);
        self.relay_all::<_, Empty>(Event::StartContainer, &req, fallback)
            .await
            .map(drop)
    }

    /// PostStartContainer: the container runs as `pid`.
    pub async fn post_start_container(&self, id: &str, pid: u32, started_at_ns: i64) {
        let change = move |c: &mut Container| {
            c.state = ContainerState::ContainerRunning as i32;
            c.pid = pid;
            c.started_at = started_at_ns;
        };
        self.post_container_event(id, Event::PostStartContainer, change)
            .await;
    }

    /// UpdateContainer: the resources after the plugins' say (a plugin may change what the
    /// update sets for this container through its updates).
    pub async fn update_container(
        &self,
        id: &str,
        resources: LinuxResources,
    ) -> Result<LinuxResources, Error> {
        let mut st = self.state.lock().await;
        let Some((pod, c)) = Self::known(&mut st, id, |_| {}) else {
            return Ok(resources);
        };
        let req = UpdateContainerRequest {
            pod,
            container: Some(c),
            linux_resources: Some(resources.clone()),
        };
        let answers = self
            .relay_all::<_, UpdateContainerResponse>(Event::UpdateContainer, &req, None)
            .await?;
        let mut result = resources;
        let mut others = Vec::new();
        for (plugin, answer) in answers {
            warn_evictions(&plugin, &answer.evict);
            for u in answer.update {
                match (u.container_id == id, u.linux.and_then(|l| l.resources)) {
                    (true, Some(r)) => crate::adjust::merge_resources(&mut result, r),
                    (false, linux) => others.push(ContainerUpdate {
                        linux: linux.map(|r| LinuxContainerUpdate { resources: Some(r) }),
                        ..u
                    }),
                    (true, None) => {}
                }
            }
        }
        drop(st);
        self.apply_updates(others).await;
        Ok(result)
    }

    pub async fn post_update_container(&self, id: &str) {
        self.post_container_event(id, Event::PostUpdateContainer, |_| {})
            .await;
    }

    /// StopContainer, once per container: whether it was stopped or exited on its own.
    pub async fn stop_container(&self, id: &str, exit_code: i32, finished_at_ns: i64) {
        let mut st = self.state.lock().await;
        self.stop_container_locked(&mut st, id, exit_code, finished_at_ns)
            .await;
    }

    async fn stop_container_locked(
        &self,
        st: &mut State,
        id: &str,
        exit_code: i32,
        finished_at_ns: i64,
    ) {
        let stopped = ContainerState::ContainerStopped as i32;
        if st.containers.get(id).is_none_or(|c| c.state == stopped) {
            return;
        }
        let change = |c: &mut Container| {
            c.state = stopped;
            c.exit_code = exit_code;
            c.finished_at = finished_at_ns;
            c.pid = 0;
        };
        let Some((pod, c)) = Self::known(st, id, change) else {
            return;
        };
        let req = ContainerEventRequest {
            pod,
            container: Some(c),
        };
        match self
            .relay_all::<_, StopContainerResponse>(Event::StopContainer, &req, None)
            .await
        {
            Ok(answers) => {
                let updates: Vec<_> = answers.into_iter().flat_map(|(_, a)| a.update).collect();
                if !updates.is_empty() {
                    // Applied in the background: the updater may need this lock.
                    self.spawn_updates(updates);
                }
            }
            Err(e) => tracing::warn!(error = %e, "NRI plugin failed StopContainer"),
        }
    }

    /// RemoveContainer (after StopContainer if that was not sent yet).
    pub async fn remove_container(&self, id: &str) {
        let mut st = self.state.lock().await;
        self.remove_container_locked(&mut st, id).await;
    }

    async fn remove_container_locked(&self, st: &mut State, id: &str) {
        self.stop_container_locked(st, id, 0, 0).await;
        let Some(c) = st.containers.remove(id) else {
            return;
        };
        let pod = st.pods.get(&c.pod_sandbox_id).map(|p| p.pod.clone());
        self.notify_container(Event::RemoveContainer, pod, c).await;
    }

    /// Whether any plugin is connected (callers may skip building messages when none is).
    pub fn has_plugins(&self) -> bool {
        !self.no_plugins()
    }
}

/// Evictions are not carried out: a runtime that stops containers behind the kubelet's back
/// only makes it start them again; the kubelet's own eviction is the way.
fn warn_evictions(plugin: &str, evict: &[ContainerEviction]) {
    for e in evict {
        tracing::warn!(plugin, container = %e.container_id, reason = %e.reason, "NRI eviction requested; not supported, ignored");
    }
}

fn containers_of(st: &State, pod_id: &str) -> Vec<String> {
    st.containers
        .values()
        .filter(|c| c.pod_sandbox_id == pod_id)
        .map(|c| c.id.clone())
        .collect()
}

/// A container event's request, with the state-change event for plugins that take it that way.
fn container_event(
    event: Event,
    pod: Option<PodSandbox>,
    c: Container,
) -> (ContainerEventRequest, Option<StateChangeEvent>) {
    let fallback = state_change(event, pod.as_ref(), Some(&c));
    let req = ContainerEventRequest {
        pod,
        container: Some(c),
    };
    (req, fallback)
}

fn state_change(
    event: Event,
    pod: Option<&PodSandbox>,
    container: Option<&Container>,
) -> Option<StateChangeEvent> {
    Some(StateChangeEvent {
        event: event as i32,
        pod: pod.cloned(),
        container: container.cloned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_bits_match_containerd_nri() {
        assert_eq!(event_bit(Event::RunPodSandbox), 1);
        assert_eq!(event_bit(Event::CreateContainer), 8);
        assert_eq!(valid_events(), 0x3fff);
    }

    #[test]
    fn registration_wants_two_digit_index_and_a_plain_name() {
        let req = |name: &str, idx: &str| RegisterPluginRequest {
            plugin_name: name.into(),
            plugin_idx: idx.into(),
            nri_version: String::new(),
        };
        assert!(check_registration(&req("logger", "10")).is_ok());
        assert!(check_registration(&req("logger", "1")).is_err());
        assert!(check_registration(&req("a/b", "10")).is_err());
        assert!(check_registration(&req("", "10")).is_err());
    }
}
