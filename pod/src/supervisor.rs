//! One task per pod, the kubelet's SyncPod loop over CRI: sandbox (in the pod cgroup, with
//! volumes), image pulls per imagePullPolicy, init containers one at a time, restartable init
//! containers (sidecars) kept running, app containers together, restarts with back-off,
//! probes, and graceful deletion. Every change is persisted before it is acted on further,
//! so a restarted daemon resumes where this one stopped.

use crate::cgroup;
use crate::cri::CriApi;
use crate::cri_config::{self, uid_selector, ContainerInputs, LABEL_CONTAINER_NAME};
use crate::probe::{self, ProbeEvent, ProbeKind, ProbeReport};
use crate::record::{field_path, now_ms, Observed, PodRecord, RunState, Waiting};
use crate::resources::{is_restartable_init, pod_requests, qos_class, Amounts};
use crate::settings::Settings;
use crate::status::{self, current_termination};
use crate::store::Store;
use crate::volumes;
use k8s_openapi::api::core::v1::{Container, Event, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use peapod_proto::v1 as cri;
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tonic::Code;

/// Ten minutes of running resets a container's back-off, as the kubelet's back-off GC does.
const BACKOFF_RESET: Duration = Duration::from_secs(600);

/// What Get/List/Events read without asking the task.
#[derive(Debug, Clone, Default)]
pub struct PodView {
    pub pod: Pod,
    pub events: Vec<Event>,
    /// The requests it holds on the node (zero once finished or refused).
    pub requests: Amounts,
}

pub enum Command {
    /// Graceful deletion; `None` uses terminationGracePeriodSeconds.
    Delete { grace_seconds: Option<i64> },
}

pub struct Supervisor {
    rec: PodRecord,
    cri: Arc<dyn CriApi>,
    settings: Arc<Settings>,
    store: Store,
    view: Arc<Mutex<PodView>>,
    probes: HashMap<(String, &'static str), JoinHandle<()>>,
    probe_tx: mpsc::UnboundedSender<ProbeReport>,
    probe_rx: mpsc::UnboundedReceiver<ProbeReport>,
    volumes: Option<BTreeMap<String, PathBuf>>,
    /// Last persisted record, to write only on change.
    last_saved: String,
}

fn kind_key(k: ProbeKind) -> &'static str {
    k.label()
}

fn observed_from(s: &cri::ContainerStatus) -> Observed {
    Observed {
        state: match s.state {
            0 => RunState::Created,
            1 => RunState::Running,
            2 => RunState::Exited,
            _ => RunState::Unknown,
        },
        started_at_ns: s.started_at,
        finished_at_ns: s.finished_at,
        exit_code: s.exit_code,
        reason: s.reason.clone(),
        message: s.message.clone(),
    }
}

impl Supervisor {
    pub fn new(
        rec: PodRecord,
        cri: Arc<dyn CriApi>,
        settings: Arc<Settings>,
        store: Store,
        view: Arc<Mutex<PodView>>,
    ) -> Supervisor {
        let (probe_tx, probe_rx) = mpsc::unbounded_channel();
        Supervisor {
            rec,
            cri,
            settings,
            store,
            view,
            probes: HashMap::new(),
            probe_tx,
            probe_rx,
            volumes: None,
            last_saved: String::new(),
        }
    }

    /// Runs until the pod is deleted (then `done` becomes true) or the daemon stops.
    pub async fn run(
        mut self,
        mut commands: mpsc::UnboundedReceiver<Command>,
        done: watch::Sender<bool>,
        adopt: bool,
    ) {
        if adopt {
            self.adopt().await;
        }
        self.publish();
        let mut tick = tokio::time::interval(self.settings.sync_period);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                c = commands.recv() => match c {
                    Some(Command::Delete { grace_seconds }) => {
                        self.terminate(grace_seconds).await;
                        let _ = done.send(true);
                        return;
                    }
                    // The daemon is stopping: pods keep running, supervision resumes on restart.
                    None => {
                        self.stop_probes();
                        return;
                    }
                },
                Some(r) = self.probe_rx.recv() => self.on_probe(r).await,
                _ = tick.tick() => {}
            }
            self.sync().await;
            self.publish();
        }
    }

    fn node(&self) -> String {
        self.settings.node_name.clone()
    }

    fn event(&mut self, type_: &str, reason: &str, container: Option<&str>, message: String) {
        let fp = container.map(|c| field_path(self.rec.spec(), c));
        let node = self.node();
        self.rec.event(type_, reason, fp, message, &node);
    }

    /// Computes the status, updates the shared view and persists the record when it changed.
    fn publish(&mut self) {
        let status = status::compute(&mut self.rec, &self.settings.host_ip);
        let phase = status.phase.clone().unwrap_or_default();
        if (phase == "Succeeded" || phase == "Failed") && self.rec.final_phase.is_none() {
            self.rec.final_phase = Some(phase.clone());
        }
        self.rec.pod.status = Some(status);
        let requests = if phase == "Succeeded" || phase == "Failed" {
            Amounts::default()
        } else {
            pod_requests(self.rec.spec())
        };
        {
            let mut v = self.view.lock().unwrap_or_else(|e| e.into_inner());
            let deletion = v.pod.metadata.deletion_timestamp.clone();
            v.pod = self.rec.pod.clone();
            if deletion.is_some() {
                v.pod.metadata.deletion_timestamp = deletion;
            }
            v.events = self.rec.events.clone();
            v.requests = requests;
        }
        self.save();
    }

    fn save(&mut self) {
        let Ok(text) = serde_json::to_string(&self.rec) else {
            return;
        };
        if text == self.last_saved {
            return;
        }
        match self.store.save(&self.rec) {
            Ok(()) => self.last_saved = text,
            Err(e) => {
                tracing::error!(pod = %self.rec.name(), error = %e, "cannot persist the pod record")
            }
        }
    }

    // ---- reconciliation -------------------------------------------------------------------

    async fn sync(&mut self) {
        // Refused pods have nothing to drive; finished ones are done once their sandbox stopped.
        if self.rec.rejection.is_some()
            || (self.rec.final_phase.is_some() && self.rec.sandbox_stopped)
        {
            return;
        }
        if !self.ensure_sandbox().await {
            return;
        }
        self.observe().await;
        if let Some(p) = self.current_phase() {
            if p == "Succeeded" || p == "Failed" {
                self.finish().await;
                return;
            }
        }
        if self.sync_init().await {
            self.sync_apps().await;
        }
    }

    fn current_phase(&mut self) -> Option<String> {
        if let Some(p) = &self.rec.final_phase {
            return Some(p.clone());
        }
        status::compute(&mut self.rec, &self.settings.host_ip).phase
    }

    fn cgroup_path(&self) -> String {
        cgroup::pod_cgroup_path(
            &self.settings.cgroup_parent,
            qos_class(self.rec.spec()),
            self.rec.uid(),
        )
    }

    fn pod_dir(&self) -> PathBuf {
        cri_config::pod_dir(&self.settings, self.rec.uid())
    }

    fn sandbox_config(&self) -> cri::PodSandboxConfig {
        cri_config::sandbox_config(&self.rec, &self.settings, &self.cgroup_path())
    }

    /// The pod cgroup, the volumes and the sandbox; false while they cannot be made.
    async fn ensure_sandbox(&mut self) -> bool {
        if self.volumes.is_none() {
            match volumes::set_up(self.rec.spec(), &self.pod_dir()) {
                Ok(v) => self.volumes = Some(v),
                Err(e) => {
                    self.event("Warning", "FailedMount", None, e.to_string());
                    return false;
                }
            }
        }
        if self.rec.sandbox_id.is_some() {
            return true;
        }
        let path = self.cgroup_path();
        let values = crate::resources::pod_cgroup(self.rec.spec());
        if let Err(e) = cgroup::create(&self.settings.cgroup_root, &path, &values) {
            self.event(
                "Warning",
                "FailedCreatePodSandBox",
                None,
                format!("Failed to create the pod cgroup: {e}"),
            );
            return false;
        }
        self.rec.cgroup = Some(path);
        self.save();
        match self.cri.run_pod_sandbox(self.sandbox_config()).await {
            Ok(id) => {
                self.rec.sandbox_id = Some(id.clone());
                self.rec.pod_ip = self.cri.pod_sandbox_ip(&id).await.unwrap_or_default();
                if self.rec.pod_ip.is_empty() && self.rec.spec().host_network.unwrap_or(false) {
                    self.rec.pod_ip = self.settings.host_ip.clone();
                }
                self.save();
                true
            }
            Err(e) => {
                self.event(
                    "Warning",
                    "FailedCreatePodSandBox",
                    None,
                    format!("Failed to create pod sandbox: {}", e.message()),
                );
                false
            }
        }
    }

    /// Refreshes every current container's CRI state.
    async fn observe(&mut self) {
        let names: Vec<String> = self.rec.containers.keys().cloned().collect();
        for name in names {
            let Some(id) = self.rec.containers[&name].id.clone() else {
                continue;
            };
            match self.cri.container_status(&id).await {
                Ok(s) => {
                    let r = self.rec.container(&name);
                    r.observed = Some(observed_from(&s));
                    if !s.image_ref.is_empty() {
                        r.image_id = s.image_ref.clone();
                    }
                }
                Err(e) if e.code() == Code::NotFound => {
                    // Gone behind our back: the next sync makes a new one.
                    tracing::warn!(container = %name, %id, "container vanished; it will be created again");
                    let r = self.rec.container(&name);
                    r.id = None;
                    r.observed = None;
                }
                Err(e) => tracing::warn!(container = %name, error = %e, "ContainerStatus failed"),
            }
        }
    }

    fn state_of(&self, name: &str) -> Option<(RunState, i32)> {
        self.rec
            .containers
            .get(name)
            .and_then(|r| r.observed.as_ref())
            .map(|o| (o.state, o.exit_code))
    }

    fn restart_policy(&self) -> String {
        self.rec
            .spec()
            .restart_policy
            .clone()
            .unwrap_or_else(|| "Always".into())
    }

    /// Init containers in order; true once all are done (sidecars started).
    async fn sync_init(&mut self) -> bool {
        let inits: Vec<Container> = self.rec.spec().init_containers.clone().unwrap_or_default();
        for c in &inits {
            let restartable = is_restartable_init(c);
            match self.state_of(&c.name) {
                None => {
                    self.start(c, false).await;
                    return false;
                }
                Some((RunState::Running, _)) => {
                    let started = self.rec.containers.get(&c.name).is_some_and(|r| r.started);
                    if restartable && started {
                        continue;
                    }
                    return false;
                }
                Some((RunState::Created | RunState::Unknown, _)) => return false,
                Some((RunState::Exited, code)) => {
                    if !restartable && code == 0 {
                        continue;
                    }
                    if !restartable && self.restart_policy() == "Never" {
                        return false;
                    }
                    self.restart(c).await;
                    return false;
                }
            }
        }
        true
    }

    async fn sync_apps(&mut self) {
        let apps = self.rec.spec().containers.clone();
        let policy = self.restart_policy();
        for c in &apps {
            match self.state_of(&c.name) {
                None => self.start(c, false).await,
                Some((RunState::Exited, code)) => {
                    let killed = self.rec.containers.get(&c.name).is_some_and(|r| r.killing);
                    let again = match policy.as_str() {
                        "Always" => true,
                        "OnFailure" => code != 0 || killed,
                        _ => false,
                    };
                    if again {
                        self.restart(c).await;
                    }
                }
                Some(_) => {}
            }
        }
    }

    /// A restart, unless the container is in back-off (CrashLoopBackOff).
    async fn restart(&mut self, c: &Container) {
        let base = self.settings.backoff_base.as_millis() as u64;
        let max = self.settings.max_backoff().as_millis() as u64;
        let pod_ref = self.rec.pod_ref();
        let r = self.rec.container(&c.name);
        let Some(obs) = r.observed.clone() else {
            return;
        };
        let finished_ms = obs.finished_at_ns / 1_000_000;
        let ran_ms = (obs.finished_at_ns - obs.started_at_ns).max(0) / 1_000_000;
        if ran_ms as u128 >= BACKOFF_RESET.as_millis() {
            r.backoff_ms = 0;
        }
        let now = now_ms();
        if r.backoff_ms > 0 && now < finished_ms + r.backoff_ms as i64 {
            let secs = r.backoff_ms.div_ceil(1000);
            // One BackOff event per back-off period, not one per sync.
            let first = r.waiting.as_ref().map(|w| w.reason.as_str()) != Some("CrashLoopBackOff");
            r.waiting = Some(Waiting {
                reason: "CrashLoopBackOff".into(),
                message: format!(
                    "back-off {secs}s restarting failed container={} pod={pod_ref}",
                    c.name
                ),
            });
            if !first {
                return;
            }
            self.event(
                "Warning",
                "BackOff",
                Some(&c.name),
                format!(
                    "Back-off restarting failed container {} in pod {pod_ref}",
                    c.name
                ),
            );
            return;
        }
        r.backoff_ms = if r.backoff_ms == 0 {
            base
        } else {
            (r.backoff_ms * 2).min(max)
        };
        self.start(c, true).await;
    }

    /// Makes the image available per imagePullPolicy; None while it is not.
    async fn ensure_image(&mut self, c: &Container) -> Option<()> {
        let image = c.image.clone().unwrap_or_default();
        let policy = c
            .image_pull_policy
            .clone()
            .unwrap_or_else(|| "IfNotPresent".into());
        let present = self.cri.image_id(&image).await.ok().flatten();
        let pull = match policy.as_str() {
            "Always" => true,
            "Never" => {
                if present.is_none() {
                    let msg = format!(
                        "Container image {image:?} is not present with pull policy of Never"
                    );
                    self.rec.container(&c.name).waiting = Some(Waiting {
                        reason: "ErrImageNeverPull".into(),
                        message: msg.clone(),
                    });
                    self.event("Warning", "ErrImageNeverPull", Some(&c.name), msg);
                    return None;
                }
                false
            }
            _ => present.is_none(),
        };
        if !pull {
            self.event(
                "Normal",
                "Pulled",
                Some(&c.name),
                format!("Container image {image:?} already present on machine"),
            );
            return Some(());
        }
        let now = now_ms();
        if now < self.rec.container(&c.name).not_before_ms {
            let r = self.rec.container(&c.name);
            let first = r.waiting.as_ref().map(|w| w.reason.as_str()) != Some("ImagePullBackOff");
            r.waiting = Some(Waiting {
                reason: "ImagePullBackOff".into(),
                message: format!("Back-off pulling image {image:?}"),
            });
            if first {
                self.event(
                    "Normal",
                    "BackOff",
                    Some(&c.name),
                    format!("Back-off pulling image {image:?}"),
                );
            }
            return None;
        }
        self.event(
            "Normal",
            "Pulling",
            Some(&c.name),
            format!("Pulling image {image:?}"),
        );
        self.publish();
        let t0 = Instant::now();
        match self.cri.pull_image(&image, self.sandbox_config()).await {
            Ok(_) => {
                let secs = t0.elapsed().as_secs_f64();
                self.rec.container(&c.name).pull_failures = 0;
                self.event(
                    "Normal",
                    "Pulled",
                    Some(&c.name),
                    format!("Successfully pulled image {image:?} in {secs:.3}s ({secs:.3}s including waiting)"),
                );
                Some(())
            }
            Err(e) => {
                let base = self.settings.backoff_base.as_millis() as i64;
                let max = self.settings.max_backoff().as_millis() as i64;
                let r = self.rec.container(&c.name);
                r.pull_failures += 1;
                let delay = (base << (r.pull_failures - 1).min(10)).min(max);
                r.not_before_ms = now_ms() + delay;
                r.waiting = Some(Waiting {
                    reason: "ErrImagePull".into(),
                    message: e.message().to_string(),
                });
                self.event(
                    "Warning",
                    "Failed",
                    Some(&c.name),
                    format!("Failed to pull image {image:?}: {}", e.message()),
                );
                self.event(
                    "Warning",
                    "Failed",
                    Some(&c.name),
                    "Error: ErrImagePull".into(),
                );
                None
            }
        }
    }

    /// Creates and starts the container's next attempt.
    async fn start(&mut self, c: &Container, is_restart: bool) {
        if self.ensure_image(c).await.is_none() {
            return;
        }
        let Some(sandbox_id) = self.rec.sandbox_id.clone() else {
            return;
        };
        let current = self.rec.container(&c.name).restart_count;
        let had_attempt = self.rec.container(&c.name).id.is_some();
        let attempt = if is_restart && had_attempt {
            current + 1
        } else {
            current
        };
        let empty = BTreeMap::new();
        let config = cri_config::container_config(
            &self.rec,
            c,
            &self.settings,
            &ContainerInputs {
                attempt: attempt.max(0) as u32,
                volumes: self.volumes.as_ref().unwrap_or(&empty),
                pod_ip: &self.rec.pod_ip,
            },
        );
        let id = match self
            .cri
            .create_container(&sandbox_id, config, self.sandbox_config())
            .await
        {
            Ok(id) => id,
            Err(e) => {
                self.rec.container(&c.name).waiting = Some(Waiting {
                    reason: "CreateContainerError".into(),
                    message: e.message().to_string(),
                });
                self.event(
                    "Warning",
                    "Failed",
                    Some(&c.name),
                    format!("Error: {}", e.message()),
                );
                return;
            }
        };
        // Exactly one previous attempt is kept, for `logs --previous`.
        let stale = {
            let r = self.rec.container(&c.name);
            let stale = if had_attempt {
                r.previous_id.take()
            } else {
                None
            };
            if had_attempt {
                r.last_terminated = current_termination(r);
                r.previous_id = r.id.take();
            }
            r.restart_count = attempt;
            r.id = Some(id.clone());
            r.observed = Some(Observed {
                state: RunState::Created,
                started_at_ns: 0,
                finished_at_ns: 0,
                exit_code: 0,
                reason: String::new(),
                message: String::new(),
            });
            r.waiting = None;
            r.killing = false;
            r.started = c.startup_probe.is_none();
            r.ready = c.readiness_probe.is_none();
            stale
        };
        self.save();
        if let Some(old) = stale {
            if let Err(e) = self.cri.remove_container(&old).await {
                tracing::warn!(container = %old, error = %e, "removing an old attempt failed");
            }
        }
        self.event(
            "Normal",
            "Created",
            Some(&c.name),
            format!("Created container: {}", c.name),
        );
        match self.cri.start_container(&id).await {
            Ok(()) => {
                self.event(
                    "Normal",
                    "Started",
                    Some(&c.name),
                    format!("Started container {}", c.name),
                );
                if let Ok(s) = self.cri.container_status(&id).await {
                    self.rec.container(&c.name).observed = Some(observed_from(&s));
                }
                if let Some(h) = c.lifecycle.as_ref().and_then(|l| l.post_start.clone()) {
                    // As the kubelet: a failed postStart hook kills the container.
                    if let Err(msg) =
                        run_hook(self.cri.as_ref(), &h, c, &id, &self.rec.pod_ip).await
                    {
                        self.event(
                            "Warning",
                            "FailedPostStartHook",
                            Some(&c.name),
                            format!("PostStartHook failed: {msg}"),
                        );
                        self.event(
                            "Normal",
                            "Killing",
                            Some(&c.name),
                            format!("FailedPostStartHook: stopping container {}", c.name),
                        );
                        let grace = self
                            .rec
                            .spec()
                            .termination_grace_period_seconds
                            .unwrap_or(30);
                        if let Err(e) = self.cri.stop_container(&id, grace).await {
                            tracing::warn!(container = %id, error = %e, "StopContainer after a failed postStart hook");
                        }
                        self.publish();
                        return;
                    }
                }
                self.start_probes(c, &id);
            }
            Err(e) => {
                self.rec.container(&c.name).waiting = Some(Waiting {
                    reason: "RunContainerError".into(),
                    message: e.message().to_string(),
                });
                self.event(
                    "Warning",
                    "Failed",
                    Some(&c.name),
                    format!("Error: {}", e.message()),
                );
            }
        }
        self.publish();
    }

    // ---- probes -----------------------------------------------------------------------------

    fn spawn_probe(&mut self, c: &Container, id: &str, kind: ProbeKind) {
        let probe = match kind {
            ProbeKind::Startup => c.startup_probe.clone(),
            ProbeKind::Liveness => c.liveness_probe.clone(),
            ProbeKind::Readiness => c.readiness_probe.clone(),
        };
        let Some(probe) = probe else {
            return;
        };
        let task = tokio::spawn(probe::worker(
            self.cri.clone(),
            kind,
            probe,
            c.clone(),
            id.to_string(),
            self.rec.pod_ip.clone(),
            self.probe_tx.clone(),
        ));
        if let Some(old) = self.probes.insert((c.name.clone(), kind_key(kind)), task) {
            old.abort();
        }
    }

    fn start_probes(&mut self, c: &Container, id: &str) {
        self.stop_container_probes(&c.name);
        let started = self.rec.containers.get(&c.name).is_some_and(|r| r.started);
        if c.startup_probe.is_some() && !started {
            self.spawn_probe(c, id, ProbeKind::Startup);
        } else {
            self.spawn_probe(c, id, ProbeKind::Liveness);
            self.spawn_probe(c, id, ProbeKind::Readiness);
        }
    }

    fn stop_container_probes(&mut self, name: &str) {
        self.probes.retain(|(n, _), t| {
            if n == name {
                t.abort();
                false
            } else {
                true
            }
        });
    }

    fn stop_probes(&mut self) {
        for (_, t) in self.probes.drain() {
            t.abort();
        }
    }

    fn container_spec(&self, name: &str) -> Option<Container> {
        let spec = self.rec.spec();
        spec.init_containers
            .iter()
            .flatten()
            .chain(spec.containers.iter())
            .find(|c| c.name == name)
            .cloned()
    }

    async fn on_probe(&mut self, r: ProbeReport) {
        let current = self
            .rec
            .containers
            .get(&r.container)
            .and_then(|c| c.id.clone());
        if current.as_deref() != Some(r.container_id.as_str()) {
            return; // a report about a previous attempt
        }
        let Some(c) = self.container_spec(&r.container) else {
            return;
        };
        match (r.kind, r.event) {
            (kind, ProbeEvent::Failed(msg)) => {
                self.event(
                    "Warning",
                    "Unhealthy",
                    Some(&c.name),
                    format!("{} probe failed: {msg}", kind.label()),
                );
            }
            (ProbeKind::Startup, ProbeEvent::Result(true)) => {
                self.rec.container(&c.name).started = true;
                self.spawn_probe(&c, &r.container_id, ProbeKind::Liveness);
                self.spawn_probe(&c, &r.container_id, ProbeKind::Readiness);
            }
            (ProbeKind::Readiness, ProbeEvent::Result(ok)) => {
                self.rec.container(&c.name).ready = ok
            }
            (ProbeKind::Liveness, ProbeEvent::Result(true)) => {}
            (kind @ (ProbeKind::Startup | ProbeKind::Liveness), ProbeEvent::Result(false)) => {
                let lower = kind.label().to_lowercase();
                self.event(
                    "Normal",
                    "Killing",
                    Some(&c.name),
                    format!(
                        "Container {} failed {lower} probe, will be restarted",
                        c.name
                    ),
                );
                self.rec.container(&c.name).killing = true;
                self.rec.container(&c.name).ready = false;
                self.stop_container_probes(&c.name);
                let grace = kind_grace(&c, kind, self.rec.spec().termination_grace_period_seconds);
                // Stopping takes up to the grace period; the loop keeps serving meanwhile.
                let cri = self.cri.clone();
                let id = r.container_id.clone();
                tokio::spawn(async move {
                    if let Err(e) = cri.stop_container(&id, grace).await {
                        tracing::warn!(container = %id, error = %e, "StopContainer after a probe failure");
                    }
                });
            }
        }
    }

    // ---- adoption, completion, deletion -----------------------------------------------------

    /// After a daemon restart: find the pod's sandbox and containers by their labels, take the
    /// newest attempt of each container as current, and restart probes.
    async fn adopt(&mut self) {
        let uid = self.rec.uid().to_string();
        if let Ok(sbs) = self.cri.list_pod_sandboxes(uid_selector(&uid)).await {
            let ready = sbs.iter().find(|s| s.state == 0);
            match (&self.rec.sandbox_id, ready) {
                (None, Some(s)) => self.rec.sandbox_id = Some(s.id.clone()),
                (Some(id), _) if !sbs.iter().any(|s| &s.id == id) => {
                    tracing::warn!(sandbox = %id, "the pod's sandbox is gone; it will be made again");
                    self.rec.sandbox_id = None;
                }
                _ => {}
            }
        }
        if let Ok(cs) = self.cri.list_containers(uid_selector(&uid)).await {
            let mut by_name: BTreeMap<String, Vec<&cri::Container>> = BTreeMap::new();
            for c in &cs {
                if let Some(n) = c.labels.get(LABEL_CONTAINER_NAME) {
                    by_name.entry(n.clone()).or_default().push(c);
                }
            }
            for (name, mut list) in by_name {
                list.sort_by_key(|c| {
                    (
                        c.metadata.as_ref().map(|m| m.attempt).unwrap_or(0),
                        c.created_at,
                    )
                });
                let newest = list.last().map(|c| c.id.clone());
                let r = self.rec.container(&name);
                if r.id != newest {
                    tracing::info!(container = %name, ?newest, "adopting the newest attempt");
                    if let Some(n) = list.last() {
                        r.restart_count = r
                            .restart_count
                            .max(n.metadata.as_ref().map(|m| m.attempt as i32).unwrap_or(0));
                    }
                    r.previous_id = list.iter().rev().nth(1).map(|c| c.id.clone());
                    r.id = newest;
                }
            }
        }
        if let Some(id) = &self.rec.sandbox_id {
            if self.rec.pod_ip.is_empty() {
                self.rec.pod_ip = self.cri.pod_sandbox_ip(id).await.unwrap_or_default();
            }
        }
        self.observe().await;
        let all: Vec<Container> = {
            let spec = self.rec.spec();
            spec.init_containers
                .iter()
                .flatten()
                .chain(spec.containers.iter())
                .cloned()
                .collect()
        };
        for c in all {
            let Some(r) = self.rec.containers.get(&c.name).cloned() else {
                continue;
            };
            let running = r.observed.as_ref().map(|o| o.state) == Some(RunState::Running);
            if let (true, false, Some(id)) = (running, r.killing, r.id.as_ref()) {
                // Readiness is proven again by the probe, as after a kubelet restart.
                if c.readiness_probe.is_some() {
                    self.rec.container(&c.name).ready = false;
                }
                self.start_probes(&c, id);
            }
        }
        tracing::info!(pod = %self.rec.name(), "pod re-adopted");
        self.save();
    }

    /// The pod finished: stop what still runs (sidecars) and the sandbox, keep the records.
    async fn finish(&mut self) {
        if self.rec.sandbox_stopped {
            return;
        }
        self.stop_probes();
        let grace = self
            .rec
            .spec()
            .termination_grace_period_seconds
            .unwrap_or(30);
        let running: Vec<(String, String)> = self
            .rec
            .containers
            .iter()
            .filter(|(_, r)| r.observed.as_ref().map(|o| o.state) == Some(RunState::Running))
            .filter_map(|(n, r)| r.id.clone().map(|id| (n.clone(), id)))
            .collect();
        for (name, id) in running {
            self.event(
                "Normal",
                "Killing",
                Some(&name),
                format!("Stopping container {name}"),
            );
            let _ = self.cri.stop_container(&id, grace).await;
        }
        if let Some(sb) = self.rec.sandbox_id.clone() {
            if let Err(e) = self.cri.stop_pod_sandbox(&sb).await {
                tracing::warn!(sandbox = %sb, error = %e, "StopPodSandbox of a finished pod");
                return;
            }
        }
        self.rec.sandbox_stopped = true;
        self.observe().await;
    }

    /// Graceful deletion: preStop hooks, StopContainer with the grace period, then every CRI
    /// object, the pod cgroup, the volumes and the record are removed.
    async fn terminate(&mut self, grace_seconds: Option<i64>) {
        let grace = grace_seconds.filter(|g| *g >= 0).unwrap_or_else(|| {
            self.rec
                .spec()
                .termination_grace_period_seconds
                .unwrap_or(30)
        });
        {
            let mut v = self.view.lock().unwrap_or_else(|e| e.into_inner());
            v.pod.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::now()));
            v.pod.metadata.deletion_grace_period_seconds = Some(grace);
        }
        self.stop_probes();
        if self.rec.rejection.is_none() {
            self.observe().await;
            // App containers stop together; then sidecars one by one, last started first, so
            // they outlive what they serve (the kubelet's order).
            let spec = self.rec.spec().clone();
            let apps: Vec<Container> = spec.containers.clone();
            let mut sidecars: Vec<Container> = spec
                .init_containers
                .iter()
                .flatten()
                .filter(|c| is_restartable_init(c))
                .cloned()
                .collect();
            sidecars.reverse();
            let mut stops = tokio::task::JoinSet::new();
            for c in apps {
                if let Some(stop) = self.stop_running(c, grace) {
                    stops.spawn(stop);
                }
            }
            while stops.join_next().await.is_some() {}
            for c in sidecars {
                if let Some(stop) = self.stop_running(c, grace) {
                    stop.await;
                }
            }
            self.remove_everything().await;
        }
        if let Err(e) = self.store.remove(self.rec.namespace(), self.rec.name()) {
            tracing::error!(error = %e, "removing the pod record");
        }
        tracing::info!(pod = %self.rec.name(), "pod deleted");
    }

    /// preStop then StopContainer for `c` if its current attempt runs.
    fn stop_running(
        &mut self,
        c: Container,
        grace: i64,
    ) -> Option<impl std::future::Future<Output = ()> + Send + 'static> {
        let r = self.rec.containers.get(&c.name)?;
        let id = r.id.clone()?;
        if r.observed.as_ref().map(|o| o.state) != Some(RunState::Running) {
            return None;
        }
        self.event(
            "Normal",
            "Killing",
            Some(&c.name),
            format!("Stopping container {}", c.name),
        );
        let cri = self.cri.clone();
        let pod_ip = self.rec.pod_ip.clone();
        Some(async move {
            let t0 = Instant::now();
            if let Some(h) = c.lifecycle.as_ref().and_then(|l| l.pre_stop.clone()) {
                let hook = tokio::time::timeout(
                    Duration::from_secs(grace.max(1) as u64),
                    run_hook(cri.as_ref(), &h, &c, &id, &pod_ip),
                );
                if let Ok(Err(e)) = hook.await {
                    tracing::warn!(container = %c.name, error = %e, "preStop hook failed");
                }
            }
            // What the hook used comes off the grace period, as in the kubelet (minimum 2 s).
            let left = (grace - t0.elapsed().as_secs() as i64).max(2);
            if let Err(e) = cri.stop_container(&id, left).await {
                tracing::warn!(container = %id, error = %e, "StopContainer");
            }
        })
    }

    async fn remove_everything(&mut self) {
        let uid = self.rec.uid().to_string();
        // By label too: an object made just before a crash may be missing from the record.
        let mut containers: Vec<String> = self
            .rec
            .containers
            .values()
            .flat_map(|r| [r.id.clone(), r.previous_id.clone()])
            .flatten()
            .collect();
        if let Ok(cs) = self.cri.list_containers(uid_selector(&uid)).await {
            containers.extend(cs.into_iter().map(|c| c.id));
        }
        containers.sort();
        containers.dedup();
        let mut sandboxes: Vec<String> = self.rec.sandbox_id.iter().cloned().collect();
        if let Ok(sbs) = self.cri.list_pod_sandboxes(uid_selector(&uid)).await {
            sandboxes.extend(sbs.into_iter().map(|s| s.id));
        }
        sandboxes.sort();
        sandboxes.dedup();
        for sb in &sandboxes {
            if let Err(e) = self.cri.stop_pod_sandbox(sb).await {
                tracing::warn!(sandbox = %sb, error = %e, "StopPodSandbox");
            }
        }
        for id in &containers {
            if let Err(e) = self.cri.remove_container(id).await {
                tracing::warn!(container = %id, error = %e, "RemoveContainer");
            }
        }
        for sb in &sandboxes {
            if let Err(e) = self.cri.remove_pod_sandbox(sb).await {
                tracing::warn!(sandbox = %sb, error = %e, "RemovePodSandbox");
            }
        }
        let path = self
            .rec
            .cgroup
            .clone()
            .unwrap_or_else(|| self.cgroup_path());
        let root = self.settings.cgroup_root.clone();
        let removed = tokio::task::spawn_blocking(move || cgroup::remove(&root, &path)).await;
        if let Ok(Err(e)) = removed {
            tracing::warn!(error = %e, "removing the pod cgroup");
        }
        if let Err(e) = volumes::tear_down(&self.pod_dir()) {
            tracing::warn!(error = %e, "removing the pod's volumes and logs");
        }
    }
}

