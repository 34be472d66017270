//! `peapod describe pod`: the text kubectl's `describePod` (staging/src/k8s.io/kubectl/pkg/
//! describe/describe.go) prints, from a Pod and its Events as JSON.

use super::json::{arr, s};
use super::tabwriter;
use super::time;
use serde_json::Value;
use std::fmt::Write;

fn int(v: &Value, pointer: &str) -> Option<i64> {
    v.pointer(pointer).and_then(Value::as_i64)
}

/// A JSON scalar as Go's `%v` prints it (quantities and ports may be strings or numbers).
fn scalar(v: Option<&Value>) -> String {
    match v {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Number(n)) => n.to_string(),
        Some(Value::Bool(b)) => b.to_string(),
        _ => String::new(),
    }
}

fn timestamp(v: &Value, pointer: &str) -> String {
    match v
        .pointer(pointer)
        .and_then(Value::as_str)
        .and_then(time::parse_rfc3339)
    {
        Some(t) => time::rfc1123z(t),
        // Go prints the zero time for a missing timestamp.
        None => "Mon, 01 Jan 0001 00:00:00 +0000".into(),
    }
}

/// kubectl's prefix writer: LEVEL_n indents by 2n spaces.
struct Out(String);

impl Out {
    fn w(&mut self, level: usize, text: &str) {
        for _ in 0..level {
            self.0.push_str("  ");
        }
        self.0.push_str(text);
    }
}

/// The whole description; `now` in seconds since the epoch (for event ages).
pub fn describe_pod(pod: &Value, events: &[Value], now: i64) -> String {
    let mut o = Out(String::new());
    o.w(0, &format!("Name:\t{}\n", s(pod, "/metadata/name")));
    o.w(
        0,
        &format!("Namespace:\t{}\n", s(pod, "/metadata/namespace")),
    );
    if let Some(p) = int(pod, "/spec/priority") {
        o.w(0, &format!("Priority:\t{p}\n"));
    }
    let pcn = s(pod, "/spec/priorityClassName");
    if !pcn.is_empty() {
        o.w(0, &format!("Priority Class Name:\t{pcn}\n"));
    }
    let rcn = s(pod, "/spec/runtimeClassName");
    if !rcn.is_empty() {
        o.w(0, &format!("Runtime Class Name:\t{rcn}\n"));
    }
    let sa = s(pod, "/spec/serviceAccountName");
    if !sa.is_empty() {
        o.w(0, &format!("Service Account:\t{sa}\n"));
    }
    let node = s(pod, "/spec/nodeName");
    if node.is_empty() {
        o.w(0, "Node:\t<none>\n");
    } else {
        o.w(0, &format!("Node:\t{node}/{}\n", s(pod, "/status/hostIP")));
    }
    if pod.pointer("/status/startTime").is_some() {
        o.w(
            0,
            &format!("Start Time:\t{}\n", timestamp(pod, "/status/startTime")),
        );
    }
    multiline(&mut o, "Labels", pod.pointer("/metadata/labels"), "=");
    multiline(
        &mut o,
        "Annotations",
        pod.pointer("/metadata/annotations"),
        ": ",
    );
    let phase = s(pod, "/status/phase");
    let deleting = pod.pointer("/metadata/deletionTimestamp").is_some();
    if deleting && phase != "Succeeded" && phase != "Failed" {
        o.w(0, "Status:\tTerminating\n");
        if let Some(g) = int(pod, "/metadata/deletionGracePeriodSeconds") {
            o.w(0, &format!("Termination Grace Period:\t{g}s\n"));
        }
    } else {
        o.w(0, &format!("Status:\t{phase}\n"));
    }
    for (label, pointer) in [("Reason", "/status/reason"), ("Message", "/status/message")] {
        let v = s(pod, pointer);
        if !v.is_empty() {
            o.w(0, &format!("{label}:\t{v}\n"));
        }
    }
    o.w(0, &format!("IP:\t{}\n", s(pod, "/status/podIP")));
    let ips = arr(pod, "/status/podIPs");
    if ips.is_empty() {
        o.w(0, "IPs:\t<none>\n");
    } else {
        o.w(0, "IPs:\n");
        for ip in ips {
            o.w(1, &format!("IP:\t{}\n", s(ip, "/ip")));
        }
    }
    let pod_env = PodFields::of(pod);
    let init = arr(pod, "/spec/initContainers");
    if !init.is_empty() {
        containers(
            &mut o,
            "Init Containers",
            init,
            arr(pod, "/status/initContainerStatuses"),
            &pod_env,
        );
    }
    containers(
        &mut o,
        "Containers",
        arr(pod, "/spec/containers"),
        arr(pod, "/status/containerStatuses"),
        &pod_env,
    );
    let conditions = arr(pod, "/status/conditions");
    if !conditions.is_empty() {
        o.w(0, "Conditions:\n  Type\tStatus\n");
        for c in conditions {
            o.w(1, &format!("{} \t{} \n", s(c, "/type"), s(c, "/status")));
        }
    }
    volumes(&mut o, arr(pod, "/spec/volumes"));
    o.w(0, &format!("QoS Class:\t{}\n", s(pod, "/status/qosClass")));
    multiline(
        &mut o,
        "Node-Selectors",
        pod.pointer("/spec/nodeSelector"),
        "=",
    );
    tolerations(&mut o, arr(pod, "/spec/tolerations"));
    if events.is_empty() {
        // Without events kubectl writes this line to the same tabwriter as the lines above.
        o.w(0, "Events:\t<none>\n");
        return tabwriter::align(&o.0, tabwriter::DESCRIBE);
    }
    let mut text = tabwriter::align(&o.0, tabwriter::DESCRIBE);
    // kubectl flushes its tabwriter before the events table, which is aligned on its own.
    text.push_str(&tabwriter::align(
        &events_table(events, now),
        tabwriter::DESCRIBE,
    ));
    text
}

