//! What the supervisor knows and persists about one pod: the applied Pod, the CRI objects it
//! made, per-container restart bookkeeping and the pod's events.

use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The CRI-observed state of a container.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum RunState {
    Created,
    Running,
    Exited,
    Unknown,
}

/// `spec.restartPolicy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RestartPolicy {
    Always,
    OnFailure,
    Never,
}

impl RestartPolicy {
    /// The pod's policy: Always when unset (defaulting sets it) or not one of the three
    /// (validation refuses those).
    pub fn of(spec: &k8s_openapi::api::core::v1::PodSpec) -> RestartPolicy {
        match spec.restart_policy.as_deref() {
            Some("OnFailure") => RestartPolicy::OnFailure,
            Some("Never") => RestartPolicy::Never,
            _ => RestartPolicy::Always,
        }
    }

    /// Whether an app container that exited with `code` runs again (`killed`: its liveness
    /// probe failed and the kubelet killed it, a failure whatever the code).
    pub fn restarts(self, code: i32, killed: bool) -> bool {
        match self {
            RestartPolicy::Always => true,
            RestartPolicy::OnFailure => code != 0 || killed,
            RestartPolicy::Never => false,
        }
    }
}

/// A pod's phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    Pending,
    Running,
    Succeeded,
    Failed,
    Unknown,
}