/// The grace period of a probe-triggered kill: the probe's own, else the pod's.
fn kind_grace(c: &Container, kind: ProbeKind, pod_grace: Option<i64>) -> i64 {
    let probe = match kind {
        ProbeKind::Startup => c.startup_probe.as_ref(),
        ProbeKind::Liveness => c.liveness_probe.as_ref(),
        ProbeKind::Readiness => None,
    };
    probe
        .and_then(|p| p.termination_grace_period_seconds)
        .or(pod_grace)
        .unwrap_or(30)
}

/// Runs a lifecycle hook (exec or httpGet; sleep waits).
async fn run_hook(
    cri: &dyn CriApi,
    h: &k8s_openapi::api::core::v1::LifecycleHandler,
    c: &Container,
    id: &str,
    pod_ip: &str,
) -> Result<(), String> {
    if let Some(s) = &h.sleep {
        tokio::time::sleep(Duration::from_secs(s.seconds.max(0) as u64)).await;
        return Ok(());
    }
    let probe = k8s_openapi::api::core::v1::Probe {
        exec: h.exec.clone(),
        http_get: h.http_get.clone(),
        tcp_socket: h.tcp_socket.clone(),
        // The hook's own deadline is the grace period, enforced by the caller.
        timeout_seconds: Some(3600),
        ..Default::default()
    };
    probe::run_once(cri, &probe, c, id, pod_ip).await
}
