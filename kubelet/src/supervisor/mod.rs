//! One task per pod, the kubelet's SyncPod loop over CRI: sandbox (in the pod cgroup, with
//! volumes), image pulls per imagePullPolicy, init containers one at a time, restartable init
//! containers (sidecars) kept running, app containers together, restarts with back-off,
//! probes, and graceful deletion. Every change is persisted before it is acted on further,
//! so a restarted daemon resumes where this one stopped.

mod plan;
mod probes;
mod start;
mod sync;
mod teardown;

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
use peapod_host::sync::LockUnpoisoned;
use peapod_proto::v1 as cri;
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tonic::Code;

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
        state: match cri::ContainerState::try_from(s.state) {
            Ok(cri::ContainerState::ContainerCreated) => RunState::Created,
            Ok(cri::ContainerState::ContainerRunning) => RunState::Running,
            Ok(cri::ContainerState::ContainerExited) => RunState::Exited,
            Ok(cri::ContainerState::ContainerUnknown) | Err(_) => RunState::Unknown,
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
        let phase = status.phase.as_deref().and_then(plan::Phase::parse);
        let over = phase.is_some_and(plan::Phase::is_terminal);
        if over && self.rec.final_phase.is_none() {
            self.rec.final_phase = status.phase.clone();
        }
        self.rec.pod.status = Some(status);
        let requests = if over {
            Amounts::default()
        } else {
            pod_requests(self.rec.spec())
        };
        {
            let mut v = self.view.lock_unpoisoned();
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
}
