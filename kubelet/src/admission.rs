//! Admission as the kubelet does it (lifecycle predicate admit handler): the pod's effective
//! requests must fit the node's allocatable less what admitted pods requested, and its
//! nodeSelector must match the node's labels. A refusal fails the pod and creates nothing.

use crate::resources::{pod_requests, Amounts};
use k8s_openapi::api::core::v1::PodSpec;
use std::collections::BTreeMap;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    /// The pod's status.reason: `OutOfcpu`, `OutOfmemory`, `NodeAffinity`.
    pub reason: String,
    pub message: String,
}

/// `allocatable` less `used` must hold the pod's requests; the node's labels must hold its
/// nodeSelector.
pub fn admit(
    spec: &PodSpec,
    allocatable: Amounts,
    used: Amounts,
    node_labels: &BTreeMap<String, String>,
) -> Result<(), Rejection> {
    if let Some(sel) = &spec.node_selector {
        for (k, v) in sel {
            if node_labels.get(k) != Some(v) {
                return Err(Rejection {
                    reason: "NodeAffinity".into(),
                    message: format!(
                        "Pod was rejected: Predicate NodeAffinity failed: node(s) didn't match Pod's node affinity/selector ({k}={v})"
                    ),
                });
            }
        }
    }
    if !node_affinity_matches(spec, node_labels) {
        return Err(Rejection {
            reason: "NodeAffinity".into(),
            message: "Pod was rejected: Predicate NodeAffinity failed: node(s) didn't match Pod's node affinity/selector".into(),
        });
    }
    let want = pod_requests(spec);
    for (name, requested, used, capacity) in [
        ("cpu", want.cpu_milli, used.cpu_milli, allocatable.cpu_milli),
        ("memory", want.memory, used.memory, allocatable.memory),
    ] {
        if requested > 0 && requested + used > capacity {
            return Err(Rejection {
                reason: format!("OutOf{name}"),
                message: format!(
                    "Pod was rejected: Node didn't have enough resource: {name}, requested: {requested}, used: {used}, capacity: {capacity}"
                ),
            });
        }
    }
    Ok(())
}

/// requiredDuringSchedulingIgnoredDuringExecution: any term whose every expression holds
/// (matchFields can only name metadata.name, this node).
fn node_affinity_matches(spec: &PodSpec, labels: &BTreeMap<String, String>) -> bool {
    let Some(req) = spec
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|n| {
            n.required_during_scheduling_ignored_during_execution
                .as_ref()
        })
    else {
        return true;
    };
    let node_name = labels
        .get("kubernetes.io/hostname")
        .cloned()
        .unwrap_or_default();
    let fields = BTreeMap::from([("metadata.name".to_string(), node_name)]);
    req.node_selector_terms.iter().any(|t| {
        let exprs = t.match_expressions.iter().flatten().map(|e| (e, labels));
        let field_exprs = t.match_fields.iter().flatten().map(|e| (e, &fields));
        let mut all = exprs.chain(field_exprs).peekable();
        // An empty term matches nothing, as in the scheduler.
        all.peek().is_some() && all.all(|(e, l)| requirement_holds(e, l))
    })
}

