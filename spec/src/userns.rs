//! A pod's user namespace (CRI `NamespaceOption.userns_options`): which one the pod asks for,
//! checked as the CRI and the kubelet define it, and what a container spec gets from it.
//!
//! - absent, or mode NODE: the host's user namespace (no mappings may come with NODE);
//! - mode POD: a user namespace of the pod, shared by all its containers (they join the
//!   pause's), with exactly one uid and one gid mapping, each mapping container id 0 (root
//!   inside is an unprivileged host id). The pod's network, PID and IPC namespaces must be
//!   the pod's own: the kernel checks a namespace's capabilities against the user namespace
//!   that owns it, so a host namespace cannot be used from inside (the kubelet refuses
//!   `hostUsers: false` with hostNetwork, hostPID or hostIPC for the same reason);
//! - CONTAINER and TARGET: not defined for user namespaces by the CRI; refused.

use crate::error::{Result, SpecError};
use peapod_proto::v1::{IdMapping, NamespaceMode, NamespaceOption, PodSandboxConfig};
use serde_json::{json, Value};

const FIELD: &str = "config.linux.security_context.namespace_options.userns_options";

/// The user namespace of a pod with NamespaceMode POD: its one uid and one gid mapping.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PodUserNamespace {
    pub uids: IdMapping,
    pub gids: IdMapping,
}

impl PodUserNamespace {
    /// Whether container uid `uid` is mapped (a process may only run as mapped ids).
    pub fn maps_uid(&self, uid: u32) -> bool {
        maps(&self.uids, uid)
    }

    /// Whether container gid `gid` is mapped.
    pub fn maps_gid(&self, gid: u32) -> bool {
        maps(&self.gids, gid)
    }

    /// The `linux.uidMappings` / `linux.gidMappings` of a runtime spec.
    pub fn spec_mappings(&self) -> (Value, Value) {
        let one = |m: &IdMapping| json!([{"containerID": m.container_id, "hostID": m.host_id, "size": m.length}]);
        (one(&self.uids), one(&self.gids))
    }
}

fn maps(m: &IdMapping, id: u32) -> bool {
    id >= m.container_id && u64::from(id) < u64::from(m.container_id) + u64::from(m.length)
}

fn mode(m: i32) -> NamespaceMode {
    NamespaceMode::try_from(m).unwrap_or(NamespaceMode::Pod)
}

fn one_mapping(list: &[IdMapping], which: &str) -> Result<IdMapping> {
    let [m] = list else {
        return Err(SpecError::invalid(format!(
            "{FIELD}.{which}: exactly one mapping is supported with mode POD, got {}",
            list.len()
        )));
    };
    if m.container_id != 0 {
        return Err(SpecError::invalid(format!(
            "{FIELD}.{which}[0].container_id is {}: the mapping must map container id 0",
            m.container_id
        )));
    }
    if m.length == 0 {
        return Err(SpecError::invalid(format!(
            "{FIELD}.{which}[0].length must not be 0"
        )));
    }
    if u64::from(m.host_id) + u64::from(m.length) > u64::from(u32::MAX) {
        return Err(SpecError::invalid(format!(
            "{FIELD}.{which}[0]: host ids {}+{} go past the largest id",
            m.host_id, m.length
        )));
    }
    Ok(*m)
}

/// The user namespace a pod asks for (`None`: the host's), or InvalidArgument naming the
/// field when the request is not one peapod (or the CRI) allows.
pub fn pod_user_namespace(config: &PodSandboxConfig) -> Result<Option<PodUserNamespace>> {
    let Some(ns) = config
        .linux
        .as_ref()
        .and_then(|l| l.security_context.as_ref())
        .and_then(|s| s.namespace_options.as_ref())
    else {
        return Ok(None);
    };
    user_namespace_of(ns)
}

