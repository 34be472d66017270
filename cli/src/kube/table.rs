//! `peapod get pods`: kubectl's pod table. The READY/STATUS/RESTARTS cells are computed as
//! kubectl's `printPod` (pkg/printers/internalversion/printers.go) computes them from the Pod.

use super::json::{arr, s};
use super::tabwriter;
use super::time;
use serde_json::Value;

/// One row of the table, before alignment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodRow {
    pub namespace: String,
    pub name: String,
    pub ready: String,
    pub status: String,
    pub restarts: String,
    pub age: String,
    pub ip: String,
    pub node: String,
    pub nominated_node: String,
    pub readiness_gates: String,
}

/// An init container with `restartPolicy: Always` (a sidecar).
fn is_restartable(container: Option<&Value>) -> bool {
    container.is_some_and(|c| s(c, "/restartPolicy") == "Always")
}

fn terminated_finished_at(status: &Value) -> Option<i64> {
    status
        .pointer("/lastState/terminated/finishedAt")
        .and_then(Value::as_str)
        .and_then(time::parse_rfc3339)
}

fn condition_true(pod: &Value, kind: &str) -> bool {
    arr(pod, "/status/conditions")
        .iter()
        .any(|c| s(c, "/type") == kind && s(c, "/status") == "True")
}

/// The reason a terminated state shows: its reason, else Signal:N / ExitCode:N.
fn terminated_reason(t: &Value, prefix: &str) -> String {
    let reason = s(t, "/reason");
    if !reason.is_empty() {
        return format!("{prefix}{reason}");
    }
    let signal = t.pointer("/signal").and_then(Value::as_i64).unwrap_or(0);
    if signal != 0 {
        format!("{prefix}Signal:{signal}")
    } else {
        let code = t.pointer("/exitCode").and_then(Value::as_i64).unwrap_or(0);
        format!("{prefix}ExitCode:{code}")
    }
}

