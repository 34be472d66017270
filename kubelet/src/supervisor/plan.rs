//! What a sync does to the pod's containers, decided without doing it (the kubelet's
//! `computePodActions`): from the pod's record (its spec, what CRI last said of each container,
//! the restart bookkeeping) and the time, the actions; `sync.rs` carries them out. Pure, so
//! the decisions are tested as tables below, without CRI, timers or tasks.

use crate::record::{ContainerRecord, PodRecord, RunState};
pub use crate::record::{Phase, RestartPolicy};
use crate::resources::is_restartable_init;
use std::time::Duration;

/// Ten minutes of running resets a container's back-off, as the kubelet's back-off GC does.
pub const BACKOFF_RESET: Duration = Duration::from_secs(600);

/// One step of a sync for the pod's containers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// The pod has ended (its phase is terminal): stop what still runs, keep the phase.
    Finish,
    /// Start a container: its first attempt, or (`again`) a new attempt of one that was
    /// created but never started (a failed start, or a daemon that died between the two).
    Start { name: String, again: bool },
    /// Run an exited container again, unless it is in back-off ([`restart_step`]).
    Restart { name: String },
}

/// The actions of one sync, with `phase` the pod's phase now. Init containers go one at a
/// time, in order (sidecars, restartable init containers, stay running and let the next one
/// go once started); app containers go together once every init container is done.
pub fn plan(rec: &PodRecord, phase: Option<Phase>) -> Vec<Action> {
    if phase.is_some_and(Phase::is_terminal) {
        return vec![Action::Finish];
    }
    let spec = rec.spec();
    let policy = RestartPolicy::of(spec);
    let name = |c: &k8s_openapi::api::core::v1::Container| c.name.clone();
    for c in spec.init_containers.iter().flatten() {
        let restartable = is_restartable_init(c);
        let r = rec.containers.get(&c.name);
        let step = match state_of(r) {
            None => Action::Start {
                name: name(c),
                again: false,
            },
            Some((RunState::Running, _)) if restartable && r.is_some_and(|r| r.started) => {
                continue;
            }
            Some((RunState::Running, _)) | Some((RunState::Unknown, _)) => return vec![],
            Some((RunState::Created, _)) => Action::Start {
                name: name(c),
                again: true,
            },
            Some((RunState::Exited, 0)) if !restartable => continue,
            Some((RunState::Exited, _)) if !restartable && policy == RestartPolicy::Never => {
                return vec![];
            }
            Some((RunState::Exited, _)) => Action::Restart { name: name(c) },
        };
        return vec![step];
    }
    spec.containers
        .iter()
        .filter_map(|c| {
            let r = rec.containers.get(&c.name);
            match state_of(r) {
                None => Some(Action::Start {
                    name: name(c),
                    again: false,
                }),
                Some((RunState::Exited, code)) => {
                    let killed = r.is_some_and(|r| r.killing);
                    policy
                        .restarts(code, killed)
                        .then(|| Action::Restart { name: name(c) })
                }
                Some((RunState::Created, _)) => Some(Action::Start {
                    name: name(c),
                    again: true,
                }),
                Some(_) => None,
            }
        })
        .collect()
}

/// `spec.activeDeadlineSeconds` has passed since the pod started (`now_ms`: unix ms).
pub fn deadline_exceeded(rec: &PodRecord, now_ms: i64) -> bool {
    let Some(deadline) = rec.spec().active_deadline_seconds else {
        return false;
    };
    let start = rec.pod.status.as_ref().and_then(|s| s.start_time.as_ref());
    let Some(start) = start else {
        return false;
    };
    now_ms - start.0.as_millisecond() > deadline.saturating_mul(1000)
}

/// What CRI last said of a container: its state and exit code.
fn state_of(r: Option<&ContainerRecord>) -> Option<(RunState, i32)> {
    r.and_then(|r| r.observed.as_ref())
        .map(|o| (o.state, o.exit_code))
}

/// Whether an exited container may start again now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RestartStep {
    /// Nothing observed of it: nothing to restart.
    NotExited,
    /// In back-off (CrashLoopBackOff) for `secs` more seconds at most; `backoff_ms` is the
    /// back-off it is in.
    Wait { backoff_ms: u64, secs: u64 },
    /// Start it now; its next back-off is `backoff_ms`.
    Go { backoff_ms: u64 },
}