/// `Labels:`-style blocks: sorted `key=value` (or `key: value`) lines, `<none>` when empty.
fn multiline(o: &mut Out, title: &str, map: Option<&Value>, sep: &str) {
    let mut entries: Vec<(String, String)> = map
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .map(|(k, v)| (k.clone(), scalar(Some(v))))
                .collect()
        })
        .unwrap_or_default();
    o.w(0, &format!("{title}:\t"));
    if entries.is_empty() {
        o.0.push_str("<none>\n");
        return;
    }
    entries.sort();
    for (i, (k, v)) in entries.iter().enumerate() {
        if i != 0 {
            o.0.push('\t');
        }
        let _ = writeln!(o.0, "{k}{sep}{v}");
    }
}

fn tolerations(o: &mut Out, list: &[Value]) {
    o.w(0, "Tolerations:\t");
    if list.is_empty() {
        o.0.push_str("<none>\n");
        return;
    }
    for (i, t) in list.iter().enumerate() {
        if i != 0 {
            o.0.push('\t');
        }
        let mut line = s(t, "/key").to_string();
        let value = s(t, "/value");
        if !value.is_empty() {
            let _ = write!(line, "={value}");
        }
        let effect = s(t, "/effect");
        if !effect.is_empty() {
            let _ = write!(line, ":{effect}");
        }
        if s(t, "/operator") == "Exists" && value.is_empty() {
            if s(t, "/key").is_empty() {
                line = "op=Exists".into();
            } else {
                line.push_str(" op=Exists");
            }
        }
        if let Some(secs) = int(t, "/tolerationSeconds") {
            let _ = write!(line, " for {secs}s");
        }
        let _ = writeln!(o.0, "{line}");
    }
}

/// What `valueFrom.fieldRef` resolves to, as kubectl's EnvValueRetriever does for a pod.
struct PodFields<'a> {
    pod: &'a Value,
}

impl<'a> PodFields<'a> {
    fn of(pod: &'a Value) -> Self {
        PodFields { pod }
    }

