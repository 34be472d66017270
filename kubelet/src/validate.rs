//! Validation of a defaulted Pod, with the API server's field paths and wording
//! (`spec.containers[1].name: Duplicate value "web"`). Everything is checked before anything
//! is created.

use crate::quantity;
use k8s_openapi::api::core::v1::{Container, Pod, Probe, Volume};
use std::collections::BTreeSet;

/// All problems found, each `path: message`.
#[derive(Debug, Default)]
pub struct FieldErrors(pub Vec<String>);

impl FieldErrors {
    fn push(&mut self, path: impl std::fmt::Display, msg: impl std::fmt::Display) {
        self.0.push(format!("{path}: {msg}"));
    }
}

const DNS1123_LABEL_MSG: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name', or '123-abc')";
const DNS1123_SUBDOMAIN_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com')";

/// RFC 1123 label: at most 63 of [a-z0-9-], alphanumeric at both ends.
pub fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// RFC 1123 subdomain: dot-separated labels, at most 253 characters.
pub fn is_dns_subdomain(s: &str) -> bool {
    !s.is_empty() && s.len() <= 253 && s.split('.').all(is_dns_label)
}

const UNSUPPORTED_VOLUME: &str =
    "no API server exists here: only emptyDir and hostPath volumes can be used";

fn validate_volume(v: &Volume, path: &str, errs: &mut FieldErrors) {
    if !is_dns_label(&v.name) {
        errs.push(
            format!("{path}.name"),
            format!("Invalid value: {:?}: {DNS1123_LABEL_MSG}", v.name),
        );
    }
    let refused: [(&str, bool); 8] = [
        ("configMap", v.config_map.is_some()),
        ("secret", v.secret.is_some()),
        ("projected", v.projected.is_some()),
        ("persistentVolumeClaim", v.persistent_volume_claim.is_some()),
        ("downwardAPI", v.downward_api.is_some()),
        ("csi", v.csi.is_some()),
        ("ephemeral", v.ephemeral.is_some()),
        ("nfs", v.nfs.is_some()),
    ];
    for (field, set) in refused {
        if set {
            errs.push(
                format!("{path}.{field}"),
                format!("Unsupported value: {UNSUPPORTED_VOLUME}"),
            );
            return;
        }
    }
    if v.empty_dir.is_none() && v.host_path.is_none() {
        errs.push(path, format!("Unsupported value: {UNSUPPORTED_VOLUME}"));
        return;
    }
    if let Some(ed) = &v.empty_dir {
        if let Some(m) = ed.medium.as_deref() {
            if !["", "Memory"].contains(&m) {
                errs.push(
                    format!("{path}.emptyDir.medium"),
                    format!("Unsupported value: {m:?}: supported values: \"\", \"Memory\""),
                );
            }
        }
        if let Some(q) = &ed.size_limit {
            check_quantity(&q.0, &format!("{path}.emptyDir.sizeLimit"), errs);
        }
    }
    if let Some(hp) = &v.host_path {
        if !hp.path.starts_with('/') {
            errs.push(
                format!("{path}.hostPath.path"),
                format!("Invalid value: {:?}: must be an absolute path", hp.path),
            );
        }
        let t = hp.type_.as_deref().unwrap_or("");
        const TYPES: [&str; 7] = [
            "",
            "DirectoryOrCreate",
            "Directory",
            "FileOrCreate",
            "File",
            "Socket",
            "CharDevice",
        ];
        if !TYPES.contains(&t) && t != "BlockDevice" {
            errs.push(
                format!("{path}.hostPath.type"),
                format!("Unsupported value: {t:?}: supported values: \"\", \"BlockDevice\", \"CharDevice\", \"Directory\", \"DirectoryOrCreate\", \"File\", \"FileOrCreate\", \"Socket\""),
            );
        }
    }
}

/// A label or annotation key: an optional DNS-subdomain prefix and `/`, then a name of at
/// most 63 of [A-Za-z0-9._-], alphanumeric at both ends.
fn is_qualified_name(key: &str) -> bool {
    let (prefix, name) = match key.rsplit_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    prefix.is_none_or(is_dns_subdomain) && is_label_value(name) && !name.is_empty()
}

