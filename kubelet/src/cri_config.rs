//! The CRI configs the kubelet derives from a Pod (pkg/kubelet/kuberuntime
//! kuberuntime_sandbox.go and kuberuntime_container_linux.go), as pure functions.

use crate::env::{container_env, expand_all, PodFacts};
use crate::record::PodRecord;
use crate::resources::{container_cgroup, oom_score_adj, qos_class};
use crate::settings::Settings;
use k8s_openapi::api::core::v1::{Container, Pod, PodSpec, SecurityContext};
use peapod_proto::v1 as cri;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

pub const LABEL_POD_NAME: &str = "io.kubernetes.pod.name";
pub const LABEL_POD_NAMESPACE: &str = "io.kubernetes.pod.namespace";
pub const LABEL_POD_UID: &str = "io.kubernetes.pod.uid";
pub const LABEL_CONTAINER_NAME: &str = "io.kubernetes.container.name";

const NS_POD: i32 = 0;
const NS_CONTAINER: i32 = 1;
const NS_NODE: i32 = 2;

/// The CRI `Signal` of a Pod's `lifecycle.stopSignal` (`SIGUSR1`, `SIGRTMIN+3`, `SIGRTMAX-1`:
/// the names the Pod API allows), as the kubelet maps it; None for any other text.
pub fn stop_signal(name: &str) -> Option<cri::Signal> {
    let rest = name.strip_prefix("SIG")?;
    let spelled = rest.replacen('+', "PLUS", 1).replacen('-', "MINUS", 1);
    cri::Signal::from_str_name(&format!("SIGNAL_SIG{spelled}"))
        .filter(|s| *s != cri::Signal::RuntimeDefault)
}

/// The options a volume mount's `bindMountOptions` may name (the Pod API's list, which the
/// daemon's CRI mounts take as `mount_options`).
pub const BIND_MOUNT_OPTIONS: [&str; 3] = ["noexec", "nodev", "nosuid"];

fn pod_labels(pod: &Pod) -> HashMap<String, String> {
    let md = &pod.metadata;
    HashMap::from([
        (
            LABEL_POD_NAME.to_string(),
            md.name.clone().unwrap_or_default(),
        ),
        (
            LABEL_POD_NAMESPACE.to_string(),
            md.namespace.clone().unwrap_or_default(),
        ),
        (
            LABEL_POD_UID.to_string(),
            md.uid.clone().unwrap_or_default(),
        ),
    ])
}

/// The label selector of everything CRI holds for the pod with `uid`.
pub fn uid_selector(uid: &str) -> HashMap<String, String> {
    HashMap::from([(LABEL_POD_UID.to_string(), uid.to_string())])
}

fn namespace_options(spec: &PodSpec) -> cri::NamespaceOption {
    let node = |b: Option<bool>| b.unwrap_or(false);
    cri::NamespaceOption {
        network: if node(spec.host_network) {
            NS_NODE
        } else {
            NS_POD
        },
        pid: if node(spec.host_pid) {
            NS_NODE
        } else if node(spec.share_process_namespace) {
            NS_POD
        } else {
            NS_CONTAINER
        },
        ipc: if node(spec.host_ipc) { NS_NODE } else { NS_POD },
        target_id: String::new(),
        ..Default::default()
    }
}

/// `<pods_dir>/<uid>`: volumes and logs of one pod.
pub fn pod_dir(settings: &Settings, uid: &str) -> PathBuf {
    settings.pods_dir.join(uid)
}