    fn resolve(&self, field_path: &str) -> String {
        let p = self.pod;
        match field_path {
            "metadata.name" => s(p, "/metadata/name").into(),
            "metadata.namespace" => s(p, "/metadata/namespace").into(),
            "metadata.uid" => s(p, "/metadata/uid").into(),
            "spec.nodeName" => s(p, "/spec/nodeName").into(),
            "spec.serviceAccountName" => s(p, "/spec/serviceAccountName").into(),
            "status.hostIP" => s(p, "/status/hostIP").into(),
            "status.podIP" => s(p, "/status/podIP").into(),
            _ => {
                // metadata.labels['k'] / metadata.annotations['k']
                for (prefix, pointer) in [
                    ("metadata.labels['", "/metadata/labels"),
                    ("metadata.annotations['", "/metadata/annotations"),
                ] {
                    if let Some(key) = field_path
                        .strip_prefix(prefix)
                        .and_then(|k| k.strip_suffix("']"))
                    {
                        return scalar(p.pointer(pointer).and_then(|m| m.get(key)));
                    }
                }
                String::new()
            }
        }
    }
}

fn containers(o: &mut Out, label: &str, specs: &[Value], statuses: &[Value], pod: &PodFields) {
    o.w(0, &format!("{label}:\n"));
    for c in specs {
        let name = s(c, "/name");
        let status = statuses.iter().find(|st| s(st, "/name") == name);
        o.w(1, &format!("{name}:\n"));
        if let Some(st) = status {
            o.w(2, &format!("Container ID:\t{}\n", s(st, "/containerID")));
        }
        o.w(2, &format!("Image:\t{}\n", s(c, "/image")));
        if let Some(st) = status {
            o.w(2, &format!("Image ID:\t{}\n", s(st, "/imageID")));
        }
        let ports = arr(c, "/ports");
        let port_list = |field: &str| -> String {
            ports
                .iter()
                .filter(|p| int(p, &format!("/{field}")).unwrap_or(0) != 0)
                .map(|p| {
                    let proto = match s(p, "/protocol") {
                        "" => "TCP",
                        other => other,
                    };
                    format!("{}/{proto}", int(p, &format!("/{field}")).unwrap_or(0))
                })
                .collect::<Vec<_>>()
                .join(", ")
        };
        for (one, many, text) in [
            ("Port", "Ports", port_list("containerPort")),
            ("Host Port", "Host Ports", port_list("hostPort")),
        ] {
            if text.contains(',') {
                o.w(2, &format!("{many}:\t{text}\n"));
            } else if text.is_empty() {
                o.w(2, &format!("{one}:\t<none>\n"));
            } else {
                o.w(2, &format!("{one}:\t{text}\n"));
            }
        }
        for (title, pointer) in [("Command", "/command"), ("Args", "/args")] {
            let items = arr(c, pointer);
            if !items.is_empty() {
                o.w(2, &format!("{title}:\n"));
                for item in items {
                    for line in item.as_str().unwrap_or("").split('\n') {
                        o.w(3, &format!("{line}\n"));
                    }
                }
            }
        }
        if let Some(st) = status {
            state(o, "State", st.pointer("/state"));
            if st.pointer("/lastState/terminated").is_some() {
                state(o, "Last State", st.pointer("/lastState"));
            }
            let ready = st.pointer("/ready").and_then(Value::as_bool) == Some(true);
            o.w(
                2,
                &format!("Ready:\t{}\n", if ready { "True" } else { "False" }),
            );
            o.w(
                2,
                &format!(
                    "Restart Count:\t{}\n",
                    int(st, "/restartCount").unwrap_or(0)
                ),
            );
        }
        for (title, pointer) in [
            ("Limits", "/resources/limits"),
            ("Requests", "/resources/requests"),
        ] {
            if let Some(m) = c.pointer(pointer).and_then(Value::as_object) {
                if !m.is_empty() {
                    o.w(2, &format!("{title}:\n"));
                    let mut keys: Vec<_> = m.keys().collect();
                    keys.sort();
                    for k in keys {
                        o.w(3, &format!("{k}:\t{}\n", scalar(m.get(k))));
                    }
                }
            }
        }
        for (title, pointer) in [
            ("Liveness", "/livenessProbe"),
            ("Readiness", "/readinessProbe"),
            ("Startup", "/startupProbe"),
        ] {
            if let Some(p) = c.pointer(pointer) {
                o.w(2, &format!("{title}:\t{}\n", probe(p)));
            }
        }
        environment(o, arr(c, "/env"), pod);
        mounts(o, arr(c, "/volumeMounts"));
    }
}