/// A label value: empty, or at most 63 of [A-Za-z0-9._-], alphanumeric at both ends.
fn is_label_value(v: &str) -> bool {
    v.is_empty()
        || (v.len() <= 63
            && v.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
            && v.as_bytes()[0].is_ascii_alphanumeric()
            && v.as_bytes()[v.len() - 1].is_ascii_alphanumeric())
}

/// Resource names: the standard ones, hugepages, or a domain-qualified extended resource.
fn is_resource_name(n: &str) -> bool {
    matches!(n, "cpu" | "memory" | "ephemeral-storage")
        || n.starts_with("hugepages-")
        || (n.contains('/') && is_qualified_name(n))
}

fn check_quantity(q: &str, path: &str, errs: &mut FieldErrors) {
    match quantity::validate(q) {
        Err(e) => errs.push(path, format!("Invalid value: {q:?}: {e}")),
        Ok(()) if quantity::is_negative(q) => errs.push(
            path,
            format!("Invalid value: {q:?}: must be greater than or equal to 0"),
        ),
        Ok(()) => {}
    }
}

fn validate_probe(p: &Probe, path: &str, errs: &mut FieldErrors) {
    let handlers = [
        p.exec.is_some(),
        p.http_get.is_some(),
        p.tcp_socket.is_some(),
        p.grpc.is_some(),
    ]
    .iter()
    .filter(|x| **x)
    .count();
    if handlers == 0 {
        errs.push(path, "Required value: must specify a handler type");
    } else if handlers > 1 {
        errs.push(path, "Forbidden: may not specify more than 1 handler type");
    }
    for (name, v, min) in [
        ("initialDelaySeconds", p.initial_delay_seconds, 0),
        ("timeoutSeconds", p.timeout_seconds, 1),
        ("periodSeconds", p.period_seconds, 1),
        ("successThreshold", p.success_threshold, 1),
        ("failureThreshold", p.failure_threshold, 1),
    ] {
        if let Some(v) = v {
            if v < min {
                errs.push(
                    format!("{path}.{name}"),
                    format!("Invalid value: {v}: must be greater than or equal to {min}"),
                );
            }
        }
    }
    if let Some(e) = &p.exec {
        if e.command.as_ref().is_none_or(|c| c.is_empty()) {
            errs.push(format!("{path}.exec.command"), "Required value");
        }
    }
}

