//! Defaulting as the API server does it on create (pkg/apis/core/v1/defaults.go), for the
//! fields the supervisor and `get -o yaml` show.

use k8s_openapi::api::core::v1::{Container, Pod, Probe};

/// The pull policy the API server gives a container that names none: Always for `:latest` or
/// an untagged image, else IfNotPresent.
pub fn default_pull_policy(image: &str) -> &'static str {
    if image.contains('@') {
        return "IfNotPresent";
    }
    // The tag is after the last ':' that follows the last '/' (a registry port is not a tag).
    let last = image.rsplit('/').next().unwrap_or(image);
    match last.rsplit_once(':') {
        Some((_, "latest")) | None => "Always",
        Some(_) => "IfNotPresent",
    }
}

fn default_probe(p: &mut Probe) {
    p.timeout_seconds.get_or_insert(1);
    p.period_seconds.get_or_insert(10);
    p.success_threshold.get_or_insert(1);
    p.failure_threshold.get_or_insert(3);
    p.initial_delay_seconds.get_or_insert(0);
    if let Some(h) = &mut p.http_get {
        h.scheme.get_or_insert_with(|| "HTTP".into());
        h.path.get_or_insert_with(|| "/".into());
    }
}

fn default_container(c: &mut Container) {
    if c.image_pull_policy.is_none() {
        c.image_pull_policy = Some(default_pull_policy(c.image.as_deref().unwrap_or("")).into());
    }
    c.termination_message_path
        .get_or_insert_with(|| "/dev/termination-log".into());
    c.termination_message_policy
        .get_or_insert_with(|| "File".into());
    for port in c.ports.iter_mut().flatten() {
        port.protocol.get_or_insert_with(|| "TCP".into());
    }
    for p in [
        &mut c.liveness_probe,
        &mut c.readiness_probe,
        &mut c.startup_probe,
    ]
    .into_iter()
    .flatten()
    {
        default_probe(p);
    }
    if let Some(lc) = &mut c.lifecycle {
        for h in [&mut lc.pre_stop, &mut lc.post_start].into_iter().flatten() {
            if let Some(g) = &mut h.http_get {
                g.scheme.get_or_insert_with(|| "HTTP".into());
                g.path.get_or_insert_with(|| "/".into());
            }
        }
    }
    // A limit with no request makes the request equal to the limit.
    if let Some(r) = &mut c.resources {
        if let Some(limits) = &r.limits {
            let requests = r.requests.get_or_insert_with(Default::default);
            for (k, v) in limits {
                requests.entry(k.clone()).or_insert_with(|| v.clone());
            }
        }
    }
}

/// Fills in what the API server would, and the namespace when the manifest names none.
pub fn apply_defaults(pod: &mut Pod, namespace: &str) {
    if pod.metadata.namespace.as_deref().unwrap_or("").is_empty() {
        pod.metadata.namespace = Some(namespace.to_string());
    }
    let Some(spec) = &mut pod.spec else {
        return;
    };
    spec.restart_policy.get_or_insert_with(|| "Always".into());
    spec.termination_grace_period_seconds.get_or_insert(30);
    spec.dns_policy.get_or_insert_with(|| "ClusterFirst".into());
    spec.scheduler_name
        .get_or_insert_with(|| "default-scheduler".into());
    spec.security_context.get_or_insert_with(Default::default);
    spec.enable_service_links.get_or_insert(true);
    spec.preemption_policy
        .get_or_insert_with(|| "PreemptLowerPriority".into());
    spec.priority.get_or_insert(0);
    for c in spec.containers.iter_mut() {
        default_container(c);
    }
    for c in spec.init_containers.iter_mut().flatten() {
        default_container(c);
    }
    for v in spec.volumes.iter_mut().flatten() {
        if let Some(hp) = &mut v.host_path {
            hp.type_.get_or_insert_with(String::new);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pull_policy_follows_the_tag() {
        assert_eq!(default_pull_policy("busybox"), "Always");
        assert_eq!(default_pull_policy("busybox:latest"), "Always");
        assert_eq!(default_pull_policy("busybox:1.36"), "IfNotPresent");
        assert_eq!(default_pull_policy("127.0.0.1:5000/busybox"), "Always");
        assert_eq!(
            default_pull_policy("127.0.0.1:5000/busybox:1"),
            "IfNotPresent"
        );
        assert_eq!(default_pull_policy("busybox@sha256:abc"), "IfNotPresent");
    }

    #[test]
    fn pod_defaults() {
        let mut pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p"},
            "spec": {"containers": [{"name": "c", "image": "x:1",
                "resources": {"limits": {"cpu": "1"}},
                "livenessProbe": {"httpGet": {"port": 80}}}]}
        }))
        .unwrap();
        apply_defaults(&mut pod, "ns1");
        assert_eq!(pod.metadata.namespace.as_deref(), Some("ns1"));
        let spec = pod.spec.unwrap();
        assert_eq!(spec.restart_policy.as_deref(), Some("Always"));
        assert_eq!(spec.termination_grace_period_seconds, Some(30));
        let c = &spec.containers[0];
        assert_eq!(c.image_pull_policy.as_deref(), Some("IfNotPresent"));
        let r = c.resources.as_ref().unwrap();
        assert_eq!(r.requests.as_ref().unwrap()["cpu"].0, "1");
        let p = c.liveness_probe.as_ref().unwrap();
        assert_eq!(
            (p.period_seconds, p.timeout_seconds, p.failure_threshold),
            (Some(10), Some(1), Some(3))
        );
        assert_eq!(p.http_get.as_ref().unwrap().path.as_deref(), Some("/"));
    }
}