fn state(o: &mut Out, title: &str, state: Option<&Value>) {
    let state = state.unwrap_or(&Value::Null);
    if let Some(r) = state.pointer("/running") {
        o.w(2, &format!("{title}:\tRunning\n"));
        o.w(3, &format!("Started:\t{}\n", timestamp(r, "/startedAt")));
    } else if let Some(t) = state.pointer("/terminated") {
        o.w(2, &format!("{title}:\tTerminated\n"));
        for (label, pointer) in [("Reason", "/reason"), ("Message", "/message")] {
            let v = s(t, pointer);
            if !v.is_empty() {
                o.w(3, &format!("{label}:\t{v}\n"));
            }
        }
        o.w(
            3,
            &format!("Exit Code:\t{}\n", int(t, "/exitCode").unwrap_or(0)),
        );
        if let Some(sig) = int(t, "/signal").filter(|s| *s > 0) {
            o.w(3, &format!("Signal:\t{sig}\n"));
        }
        o.w(3, &format!("Started:\t{}\n", timestamp(t, "/startedAt")));
        o.w(3, &format!("Finished:\t{}\n", timestamp(t, "/finishedAt")));
    } else {
        o.w(2, &format!("{title}:\tWaiting\n"));
        let reason = s(state, "/waiting/reason");
        if !reason.is_empty() {
            o.w(3, &format!("Reason:\t{reason}\n"));
        }
    }
}

/// kubectl's `DescribeProbe`, with the API server's defaults for fields the pod leaves out.
pub fn probe(p: &Value) -> String {
    let attrs = format!(
        "delay={}s timeout={}s period={}s #success={} #failure={}",
        int(p, "/initialDelaySeconds").unwrap_or(0),
        int(p, "/timeoutSeconds").unwrap_or(1),
        int(p, "/periodSeconds").unwrap_or(10),
        int(p, "/successThreshold").unwrap_or(1),
        int(p, "/failureThreshold").unwrap_or(3),
    );
    if let Some(cmd) = p.pointer("/exec/command").and_then(Value::as_array) {
        let words: Vec<String> = cmd.iter().map(|c| scalar(Some(c))).collect();
        return format!("exec [{}] {attrs}", words.join(" "));
    }
    if let Some(h) = p.pointer("/httpGet") {
        let scheme = match s(h, "/scheme") {
            "" => "http".to_string(),
            other => other.to_ascii_lowercase(),
        };
        let port = scalar(h.pointer("/port"));
        let host = s(h, "/host");
        let hostport = if host.contains(':') {
            format!("[{host}]:{port}")
        } else {
            format!("{host}:{port}")
        };
        return format!("http-get {scheme}://{hostport}{} {attrs}", s(h, "/path"));
    }
    if let Some(t) = p.pointer("/tcpSocket") {
        return format!(
            "tcp-socket {}:{} {attrs}",
            s(t, "/host"),
            scalar(t.pointer("/port"))
        );
    }
    if let Some(g) = p.pointer("/grpc") {
        return format!(
            "grpc <pod>:{} {} {attrs}",
            scalar(g.pointer("/port")),
            s(g, "/service")
        );
    }
    format!("unknown {attrs}")
}

