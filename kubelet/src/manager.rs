//! The pods of this node: apply (validate everything, then create, replace or leave alone),
//! get, list, delete and events; one supervisor task per pod; re-adoption at start.

use crate::admission::admit;
use crate::cri::CriApi;
use crate::defaults::apply_defaults;
use crate::manifest::{documents, pod_from_value};
use crate::record::PodRecord;
use crate::resources::Amounts;
use crate::settings::Settings;
use crate::store::Store;
use crate::supervisor::{Command, PodView, Supervisor};
use crate::validate::{invalid_message, validate_pod};
use k8s_openapi::api::core::v1::{Event, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use peapod_host::sync::LockUnpoisoned;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use tokio::sync::{mpsc, watch};
use tracing::Instrument;

#[derive(Debug, thiserror::Error)]
pub enum PodError {
    #[error("{0}")]
    Invalid(String),
    #[error("pods {name:?} not found in namespace {namespace:?}")]
    NotFound { namespace: String, name: String },
    #[error("{0}")]
    Internal(String),
}

impl From<PodError> for tonic::Status {
    fn from(e: PodError) -> tonic::Status {
        match &e {
            PodError::Invalid(m) => tonic::Status::invalid_argument(m.clone()),
            PodError::NotFound { .. } => tonic::Status::not_found(e.to_string()),
            PodError::Internal(m) => tonic::Status::internal(m.clone()),
        }
    }
}

type Key = (String, String);

struct Handle {
    uid: String,
    view: Arc<Mutex<PodView>>,
    commands: mpsc::UnboundedSender<Command>,
    done: watch::Receiver<bool>,
}

pub struct Manager {
    cri: Arc<dyn CriApi>,
    settings: Arc<Settings>,
    store: Store,
    pods: Arc<Mutex<BTreeMap<Key, Handle>>>,
    /// One apply or delete at a time: admission sees a consistent set of pods.
    changes: tokio::sync::Mutex<()>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applied {
    pub namespace: String,
    pub name: String,
    /// "created", "configured" or "unchanged".
    pub action: &'static str,
}

/// A delete of one pod: which, and how.
#[derive(Debug, Clone, Copy)]
pub struct Deletion<'a> {
    pub namespace: &'a str,
    pub name: &'a str,
    /// The containers' grace period in seconds; `None` (or negative): the pod's own.
    pub grace_seconds: Option<i64>,
    /// Return once the pod is gone, not once its deletion has begun.
    pub wait: bool,
}

impl<'a> Deletion<'a> {
    /// With the pod's own grace period, returning once it is gone: what a replace does.
    pub fn waited(namespace: &'a str, name: &'a str) -> Deletion<'a> {
        Deletion {
            namespace,
            name,
            grace_seconds: None,
            wait: true,
        }
    }
}

fn new_uid() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/uuid")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| format!("{:032x}", Timestamp::now().as_nanosecond()))
}

/// What apply compares: a pod is unchanged when its labels, annotations and spec are.
fn desired(p: &Pod) -> serde_json::Value {
    serde_json::json!({
        "labels": p.metadata.labels,
        "annotations": p.metadata.annotations,
        "spec": p.spec,
    })
}