pub fn sandbox_config(
    rec: &PodRecord,
    settings: &Settings,
    cgroup_parent: &str,
) -> cri::PodSandboxConfig {
    let pod = &rec.pod;
    let spec = rec.spec();
    let md = &pod.metadata;
    let mut labels: HashMap<String, String> =
        md.labels.clone().unwrap_or_default().into_iter().collect();
    labels.extend(pod_labels(pod));
    let annotations: HashMap<String, String> = md
        .annotations
        .clone()
        .unwrap_or_default()
        .into_iter()
        .collect();
    let hostname = if spec.host_network.unwrap_or(false) {
        String::new()
    } else {
        let h = spec
            .hostname
            .clone()
            .unwrap_or_else(|| md.name.clone().unwrap_or_default());
        // A hostname is at most 63 characters; the kubelet truncates the pod name likewise.
        h.chars()
            .take(63)
            .collect::<String>()
            .trim_end_matches(['-', '.'])
            .to_string()
    };
    let dns_config = spec.dns_config.as_ref().map(|d| cri::DnsConfig {
        servers: d.nameservers.clone().unwrap_or_default(),
        searches: d.searches.clone().unwrap_or_default(),
        options: d
            .options
            .iter()
            .flatten()
            .map(|o| match &o.value {
                Some(v) => format!("{}:{v}", o.name.clone().unwrap_or_default()),
                None => o.name.clone().unwrap_or_default(),
            })
            .collect(),
    });
    let mut port_mappings = Vec::new();
    for c in spec
        .init_containers
        .iter()
        .flatten()
        .chain(spec.containers.iter())
    {
        for p in c.ports.iter().flatten() {
            let host_port = p.host_port.unwrap_or(0);
            if host_port <= 0 {
                continue;
            }
            port_mappings.push(cri::PortMapping {
                protocol: match p.protocol.as_deref() {
                    Some("UDP") => 1,
                    Some("SCTP") => 2,
                    _ => 0,
                },
                container_port: p.container_port,
                host_port,
                host_ip: p.host_ip.clone().unwrap_or_default(),
            });
        }
    }
    let psc = spec.security_context.clone().unwrap_or_default();
    let sysctls: HashMap<String, String> = psc
        .sysctls
        .iter()
        .flatten()
        .map(|s| (s.name.clone(), s.value.clone()))
        .collect();
    cri::PodSandboxConfig {
        metadata: Some(cri::PodSandboxMetadata {
            name: md.name.clone().unwrap_or_default(),
            uid: md.uid.clone().unwrap_or_default(),
            namespace: md.namespace.clone().unwrap_or_default(),
            attempt: 0,
        }),
        hostname,
        log_directory: pod_dir(settings, rec.uid())
            .join("logs")
            .display()
            .to_string(),
        dns_config,
        port_mappings,
        labels,
        annotations,
        linux: Some(cri::LinuxPodSandboxConfig {
            cgroup_parent: cgroup_parent.to_string(),
            security_context: Some(cri::LinuxSandboxSecurityContext {
                namespace_options: Some(namespace_options(spec)),
                run_as_user: psc.run_as_user.map(|v| cri::Int64Value { value: v }),
                run_as_group: psc.run_as_group.map(|v| cri::Int64Value { value: v }),
                supplemental_groups: psc.supplemental_groups.clone().unwrap_or_default(),
                ..Default::default()
            }),
            sysctls,
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The container's security context merged over the pod's (container fields win).
fn security(c: &Container, spec: &PodSpec) -> cri::LinuxContainerSecurityContext {
    let psc = spec.security_context.clone().unwrap_or_default();
    let sc: SecurityContext = c.security_context.clone().unwrap_or_default();
    let caps = sc.capabilities.clone().unwrap_or_default();
    // The kubelet sends its masked and read-only /proc paths, or none for procMount:
    // Unmasked (which the runtime reads as "mask nothing").
    let (masked_paths, readonly_paths) = if sc.proc_mount.as_deref() == Some("Unmasked") {
        (Vec::new(), Vec::new())
    } else {
        let owned = |l: &[&str]| l.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        (
            owned(peapod_spec::DEFAULT_MASKED_PATHS),
            owned(peapod_spec::DEFAULT_READONLY_PATHS),
        )
    };
    cri::LinuxContainerSecurityContext {
        capabilities: Some(cri::Capability {
            add_capabilities: caps.add.clone().unwrap_or_default(),
            drop_capabilities: caps.drop.clone().unwrap_or_default(),
            ..Default::default()
        }),
        privileged: sc.privileged.unwrap_or(false),
        namespace_options: Some(namespace_options(spec)),
        run_as_user: sc
            .run_as_user
            .or(psc.run_as_user)
            .map(|v| cri::Int64Value { value: v }),
        run_as_group: sc
            .run_as_group
            .or(psc.run_as_group)
            .map(|v| cri::Int64Value { value: v }),
        readonly_rootfs: sc.read_only_root_filesystem.unwrap_or(false),
        supplemental_groups: psc.supplemental_groups.clone().unwrap_or_default(),
        no_new_privs: sc.allow_privilege_escalation == Some(false),
        masked_paths,
        readonly_paths,
        ..Default::default()
    }
}

/// Everything a container config needs besides the pod.
pub struct ContainerInputs<'a> {
    pub attempt: u32,
    pub volumes: &'a BTreeMap<String, PathBuf>,
    pub pod_ip: &'a str,
    /// The host file mounted at terminationMessagePath.
    pub termination_log: Option<&'a Path>,
}

pub fn container_config(
    rec: &PodRecord,
    c: &Container,
    settings: &Settings,
    inputs: &ContainerInputs<'_>,
) -> cri::ContainerConfig {
    let pod = &rec.pod;
    let spec = rec.spec();
    let facts = PodFacts {
        pod,
        pod_ip: inputs.pod_ip,
        host_ip: &settings.host_ip,
        node_name: &settings.node_name,
    };
    let env = container_env(c, &facts);
    let mut labels = pod_labels(pod);
    labels.insert(LABEL_CONTAINER_NAME.into(), c.name.clone());
    let annotations = HashMap::from([
        (
            "io.kubernetes.container.restartCount".to_string(),
            inputs.attempt.to_string(),
        ),
        (
            "io.kubernetes.pod.terminationGracePeriod".to_string(),
            spec.termination_grace_period_seconds
                .unwrap_or(30)
                .to_string(),
        ),
    ]);
    let mut mounts = Vec::new();
    for m in c.volume_mounts.iter().flatten() {
        let Some(host) = inputs.volumes.get(&m.name) else {
            continue;
        };
        let host = match m.sub_path.as_deref().filter(|s| !s.is_empty()) {
            Some(sub) => {
                let p = host.join(sub.trim_start_matches('/'));
                // subPath directories of emptyDirs are made as the kubelet does: with the
                // volume's own mode (the daemon's umask would make them 0700).
                if !p.exists() && std::fs::create_dir_all(&p).is_ok() {
                    use std::os::unix::fs::PermissionsExt;
                    if let Ok(m) = std::fs::metadata(host) {
                        let mode = m.permissions().mode() & 0o7777;
                        let _ = std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode));
                    }
                }
                p
            }
            None => host.clone(),
        };
        mounts.push(cri::Mount {
            container_path: m.mount_path.clone(),
            host_path: host.display().to_string(),
            readonly: m.read_only.unwrap_or(false),
            propagation: match m.mount_propagation.as_deref() {
                Some("HostToContainer") => 1,
                Some("Bidirectional") => 2,
                _ => 0,
            },
            mount_options: m.bind_mount_options.clone().unwrap_or_default(),
            ..Default::default()
        });
    }
    if let (Some(file), Some(path)) = (
        inputs.termination_log,
        c.termination_message_path
            .as_deref()
            .filter(|p| !p.is_empty()),
    ) {
        mounts.push(cri::Mount {
            container_path: path.to_string(),
            host_path: file.display().to_string(),
            ..Default::default()
        });
    }
    let cg = container_cgroup(c);
    let qos = qos_class(spec);
    let oom = oom_score_adj(qos, c, settings.memory_capacity).max(settings.oom_score_adj_floor);
    cri::ContainerConfig {
        metadata: Some(cri::ContainerMetadata {
            name: c.name.clone(),
            attempt: inputs.attempt,
        }),
        image: Some(cri::ImageSpec {
            image: c.image.clone().unwrap_or_default(),
            ..Default::default()
        }),
        command: expand_all(c.command.as_ref(), &env),
        args: expand_all(c.args.as_ref(), &env),
        working_dir: c.working_dir.clone().unwrap_or_default(),
        envs: env
            .iter()
            .map(|(k, v)| cri::KeyValue {
                key: k.clone(),
                value: v.clone().into_bytes(),
            })
            .collect(),
        mounts,
        labels,
        annotations,
        log_path: Path::new(&c.name)
            .join(format!("{}.log", inputs.attempt))
            .display()
            .to_string(),
        // lifecycle.stopSignal (checked by validation; unknown text: the runtime's default).
        stop_signal: c
            .lifecycle
            .as_ref()
            .and_then(|l| l.stop_signal.as_deref())
            .and_then(stop_signal)
            .map_or(0, |s| s as i32),
        stdin: c.stdin.unwrap_or(false),
        stdin_once: c.stdin_once.unwrap_or(false),
        tty: c.tty.unwrap_or(false),
        linux: Some(cri::LinuxContainerConfig {
            resources: Some(cri::LinuxContainerResources {
                cpu_period: cg.cpu_period as i64,
                cpu_quota: cg.cpu_quota,
                cpu_shares: cg.cpu_shares as i64,
                memory_limit_in_bytes: cg.memory_limit,
                oom_score_adj: oom,
                ..Default::default()
            }),
            security_context: Some(security(c, spec)),
        }),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::Amounts;

    fn settings() -> Settings {
        Settings {
            pods_dir: "/var/lib/peapod/pods".into(),
            node_name: "n1".into(),
            node_labels: Default::default(),
            allocatable: Amounts {
                cpu_milli: 2000,
                memory: 4 << 30,
            },
            memory_capacity: 4_000_000_000,
            cgroup_parent: "/kubepods".into(),
            cgroups: crate::cgroup::PodCgroups::Fs {
                root: "/sys/fs/cgroup".into(),
            },
            backoff_base: std::time::Duration::from_secs(10),
            sync_period: std::time::Duration::from_secs(1),
            oom_score_adj_floor: -1000,
            host_ip: "192.0.2.1".into(),
        }
    }

    fn rec() -> PodRecord {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web", "namespace": "default", "uid": "u1", "labels": {"app": "web"}},
            "spec": {"shareProcessNamespace": true, "containers": [{"name": "c", "image": "busybox:1",
                "command": ["sh", "-c"], "args": ["echo $(NAME)"],
                "terminationMessagePath": "/dev/termination-log",
                "env": [{"name": "NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
                "ports": [{"containerPort": 80, "hostPort": 8080}],
                "lifecycle": {"stopSignal": "SIGRTMIN+2"},
                "volumeMounts": [{"name": "w", "mountPath": "/w", "readOnly": true,
                    "bindMountOptions": ["noexec", "nodev"]}],
                "resources": {"requests": {"cpu": "250m", "memory": "1000000000"}, "limits": {"cpu": "500m"}}}],
                "volumes": [{"name": "w", "emptyDir": {}}]}
        }))
        .unwrap();
        PodRecord {
            pod,
            ..Default::default()
        }
    }

    #[test]
    fn sandbox_config_carries_labels_ports_and_namespaces() {
        let r = rec();
        let s = sandbox_config(&r, &settings(), "/kubepods/burstable/podu1");
        assert_eq!(s.hostname, "web");
        assert_eq!(s.labels[LABEL_POD_UID], "u1");
        assert_eq!(s.labels["app"], "web");
        assert_eq!(s.port_mappings[0].host_port, 8080);
        let linux = s.linux.unwrap();
        assert_eq!(linux.cgroup_parent, "/kubepods/burstable/podu1");
        let ns = linux.security_context.unwrap().namespace_options.unwrap();
        assert_eq!((ns.network, ns.pid, ns.ipc), (NS_POD, NS_POD, NS_POD));
        assert_eq!(s.log_directory, "/var/lib/peapod/pods/u1/logs");
    }

    #[test]
    fn container_config_has_kubelet_resources_labels_and_env() {
        let r = rec();
        let vols = BTreeMap::from([("w".to_string(), PathBuf::from("/v/w"))]);
        let c = &r.spec().containers[0];
        let cfg = container_config(
            &r,
            c,
            &settings(),
            &ContainerInputs {
                attempt: 2,
                volumes: &vols,
                pod_ip: "10.0.0.9",
                termination_log: Some(Path::new("/p/containers/c/2.termination-log")),
            },
        );
        assert_eq!(cfg.metadata.as_ref().unwrap().attempt, 2);
        assert_eq!(cfg.log_path, "c/2.log");
        assert_eq!(cfg.labels[LABEL_CONTAINER_NAME], "c");
        assert_eq!(cfg.labels[LABEL_POD_NAME], "web");
        assert_eq!(cfg.args, vec!["echo web"]);
        assert_eq!(cfg.mounts[0].host_path, "/v/w");
        assert!(cfg.mounts[0].readonly);
        assert_eq!(cfg.mounts[0].mount_options, ["noexec", "nodev"]);
        assert_eq!(cfg.stop_signal, cri::Signal::Sigrtminplus2 as i32);
        assert_eq!(cfg.mounts[1].container_path, "/dev/termination-log");
        assert_eq!(cfg.mounts[1].host_path, "/p/containers/c/2.termination-log");
        let res = cfg.linux.unwrap().resources.unwrap();
        assert_eq!(
            (res.cpu_shares, res.cpu_quota, res.cpu_period),
            (256, 50000, 100000)
        );
        assert_eq!(res.memory_limit_in_bytes, 0);
        // Burstable: 1000 - 1000*1e9/4e9 = 750.
        assert_eq!(res.oom_score_adj, 750);
    }

    #[test]
    fn proc_paths_are_the_kubelets_unless_unmasked() {
        let p: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p"},
            "spec": {"containers": [
                {"name": "a", "image": "i"},
                {"name": "b", "image": "i", "securityContext": {"procMount": "Unmasked"}},
            ]},
        }))
        .unwrap();
        let spec = p.spec.unwrap();
        let default = security(&spec.containers[0], &spec);
        assert_eq!(
            default.masked_paths.len(),
            peapod_spec::DEFAULT_MASKED_PATHS.len()
        );
        assert!(default.masked_paths.contains(&"/proc/kcore".to_string()));
        assert_eq!(
            default.readonly_paths.len(),
            peapod_spec::DEFAULT_READONLY_PATHS.len()
        );
        let unmasked = security(&spec.containers[1], &spec);
        assert!(unmasked.masked_paths.is_empty() && unmasked.readonly_paths.is_empty());
    }

    #[test]
    fn stop_signal_names_are_the_kubelets() {
        assert_eq!(stop_signal("SIGTERM"), Some(cri::Signal::Sigterm));
        assert_eq!(stop_signal("SIGIOT"), Some(cri::Signal::Sigiot));
        assert_eq!(stop_signal("SIGRTMIN"), Some(cri::Signal::Sigrtmin));
        assert_eq!(
            stop_signal("SIGRTMIN+15"),
            Some(cri::Signal::Sigrtminplus15)
        );
        assert_eq!(
            stop_signal("SIGRTMAX-14"),
            Some(cri::Signal::Sigrtmaxminus14)
        );
        for bad in [
            "TERM",
            "sigterm",
            "15",
            "SIGRTMIN+16",
            "SIGNOPE",
            "SIGRUNTIME_DEFAULT",
            "",
        ] {
            assert_eq!(stop_signal(bad), None, "{bad:?}");
        }
    }
}