/// The row kubectl prints for `pod`, `now` being seconds since the epoch.
pub fn pod_row(pod: &Value, now: i64) -> PodRow {
    let init_specs = arr(pod, "/spec/initContainers");
    let mut total = arr(pod, "/spec/containers").len();
    total += init_specs
        .iter()
        .filter(|c| is_restartable(Some(c)))
        .count();
    let init_spec = |name: &str| init_specs.iter().find(|c| s(c, "/name") == name);

    let phase = s(pod, "/status/phase");
    let mut reason = match s(pod, "/status/reason") {
        "" => phase.to_string(),
        r => r.to_string(),
    };
    if arr(pod, "/status/conditions")
        .iter()
        .any(|c| s(c, "/type") == "PodScheduled" && s(c, "/reason") == "SchedulingGated")
    {
        reason = "SchedulingGated".into();
    }

    let mut ready = 0usize;
    let mut restarts = 0i64;
    let mut sidecar_restarts = 0i64;
    let mut last_restart: Option<i64> = None;
    let mut last_sidecar_restart: Option<i64> = None;
    let mut initializing = false;
    let init_statuses = arr(pod, "/status/initContainerStatuses");
    for (i, st) in init_statuses.iter().enumerate() {
        let count = st
            .pointer("/restartCount")
            .and_then(Value::as_i64)
            .unwrap_or(0);
        restarts += count;
        let finished = terminated_finished_at(st);
        last_restart = last_restart.max(finished);
        let restartable = is_restartable(init_spec(s(st, "/name")));
        if restartable {
            sidecar_restarts += count;
            last_sidecar_restart = last_sidecar_restart.max(finished);
        }
        let terminated = st.pointer("/state/terminated");
        let waiting_reason = s(st, "/state/waiting/reason");
        let started = st.pointer("/started").and_then(Value::as_bool) == Some(true);
        if let Some(t) = terminated {
            if t.pointer("/exitCode").and_then(Value::as_i64) == Some(0) {
                continue;
            }
        }
        if restartable && started {
            if st.pointer("/ready").and_then(Value::as_bool) == Some(true) {
                ready += 1;
            }
            continue;
        }
        if let Some(t) = terminated {
            reason = terminated_reason(t, "Init:");
        } else if !waiting_reason.is_empty() && waiting_reason != "PodInitializing" {
            reason = format!("Init:{waiting_reason}");
        } else {
            reason = format!("Init:{i}/{}", init_specs.len());
        }
        initializing = true;
        break;
    }

    if !initializing || condition_true(pod, "Initialized") {
        restarts = sidecar_restarts;
        last_restart = last_sidecar_restart;
        let mut has_running = false;
        for st in arr(pod, "/status/containerStatuses").iter().rev() {
            restarts += st
                .pointer("/restartCount")
                .and_then(Value::as_i64)
                .unwrap_or(0);
            last_restart = last_restart.max(terminated_finished_at(st));
            let waiting_reason = s(st, "/state/waiting/reason");
            if !waiting_reason.is_empty() {
                reason = waiting_reason.to_string();
            } else if let Some(t) = st.pointer("/state/terminated") {
                reason = terminated_reason(t, "");
            } else if st.pointer("/ready").and_then(Value::as_bool) == Some(true)
                && st.pointer("/state/running").is_some()
            {
                has_running = true;
                ready += 1;
            }
        }
        // A completed container next to running ones: the pod is still running.
        if reason == "Completed" && has_running {
            reason = if condition_true(pod, "Ready") {
                "Running".into()
            } else {
                "NotReady".into()
            };
        }
    }

    let deleting = pod.pointer("/metadata/deletionTimestamp").is_some();
    if deleting && s(pod, "/status/reason") == "NodeLost" {
        reason = "Unknown".into();
    } else if deleting && phase != "Succeeded" && phase != "Failed" {
        reason = "Terminating".into();
    }

    let restarts_text = match last_restart {
        Some(t) if restarts != 0 => {
            format!("{restarts} ({} ago)", time::human_duration(now - t))
        }
        _ => restarts.to_string(),
    };
    let ip = arr(pod, "/status/podIPs")
        .first()
        .map(|p| s(p, "/ip").to_string())
        .filter(|ip| !ip.is_empty())
        .unwrap_or_else(|| none_if_empty(s(pod, "/status/podIP")));
    let gates = arr(pod, "/spec/readinessGates");
    let readiness_gates = if gates.is_empty() {
        "<none>".to_string()
    } else {
        let met = gates
            .iter()
            .filter(|g| condition_true(pod, s(g, "/conditionType")))
            .count();
        format!("{met}/{}", gates.len())
    };
    PodRow {
        namespace: s(pod, "/metadata/namespace").to_string(),
        name: s(pod, "/metadata/name").to_string(),
        ready: format!("{ready}/{total}"),
        status: reason,
        restarts: restarts_text,
        age: time::age_since(
            pod.pointer("/metadata/creationTimestamp")
                .and_then(Value::as_str),
            now,
        ),
        ip,
        node: none_if_empty(s(pod, "/spec/nodeName")),
        nominated_node: none_if_empty(s(pod, "/status/nominatedNodeName")),
        readiness_gates,
    }
}

fn none_if_empty(v: &str) -> String {
    if v.is_empty() {
        "<none>".into()
    } else {
        v.to_string()
    }
}

/// Which optional columns the table has.
#[derive(Debug, Clone, Copy, Default)]
pub struct Columns {
    /// IP, NODE, NOMINATED NODE and READINESS GATES (`-o wide`).
    pub wide: bool,
    /// NAMESPACE first (`-A`).
    pub namespace: bool,
    /// LABELS last (`--show-labels`).
    pub labels: bool,
}

/// `k=v,k2=v2` sorted by key, `<none>` without labels.
fn labels_cell(pod: &Value) -> String {
    let mut pairs: Vec<String> = pod
        .pointer("/metadata/labels")
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("")))
                .collect()
        })
        .unwrap_or_default();
    if pairs.is_empty() {
        return "<none>".into();
    }
    pairs.sort();
    pairs.join(",")
}