fn validate_container(
    c: &Container,
    path: &str,
    volumes: &BTreeSet<&str>,
    init: bool,
    errs: &mut FieldErrors,
) {
    if c.name.is_empty() {
        errs.push(format!("{path}.name"), "Required value");
    } else if !is_dns_label(&c.name) {
        errs.push(
            format!("{path}.name"),
            format!("Invalid value: {:?}: {DNS1123_LABEL_MSG}", c.name),
        );
    }
    if c.image.as_deref().unwrap_or("").trim().is_empty() {
        errs.push(format!("{path}.image"), "Required value");
    }
    if let Some(p) = c.image_pull_policy.as_deref() {
        if !["Always", "IfNotPresent", "Never"].contains(&p) {
            errs.push(
                format!("{path}.imagePullPolicy"),
                format!("Unsupported value: {p:?}: supported values: \"Always\", \"IfNotPresent\", \"Never\""),
            );
        }
    }
    match (init, c.restart_policy.as_deref()) {
        (_, None) => {}
        (true, Some("Always")) => {}
        (_, Some(p)) => errs.push(
            format!("{path}.restartPolicy"),
            if init {
                format!("Unsupported value: {p:?}: supported values: \"Always\"")
            } else {
                format!("Forbidden: may not be set for non-init containers (got {p:?})")
            },
        ),
    }
    if let Some(r) = &c.resources {
        for (kind, map) in [("requests", &r.requests), ("limits", &r.limits)] {
            for (k, q) in map.iter().flatten() {
                if !is_resource_name(k) {
                    errs.push(
                        format!("{path}.resources.{kind}[{k}]"),
                        format!("Invalid value: {k:?}: must be a standard resource type or fully qualified"),
                    );
                    continue;
                }
                check_quantity(&q.0, &format!("{path}.resources.{kind}[{k}]"), errs);
            }
        }
        if let (Some(req), Some(lim)) = (&r.requests, &r.limits) {
            for (k, rq) in req {
                let Some(lq) = lim.get(k) else { continue };
                let (Ok(rv), Ok(lv)) = (quantity::milli_value(&rq.0), quantity::milli_value(&lq.0))
                else {
                    continue;
                };
                if rv > lv {
                    errs.push(
                        format!("{path}.resources.requests"),
                        format!(
                            "Invalid value: {:?}: must be less than or equal to {k} limit of {}",
                            rq.0, lq.0
                        ),
                    );
                }
            }
        }
    }
    let mut ports = BTreeSet::new();
    for (i, p) in c.ports.iter().flatten().enumerate() {
        let pp = format!("{path}.ports[{i}]");
        if !(1..=65535).contains(&p.container_port) {
            errs.push(
                format!("{pp}.containerPort"),
                format!(
                    "Invalid value: {}: must be between 1 and 65535, inclusive",
                    p.container_port
                ),
            );
        }
        if let Some(h) = p.host_port {
            if !(0..=65535).contains(&h) {
                errs.push(
                    format!("{pp}.hostPort"),
                    format!("Invalid value: {h}: must be between 1 and 65535, inclusive"),
                );
            }
        }
        let proto = p.protocol.as_deref().unwrap_or("TCP");
        if !["TCP", "UDP", "SCTP"].contains(&proto) {
            errs.push(
                format!("{pp}.protocol"),
                format!(
                    "Unsupported value: {proto:?}: supported values: \"SCTP\", \"TCP\", \"UDP\""
                ),
            );
        }
        if let Some(name) = &p.name {
            if !ports.insert(name.clone()) {
                errs.push(format!("{pp}.name"), format!("Duplicate value {name:?}"));
            }
        }
    }
    for (i, m) in c.volume_mounts.iter().flatten().enumerate() {
        let mp = format!("{path}.volumeMounts[{i}]");
        if !volumes.contains(m.name.as_str()) {
            errs.push(format!("{mp}.name"), format!("Not found: {:?}", m.name));
        }
        if m.mount_path.is_empty() {
            errs.push(format!("{mp}.mountPath"), "Required value");
        }
        for (j, o) in m.bind_mount_options.iter().flatten().enumerate() {
            if !crate::cri_config::BIND_MOUNT_OPTIONS.contains(&o.as_str()) {
                errs.push(
                    format!("{mp}.bindMountOptions[{j}]"),
                    format!("Unsupported value: {o:?}: supported values: \"nodev\", \"noexec\", \"nosuid\""),
                );
            }
        }
    }
    if let Some(s) = c.lifecycle.as_ref().and_then(|l| l.stop_signal.as_deref()) {
        if crate::cri_config::stop_signal(s).is_none() {
            errs.push(
                format!("{path}.lifecycle.stopSignal"),
                format!(
                    "Unsupported value: {s:?}: a signal name such as \"SIGTERM\" or \"SIGRTMIN+1\""
                ),
            );
        }
    }
    for (i, e) in c.env.iter().flatten().enumerate() {
        let ep = format!("{path}.env[{i}]");
        if e.name.is_empty() {
            errs.push(format!("{ep}.name"), "Required value");
        }
        if let Some(vf) = &e.value_from {
            match &vf.field_ref {
                Some(f) => {
                    let ok = matches!(
                        f.field_path.as_str(),
                        "metadata.name"
                            | "metadata.namespace"
                            | "metadata.uid"
                            | "status.podIP"
                            | "status.podIPs"
                            | "status.hostIP"
                            | "spec.nodeName"
                            | "spec.serviceAccountName"
                    ) || f.field_path.starts_with("metadata.labels['")
                        || f.field_path.starts_with("metadata.annotations['");
                    if !ok {
                        errs.push(
                            format!("{ep}.valueFrom.fieldRef.fieldPath"),
                            format!("Unsupported value: {:?}", f.field_path),
                        );
                    }
                }
                None => errs.push(
                    format!("{ep}.valueFrom"),
                    "Unsupported value: no API server exists here: only fieldRef can be used",
                ),
            }
        }
    }
    if c.env_from.as_ref().is_some_and(|v| !v.is_empty()) {
        errs.push(
            format!("{path}.envFrom"),
            "Unsupported value: no API server exists here: configMaps and secrets cannot be used",
        );
    }
    for (name, p) in [
        ("livenessProbe", &c.liveness_probe),
        ("readinessProbe", &c.readiness_probe),
        ("startupProbe", &c.startup_probe),
    ] {
        if let Some(p) = p {
            let restartable = c.restart_policy.as_deref() == Some("Always");
            if init && !restartable {
                errs.push(
                    format!("{path}.{name}"),
                    "Forbidden: may not be set for init containers without restartPolicy=Always",
                );
                continue;
            }
            validate_probe(p, &format!("{path}.{name}"), errs);
            if name != "readinessProbe" && p.success_threshold.unwrap_or(1) != 1 {
                errs.push(
                    format!("{path}.{name}.successThreshold"),
                    "Invalid value: must be 1",
                );
            }
        }
    }
}