fn user_namespace_of(ns: &NamespaceOption) -> Result<Option<PodUserNamespace>> {
    let Some(u) = &ns.userns_options else {
        return Ok(None);
    };
    match mode(u.mode) {
        NamespaceMode::Node => {
            if !u.uids.is_empty() || !u.gids.is_empty() {
                return Err(SpecError::invalid(format!(
                    "{FIELD}: uids and gids must be empty with mode NODE (the host's user \
                     namespace has its own mappings)"
                )));
            }
            Ok(None)
        }
        m @ (NamespaceMode::Container | NamespaceMode::Target) => Err(SpecError::invalid(format!(
            "{FIELD}.mode {}: user namespaces are POD or NODE",
            m.as_str_name()
        ))),
        NamespaceMode::Pod => {
            for (name, m) in [("network", ns.network), ("pid", ns.pid), ("ipc", ns.ipc)] {
                if mode(m) == NamespaceMode::Node {
                    return Err(SpecError::invalid(format!(
                        "{FIELD}.mode POD cannot be combined with the host's {name} namespace \
                         (config.linux.security_context.namespace_options.{name} NODE)"
                    )));
                }
            }
            Ok(Some(PodUserNamespace {
                uids: one_mapping(&u.uids, "uids")?,
                gids: one_mapping(&u.gids, "gids")?,
            }))
        }
    }
}

/// A container's user namespace: its pod's. A container config that names another mode than
/// its pod's is refused (the kubelet copies the pod's options into every container).
pub(crate) fn container_user_namespace(
    container_ns: &NamespaceOption,
    sandbox_ns: &NamespaceOption,
) -> Result<Option<PodUserNamespace>> {
    let pod = user_namespace_of(sandbox_ns).map_err(|e| match e {
        SpecError::InvalidArgument(m) => SpecError::InvalidArgument(format!("sandbox_config: {m}")),
        other => other,
    })?;
    if let Some(u) = &container_ns.userns_options {
        let pod_mode = if pod.is_some() {
            NamespaceMode::Pod
        } else {
            NamespaceMode::Node
        };
        if mode(u.mode) != pod_mode {
            return Err(SpecError::invalid(format!(
                "{FIELD}.mode {}: the container must use its pod's user namespace ({})",
                mode(u.mode).as_str_name(),
                pod_mode.as_str_name()
            )));
        }
    }
    if pod.is_some() && mode(container_ns.pid) == NamespaceMode::Node {
        return Err(SpecError::invalid(
            "config.linux.security_context.namespace_options.pid NODE: a container in a pod \
             with its own user namespace cannot use the host's PID namespace",
        ));
    }
    Ok(pod)
}

#[cfg(test)]
mod tests {
    use super::*;
    use peapod_proto::v1::{LinuxPodSandboxConfig, LinuxSandboxSecurityContext, UserNamespace};

    fn m(container_id: u32, host_id: u32, length: u32) -> IdMapping {
        IdMapping {
            container_id,
            host_id,
            length,
        }
    }

