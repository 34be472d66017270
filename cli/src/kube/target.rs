//! Which pod and which of its containers a verb (`logs`, `exec`) acts on, as kubectl picks
//! them, with the CRI ids from the pod's status.

use super::json::s;
use super::{parse_pod, Clients, KubeError};
use peapod_proto::pods as api;
use serde_json::Value;

/// A container of a pod picked by name, with the CRI ids kubectl reads logs and execs through.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Picked {
    pub name: String,
    /// The current instance (None while it waits to be created).
    pub container_id: Option<String>,
    /// The instance before the last restart.
    pub previous_id: Option<String>,
    /// Why it is not running, when it waits.
    pub waiting_reason: Option<String>,
}

fn names(pod: &Value, pointer: &str) -> Vec<String> {
    pod.pointer(pointer)
        .and_then(Value::as_array)
        .map(|cs| cs.iter().map(|c| s(c, "/name").to_string()).collect())
        .unwrap_or_default()
}

/// `peapod://ID` (any scheme) to `ID`.
fn cri_id(container_id: &str) -> Option<String> {
    let id = container_id
        .split_once("://")
        .map(|(_, id)| id)
        .unwrap_or(container_id);
    (!id.is_empty()).then(|| id.to_string())
}

/// How a verb picks a container when none is named.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DefaultContainer {
    /// `logs`: only when the pod has exactly one app container.
    OnlyOne,
    /// `exec`: kubectl's default-container annotation, else the first app container, with a
    /// notice (returned alongside) naming the others.
    First,
}

/// Picks the container `requested` (or the default) of `pod`; the notice, if any, is what
/// kubectl prints to stderr about the choice.
pub fn pick(
    pod: &Value,
    requested: Option<&str>,
    default: DefaultContainer,
) -> Result<(Picked, Option<String>), KubeError> {
    let pod_name = s(pod, "/metadata/name");
    let apps = names(pod, "/spec/containers");
    let inits = names(pod, "/spec/initContainers");
    let mut notice = None;
    let name = match requested {
        Some(n) if apps.iter().chain(&inits).any(|c| c == n) => n.to_string(),
        Some(n) => {
            return Err(KubeError::Usage(format!(
                "container {n} is not valid for pod {pod_name}"
            )))
        }
        None if apps.len() == 1 => apps[0].clone(),
        None if apps.is_empty() => {
            return Err(KubeError::Usage(format!(
                "pod {pod_name} has no containers"
            )))
        }
        None => match default {
            DefaultContainer::OnlyOne => {
                let mut msg = format!(
                    "a container name must be specified for pod {pod_name}, choose one of: [{}]",
                    apps.join(" ")
                );
                if !inits.is_empty() {
                    msg.push_str(&format!(
                        " or one of the init containers: [{}]",
                        inits.join(" ")
                    ));
                }
                return Err(KubeError::Usage(msg));
            }
            DefaultContainer::First => {
                let annotated = s(
                    pod,
                    "/metadata/annotations/kubectl.kubernetes.io~1default-container",
                );
                let chosen = if apps.iter().any(|a| a == annotated) {
                    annotated.to_string()
                } else {
                    apps[0].clone()
                };
                let all: Vec<String> = apps
                    .iter()
                    .cloned()
                    .chain(inits.iter().map(|i| format!("{i} (init)")))
                    .collect();
                notice = Some(format!(
                    "Defaulted container \"{chosen}\" out of: {}",
                    all.join(", ")
                ));
                chosen
            }
        },
    };
    let status = ["/status/containerStatuses", "/status/initContainerStatuses"]
        .iter()
        .filter_map(|p| pod.pointer(p).and_then(Value::as_array))
        .flatten()
        .find(|st| s(st, "/name") == name);
    let picked = Picked {
        name,
        container_id: status.and_then(|st| cri_id(s(st, "/containerID"))),
        previous_id: status.and_then(|st| cri_id(s(st, "/lastState/terminated/containerID"))),
        waiting_reason: status
            .map(|st| s(st, "/state/waiting/reason").to_string())
            .filter(|r| !r.is_empty()),
    };
    Ok((picked, notice))
}

/// Gets the pod or kubectl's NotFound error.
pub async fn get_pod(c: &mut Clients, namespace: &str, name: &str) -> anyhow::Result<Value> {
    let r = c
        .pods
        .get(api::GetRequest {
            namespace: namespace.to_string(),
            name: name.to_string(),
        })
        .await
        .map_err(|s| KubeError::from_status(s, name))?;
    parse_pod(&r.into_inner().pod_json)
}

/// `pod/NAME` or `NAME`.
pub fn pod_name(arg: &str) -> Result<&str, KubeError> {
    match arg.split_once('/') {
        Some((kind, name)) => {
            super::check_resource(kind)?;
            Ok(name)
        }
        None => Ok(arg),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod() -> Value {
        json!({"metadata": {"name": "war"},
            "spec": {"initContainers": [{"name": "install"}],
                     "containers": [{"name": "web"}, {"name": "shipper"}]},
            "status": {
                "initContainerStatuses": [{"name": "install", "containerID": "peapod://i1",
                    "state": {"terminated": {"exitCode": 0}}}],
                "containerStatuses": [
                    {"name": "web", "containerID": "peapod://w2",
                     "lastState": {"terminated": {"containerID": "peapod://w1"}},
                     "state": {"running": {}}},
                    {"name": "shipper", "state": {"waiting": {"reason": "ContainerCreating"}}}]}})
    }

    #[test]
    fn picks_named_containers_with_their_ids() {
        let (p, notice) = pick(&pod(), Some("web"), DefaultContainer::OnlyOne).unwrap();
        assert_eq!(p.container_id.as_deref(), Some("w2"));
        assert_eq!(p.previous_id.as_deref(), Some("w1"));
        assert!(notice.is_none());
        let (p, _) = pick(&pod(), Some("install"), DefaultContainer::OnlyOne).unwrap();
        assert_eq!(p.container_id.as_deref(), Some("i1"));
        let (p, _) = pick(&pod(), Some("shipper"), DefaultContainer::OnlyOne).unwrap();
        assert_eq!(
            (p.container_id, p.waiting_reason.as_deref()),
            (None, Some("ContainerCreating"))
        );
        let e = pick(&pod(), Some("nope"), DefaultContainer::OnlyOne).unwrap_err();
        assert_eq!(
            e.to_string(),
            "error: container nope is not valid for pod war"
        );
    }

    #[test]
    fn several_app_containers_need_a_name_for_logs_and_default_for_exec() {
        let e = pick(&pod(), None, DefaultContainer::OnlyOne).unwrap_err();
        assert_eq!(
            e.to_string(),
            "error: a container name must be specified for pod war, choose one of: [web shipper] or one of the init containers: [install]"
        );
        let (p, notice) = pick(&pod(), None, DefaultContainer::First).unwrap();
        assert_eq!(p.name, "web");
        assert_eq!(
            notice.as_deref(),
            Some("Defaulted container \"web\" out of: web, shipper, install (init)")
        );
        let single = json!({"metadata": {"name": "one"}, "spec": {"containers": [{"name": "a"}]}});
        assert_eq!(
            pick(&single, None, DefaultContainer::OnlyOne)
                .unwrap()
                .0
                .name,
            "a"
        );
    }
}