fn requirement_holds(
    e: &k8s_openapi::api::core::v1::NodeSelectorRequirement,
    labels: &BTreeMap<String, String>,
) -> bool {
    let value = labels.get(&e.key);
    let values = e.values.clone().unwrap_or_default();
    let number = |s: &str| s.parse::<i64>().ok();
    match e.operator.as_str() {
        "In" => value.is_some_and(|v| values.contains(v)),
        "NotIn" => value.is_none_or(|v| !values.contains(v)),
        "Exists" => value.is_some(),
        "DoesNotExist" => value.is_none(),
        "Gt" | "Lt" => {
            let (Some(v), Some(limit)) = (
                value.and_then(|v| number(v)),
                values.first().and_then(|v| number(v)),
            ) else {
                return false;
            };
            if e.operator == "Gt" {
                v > limit
            } else {
                v < limit
            }
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec(cpu: &str, mem: &str, selector: serde_json::Value) -> PodSpec {
        serde_json::from_value(json!({
            "nodeSelector": selector,
            "containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": cpu, "memory": mem}}}]
        }))
        .unwrap()
    }

    #[test]
    fn admission_by_resources_and_labels() {
        let alloc = Amounts {
            cpu_milli: 2000,
            memory: 1 << 30,
        };
        let labels: BTreeMap<String, String> = [("disk".to_string(), "ssd".to_string())].into();
        assert!(admit(
            &spec("1", "100Mi", json!({})),
            alloc,
            Amounts::default(),
            &labels
        )
        .is_ok());
        let e = admit(
            &spec("3", "100Mi", json!({})),
            alloc,
            Amounts::default(),
            &labels,
        )
        .unwrap_err();
        assert_eq!(e.reason, "OutOfcpu");
        assert!(
            e.message
                .contains("requested: 3000, used: 0, capacity: 2000"),
            "{}",
            e.message
        );
        let e = admit(
            &spec("1", "100Mi", json!({})),
            alloc,
            Amounts {
                cpu_milli: 1500,
                memory: 0,
            },
            &labels,
        )
        .unwrap_err();
        assert_eq!(e.reason, "OutOfcpu");
        let e = admit(
            &spec("1", "2Gi", json!({})),
            alloc,
            Amounts::default(),
            &labels,
        )
        .unwrap_err();
        assert_eq!(e.reason, "OutOfmemory");
        assert!(admit(
            &spec("1", "1Mi", json!({"disk": "ssd"})),
            alloc,
            Amounts::default(),
            &labels
        )
        .is_ok());
        let e = admit(
            &spec("1", "1Mi", json!({"disk": "hdd"})),
            alloc,
            Amounts::default(),
            &labels,
        )
        .unwrap_err();
        assert_eq!(e.reason, "NodeAffinity");
    }
}

#[cfg(test)]
mod affinity_tests {
    use super::*;
    use serde_json::json;

    fn admits(affinity: serde_json::Value) -> bool {
        let spec: PodSpec = serde_json::from_value(json!({
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": affinity}},
            "containers": [{"name": "c", "image": "x"}]
        }))
        .unwrap();
        let labels: BTreeMap<String, String> = [
            ("kubernetes.io/hostname".to_string(), "n1".to_string()),
            ("zone".to_string(), "a".to_string()),
            ("cores".to_string(), "8".to_string()),
        ]
        .into();
        let alloc = Amounts {
            cpu_milli: 1000,
            memory: 1 << 30,
        };
        admit(&spec, alloc, Amounts::default(), &labels).is_ok()
    }

    fn term(exprs: serde_json::Value) -> serde_json::Value {
        json!({"nodeSelectorTerms": [{"matchExpressions": exprs}]})
    }

    #[test]
    fn required_node_affinity() {
        assert!(admits(term(
            json!([{"key": "zone", "operator": "In", "values": ["a", "b"]}])
        )));
        assert!(!admits(term(
            json!([{"key": "zone", "operator": "In", "values": ["b"]}])
        )));
        assert!(admits(term(
            json!([{"key": "zone", "operator": "NotIn", "values": ["b"]}])
        )));
        assert!(admits(term(
            json!([{"key": "gpu", "operator": "DoesNotExist"}])
        )));
        assert!(!admits(term(json!([{"key": "gpu", "operator": "Exists"}]))));
        assert!(admits(term(
            json!([{"key": "cores", "operator": "Gt", "values": ["4"]}])
        )));
        assert!(!admits(term(
            json!([{"key": "cores", "operator": "Lt", "values": ["4"]}])
        )));
        // Terms are ORed, expressions ANDed.
        assert!(admits(json!({"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["z"]}]},
            {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}, {"key": "cores", "operator": "Exists"}]}
        ]})));
        assert!(admits(
            json!({"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]})
        ));
        assert!(!admits(
            json!({"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n2"]}]}]})
        ));
    }
}