    fn pod(ns: NamespaceOption) -> PodSandboxConfig {
        PodSandboxConfig {
            linux: Some(LinuxPodSandboxConfig {
                security_context: Some(LinuxSandboxSecurityContext {
                    namespace_options: Some(ns),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn userns(mode: NamespaceMode, uids: Vec<IdMapping>, gids: Vec<IdMapping>) -> NamespaceOption {
        NamespaceOption {
            userns_options: Some(UserNamespace {
                mode: mode as i32,
                uids,
                gids,
            }),
            ..Default::default()
        }
    }

    fn err(config: &PodSandboxConfig) -> String {
        match pod_user_namespace(config) {
            Err(SpecError::InvalidArgument(m)) => m,
            other => panic!("expected InvalidArgument, got {other:?}"),
        }
    }

    #[test]
    fn absent_and_node_mean_the_hosts() {
        assert_eq!(
            pod_user_namespace(&PodSandboxConfig::default()).unwrap(),
            None
        );
        assert_eq!(
            pod_user_namespace(&pod(NamespaceOption::default())).unwrap(),
            None
        );
        let node = pod(userns(NamespaceMode::Node, vec![], vec![]));
        assert_eq!(pod_user_namespace(&node).unwrap(), None);
        let node_with_maps = pod(userns(NamespaceMode::Node, vec![m(0, 1000, 10)], vec![]));
        assert!(err(&node_with_maps).contains("userns_options"));
    }

    #[test]
    fn pod_mode_takes_exactly_one_mapping_of_root_each() {
        let good = pod(userns(
            NamespaceMode::Pod,
            vec![m(0, 1000, 100000)],
            vec![m(0, 2000, 65536)],
        ));
        let u = pod_user_namespace(&good).unwrap().unwrap();
        assert_eq!(u.uids, m(0, 1000, 100000));
        assert_eq!(u.gids, m(0, 2000, 65536));
        assert!(u.maps_uid(0) && u.maps_uid(99999) && !u.maps_uid(100000));
        assert!(u.maps_gid(65535) && !u.maps_gid(65536));
        let (uids, gids) = u.spec_mappings();
        assert_eq!(
            uids,
            json!([{"containerID": 0, "hostID": 1000, "size": 100000}])
        );
        assert_eq!(gids[0]["hostID"], 2000);

        let two = pod(userns(
            NamespaceMode::Pod,
            vec![m(0, 1000, 100000), m(0, 2000, 100000)],
            vec![m(0, 1000, 100000)],
        ));
        assert!(err(&two).contains("userns_options.uids"), "{}", err(&two));
        let not_root = pod(userns(
            NamespaceMode::Pod,
            vec![m(0, 1000, 100000)],
            vec![m(1, 1000, 100000)],
        ));
        assert!(
            err(&not_root).contains("gids[0].container_id"),
            "{}",
            err(&not_root)
        );
        let none = pod(userns(NamespaceMode::Pod, vec![], vec![]));
        assert!(err(&none).contains("uids"));
        let empty = pod(userns(
            NamespaceMode::Pod,
            vec![m(0, 1000, 0)],
            vec![m(0, 1000, 1)],
        ));
        assert!(err(&empty).contains("uids[0].length"));
        let overflow = pod(userns(
            NamespaceMode::Pod,
            vec![m(0, u32::MAX - 5, 10)],
            vec![m(0, 1000, 1)],
        ));
        assert!(err(&overflow).contains("uids[0]"));
    }

    #[test]
    fn container_and_target_are_refused_naming_the_field() {
        for mode in [NamespaceMode::Container, NamespaceMode::Target] {
            let e = err(&pod(userns(mode, vec![], vec![])));
            assert!(e.contains("userns_options.mode"), "{e}");
            assert!(e.contains(mode.as_str_name()), "{e}");
        }
    }

    #[test]
    fn pod_mode_refuses_host_namespaces() {
        let mut ns = userns(
            NamespaceMode::Pod,
            vec![m(0, 1000, 65536)],
            vec![m(0, 1000, 65536)],
        );
        ns.network = NamespaceMode::Node as i32;
        assert!(err(&pod(ns)).contains("namespace_options.network"));
    }

    #[test]
    fn a_container_follows_its_pods_user_namespace() {
        let pod_ns = userns(
            NamespaceMode::Pod,
            vec![m(0, 1000, 65536)],
            vec![m(0, 1000, 65536)],
        );
        // Unset in the container: the pod's.
        let got = container_user_namespace(&NamespaceOption::default(), &pod_ns).unwrap();
        assert!(got.is_some());
        // The same: fine. Another mode: refused.
        assert!(container_user_namespace(&pod_ns, &pod_ns)
            .unwrap()
            .is_some());
        let node = userns(NamespaceMode::Node, vec![], vec![]);
        assert!(matches!(
            container_user_namespace(&node, &pod_ns),
            Err(SpecError::InvalidArgument(_))
        ));
        assert!(matches!(
            container_user_namespace(&pod_ns, &NamespaceOption::default()),
            Err(SpecError::InvalidArgument(_))
        ));
        let host_pid = NamespaceOption {
            pid: NamespaceMode::Node as i32,
            ..Default::default()
        };
        assert!(matches!(
            container_user_namespace(&host_pid, &pod_ns),
            Err(SpecError::InvalidArgument(_))
        ));
    }
}