/// Checks a defaulted pod. Err holds every problem.
pub fn validate_pod(pod: &Pod) -> Result<(), FieldErrors> {
    let mut errs = FieldErrors::default();
    let name = pod.metadata.name.as_deref().unwrap_or("");
    if name.is_empty() {
        errs.push("metadata.name", "Required value: name is required");
    } else if !is_dns_subdomain(name) {
        errs.push(
            "metadata.name",
            format!("Invalid value: {name:?}: {DNS1123_SUBDOMAIN_MSG}"),
        );
    }
    let ns = pod.metadata.namespace.as_deref().unwrap_or("");
    if !is_dns_label(ns) {
        errs.push(
            "metadata.namespace",
            format!("Invalid value: {ns:?}: {DNS1123_LABEL_MSG}"),
        );
    }
    for (k, v) in pod.metadata.labels.iter().flatten() {
        if !is_qualified_name(k) {
            errs.push("metadata.labels", format!("Invalid value: {k:?}: name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character"));
        } else if !is_label_value(v) {
            errs.push("metadata.labels", format!("Invalid value: {v:?}: a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character"));
        }
    }
    for k in pod.metadata.annotations.iter().flatten().map(|(k, _)| k) {
        if !is_qualified_name(k) {
            errs.push("metadata.annotations", format!("Invalid value: {k:?}: name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character"));
        }
    }
    let Some(spec) = &pod.spec else {
        errs.push("spec", "Required value");
        return Err(errs);
    };
    if spec.containers.is_empty() {
        errs.push("spec.containers", "Required value");
    }
    if let Some(p) = spec.restart_policy.as_deref() {
        if !["Always", "OnFailure", "Never"].contains(&p) {
            errs.push(
                "spec.restartPolicy",
                format!("Unsupported value: {p:?}: supported values: \"Always\", \"OnFailure\", \"Never\""),
            );
        }
    }
    if let Some(g) = spec.termination_grace_period_seconds {
        if g < 0 {
            errs.push(
                "spec.terminationGracePeriodSeconds",
                format!("Invalid value: {g}: must be greater than or equal to 0"),
            );
        }
    }
    if let Some(d) = spec.active_deadline_seconds {
        if !(1..=i64::from(i32::MAX)).contains(&d) {
            errs.push(
                "spec.activeDeadlineSeconds",
                format!("Invalid value: {d}: must be between 1 and 2147483647, inclusive"),
            );
        }
    }
    if let Some(h) = spec.hostname.as_deref() {
        if !is_dns_label(h) {
            errs.push(
                "spec.hostname",
                format!("Invalid value: {h:?}: {DNS1123_LABEL_MSG}"),
            );
        }
    }
    let mut vol_names = BTreeSet::new();
    for (i, v) in spec.volumes.iter().flatten().enumerate() {
        let path = format!("spec.volumes[{i}]");
        if !vol_names.insert(v.name.as_str()) {
            errs.push(
                format!("{path}.name"),
                format!("Duplicate value {:?}", v.name),
            );
        }
        validate_volume(v, &path, &mut errs);
    }
    let mut names = BTreeSet::new();
    let inits = spec
        .init_containers
        .iter()
        .flatten()
        .map(|c| (c, true, "initContainers"));
    let apps = spec.containers.iter().map(|c| (c, false, "containers"));
    let mut index = std::collections::BTreeMap::<&str, usize>::new();
    for (c, init, list) in inits.chain(apps) {
        let i = index.entry(list).or_insert(0);
        let path = format!("spec.{list}[{i}]");
        *i += 1;
        if !c.name.is_empty() && !names.insert(c.name.as_str()) {
            errs.push(
                format!("{path}.name"),
                format!("Duplicate value {:?}", c.name),
            );
        }
        validate_container(c, &path, &vol_names, init, &mut errs);
    }
    if let Some(o) = &spec.overhead {
        for (k, q) in o {
            check_quantity(&q.0, &format!("spec.overhead[{k}]"), &mut errs);
        }
    }
    if errs.0.is_empty() {
        Ok(())
    } else {
        Err(errs)
    }
}

