//! Container environment: `value` with `$(VAR)` references expanded as the kubelet does, and
//! `valueFrom.fieldRef` (the downward API fields a single node can answer).

use k8s_openapi::api::core::v1::{Container, Pod};
use std::collections::BTreeMap;

/// What fieldRefs resolve against.
pub struct PodFacts<'a> {
    pub pod: &'a Pod,
    pub pod_ip: &'a str,
    pub host_ip: &'a str,
    pub node_name: &'a str,
}

fn field(facts: &PodFacts<'_>, path: &str) -> String {
    let md = &facts.pod.metadata;
    let lookup = |map: &Option<BTreeMap<String, String>>, prefix: &str| -> String {
        let key = path
            .strip_prefix(prefix)
            .and_then(|s| s.strip_suffix("']"))
            .unwrap_or("");
        map.as_ref()
            .and_then(|m| m.get(key))
            .cloned()
            .unwrap_or_default()
    };
    match path {
        "metadata.name" => md.name.clone().unwrap_or_default(),
        "metadata.namespace" => md.namespace.clone().unwrap_or_default(),
        "metadata.uid" => md.uid.clone().unwrap_or_default(),
        "status.podIP" | "status.podIPs" => facts.pod_ip.to_string(),
        "status.hostIP" | "status.hostIPs" => facts.host_ip.to_string(),
        "spec.nodeName" => facts.node_name.to_string(),
        "spec.serviceAccountName" => facts
            .pod
            .spec
            .as_ref()
            .and_then(|s| s.service_account_name.clone())
            .unwrap_or_else(|| "default".into()),
        p if p.starts_with("metadata.labels['") => lookup(&md.labels, "metadata.labels['"),
        p if p.starts_with("metadata.annotations['") => {
            lookup(&md.annotations, "metadata.annotations['")
        }
        _ => String::new(),
    }
}

/// Expands `$(NAME)` from `vars`; `$$` is a literal `$`; unknown references stay as written.
pub fn expand(s: &str, vars: &BTreeMap<String, String>) -> String {
    let mut out = String::with_capacity(s.len());
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'$' && i + 1 < b.len() {
            if b[i + 1] == b'$' {
                out.push('$');
                i += 2;
                continue;
            }
            if b[i + 1] == b'(' {
                if let Some(end) = s[i + 2..].find(')') {
                    let name = &s[i + 2..i + 2 + end];
                    match vars.get(name) {
                        Some(v) => out.push_str(v),
                        None => out.push_str(&s[i..i + 3 + end]),
                    }
                    i += 3 + end;
                    continue;
                }
            }
        }
        let ch = s[i..].chars().next().unwrap_or('\u{fffd}');
        out.push(ch);
        i += ch.len_utf8();
    }
    out
}

/// The container's environment in order, references resolved.
pub fn container_env(c: &Container, facts: &PodFacts<'_>) -> Vec<(String, String)> {
    let mut vars = BTreeMap::new();
    let mut out: Vec<(String, String)> = Vec::new();
    for e in c.env.iter().flatten() {
        let value = if let Some(f) = e.value_from.as_ref().and_then(|v| v.field_ref.as_ref()) {
            field(facts, &f.field_path)
        } else {
            expand(e.value.as_deref().unwrap_or(""), &vars)
        };
        vars.insert(e.name.clone(), value.clone());
        out.retain(|(k, _)| k != &e.name);
        out.push((e.name.clone(), value));
    }
    out
}

/// Command and args with `$(VAR)` expanded from the container's environment.
pub fn expand_all(list: Option<&Vec<String>>, env: &[(String, String)]) -> Vec<String> {
    let vars: BTreeMap<String, String> = env.iter().cloned().collect();
    list.into_iter()
        .flatten()
        .map(|s| expand(s, &vars))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expansion() {
        let vars: BTreeMap<String, String> = [("A".to_string(), "x".to_string())].into();
        assert_eq!(expand("$(A)-$(B)-$$(A)-$", &vars), "x-$(B)-$(A)-$");
        assert_eq!(expand("é$(A)", &vars), "éx");
    }

    #[test]
    fn field_refs_and_values() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "u", "labels": {"app": "web"}},
            "spec": {"containers": [{"name": "c", "env": [
                {"name": "NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                {"name": "APP", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}}},
                {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                {"name": "GREETING", "value": "hi $(NAME) on $(NODE)"}
            ]}]}
        }))
        .unwrap();
        let facts = PodFacts {
            pod: &pod,
            pod_ip: "10.0.0.5",
            host_ip: "1.2.3.4",
            node_name: "n1",
        };
        let c = &pod.spec.as_ref().unwrap().containers[0];
        let env = container_env(c, &facts);
        let m: BTreeMap<_, _> = env.iter().cloned().collect();
        assert_eq!(m["NAME"], "p");
        assert_eq!(m["APP"], "web");
        assert_eq!(m["IP"], "10.0.0.5");
        assert_eq!(m["GREETING"], "hi p on n1");
        assert_eq!(
            expand_all(Some(&vec!["echo $(APP)".into()]), &env),
            vec!["echo web"]
        );
    }
}
