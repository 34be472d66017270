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