impl Manager {
    /// Loads stored pods and resumes supervising each.
    pub fn start(cri: Arc<dyn CriApi>, settings: Settings) -> Arc<Manager> {
        let store = Store::new(&settings.pods_dir);
        let m = Arc::new(Manager {
            cri,
            settings: Arc::new(settings),
            store,
            pods: Arc::new(Mutex::new(BTreeMap::new())),
            changes: tokio::sync::Mutex::new(()),
        });
        // The QoS cgroups follow the pods: now and then, and after every apply or delete.
        let weak = Arc::downgrade(&m);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(std::time::Duration::from_secs(5));
            loop {
                tick.tick().await;
                match weak.upgrade() {
                    Some(m) => m.update_qos_cgroups(),
                    None => return,
                }
            }
        });
        let records = m.store.load_all();
        tracing::info!(pods = records.len(), "re-adopting stored pods");
        for rec in records {
            let deleting = rec.deleting;
            let key = (rec.namespace().to_string(), rec.name().to_string());
            m.spawn(rec, true);
            // A delete the previous daemon did not finish is finished now.
            if let Some(grace) = deleting {
                if let Some(h) = m.lock().get(&key) {
                    let _ = h.commands.send(Command::Delete {
                        grace_seconds: Some(grace),
                    });
                }
                let pods = m.pods.clone();
                let mut done = m.lock().get(&key).map(|h| h.done.clone());
                tokio::spawn(async move {
                    if let Some(d) = done.as_mut() {
                        let _ = d.wait_for(|d| *d).await;
                    }
                    pods.lock_unpoisoned().remove(&key);
                });
            }
        }
        m
    }

    /// The Burstable QoS cgroup's shares from the cpu requests of the Burstable pods that hold
    /// resources (neither finished nor refused).
    pub fn update_qos_cgroups(&self) {
        let milli: i64 = self
            .lock()
            .values()
            .map(|h| {
                let v = h.view.lock_unpoisoned();
                let burstable = v.pod.spec.as_ref().is_some_and(|s| {
                    crate::resources::qos_class(s) == crate::resources::QosClass::Burstable
                });
                if burstable {
                    v.requests.cpu_milli
                } else {
                    0
                }
            })
            .sum();
        self.settings
            .cgroups
            .set_burstable_shares(&self.settings.cgroup_parent, milli);
    }

    /// Stops supervising (the daemon is going away): every task ends, pods keep running.
    pub fn stop(&self) {
        self.lock().clear();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<Key, Handle>> {
        self.pods.lock_unpoisoned()
    }

    fn spawn(&self, rec: PodRecord, adopt: bool) {
        let key = (rec.namespace().to_string(), rec.name().to_string());
        let uid = rec.uid().to_string();
        let view = Arc::new(Mutex::new(PodView {
            pod: rec.pod.clone(),
            events: rec.events.clone(),
            requests: Amounts::default(),
        }));
        let (tx, rx) = mpsc::unbounded_channel();
        let (done_tx, done_rx) = watch::channel(false);
        let span = tracing::info_span!("pod", namespace = %key.0, name = %key.1);
        let sup = Supervisor::new(
            rec,
            self.cri.clone(),
            self.settings.clone(),
            self.store.clone(),
            view.clone(),
        );
        tokio::spawn(sup.run(rx, done_tx, adopt).instrument(span));
        self.lock().insert(
            key,
            Handle {
                uid,
                view,
                commands: tx,
                done: done_rx,
            },
        );
    }

    /// Parses and validates every document, then acts on each.
    pub async fn apply(
        &self,
        namespace: &str,
        manifest: &[u8],
        source: &str,
    ) -> Result<Vec<Applied>, PodError> {
        let namespace = if namespace.is_empty() {
            "default"
        } else {
            namespace
        };
        let source = if source.is_empty() {
            "manifest"
        } else {
            source
        };
        let docs = documents(manifest, source).map_err(|e| PodError::Invalid(e.to_string()))?;
        let mut pods = Vec::new();
        let mut seen = std::collections::BTreeSet::new();
        for (i, doc) in docs.into_iter().enumerate() {
            let mut pod = pod_from_value(doc).map_err(|m| {
                PodError::Invalid(format!("error parsing {source} (document {}): {m}", i + 1))
            })?;
            apply_defaults(&mut pod, namespace);
            let name = pod.metadata.name.clone().unwrap_or_default();
            validate_pod(&pod).map_err(|e| PodError::Invalid(invalid_message(&name, &e)))?;
            if let Some(spec) = &mut pod.spec {
                if spec
                    .node_name
                    .as_deref()
                    .is_some_and(|n| !n.is_empty() && n != self.settings.node_name)
                {
                    return Err(PodError::Invalid(format!(
                        "Pod {name:?} is invalid: spec.nodeName: Invalid value: {:?}: this node is {:?}",
                        spec.node_name.as_deref().unwrap_or(""),
                        self.settings.node_name
                    )));
                }
                spec.node_name = Some(self.settings.node_name.clone());
            }
            let key = (
                pod.metadata.namespace.clone().unwrap_or_default(),
                name.clone(),
            );
            if !seen.insert(key.clone()) {
                return Err(PodError::Invalid(format!(
                    "{source}: pod {}/{} appears twice in the manifest",
                    key.0, key.1
                )));
            }
            pods.push(pod);
        }
        let _guard = self.changes.lock().await;
        let mut out = Vec::new();
        for pod in pods {
            let ns = pod.metadata.namespace.clone().unwrap_or_default();
            let name = pod.metadata.name.clone().unwrap_or_default();
            let existing = {
                let pods = self.lock();
                pods.get(&(ns.clone(), name.clone())).map(|h| {
                    let v = h.view.lock_unpoisoned();
                    (desired(&v.pod), v.pod.metadata.deletion_timestamp.is_some())
                })
            };
            let action = match existing {
                Some((d, false)) if d == desired(&pod) => "unchanged",
                Some(_) => {
                    self.delete_locked(Deletion::waited(&ns, &name)).await?;
                    self.create(pod)?;
                    "configured"
                }
                None => {
                    self.create(pod)?;
                    "created"
                }
            };
            out.push(Applied {
                namespace: ns,
                name,
                action,
            });
        }
        self.update_qos_cgroups();
        Ok(out)
    }

    /// Admits (or refuses) the pod and starts its supervisor.
    fn create(&self, mut pod: Pod) -> Result<(), PodError> {
        pod.metadata.uid = Some(new_uid());
        pod.metadata.creation_timestamp = Some(Time(Timestamp::now()));
        pod.status = Some(k8s_openapi::api::core::v1::PodStatus {
            start_time: Some(Time(Timestamp::now())),
            ..Default::default()
        });
        let used = {
            let pods = self.lock();
            pods.values().fold(Amounts::default(), |acc, h| {
                let v = h.view.lock_unpoisoned();
                Amounts {
                    cpu_milli: acc.cpu_milli + v.requests.cpu_milli,
                    memory: acc.memory + v.requests.memory,
                }
            })
        };
        let mut rec = PodRecord {
            pod,
            ..Default::default()
        };
        let node = self.settings.node_name.clone();
        match admit(
            rec.spec(),
            self.settings.allocatable,
            used,
            &self.settings.node_labels,
        ) {
            Ok(()) => {
                let msg = format!(
                    "Successfully assigned {}/{} to {node}",
                    rec.namespace(),
                    rec.name()
                );
                rec.event("Normal", "Scheduled", None, msg, &node);
            }
            Err(r) => {
                rec.event("Warning", &r.reason, None, r.message.clone(), &node);
                rec.rejection = Some((r.reason, r.message));
            }
        }
        self.store
            .save(&rec)
            .map_err(|e| PodError::Internal(format!("persist pod {}: {e}", rec.name())))?;
        // Admission counts this pod from now on, before its task first runs.
        let requests = if rec.rejection.is_none() {
            crate::resources::pod_requests(rec.spec())
        } else {
            Amounts::default()
        };
        self.spawn(rec.clone(), false);
        if let Some(h) = self
            .lock()
            .get(&(rec.namespace().to_string(), rec.name().to_string()))
        {
            h.view.lock_unpoisoned().requests = requests;
        }
        Ok(())
    }

    /// What `read` takes from the view of pod `namespace/name`.
    fn read_view<T>(
        &self,
        namespace: &str,
        name: &str,
        read: impl FnOnce(&PodView) -> T,
    ) -> Result<T, PodError> {
        let pods = self.lock();
        let h = pods
            .get(&(namespace.to_string(), name.to_string()))
            .ok_or_else(|| PodError::NotFound {
                namespace: namespace.into(),
                name: name.into(),
            })?;
        let view = h.view.lock_unpoisoned();
        Ok(read(&view))
    }

    pub fn get(&self, namespace: &str, name: &str) -> Result<Pod, PodError> {
        self.read_view(namespace, name, |v| v.pod.clone())
    }

    /// Pods sorted by namespace then name; `None`: all namespaces.
    pub fn list(&self, namespace: Option<&str>) -> Vec<Pod> {
        let pods = self.lock();
        pods.iter()
            .filter(|((ns, _), _)| namespace.is_none_or(|n| n == ns))
            .map(|(_, h)| h.view.lock_unpoisoned().pod.clone())
            .collect()
    }

    pub fn events(&self, namespace: &str, name: &str) -> Result<Vec<Event>, PodError> {
        self.read_view(namespace, name, |v| v.events.clone())
    }

    pub async fn delete(&self, deletion: Deletion<'_>) -> Result<(), PodError> {
        let _guard = self.changes.lock().await;
        self.delete_locked(deletion).await?;
        self.update_qos_cgroups();
        Ok(())
    }

    async fn delete_locked(&self, deletion: Deletion<'_>) -> Result<(), PodError> {
        let Deletion {
            namespace,
            name,
            grace_seconds,
            wait,
        } = deletion;
        let key = (namespace.to_string(), name.to_string());
        let (uid, mut done) = {
            let pods = self.lock();
            let h = pods.get(&key).ok_or_else(|| PodError::NotFound {
                namespace: namespace.into(),
                name: name.into(),
            })?;
            // A second delete of a pod being deleted just waits with the first.
            let _ = h.commands.send(Command::Delete { grace_seconds });
            (h.uid.clone(), h.done.clone())
        };
        let pods = self.pods.clone();
        let finished = async move {
            let _ = done.wait_for(|d| *d).await;
            let mut pods = pods.lock_unpoisoned();
            if pods.get(&key).is_some_and(|h| h.uid == uid) {
                pods.remove(&key);
            }
        };
        if wait {
            finished.await;
        } else {
            tokio::spawn(finished);
        }
        Ok(())
    }
}