/// The API server's wording for a refused pod: `Pod "web" is invalid: <errors>`.
pub fn invalid_message(name: &str, errs: &FieldErrors) -> String {
    if errs.0.len() == 1 {
        format!("Pod {name:?} is invalid: {}", errs.0[0])
    } else {
        format!("Pod {name:?} is invalid: [{}]", errs.0.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::defaults::apply_defaults;

    fn pod(spec: serde_json::Value) -> Pod {
        let mut p: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p"}, "spec": spec
        }))
        .unwrap();
        apply_defaults(&mut p, "default");
        p
    }

    fn errors(spec: serde_json::Value) -> Vec<String> {
        validate_pod(&pod(spec))
            .err()
            .map(|e| e.0)
            .unwrap_or_default()
    }

    #[test]
    fn a_good_pod_passes() {
        assert!(errors(serde_json::json!({
            "initContainers": [{"name": "init", "image": "x:1", "volumeMounts": [{"name": "w", "mountPath": "/w"}]}],
            "containers": [{"name": "web", "image": "x:1",
                "resources": {"requests": {"cpu": "250m", "memory": "64Mi"}, "limits": {"cpu": "1", "memory": "128Mi"}},
                "readinessProbe": {"tcpSocket": {"port": 80}}}],
            "volumes": [{"name": "w", "emptyDir": {}}]
        }))
        .is_empty());
    }

    #[test]
    fn each_problem_names_its_field() {
        let cases = [
            (serde_json::json!({"containers": [{"name": "web", "image": "x"}, {"name": "web", "image": "y"}]}),
             "spec.containers[1].name: Duplicate value \"web\""),
            (serde_json::json!({"initContainers": [{"name": "web", "image": "x"}], "containers": [{"name": "web", "image": "y"}]}),
             "spec.containers[0].name: Duplicate value \"web\""),
            (serde_json::json!({"containers": [{"name": "web"}]}), "spec.containers[0].image: Required value"),
            (serde_json::json!({"containers": [{"name": "Web_1", "image": "x"}]}), "spec.containers[0].name: Invalid value: \"Web_1\""),
            (serde_json::json!({"containers": [{"name": "w", "image": "x", "resources": {"limits": {"cpu": "abc"}}}]}),
             "spec.containers[0].resources.limits[cpu]: Invalid value: \"abc\""),
            (serde_json::json!({"containers": [{"name": "w", "image": "x", "resources": {"requests": {"cpu": "2"}, "limits": {"cpu": "1"}}}]}),
             "spec.containers[0].resources.requests: Invalid value: \"2\": must be less than or equal to cpu limit of 1"),
            (serde_json::json!({"containers": []}), "spec.containers: Required value"),
            (serde_json::json!({"containers": [{"name": "w", "image": "x"}], "volumes": [{"name": "c", "configMap": {"name": "x"}}]}),
             "spec.volumes[0].configMap: Unsupported value: no API server exists here"),
            (serde_json::json!({"containers": [{"name": "w", "image": "x"}], "volumes": [{"name": "c", "persistentVolumeClaim": {"claimName": "x"}}]}),
             "spec.volumes[0].persistentVolumeClaim: Unsupported value: no API server exists here"),
            (serde_json::json!({"containers": [{"name": "w", "image": "x", "volumeMounts": [{"name": "nope", "mountPath": "/x"}]}]}),
             "spec.containers[0].volumeMounts[0].name: Not found: \"nope\""),
            (serde_json::json!({"activeDeadlineSeconds": 0, "containers": [{"name": "w", "image": "x"}]}),
             "spec.activeDeadlineSeconds: Invalid value: 0"),
            (serde_json::json!({"restartPolicy": "Sometimes", "containers": [{"name": "w", "image": "x"}]}),
             "spec.restartPolicy: Unsupported value: \"Sometimes\""),
            (serde_json::json!({"containers": [{"name": "w", "image": "x", "livenessProbe": {"periodSeconds": 1}}]}),
             "spec.containers[0].livenessProbe: Required value: must specify a handler type"),
            (serde_json::json!({"containers": [{"name": "w", "image": "x", "resources": {"limits": {"cpus": "1"}}}]}),
             "spec.containers[0].resources.limits[cpus]: Invalid value: \"cpus\": must be a standard resource type"),
            (serde_json::json!({"containers": [{"name": "w", "image": "x", "ports": [{"containerPort": 70000}]}]}),
             "spec.containers[0].ports[0].containerPort: Invalid value: 70000"),
            (serde_json::json!({"containers": [{"name": "w", "image": "x", "lifecycle": {"stopSignal": "TERM"}}]}),
             "spec.containers[0].lifecycle.stopSignal: Unsupported value: \"TERM\""),
            (serde_json::json!({"containers": [{"name": "w", "image": "x", "volumeMounts": [{"name": "v", "mountPath": "/v", "bindMountOptions": ["noexec", "exec"]}]}],
                                "volumes": [{"name": "v", "emptyDir": {}}]}),
             "spec.containers[0].volumeMounts[0].bindMountOptions[1]: Unsupported value: \"exec\""),
        ];
        for (spec, want) in cases {
            let got = errors(spec.clone());
            assert!(
                got.iter().any(|e| e.starts_with(want)),
                "{spec}: want {want}, got {got:?}"
            );
        }
    }

    #[test]
    fn names_must_be_dns() {
        let mut p = pod(serde_json::json!({"containers": [{"name": "w", "image": "x"}]}));
        p.metadata.name = Some("Bad_Name".into());
        let e = validate_pod(&p).unwrap_err();
        assert!(
            e.0[0].starts_with("metadata.name: Invalid value: \"Bad_Name\""),
            "{e:?}"
        );
        assert!(invalid_message("Bad_Name", &e)
            .starts_with("Pod \"Bad_Name\" is invalid: metadata.name"));
        assert!(is_dns_label("a-1") && !is_dns_label("-a") && !is_dns_label("a.b"));
        assert!(is_qualified_name("app") && is_qualified_name("example.com/app-1"));
        assert!(
            !is_qualified_name("-app")
                && !is_qualified_name("Bad_Domain/x")
                && !is_qualified_name("a/")
        );
        assert!(is_label_value("") && is_label_value("v1.2_x") && !is_label_value("a b"));
        p.metadata.name = Some("ok".into());
        p.metadata.labels = Some([("app".to_string(), "bad value".to_string())].into());
        let e = validate_pod(&p).unwrap_err();
        assert!(
            e.0[0].starts_with("metadata.labels: Invalid value: \"bad value\""),
            "{e:?}"
        );
        assert!(is_dns_subdomain("a.b-c") && !is_dns_subdomain("a..b"));
    }
}