fn environment(o: &mut Out, env: &[Value], pod: &PodFields) {
    if env.is_empty() {
        o.w(2, "Environment:\t<none>\n");
        return;
    }
    o.w(2, "Environment:\n");
    for e in env {
        let name = s(e, "/name");
        if let Some(f) = e.pointer("/valueFrom/fieldRef") {
            let api = match s(f, "/apiVersion") {
                "" => "v1",
                other => other,
            };
            let path = s(f, "/fieldPath");
            o.w(
                3,
                &format!("{name}:\t{} ({api}:{path})\n", pod.resolve(path)),
            );
        } else if let Some(r) = e.pointer("/valueFrom/resourceFieldRef") {
            let container = s(r, "/containerName");
            let mut text = format!("{name}:\t{}", s(r, "/resource"));
            if !container.is_empty() {
                let _ = write!(text, " ({container})");
            }
            o.w(3, &format!("{text}\n"));
        } else if e.pointer("/valueFrom").is_some() {
            o.w(
                3,
                &format!("{name}:\t<set from a source peapod cannot read>\n"),
            );
        } else {
            for (i, line) in s(e, "/value").split('\n').enumerate() {
                if i == 0 {
                    o.w(3, &format!("{name}:\t{line}\n"));
                } else {
                    o.w(3, &format!("\t{line}\n"));
                }
            }
        }
    }
}

fn mounts(o: &mut Out, list: &[Value]) {
    if list.is_empty() {
        o.w(2, "Mounts:\t<none>\n");
        return;
    }
    o.w(2, "Mounts:\n");
    let mut sorted: Vec<&Value> = list.iter().collect();
    sorted.sort_by(|a, b| s(a, "/mountPath").cmp(s(b, "/mountPath")));
    for m in sorted {
        let ro = m.pointer("/readOnly").and_then(Value::as_bool) == Some(true);
        let mut flags = vec![if ro {
            "ro".to_string()
        } else {
            "rw".to_string()
        }];
        let sub = s(m, "/subPath");
        if !sub.is_empty() {
            flags.push(format!("path={sub:?}"));
        }
        o.w(
            3,
            &format!(
                "{} from {} ({})\n",
                s(m, "/mountPath"),
                s(m, "/name"),
                flags.join(",")
            ),
        );
    }
}

fn volumes(o: &mut Out, list: &[Value]) {
    if list.is_empty() {
        o.w(0, "Volumes:\t<none>\n");
        return;
    }
    o.w(0, "Volumes:\n");
    for v in list {
        o.w(1, &format!("{}:\n", s(v, "/name")));
        if let Some(h) = v.pointer("/hostPath") {
            let kind = match s(h, "/type") {
                "" => "<none>",
                other => other,
            };
            o.w(2, "Type:\tHostPath (bare host directory volume)\n");
            o.w(2, &format!("Path:\t{}\n", s(h, "/path")));
            o.w(2, &format!("HostPathType:\t{kind}\n"));
        } else if let Some(e) = v.pointer("/emptyDir") {
            let limit = match scalar(e.pointer("/sizeLimit")) {
                l if l.is_empty() || l == "0" => "<unset>".to_string(),
                l => l,
            };
            o.w(
                2,
                "Type:\tEmptyDir (a temporary directory that shares a pod's lifetime)\n",
            );
            o.w(2, &format!("Medium:\t{}\n", s(e, "/medium")));
            o.w(2, &format!("SizeLimit:\t{limit}\n"));
        } else {
            o.w(1, "<unknown>\n");
        }
    }
}