/// The restart back-off (the kubelet's): none before the first restart, then `base_ms`,
/// doubling up to `max_ms`, counted from the attempt's exit; an attempt that ran for
/// [`BACKOFF_RESET`] starts it over.
pub fn restart_step(r: &ContainerRecord, now_ms: i64, base_ms: u64, max_ms: u64) -> RestartStep {
    let Some(obs) = &r.observed else {
        return RestartStep::NotExited;
    };
    let finished_ms = obs.finished_at_ns / 1_000_000;
    let ran_ms = (obs.finished_at_ns - obs.started_at_ns).max(0) / 1_000_000;
    let backoff_ms = if ran_ms as u128 >= BACKOFF_RESET.as_millis() {
        0
    } else {
        r.backoff_ms
    };
    if backoff_ms > 0 && now_ms < finished_ms + backoff_ms as i64 {
        return RestartStep::Wait {
            backoff_ms,
            secs: backoff_ms.div_ceil(1000),
        };
    }
    RestartStep::Go {
        backoff_ms: if backoff_ms == 0 {
            base_ms
        } else {
            (backoff_ms * 2).min(max_ms)
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::Observed;
    use k8s_openapi::api::core::v1::{Pod, PodSpec};
    use RunState::{Created, Exited, Running, Unknown};

    /// What CRI said of a container in a row of a table: nothing yet, or a state and code.
    type Seen = Option<(RunState, i32)>;
    /// A row: the pod's policy, its init and app containers as seen, the actions wanted.
    type Row = (
        &'static str,
        Vec<(&'static str, Seen)>,
        Vec<(&'static str, Seen)>,
        Vec<Action>,
    );

    /// A pod with `policy`, init containers `inits` (a name ending in `+` is a restartable
    /// one, a sidecar) and app containers `apps`, each observed as given.
    fn rec(policy: &str, inits: &[(&str, Seen)], apps: &[(&str, Seen)]) -> PodRecord {
        let init = |(n, _): &(&str, Seen)| match n.strip_suffix('+') {
            Some(n) => serde_json::json!({"name": n, "image": "x:1", "restartPolicy": "Always"}),
            None => serde_json::json!({"name": n, "image": "x:1"}),
        };
        let app = |(n, _): &(&str, Seen)| serde_json::json!({"name": n, "image": "x:1"});
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "default", "uid": "u"},
            "spec": {"restartPolicy": policy,
                     "initContainers": inits.iter().map(init).collect::<Vec<_>>(),
                     "containers": apps.iter().map(app).collect::<Vec<_>>()}
        }))
        .unwrap();
        let mut r = PodRecord {
            pod,
            ..Default::default()
        };
        for (n, seen) in inits.iter().chain(apps) {
            let c = r.container(n.trim_end_matches('+'));
            c.started = true;
            c.observed = seen.map(|(state, exit_code)| Observed {
                state,
                started_at_ns: 0,
                finished_at_ns: 0,
                exit_code,
                reason: String::new(),
                message: String::new(),
            });
        }
        r
    }

    fn start(name: &str) -> Action {
        Action::Start {
            name: name.into(),
            again: false,
        }
    }

    fn start_again(name: &str) -> Action {
        Action::Start {
            name: name.into(),
            again: true,
        }
    }

    fn restart(name: &str) -> Action {
        Action::Restart { name: name.into() }
    }

    #[test]
    fn init_containers_one_at_a_time_then_the_apps_together() {
        let ok = Some((Exited, 0));
        let failed = Some((Exited, 1));
        let running = Some((Running, 0));
        #[rustfmt::skip]
        let table: Vec<Row> = vec![
            // Nothing yet: the first init container only.
            ("Always", vec![("a", None), ("b", None)], vec![("web", None)], vec![start("a")]),
            // It runs: wait for it.
            ("Always", vec![("a", running), ("b", None)], vec![("web", None)], vec![]),
            // Done: the next one.
            ("Always", vec![("a", ok), ("b", None)], vec![("web", None)], vec![start("b")]),
            // All done: every app container at once.
            ("Always", vec![("a", ok)], vec![("web", None), ("db", None)], vec![start("web"), start("db")]),
            // A failed init container runs again, unless the pod never restarts.
            ("Always", vec![("a", failed)], vec![("web", None)], vec![restart("a")]),
            ("OnFailure", vec![("a", failed)], vec![("web", None)], vec![restart("a")]),
            ("Never", vec![("a", failed)], vec![("web", None)], vec![]),
            // Created but never started: started again.
            ("Always", vec![("a", Some((Created, 0)))], vec![("web", None)], vec![start_again("a")]),
            // Unknown: wait until CRI can tell.
            ("Always", vec![("a", Some((Unknown, 0)))], vec![("web", None)], vec![]),
            // A started sidecar lets the next one go and keeps running; one that ended runs
            // again whatever its code and the pod's policy.
            ("Never", vec![("log+", running), ("b", None)], vec![("web", None)], vec![start("b")]),
            ("Never", vec![("log+", Some((Exited, 0)))], vec![("web", None)], vec![restart("log")]),
        ];
        for (policy, inits, apps, want) in table {
            let r = rec(policy, &inits, &apps);
            assert_eq!(plan(&r, None), want, "{policy} {inits:?} {apps:?}");
        }
    }

    #[test]
    fn app_containers_restart_per_the_policy() {
        #[rustfmt::skip]
        let table: Vec<(&str, Seen, bool, Vec<Action>)> = vec![
            ("Always", Some((Exited, 0)), false, vec![restart("web")]),
            ("Always", Some((Exited, 2)), false, vec![restart("web")]),
            ("OnFailure", Some((Exited, 0)), false, vec![]),
            ("OnFailure", Some((Exited, 2)), false, vec![restart("web")]),
            // Killed by its liveness probe: a failure even with code 0.
            ("OnFailure", Some((Exited, 0)), true, vec![restart("web")]),
            ("Never", Some((Exited, 2)), true, vec![]),
            ("Never", Some((Running, 0)), false, vec![]),
            ("Never", Some((Created, 0)), false, vec![start_again("web")]),
            ("Never", Some((Unknown, 0)), false, vec![]),
        ];
        for (policy, seen, killed, want) in table {
            let mut r = rec(policy, &[], &[("web", seen)]);
            r.container("web").killing = killed;
            assert_eq!(plan(&r, None), want, "{policy} {seen:?} killed={killed}");
        }
    }

    #[test]
    fn a_terminal_phase_finishes_the_pod_and_nothing_else() {
        let r = rec("Always", &[], &[("web", None)]);
        for (phase, want) in [
            (Some(Phase::Succeeded), vec![Action::Finish]),
            (Some(Phase::Failed), vec![Action::Finish]),
            (Some(Phase::Running), vec![start("web")]),
            (Some(Phase::Pending), vec![start("web")]),
            (None, vec![start("web")]),
        ] {
            assert_eq!(plan(&r, phase), want, "{phase:?}");
        }
    }

    #[test]
    fn the_restart_back_off() {
        const S: i64 = 1_000_000_000; // a second in ns
        let exited = |started_s: i64, finished_s: i64, backoff_ms: u64| ContainerRecord {
            backoff_ms,
            observed: Some(Observed {
                state: Exited,
                started_at_ns: started_s * S,
                finished_at_ns: finished_s * S,
                exit_code: 1,
                reason: String::new(),
                message: String::new(),
            }),
            ..Default::default()
        };
        let (base, max) = (10_000, 300_000);
        #[rustfmt::skip]
        let table = [
            // The first restart: at once, then 10 s of back-off.
            (exited(0, 1, 0), 1_000, RestartStep::Go { backoff_ms: 10_000 }),
            // In back-off: wait, and say for how long at most.
            (exited(0, 1, 10_000), 5_000, RestartStep::Wait { backoff_ms: 10_000, secs: 10 }),
            (exited(0, 1, 2_500), 1_000, RestartStep::Wait { backoff_ms: 2_500, secs: 3 }),
            // Back-off over: go, and double the next one, up to the most.
            (exited(0, 1, 10_000), 11_000, RestartStep::Go { backoff_ms: 20_000 }),
            (exited(0, 1, 200_000), 201_000, RestartStep::Go { backoff_ms: 300_000 }),
            // Ten minutes of running start the back-off over.
            (exited(0, 600, 300_000), 600_500, RestartStep::Go { backoff_ms: 10_000 }),
        ];
        for (r, now_ms, want) in table {
            assert_eq!(
                restart_step(&r, now_ms, base, max),
                want,
                "{r:?} at {now_ms}"
            );
        }
        assert_eq!(
            restart_step(&ContainerRecord::default(), 0, base, max),
            RestartStep::NotExited
        );
    }

    #[test]
    fn the_active_deadline() {
        use k8s_openapi::api::core::v1::PodStatus;
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
        let started_ms = 1_700_000_000_000;
        let pod = |deadline: Option<i64>, started: bool| {
            let mut r = rec("Always", &[], &[("web", None)]);
            r.pod.spec.as_mut().unwrap().active_deadline_seconds = deadline;
            let start = k8s_openapi::jiff::Timestamp::from_millisecond(started_ms).unwrap();
            r.pod.status = Some(PodStatus {
                start_time: started.then_some(Time(start)),
                ..Default::default()
            });
            r
        };
        for (deadline, started, after_ms, want) in [
            (None, true, 1_000_000, false),
            (Some(10), false, 1_000_000, false),
            (Some(10), true, 10_000, false),
            (Some(10), true, 10_001, true),
        ] {
            let r = pod(deadline, started);
            let got = deadline_exceeded(&r, started_ms + after_ms);
            assert_eq!(got, want, "{deadline:?} started={started} +{after_ms}ms");
        }
    }

    #[test]
    fn policies_and_phases_from_their_names() {
        let spec = |p: Option<&str>| PodSpec {
            restart_policy: p.map(Into::into),
            ..Default::default()
        };
        for (name, want) in [
            (Some("Always"), RestartPolicy::Always),
            (Some("OnFailure"), RestartPolicy::OnFailure),
            (Some("Never"), RestartPolicy::Never),
            (None, RestartPolicy::Always),
        ] {
            assert_eq!(RestartPolicy::of(&spec(name)), want);
        }
        for (name, want) in [
            ("Pending", Some(Phase::Pending)),
            ("Running", Some(Phase::Running)),
            ("Succeeded", Some(Phase::Succeeded)),
            ("Failed", Some(Phase::Failed)),
            ("Unknown", Some(Phase::Unknown)),
            ("", None),
        ] {
            assert_eq!(Phase::parse(name), want);
        }
        assert!(Phase::Succeeded.is_terminal() && Phase::Failed.is_terminal());
        assert!(!Phase::Running.is_terminal());
    }
}