impl Phase {
    /// The phase a status names (`None` for anything else).
    pub fn parse(s: &str) -> Option<Phase> {
        Some(match s {
            "Pending" => Phase::Pending,
            "Running" => Phase::Running,
            "Succeeded" => Phase::Succeeded,
            "Failed" => Phase::Failed,
            "Unknown" => Phase::Unknown,
            _ => return None,
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Pending => "Pending",
            Phase::Running => "Running",
            Phase::Succeeded => "Succeeded",
            Phase::Failed => "Failed",
            Phase::Unknown => "Unknown",
        }
    }

    /// Succeeded or Failed: the pod is over and stays so.
    pub fn is_terminal(self) -> bool {
        matches!(self, Phase::Succeeded | Phase::Failed)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Observed {
    pub state: RunState,
    pub started_at_ns: i64,
    pub finished_at_ns: i64,
    pub exit_code: i32,
    pub reason: String,
    pub message: String,
}

/// A finished attempt, for `lastState.terminated`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Terminated {
    pub container_id: String,
    pub exit_code: i32,
    pub reason: String,
    pub message: String,
    pub started_at_ns: i64,
    pub finished_at_ns: i64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Waiting {
    pub reason: String,
    pub message: String,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ContainerRecord {
    /// The current attempt's CRI container id.
    pub id: Option<String>,
    /// The previous attempt, kept (not removed) for `logs --previous`.
    pub previous_id: Option<String>,
    pub restart_count: i32,
    pub last_terminated: Option<Terminated>,
    /// The current restart back-off; 0 before the first restart.
    pub backoff_ms: u64,
    /// Shown instead of the observed state: CrashLoopBackOff, ErrImagePull, ...
    pub waiting: Option<Waiting>,
    pub observed: Option<Observed>,
    pub image_ref: String,
    pub image_id: String,
    /// The startup probe passed (or there is none) for the current attempt.
    pub started: bool,
    /// The readiness probe passes (or there is none) for the current attempt.
    pub ready: bool,
    /// The liveness probe failed and the container is being killed.
    pub killing: bool,
    /// Image pulls that failed in a row (ImagePullBackOff).
    pub pull_failures: u32,
    /// CreateContainer/StartContainer failures in a row.
    #[serde(default)]
    pub start_failures: u32,
    /// No new attempt before this time (unix ms): back-off.
    pub not_before_ms: i64,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct PodRecord {
    /// The applied Pod: metadata (uid, creationTimestamp), defaulted spec, last status.
    pub pod: Pod,
    pub sandbox_id: Option<String>,
    pub pod_ip: String,
    /// The pod cgroup (absolute path under the hierarchies), once made.
    pub cgroup: Option<String>,
    pub containers: BTreeMap<String, ContainerRecord>,
    pub events: Vec<Event>,
    /// RunPodSandbox failures in a row, and no new try before this time (unix ms).
    #[serde(default)]
    pub sandbox_failures: u32,
    #[serde(default)]
    pub sandbox_not_before_ms: i64,
    /// Admission refused the pod: (reason, message). Nothing was created.
    pub rejection: Option<(String, String)>,
    /// The pod finished (Succeeded/Failed) and its sandbox was stopped.
    pub sandbox_stopped: bool,
    /// Once Succeeded or Failed, the phase stays (stopping sidecars must not undo it).
    pub final_phase: Option<String>,
    /// A graceful delete was asked with this grace period; a restarted daemon finishes it.
    pub deleting: Option<i64>,
    /// Why a pod the kubelet itself ended is Failed: (reason, message), e.g. DeadlineExceeded.
    #[serde(default)]
    pub terminal_reason: Option<(String, String)>,
    /// Condition type → (status, lastTransitionTime).
    pub condition_times: BTreeMap<String, (String, String)>,
}

impl PodRecord {
    pub fn name(&self) -> &str {
        self.pod.metadata.name.as_deref().unwrap_or("")
    }
    pub fn namespace(&self) -> &str {
        self.pod.metadata.namespace.as_deref().unwrap_or("")
    }
    pub fn uid(&self) -> &str {
        self.pod.metadata.uid.as_deref().unwrap_or("")
    }
    pub fn spec(&self) -> &k8s_openapi::api::core::v1::PodSpec {
        static EMPTY: std::sync::OnceLock<k8s_openapi::api::core::v1::PodSpec> =
            std::sync::OnceLock::new();
        self.pod
            .spec
            .as_ref()
            .unwrap_or_else(|| EMPTY.get_or_init(Default::default))
    }
    /// `name_namespace(uid)`, as the kubelet names a pod in messages.
    pub fn pod_ref(&self) -> String {
        format!("{}_{}({})", self.name(), self.namespace(), self.uid())
    }
    pub fn container(&mut self, name: &str) -> &mut ContainerRecord {
        self.containers.entry(name.to_string()).or_default()
    }

    /// Records an event; a repeat of the latest same event bumps its count instead.
    pub fn event(
        &mut self,
        type_: &str,
        reason: &str,
        field_path: Option<String>,
        message: String,
        node: &str,
    ) {
        let now = Time(Timestamp::now());
        if let Some(e) = self.events.iter_mut().rev().find(|e| {
            e.reason.as_deref() == Some(reason)
                && e.message.as_deref() == Some(message.as_str())
                && e.involved_object.field_path == field_path
        }) {
            e.count = Some(e.count.unwrap_or(1) + 1);
            e.last_timestamp = Some(now);
            return;
        }
        tracing::info!(pod = %self.name(), namespace = %self.namespace(), %reason, %message, "event");
        let seq = self.events.len();
        self.events.push(Event {
            metadata: ObjectMeta {
                name: Some(format!(
                    "{}.{:x}{:04x}",
                    self.name(),
                    now.0.as_millisecond(),
                    seq
                )),
                namespace: Some(self.namespace().to_string()),
                ..Default::default()
            },
            involved_object: ObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Pod".into()),
                name: Some(self.name().to_string()),
                namespace: Some(self.namespace().to_string()),
                uid: Some(self.uid().to_string()),
                field_path,
                ..Default::default()
            },
            reason: Some(reason.into()),
            message: Some(message),
            type_: Some(type_.into()),
            count: Some(1),
            first_timestamp: Some(now.clone()),
            last_timestamp: Some(now),
            source: Some(EventSource {
                component: Some("kubelet".into()),
                host: Some(node.into()),
            }),
            reporting_component: Some("kubelet".into()),
            reporting_instance: Some(node.into()),
            ..Default::default()
        });
        // Bounded: a crash-looping pod must not grow its record without end.
        if self.events.len() > 500 {
            self.events.remove(0);
        }
    }
}

/// `spec.containers{name}` or `spec.initContainers{name}`.
pub fn field_path(spec: &k8s_openapi::api::core::v1::PodSpec, name: &str) -> String {
    if spec
        .init_containers
        .iter()
        .flatten()
        .any(|c| c.name == name)
    {
        format!("spec.initContainers{{{name}}}")
    } else {
        format!("spec.containers{{{name}}}")
    }
}

pub fn now_ms() -> i64 {
    Timestamp::now().as_millisecond()
}

pub fn time_from_ns(ns: i64) -> Option<Time> {
    if ns <= 0 {
        return None;
    }
    Timestamp::from_nanosecond(i128::from(ns)).ok().map(Time)
}