/// The Events table (after the flush), sorted by last timestamp as kubectl sorts them.
fn events_table(events: &[Value], now: i64) -> String {
    let mut sorted: Vec<&Value> = events.iter().collect();
    let last = |e: &Value| {
        e.pointer("/lastTimestamp")
            .and_then(Value::as_str)
            .and_then(time::parse_rfc3339)
    };
    sorted.sort_by_key(|e| last(e));
    let mut o = Out(String::new());
    o.w(0, "Events:\n  Type\tReason\tAge\tFrom\tMessage\n");
    o.w(1, "----\t------\t----\t----\t-------\n");
    for e in sorted {
        let first = e
            .pointer("/eventTime")
            .and_then(Value::as_str)
            .or_else(|| e.pointer("/firstTimestamp").and_then(Value::as_str));
        let first_age = time::age_since(first, now);
        let count = int(e, "/count").unwrap_or(1);
        let interval = if count > 1 {
            format!(
                "{} (x{count} over {first_age})",
                time::age_since(e.pointer("/lastTimestamp").and_then(Value::as_str), now)
            )
        } else {
            first_age
        };
        let source = match s(e, "/source/component") {
            "" => s(e, "/reportingComponent"),
            c => c,
        };
        o.w(
            1,
            &format!(
                "{}\t{}\t{interval}\t{source}\t{}\n",
                s(e, "/type"),
                s(e, "/reason"),
                s(e, "/message").trim()
            ),
        );
    }
    o.0
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn war_pod() -> Value {
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "war", "namespace": "default", "uid": "u-1",
                "creationTimestamp": "2026-11-30T18:30:00Z", "labels": {"app": "war", "tier": "web"}},
            "spec": {
                "nodeName": "node1",
                "initContainers": [{"name": "install", "image": "busybox",
                    "command": ["sh", "-c", "cp /war/app.war /work/"],
                    "volumeMounts": [{"name": "workdir", "mountPath": "/work"}]}],
                "containers": [{"name": "web", "image": "busybox",
                    "ports": [{"containerPort": 8080, "protocol": "TCP"}],
                    "resources": {"limits": {"cpu": "500m", "memory": "64Mi"},
                                  "requests": {"cpu": "250m", "memory": "32Mi"}},
                    "livenessProbe": {"httpGet": {"path": "/", "port": 8080}, "periodSeconds": 5},
                    "readinessProbe": {"exec": {"command": ["cat", "/tmp/ready"]}},
                    "env": [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                            {"name": "MODE", "value": "prod"}],
                    "volumeMounts": [{"name": "workdir", "mountPath": "/www", "readOnly": true},
                                     {"name": "logs", "mountPath": "/logs"}]}],
                "volumes": [{"name": "workdir", "emptyDir": {}},
                            {"name": "logs", "hostPath": {"path": "/var/log/war", "type": "DirectoryOrCreate"}}]
            },
            "status": {
                "phase": "Running", "hostIP": "10.0.0.1", "podIP": "10.88.0.5",
                "podIPs": [{"ip": "10.88.0.5"}], "qosClass": "Burstable",
                "startTime": "2026-11-30T18:30:00Z",
                "conditions": [{"type": "Initialized", "status": "True"},
                               {"type": "Ready", "status": "True"}],
                "initContainerStatuses": [{"name": "install", "containerID": "peapod://i1",
                    "image": "busybox", "imageID": "sha256:aa", "ready": true, "restartCount": 0,
                    "state": {"terminated": {"exitCode": 0, "reason": "Completed",
                        "startedAt": "2026-11-30T18:30:01Z", "finishedAt": "2026-11-30T18:30:02Z"}}}],
                "containerStatuses": [{"name": "web", "containerID": "peapod://w1",
                    "image": "busybox", "imageID": "sha256:aa", "ready": true, "restartCount": 1,
                    "state": {"running": {"startedAt": "2026-11-30T18:31:00Z"}},
                    "lastState": {"terminated": {"exitCode": 137, "reason": "Error",
                        "startedAt": "2026-11-30T18:30:03Z", "finishedAt": "2026-11-30T18:30:59Z"}}}]
            }
        })
    }

    #[test]
    fn describes_the_war_pod_like_kubectl() {
        let events = vec![
            json!({"type": "Normal", "reason": "Scheduled", "message": "Successfully assigned default/war to node1",
                   "count": 1, "firstTimestamp": "2026-11-30T18:30:00Z", "lastTimestamp": "2026-11-30T18:30:00Z",
                   "source": {"component": "default-scheduler"}}),
            json!({"type": "Warning", "reason": "Unhealthy", "message": "Liveness probe failed: ",
                   "count": 3, "firstTimestamp": "2026-11-30T18:30:40Z", "lastTimestamp": "2026-11-30T18:30:50Z",
                   "source": {"component": "kubelet"}}),
        ];
        let now = time::parse_rfc3339("2026-11-30T18:32:00Z").unwrap();
        let text = describe_pod(&war_pod(), &events, now);
        let expected = "\
Name:         war
Namespace:    default
Node:         node1/10.0.0.1
Start Time:   Mon, 30 Nov 2026 18:30:00 +0000
Labels:       app=war
              tier=web
Annotations:  <none>
Status:       Running
IP:           10.88.0.5
IPs:
  IP:  10.88.0.5
Init Containers:
  install:
    Container ID:  peapod://i1
    Image:         busybox
    Image ID:      sha256:aa
    Port:          <none>
    Host Port:     <none>
    Command:
      sh
      -c
      cp /war/app.war /work/
    State:          Terminated
      Reason:       Completed
      Exit Code:    0
      Started:      Mon, 30 Nov 2026 18:30:01 +0000
      Finished:     Mon, 30 Nov 2026 18:30:02 +0000
    Ready:          True
    Restart Count:  0
    Environment:    <none>
    Mounts:
      /work from workdir (rw)
Containers:
  web:
    Container ID:   peapod://w1
    Image:          busybox
    Image ID:       sha256:aa
    Port:           8080/TCP
    Host Port:      <none>
    State:          Running
      Started:      Mon, 30 Nov 2026 18:31:00 +0000
    Last State:     Terminated
      Reason:       Error
      Exit Code:    137
      Started:      Mon, 30 Nov 2026 18:30:03 +0000
      Finished:     Mon, 30 Nov 2026 18:30:59 +0000
    Ready:          True
    Restart Count:  1
    Limits:
      cpu:     500m
      memory:  64Mi
    Requests:
      cpu:      250m
      memory:   32Mi
    Liveness:   http-get http://:8080/ delay=0s timeout=1s period=5s #success=1 #failure=3
    Readiness:  exec [cat /tmp/ready] delay=0s timeout=1s period=10s #success=1 #failure=3
    Environment:
      POD_NAME:  war (v1:metadata.name)
      MODE:      prod
    Mounts:
      /logs from logs (rw)
      /www from workdir (ro)
Conditions:
  Type          Status
  Initialized   True 
  Ready         True 
Volumes:
  workdir:
    Type:       EmptyDir (a temporary directory that shares a pod's lifetime)
    Medium:     
    SizeLimit:  <unset>
  logs:
    Type:          HostPath (bare host directory volume)
    Path:          /var/log/war
    HostPathType:  DirectoryOrCreate
QoS Class:         Burstable
Node-Selectors:    <none>
Tolerations:       <none>
Events:
  Type     Reason     Age                From               Message
  ----     ------     ----               ----               -------
  Normal   Scheduled  2m                 default-scheduler  Successfully assigned default/war to node1
  Warning  Unhealthy  70s (x3 over 80s)  kubelet            Liveness probe failed:
";
        for (i, (got, want)) in text.lines().zip(expected.lines()).enumerate() {
            assert_eq!(got, want, "line {i}:\n{text}");
        }
        assert_eq!(text.lines().count(), expected.lines().count(), "{text}");
    }

    #[test]
    fn probes_render_each_handler() {
        assert_eq!(
            probe(&json!({"tcpSocket": {"port": 80}, "initialDelaySeconds": 3})),
            "tcp-socket :80 delay=3s timeout=1s period=10s #success=1 #failure=3"
        );
        assert_eq!(
            probe(&json!({"grpc": {"port": 9000}})),
            "grpc <pod>:9000  delay=0s timeout=1s period=10s #success=1 #failure=3"
        );
        assert_eq!(
            probe(
                &json!({"httpGet": {"scheme": "HTTPS", "host": "h", "port": "web", "path": "/z"}})
            ),
            "http-get https://h:web/z delay=0s timeout=1s period=10s #success=1 #failure=3"
        );
    }

    #[test]
    fn empty_pod_shows_nones() {
        let text = describe_pod(
            &json!({"metadata": {"name": "x", "namespace": "default"}, "spec": {"containers": []},
                    "status": {"phase": "Failed", "reason": "OutOfcpu", "message": "Node didn't have enough resource: cpu"}}),
            &[],
            0,
        );
        assert!(text.contains("Node:         <none>\n"), "{text}");
        assert!(text.contains("Reason:       OutOfcpu\n"), "{text}");
        assert!(text.contains("IPs:          <none>\n"), "{text}");
        // Aligned with the lines above it, as kubectl does when there are no events.
        assert!(
            text.ends_with("Tolerations:     <none>\nEvents:          <none>\n"),
            "{text}"
        );
    }
}