/// The whole table, aligned as kubectl aligns it.
pub fn render(pods: &[Value], columns: Columns, now: i64) -> String {
    let mut text = String::new();
    let mut header = vec!["NAME", "READY", "STATUS", "RESTARTS", "AGE"];
    if columns.namespace {
        header.insert(0, "NAMESPACE");
    }
    if columns.wide {
        header.extend(["IP", "NODE", "NOMINATED NODE", "READINESS GATES"]);
    }
    if columns.labels {
        header.push("LABELS");
    }
    text.push_str(&header.join("\t"));
    text.push('\n');
    for pod in pods {
        let r = pod_row(pod, now);
        let mut cells = vec![r.name, r.ready, r.status, r.restarts, r.age];
        if columns.namespace {
            cells.insert(0, r.namespace);
        }
        if columns.wide {
            cells.extend([r.ip, r.node, r.nominated_node, r.readiness_gates]);
        }
        if columns.labels {
            cells.push(labels_cell(pod));
        }
        text.push_str(&cells.join("\t"));
        text.push('\n');
    }
    tabwriter::align(&text, tabwriter::TABLE)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const NOW: &str = "2026-11-30T18:40:00Z";

    fn now() -> i64 {
        time::parse_rfc3339(NOW).unwrap()
    }

    fn base(status: Value) -> Value {
        json!({
            "metadata": {"name": "war", "namespace": "default",
                         "creationTimestamp": "2026-11-30T18:37:50Z"},
            "spec": {
                "nodeName": "node1",
                "initContainers": [{"name": "install", "image": "busybox"}],
                "containers": [{"name": "web", "image": "busybox"},
                               {"name": "shipper", "image": "busybox"}]
            },
            "status": status
        })
    }

    #[test]
    fn running_ready_pod() {
        let pod = base(json!({
            "phase": "Running",
            "podIP": "10.88.0.5", "podIPs": [{"ip": "10.88.0.5"}],
            "conditions": [{"type": "Initialized", "status": "True"},
                           {"type": "Ready", "status": "True"}],
            "initContainerStatuses": [{"name": "install", "ready": true, "restartCount": 0,
                "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}],
            "containerStatuses": [
                {"name": "web", "ready": true, "restartCount": 0, "state": {"running": {}}},
                {"name": "shipper", "ready": true, "restartCount": 0, "state": {"running": {}}}]
        }));
        let r = pod_row(&pod, now());
        assert_eq!((r.ready.as_str(), r.status.as_str()), ("2/2", "Running"));
        assert_eq!((r.restarts.as_str(), r.age.as_str()), ("0", "2m10s"));
        assert_eq!((r.ip.as_str(), r.node.as_str()), ("10.88.0.5", "node1"));
    }

    #[test]
    fn init_progress_and_failures() {
        let running_init = base(json!({"phase": "Pending",
            "initContainerStatuses": [{"name": "install", "restartCount": 0,
                "state": {"running": {}}}],
            "containerStatuses": [
                {"name": "web", "state": {"waiting": {"reason": "PodInitializing"}}},
                {"name": "shipper", "state": {"waiting": {"reason": "PodInitializing"}}}]}));
        assert_eq!(pod_row(&running_init, now()).status, "Init:0/1");

        let failed_init = base(json!({"phase": "Failed",
            "initContainerStatuses": [{"name": "install", "restartCount": 0,
                "state": {"terminated": {"exitCode": 3, "reason": "Error"}}}]}));
        assert_eq!(pod_row(&failed_init, now()).status, "Init:Error");

        let no_reason = base(json!({"phase": "Failed",
            "initContainerStatuses": [{"name": "install",
                "state": {"terminated": {"exitCode": 3}}}]}));
        assert_eq!(pod_row(&no_reason, now()).status, "Init:ExitCode:3");

        let backoff = base(json!({"phase": "Pending",
            "initContainerStatuses": [{"name": "install", "restartCount": 3,
                "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                "lastState": {"terminated": {"exitCode": 1, "finishedAt": "2026-11-30T18:39:30Z"}}}]}));
        let r = pod_row(&backoff, now());
        assert_eq!(r.status, "Init:CrashLoopBackOff");
        assert_eq!(r.restarts, "3 (30s ago)");

        let initialized_waiting = base(json!({"phase": "Pending",
            "conditions": [{"type": "Initialized", "status": "True"}],
            "initContainerStatuses": [{"name": "install",
                "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}],
            "containerStatuses": [
                {"name": "web", "state": {"waiting": {"reason": "ContainerCreating"}}},
                {"name": "shipper", "state": {"waiting": {"reason": "ContainerCreating"}}}]}));
        assert_eq!(
            pod_row(&initialized_waiting, now()).status,
            "ContainerCreating"
        );
    }

    #[test]
    fn app_container_reasons() {
        let crash = base(json!({"phase": "Running",
            "conditions": [{"type": "Initialized", "status": "True"},
                           {"type": "Ready", "status": "False"}],
            "containerStatuses": [
                {"name": "web", "ready": false, "restartCount": 4,
                 "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                 "lastState": {"terminated": {"exitCode": 137, "reason": "Error",
                    "finishedAt": "2026-11-30T18:35:00Z"}}},
                {"name": "shipper", "ready": true, "restartCount": 0, "state": {"running": {}}}]}));
        let r = pod_row(&crash, now());
        assert_eq!(
            (r.ready.as_str(), r.status.as_str()),
            ("1/2", "CrashLoopBackOff")
        );
        assert_eq!(r.restarts, "4 (5m ago)");

        let completed = json!({"metadata": {"name": "once"}, "spec": {"containers": [{"name": "a"}]},
            "status": {"phase": "Succeeded", "containerStatuses": [
                {"name": "a", "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}]}});
        assert_eq!(pod_row(&completed, now()).status, "Completed");

        let oom = json!({"metadata": {"name": "big"}, "spec": {"containers": [{"name": "a"}]},
            "status": {"phase": "Failed", "containerStatuses": [
                {"name": "a", "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}}]}});
        assert_eq!(pod_row(&oom, now()).status, "OOMKilled");

        let pull = json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "a"}]},
            "status": {"phase": "Pending", "containerStatuses": [
                {"name": "a", "state": {"waiting": {"reason": "ErrImagePull"}}}]}});
        assert_eq!(pod_row(&pull, now()).status, "ErrImagePull");

        let one_done = json!({"metadata": {"name": "m"},
            "spec": {"containers": [{"name": "a"}, {"name": "b"}]},
            "status": {"phase": "Running",
                "conditions": [{"type": "Ready", "status": "False"}],
                "containerStatuses": [
                {"name": "a", "ready": true, "state": {"running": {}}},
                {"name": "b", "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}]}});
        assert_eq!(pod_row(&one_done, now()).status, "NotReady");
    }

    #[test]
    fn admission_failure_and_terminating() {
        let too_big = json!({"metadata": {"name": "huge"}, "spec": {"containers": [{"name": "a"}]},
            "status": {"phase": "Failed", "reason": "OutOfcpu"}});
        let r = pod_row(&too_big, now());
        assert_eq!((r.ready.as_str(), r.status.as_str()), ("0/1", "OutOfcpu"));
        assert_eq!((r.ip.as_str(), r.age.as_str()), ("<none>", "<unknown>"));

        let deleting = json!({"metadata": {"name": "d", "deletionTimestamp": NOW},
            "spec": {"containers": [{"name": "a"}]},
            "status": {"phase": "Running", "containerStatuses": [
                {"name": "a", "ready": true, "state": {"running": {}}}]}});
        assert_eq!(pod_row(&deleting, now()).status, "Terminating");
    }

    #[test]
    fn sidecars_count_as_containers() {
        let pod = json!({"metadata": {"name": "s"},
            "spec": {"initContainers": [{"name": "log", "restartPolicy": "Always"}],
                     "containers": [{"name": "app"}]},
            "status": {"phase": "Running",
                "conditions": [{"type": "Initialized", "status": "True"}],
                "initContainerStatuses": [{"name": "log", "started": true, "ready": true,
                    "restartCount": 1, "state": {"running": {}}}],
                "containerStatuses": [{"name": "app", "ready": true, "state": {"running": {}}}]}});
        let r = pod_row(&pod, now());
        assert_eq!(
            (r.ready.as_str(), r.status.as_str(), r.restarts.as_str()),
            ("2/2", "Running", "1")
        );
    }

    #[test]
    fn table_layout() {
        let pod = base(json!({"phase": "Pending"}));
        let t = render(std::slice::from_ref(&pod), Columns::default(), now());
        assert_eq!(
            t,
            "NAME      READY     STATUS    RESTARTS   AGE\nwar       0/2       Pending   0          2m10s\n"
        );
        let wide = render(
            std::slice::from_ref(&pod),
            Columns {
                wide: true,
                namespace: true,
                labels: false,
            },
            now(),
        );
        assert_eq!(
            wide,
            "NAMESPACE   NAME      READY     STATUS    RESTARTS   AGE       IP        NODE      NOMINATED NODE   READINESS GATES\n\
             default     war       0/2       Pending   0          2m10s     <none>    node1     <none>           <none>\n"
        );
        let mut labelled = pod;
        labelled["metadata"]["labels"] = json!({"tier": "web", "app": "war"});
        let t = render(
            &[labelled],
            Columns {
                labels: true,
                ..Columns::default()
            },
            now(),
        );
        assert!(
            t.lines().next().unwrap().ends_with("AGE       LABELS"),
            "{t}"
        );
        assert!(
            t.lines()
                .nth(1)
                .unwrap()
                .ends_with("2m10s     app=war,tier=web"),
            "{t}"
        );
    }
}
