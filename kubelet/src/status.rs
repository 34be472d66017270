//! The pod's status as the kubelet computes it (pkg/kubelet/kubelet_pods.go getPhase and
//! pkg/kubelet/status/generate.go): container states, phase and conditions, from a record.

use crate::record::{
    time_from_ns, ContainerRecord, Phase, PodRecord, RestartPolicy, RunState, Terminated,
};
use crate::resources::{is_restartable_init, qos_class};
use k8s_openapi::api::core::v1::{
    Container, ContainerState, ContainerStateRunning, ContainerStateTerminated,
    ContainerStateWaiting, ContainerStatus, HostIP, PodCondition, PodIP, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

fn terminated_state(t: &Terminated) -> ContainerState {
    ContainerState {
        terminated: Some(ContainerStateTerminated {
            container_id: Some(format!("peapod://{}", t.container_id)),
            exit_code: t.exit_code,
            reason: Some(t.reason.clone()),
            message: (!t.message.is_empty()).then(|| t.message.clone()),
            started_at: time_from_ns(t.started_at_ns),
            finished_at: time_from_ns(t.finished_at_ns),
            signal: None,
        }),
        ..Default::default()
    }
}

fn waiting_state(reason: &str, message: &str) -> ContainerState {
    ContainerState {
        waiting: Some(ContainerStateWaiting {
            reason: Some(reason.into()),
            message: (!message.is_empty()).then(|| message.into()),
        }),
        ..Default::default()
    }
}

/// The reason the kubelet gives an exit: the runtime's (OOMKilled) or Completed/Error.
pub fn exit_reason(exit_code: i32, runtime_reason: &str) -> String {
    if runtime_reason == "OOMKilled" {
        return "OOMKilled".into();
    }
    if exit_code == 0 {
        "Completed".into()
    } else {
        "Error".into()
    }
}

/// The current attempt as a Terminated, when it has exited.
pub fn current_termination(r: &ContainerRecord) -> Option<Terminated> {
    let o = r.observed.as_ref()?;
    if o.state != RunState::Exited {
        return None;
    }
    Some(Terminated {
        container_id: r.id.clone().unwrap_or_default(),
        exit_code: o.exit_code,
        reason: exit_reason(o.exit_code, &o.reason),
        message: o.message.clone(),
        started_at_ns: o.started_at_ns,
        finished_at_ns: o.finished_at_ns,
    })
}

fn container_status(
    c: &Container,
    r: Option<&ContainerRecord>,
    default_waiting: &str,
) -> ContainerStatus {
    let image = c.image.clone().unwrap_or_default();
    let Some(r) = r else {
        return ContainerStatus {
            name: c.name.clone(),
            image,
            state: Some(waiting_state(default_waiting, "")),
            started: Some(false),
            ..Default::default()
        };
    };
    let running = r.observed.as_ref().map(|o| o.state) == Some(RunState::Running);
    let (state, last) = match (&r.waiting, &r.observed) {
        (Some(w), obs) => {
            // A container waiting to be restarted shows its exit as the last state.
            let last = if obs.as_ref().map(|o| o.state) == Some(RunState::Exited) {
                current_termination(r)
            } else {
                r.last_terminated.clone()
            };
            (waiting_state(&w.reason, &w.message), last)
        }
        (None, Some(o)) => match o.state {
            RunState::Running => (
                ContainerState {
                    running: Some(ContainerStateRunning {
                        started_at: time_from_ns(o.started_at_ns),
                    }),
                    ..Default::default()
                },
                r.last_terminated.clone(),
            ),
            RunState::Exited => (
                current_termination(r)
                    .as_ref()
                    .map(terminated_state)
                    .unwrap_or_default(),
                r.last_terminated.clone(),
            ),
            RunState::Created | RunState::Unknown => (
                waiting_state("ContainerCreating", ""),
                r.last_terminated.clone(),
            ),
        },
        (None, None) => (
            waiting_state(default_waiting, ""),
            r.last_terminated.clone(),
        ),
    };
    ContainerStatus {
        name: c.name.clone(),
        image,
        image_id: r.image_id.clone(),
        container_id: r.id.as_ref().map(|id| format!("peapod://{id}")),
        state: Some(state),
        last_state: Some(last.as_ref().map(terminated_state).unwrap_or_default()),
        // Nothing is ready before its startup probe passed.
        ready: running && r.started && r.ready,
        started: Some(running && r.started),
        restart_count: r.restart_count,
        ..Default::default()
    }
}

/// Terminated with exit code 0.
fn completed(s: &ContainerStatus) -> bool {
    s.state
        .as_ref()
        .and_then(|st| st.terminated.as_ref())
        .is_some_and(|t| t.exit_code == 0)
}

/// getPhase.
pub fn phase(rec: &PodRecord, init: &[ContainerStatus], apps: &[ContainerStatus]) -> Phase {
    let spec = rec.spec();
    let policy = RestartPolicy::of(spec);
    let mut pending_init = 0;
    let mut failed_init = 0;
    for (c, s) in spec.init_containers.iter().flatten().zip(init) {
        let st = s.state.clone().unwrap_or_default();
        if is_restartable_init(c) {
            if !s.started.unwrap_or(false) {
                pending_init += 1;
            }
            continue;
        }
        if st.running.is_some() {
            pending_init += 1;
        } else if let Some(t) = &st.terminated {
            if t.exit_code != 0 {
                failed_init += 1;
            }
        } else {
            let last_failed = s
                .last_state
                .as_ref()
                .and_then(|l| l.terminated.as_ref())
                .is_some_and(|t| t.exit_code != 0);
            if last_failed {
                failed_init += 1;
            } else {
                pending_init += 1;
            }
        }
    }
    let (mut unknown, mut running, mut waiting, mut stopped, mut succeeded) = (0, 0, 0, 0, 0);
    for s in apps {
        let st = s.state.clone().unwrap_or_default();
        if st.running.is_some() {
            running += 1;
        } else if let Some(t) = &st.terminated {
            stopped += 1;
            if t.exit_code == 0 {
                succeeded += 1;
            }
        } else if st.waiting.is_some() {
            if s.last_state
                .as_ref()
                .and_then(|l| l.terminated.as_ref())
                .is_some()
            {
                stopped += 1;
            } else {
                waiting += 1;
            }
        } else {
            unknown += 1;
        }
    }
    if failed_init > 0 && policy == RestartPolicy::Never {
        return Phase::Failed;
    }
    if pending_init > 0 || failed_init > 0 {
        return Phase::Pending;
    }
    if waiting > 0 {
        return Phase::Pending;
    }
    if running > 0 && unknown == 0 {
        return Phase::Running;
    }
    if running == 0 && stopped > 0 && unknown == 0 {
        if policy == RestartPolicy::Always {
            return Phase::Running;
        }
        if stopped == succeeded {
            return Phase::Succeeded;
        }
        if policy == RestartPolicy::Never {
            return Phase::Failed;
        }
        return Phase::Running;
    }
    Phase::Pending
}

fn condition(
    rec: &mut PodRecord,
    type_: &str,
    ok: bool,
    reason: Option<&str>,
    message: Option<String>,
) -> PodCondition {
    let status = if ok { "True" } else { "False" }.to_string();
    let now = k8s_time_string(Timestamp::now());
    let entry = rec
        .condition_times
        .entry(type_.to_string())
        .or_insert_with(|| (status.clone(), now.clone()));
    if entry.0 != status {
        *entry = (status.clone(), now);
    }
    let ltt = entry.1.parse::<Timestamp>().ok().map(Time);
    PodCondition {
        type_: type_.into(),
        status,
        last_transition_time: ltt,
        reason: reason.map(Into::into),
        message,
        ..Default::default()
    }
}

fn k8s_time_string(t: Timestamp) -> String {
    t.to_string()
}

/// The full status of the pod; updates lastTransitionTime bookkeeping in `rec`.
pub fn compute(rec: &mut PodRecord, host_ip: &str) -> PodStatus {
    let spec = rec.spec().clone();
    let qos = qos_class(&spec).as_str().to_string();
    let start_time = rec.pod.status.as_ref().and_then(|s| s.start_time.clone());
    if let Some((reason, message)) = rec.rejection.clone() {
        return PodStatus {
            phase: Some(Phase::Failed.as_str().into()),
            reason: Some(reason),
            message: Some(message),
            qos_class: Some(qos),
            start_time,
            ..Default::default()
        };
    }
    let inits: Vec<ContainerStatus> = spec
        .init_containers
        .iter()
        .flatten()
        .map(|c| {
            let mut s = container_status(c, rec.containers.get(&c.name), "PodInitializing");
            // The kubelet reports an init container that ran to success as ready (kubectl
            // describe shows "Ready: True" under a Completed one); sidecars as probed.
            if !is_restartable_init(c) {
                s.ready = completed(&s);
            }
            s
        })
        .collect();
    let initialized = spec
        .init_containers
        .iter()
        .flatten()
        .zip(&inits)
        .all(|(c, s)| {
            if is_restartable_init(c) {
                s.started.unwrap_or(false)
            } else {
                completed(s)
            }
        });
    let app_default = if initialized {
        "ContainerCreating"
    } else {
        "PodInitializing"
    };
    let apps: Vec<ContainerStatus> = spec
        .containers
        .iter()
        .map(|c| container_status(c, rec.containers.get(&c.name), app_default))
        .collect();
    let phase = match rec.final_phase.as_deref().and_then(Phase::parse) {
        Some(p) if p.is_terminal() => p,
        _ => phase(rec, &inits, &apps),
    };
    let sidecars_ready = spec
        .init_containers
        .iter()
        .flatten()
        .zip(&inits)
        .filter(|(c, _)| is_restartable_init(c))
        .all(|(_, s)| s.ready);
    let unready: Vec<String> = apps
        .iter()
        .filter(|s| !s.ready)
        .map(|s| s.name.clone())
        .collect();
    let uninit: Vec<String> = spec
        .init_containers
        .iter()
        .flatten()
        .zip(&inits)
        .filter(|(c, s)| {
            if is_restartable_init(c) {
                !s.started.unwrap_or(false)
            } else {
                !completed(s)
            }
        })
        .map(|(c, _)| c.name.clone())
        .collect();
    let sandbox_ready = rec.sandbox_id.is_some() && !rec.sandbox_stopped;
    let mut conditions = Vec::new();
    conditions.push(condition(
        rec,
        "PodReadyToStartContainers",
        sandbox_ready,
        None,
        None,
    ));
    // As the kubelet (status/generate.go): only a Succeeded pod is "Initialized: PodCompleted";
    // a Failed pod reports its init containers as they ended (kubectl then shows Init:Error).
    let succeeded = phase == Phase::Succeeded;
    let done = phase.is_terminal();
    if succeeded {
        conditions.push(condition(
            rec,
            "Initialized",
            true,
            Some("PodCompleted"),
            None,
        ));
    } else if initialized {
        conditions.push(condition(rec, "Initialized", true, None, None));
    } else {
        conditions.push(condition(
            rec,
            "Initialized",
            false,
            Some("ContainersNotInitialized"),
            Some(format!(
                "containers with incomplete status: [{}]",
                uninit.join(" ")
            )),
        ));
    }
    let ready = unready.is_empty() && sidecars_ready && !done;
    let (reason, message) = if done {
        (
            Some(if succeeded {
                "PodCompleted"
            } else {
                "PodFailed"
            }),
            None,
        )
    } else if ready {
        (None, None)
    } else {
        (
            Some("ContainersNotReady"),
            Some(format!(
                "containers with unready status: [{}]",
                unready.join(" ")
            )),
        )
    };
    // The order `kubectl get pod -o yaml` shows.
    conditions.push(condition(rec, "Ready", ready, reason, message.clone()));
    conditions.push(condition(rec, "ContainersReady", ready, reason, message));
    conditions.push(condition(rec, "PodScheduled", true, None, None));
    let pod_ip = (!rec.pod_ip.is_empty()).then(|| rec.pod_ip.clone());
    PodStatus {
        phase: Some(phase.as_str().into()),
        conditions: Some(conditions),
        host_ip: Some(host_ip.into()),
        host_ips: Some(vec![HostIP { ip: host_ip.into() }]),
        pod_ip: pod_ip.clone(),
        pod_ips: pod_ip.map(|ip| vec![PodIP { ip }]),
        qos_class: Some(qos),
        start_time,
        reason: rec.terminal_reason.as_ref().map(|r| r.0.clone()),
        message: rec.terminal_reason.as_ref().map(|r| r.1.clone()),
        init_container_statuses: (!inits.is_empty()).then_some(inits),
        container_statuses: Some(apps),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{Observed, Waiting};
    use k8s_openapi::api::core::v1::Pod;

    fn rec(policy: &str, inits: &[&str], apps: &[&str]) -> PodRecord {
        let c = |n: &&str| serde_json::json!({"name": n, "image": "x:1"});
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "default", "uid": "u"},
            "spec": {"restartPolicy": policy,
                     "initContainers": inits.iter().map(c).collect::<Vec<_>>(),
                     "containers": apps.iter().map(c).collect::<Vec<_>>()}
        }))
        .unwrap();
        PodRecord {
            pod,
            sandbox_id: Some("s".into()),
            pod_ip: "10.0.0.2".into(),
            ..Default::default()
        }
    }

    fn set(r: &mut PodRecord, name: &str, state: RunState, exit: i32) {
        let c = r.container(name);
        c.id = Some(format!("id-{name}"));
        c.started = true;
        c.ready = true;
        c.observed = Some(Observed {
            state,
            started_at_ns: 1_700_000_000_000_000_000,
            finished_at_ns: 1_700_000_001_000_000_000,
            exit_code: exit,
            reason: String::new(),
            message: String::new(),
        });
    }

    /// The reason of a container status's waiting state (which it must have).
    fn waiting_reason(st: &ContainerStatus) -> Option<&str> {
        let state = st.state.as_ref().unwrap();
        state.waiting.as_ref().unwrap().reason.as_deref()
    }

    fn cond<'a>(s: &'a PodStatus, t: &str) -> &'a PodCondition {
        s.conditions
            .as_ref()
            .unwrap()
            .iter()
            .find(|c| c.type_ == t)
            .unwrap()
    }

    #[test]
    fn pending_while_init_runs_then_running_and_ready() {
        let mut r = rec("Always", &["init"], &["web"]);
        let s = compute(&mut r, "1.2.3.4");
        assert_eq!(s.phase.as_deref(), Some("Pending"));
        assert_eq!(cond(&s, "Initialized").status, "False");
        assert_eq!(
            cond(&s, "Initialized").message.as_deref(),
            Some("containers with incomplete status: [init]")
        );
        let web = &s.container_statuses.as_ref().unwrap()[0];
        assert_eq!(waiting_reason(web), Some("PodInitializing"));
        set(&mut r, "init", RunState::Exited, 0);
        set(&mut r, "web", RunState::Running, 0);
        let s = compute(&mut r, "1.2.3.4");
        assert_eq!(s.phase.as_deref(), Some("Running"));
        assert_eq!(cond(&s, "Initialized").status, "True");
        assert_eq!(cond(&s, "Ready").status, "True");
        assert_eq!(cond(&s, "PodReadyToStartContainers").status, "True");
        let init = &s.init_container_statuses.as_ref().unwrap()[0];
        let t = init.state.as_ref().unwrap().terminated.as_ref().unwrap();
        assert_eq!((t.exit_code, t.reason.as_deref()), (0, Some("Completed")));
        assert_eq!(t.container_id.as_deref(), Some("peapod://id-init"));
        assert!(
            init.ready,
            "a Completed init container is ready, as the kubelet reports it"
        );
        assert_eq!(s.pod_ip.as_deref(), Some("10.0.0.2"));
        assert_eq!(s.qos_class.as_deref(), Some("BestEffort"));
    }

    #[test]
    fn run_once_pods_end_succeeded_or_failed() {
        let mut r = rec("Never", &[], &["a", "b"]);
        set(&mut r, "a", RunState::Exited, 0);
        set(&mut r, "b", RunState::Exited, 0);
        let s = compute(&mut r, "h");
        assert_eq!(s.phase.as_deref(), Some("Succeeded"));
        assert_eq!(cond(&s, "Ready").reason.as_deref(), Some("PodCompleted"));
        set(&mut r, "b", RunState::Exited, 3);
        assert_eq!(compute(&mut r, "h").phase.as_deref(), Some("Failed"));
        let mut r = rec("OnFailure", &[], &["a"]);
        set(&mut r, "a", RunState::Exited, 3);
        assert_eq!(compute(&mut r, "h").phase.as_deref(), Some("Running"));
        let mut r = rec("Always", &[], &["a"]);
        set(&mut r, "a", RunState::Exited, 0);
        assert_eq!(compute(&mut r, "h").phase.as_deref(), Some("Running"));
    }

    #[test]
    fn a_failed_init_container_fails_a_never_pod_and_keeps_others_pending() {
        let mut r = rec("Never", &["init"], &["web"]);
        set(&mut r, "init", RunState::Exited, 1);
        let s = compute(&mut r, "h");
        assert_eq!(s.phase.as_deref(), Some("Failed"));
        // As the kubelet: a Failed pod is not "Initialized: PodCompleted" when its init
        // container failed (kubectl shows Init:Error), and Ready says PodFailed.
        let initialized = cond(&s, "Initialized");
        assert_eq!(initialized.status, "False");
        assert_eq!(
            initialized.reason.as_deref(),
            Some("ContainersNotInitialized")
        );
        assert_eq!(cond(&s, "Ready").reason.as_deref(), Some("PodFailed"));
        let init = &s.init_container_statuses.as_ref().unwrap()[0];
        assert!(!init.ready);
        assert_eq!(
            init.state
                .as_ref()
                .unwrap()
                .terminated
                .as_ref()
                .unwrap()
                .reason
                .as_deref(),
            Some("Error")
        );
        let mut r = rec("Always", &["init"], &["web"]);
        set(&mut r, "init", RunState::Exited, 1);
        r.container("init").waiting = Some(Waiting {
            reason: "CrashLoopBackOff".into(),
            message: "back-off".into(),
        });
        let s = compute(&mut r, "h");
        assert_eq!(s.phase.as_deref(), Some("Pending"));
        let init = &s.init_container_statuses.as_ref().unwrap()[0];
        assert_eq!(waiting_reason(init), Some("CrashLoopBackOff"));
        assert_eq!(
            init.last_state
                .as_ref()
                .unwrap()
                .terminated
                .as_ref()
                .unwrap()
                .exit_code,
            1
        );
    }

    #[test]
    fn readiness_drives_ready_and_rejection_fails() {
        let mut r = rec("Always", &[], &["web"]);
        set(&mut r, "web", RunState::Running, 0);
        r.container("web").ready = false;
        let s = compute(&mut r, "h");
        assert_eq!(s.phase.as_deref(), Some("Running"));
        assert_eq!(cond(&s, "Ready").status, "False");
        assert_eq!(
            cond(&s, "ContainersReady").message.as_deref(),
            Some("containers with unready status: [web]")
        );
        r.rejection = Some(("OutOfcpu".into(), "Pod was rejected".into()));
        let s = compute(&mut r, "h");
        assert_eq!(
            (s.phase.as_deref(), s.reason.as_deref()),
            (Some("Failed"), Some("OutOfcpu"))
        );
    }
}
