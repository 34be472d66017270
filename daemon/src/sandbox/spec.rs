//! The runtime spec of a pod's pause container.

use crate::error::{Error, Result};
use crate::pause::PAUSE_USER;
use crate::runtime_spec::{self as oci, spec_err};
use oci_spec::runtime::{
    LinuxBuilder, LinuxCapabilitiesBuilder, LinuxCpuBuilder, LinuxDeviceCgroupBuilder,
    LinuxIdMappingBuilder, LinuxNamespaceType, LinuxResourcesBuilder, ProcessBuilder, RootBuilder,
    Spec, SpecBuilder, UserBuilder,
};
use peapod_proto::v1::{NamespaceMode, PodSandboxConfig};
use std::collections::HashSet;
use std::path::Path;

/// The pause container's oom_score_adj (containerd's `defaultSandboxOOMAdj`): the last thing
/// the OOM killer should pick, since killing it kills the pod.
pub const SANDBOX_OOM_SCORE_ADJ: i32 = -998;

pub const DEFAULT_PATH_ENV: &str =
    "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// What the pause container needs beyond the CRI config.
pub struct PauseInputs<'a> {
    /// The sandbox's id (its pause's container id).
    pub id: &'a str,
    pub rootfs: &'a Path,
    pub args: &'a [String],
    pub netns: Option<&'a Path>,
    pub shm: Option<&'a Path>,
    pub cgroups_path: &'a str,
    /// The pod's pinned user namespace, when it has one (see
    /// `crate::host_ops::userns::pinned_user_namespace`).
    pub userns: Option<&'a Path>,
}

/// RunPodSandbox's check of the pod's user namespace: the request must be valid
/// (`peapod_spec::pod_user_namespace`, InvalidArgument naming the field), and a POD one needs
/// a host that can (`support`, the probe's answer at start; FailedPrecondition otherwise).
pub fn check_user_namespace(
    config: &PodSandboxConfig,
    support: &std::result::Result<(), String>,
) -> Result<()> {
    let Some(userns) = peapod_spec::pod_user_namespace(config)? else {
        return Ok(());
    };
    if let Err(why) = support {
        return Err(Error::failed_precondition(format!(
            "config.linux.security_context.namespace_options.userns_options: user \
             namespaces are not supported on this host ({why})"
        )));
    }
    // Before anything is made: the pause's ids must be mapped.
    pause_user(config, Some(&userns)).map(drop)
}

/// One id of the pause: the explicit one if mapped (refused naming `field` otherwise), else
/// `default` if mapped, else root of the pod's user namespace.
fn pause_id(
    explicit: Option<&peapod_proto::v1::Int64Value>,
    mapped: impl Fn(u32) -> bool,
    field: &str,
    mapping: &str,
    default: u32,
) -> Result<u32> {
    match explicit {
        Some(v) if !mapped(v.value as u32) => Err(Error::invalid(format!(
            "config.linux.security_context.{field} {} is not mapped by \
             namespace_options.userns_options.{mapping}",
            v.value
        ))),
        Some(v) => Ok(v.value as u32),
        None if mapped(default) => Ok(default),
        None => Ok(0),
    }
}

/// The pause's uid and gid: the sandbox's `run_as_user`/`run_as_group`, else the pause
/// image's 65535, or, in a user namespace too small to map 65535, root of the pod's
/// namespace (an unprivileged host id). An explicit id the namespace does not map is refused.
fn pause_user(
    config: &PodSandboxConfig,
    userns: Option<&peapod_spec::PodUserNamespace>,
) -> Result<(u32, u32)> {
    let security = config
        .linux
        .as_ref()
        .and_then(|l| l.security_context.clone())
        .unwrap_or_default();
    let maps_uid = |id: u32| userns.is_none_or(|u| u.maps_uid(id));
    let maps_gid = |id: u32| userns.is_none_or(|u| u.maps_gid(id));
    let uid = pause_id(
        security.run_as_user.as_ref(),
        maps_uid,
        "run_as_user",
        "uids",
        PAUSE_USER,
    )?;
    // With run_as_user alone, the group is root's (as for any container).
    let default_gid = if security.run_as_user.is_some() {
        0
    } else {
        PAUSE_USER
    };
    let gid = pause_id(
        security.run_as_group.as_ref(),
        maps_gid,
        "run_as_group",
        "gids",
        default_gid,
    )?;
    Ok((uid, gid))
}

/// The pause's annotations, containerd's: what it is (a sandbox, which runtimes with a
/// sandbox of their own, gVisor's runsc, make it from) and of which pod.
fn pause_annotations(
    config: &PodSandboxConfig,
    id: &str,
) -> std::collections::HashMap<String, String> {
    use peapod_spec::annotations as a;
    let meta = config.metadata.clone().unwrap_or_default();
    [
        (a::CONTAINER_TYPE, a::CONTAINER_TYPE_SANDBOX.to_string()),
        (a::SANDBOX_ID, id.to_string()),
        (a::SANDBOX_NAME, meta.name),
        (a::SANDBOX_NAMESPACE, meta.namespace),
        (a::SANDBOX_UID, meta.uid),
        (a::SANDBOX_LOG_DIRECTORY, config.log_directory.clone()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

fn mode(m: i32) -> NamespaceMode {
    NamespaceMode::try_from(m).unwrap_or(NamespaceMode::Pod)
}

/// Namespace modes of a sandbox config: (network, pid, ipc).
pub fn namespace_modes(config: &PodSandboxConfig) -> (NamespaceMode, NamespaceMode, NamespaceMode) {
    let ns = config
        .linux
        .as_ref()
        .and_then(|l| l.security_context.as_ref())
        .and_then(|s| s.namespace_options.clone())
        .unwrap_or_default();
    (mode(ns.network), mode(ns.pid), mode(ns.ipc))
}

pub fn pause_spec(config: &PodSandboxConfig, inputs: &PauseInputs<'_>) -> Result<Spec> {
    let (net, pid, ipc) = namespace_modes(config);
    let userns = peapod_spec::pod_user_namespace(config)?;
    let (uid, gid) = pause_user(config, userns.as_ref())?;

    let process = ProcessBuilder::default()
        .terminal(false)
        .args(inputs.args.to_vec())
        .env(vec![DEFAULT_PATH_ENV.to_string()])
        .cwd("/")
        .user(
            UserBuilder::default()
                .uid(uid)
                .gid(gid)
                .build()
                .map_err(spec_err)?,
        )
        // Pause needs no privilege at all.
        .capabilities(
            LinuxCapabilitiesBuilder::default()
                .bounding(HashSet::new())
                .effective(HashSet::new())
                .permitted(HashSet::new())
                .inheritable(HashSet::new())
                .ambient(HashSet::new())
                .build()
                .map_err(spec_err)?,
        )
        .no_new_privileges(true)
        .oom_score_adj(crate::oom_score::restrict(SANDBOX_OOM_SCORE_ADJ))
        .build()
        .map_err(spec_err)?;

    let mut mounts = peapod_spec::kernel_mounts(false).map_err(Error::from)?;
    match inputs.shm {
        Some(shm) => mounts.push(oci::bind("/dev/shm", shm, &["rw"])?),
        None => mounts.push(oci::bind("/dev/shm", Path::new("/dev/shm"), &["rw"])?),
    }

    let mut namespaces = vec![oci::namespace(LinuxNamespaceType::Mount, None)?];
    if pid != NamespaceMode::Node {
        namespaces.push(oci::namespace(LinuxNamespaceType::Pid, None)?);
    }
    if ipc != NamespaceMode::Node {
        namespaces.push(oci::namespace(LinuxNamespaceType::Ipc, None)?);
    }
    if net != NamespaceMode::Node {
        namespaces.push(oci::namespace(LinuxNamespaceType::Uts, None)?);
        namespaces.push(oci::namespace(LinuxNamespaceType::Network, inputs.netns)?);
    }
    let mut id_mappings = None;
    if let Some(u) = &userns {
        // The pinned one, which owns the pod's network namespace: a user namespace runc made
        // anew would not, and root of the pod could not mount sysfs or set net.* sysctls.
        let path = inputs
            .userns
            .ok_or_else(|| Error::internal("a pod with its own user namespace has none pinned"))?;
        namespaces.push(oci::namespace(LinuxNamespaceType::User, Some(path))?);
        let one = |m: &peapod_proto::v1::IdMapping| {
            LinuxIdMappingBuilder::default()
                .container_id(m.container_id)
                .host_id(m.host_id)
                .size(m.length)
                .build()
                .map_err(spec_err)
        };
        id_mappings = Some((vec![one(&u.uids)?], vec![one(&u.gids)?]));
    }

    let sysctls: std::collections::HashMap<String, String> = config
        .linux
        .as_ref()
        .map(|l| l.sysctls.clone().into_iter().collect())
        .unwrap_or_default();

    let resources = LinuxResourcesBuilder::default()
        .devices(vec![LinuxDeviceCgroupBuilder::default()
            .allow(false)
            .access("rwm")
            .build()
            .map_err(spec_err)?])
        // containerd's default sandbox shares: pause should not compete for CPU.
        .cpu(
            LinuxCpuBuilder::default()
                .shares(2u64)
                .build()
                .map_err(spec_err)?,
        )
        .build()
        .map_err(spec_err)?;

    let mut linux = LinuxBuilder::default();
    if let Some((uids, gids)) = id_mappings {
        // runc 1.1 wants them even when joining: root's host id comes from them.
        linux = linux.uid_mappings(uids).gid_mappings(gids);
    }
    let linux = linux
        .namespaces(namespaces)
        .cgroups_path(inputs.cgroups_path)
        .sysctl(sysctls)
        .resources(resources)
        .masked_paths(oci::strings(peapod_spec::DEFAULT_MASKED_PATHS))
        .readonly_paths(oci::strings(peapod_spec::DEFAULT_READONLY_PATHS))
        .build()
        .map_err(spec_err)?;

    let mut spec = SpecBuilder::default()
        .version(oci::OCI_VERSION)
        .root(
            RootBuilder::default()
                .path(inputs.rootfs)
                .readonly(true)
                .build()
                .map_err(spec_err)?,
        )
        .process(process)
        .mounts(mounts)
        .linux(linux)
        .build()
        .map_err(spec_err)?;
    spec.set_annotations(Some(pause_annotations(config, inputs.id)));
    // The builder starts from oci-spec's Spec::default(), which names the host "youki".
    spec.set_hostname(None);
    if net != NamespaceMode::Node && !config.hostname.is_empty() {
        spec.set_hostname(Some(config.hostname.clone()));
    }
    Ok(spec)
}

#[cfg(test)]
mod tests {
    use super::*;
    use peapod_proto::v1::{LinuxPodSandboxConfig, LinuxSandboxSecurityContext, NamespaceOption};

    fn config(net: NamespaceMode, pid: NamespaceMode) -> PodSandboxConfig {
        PodSandboxConfig {
            hostname: "pod-a".into(),
            linux: Some(LinuxPodSandboxConfig {
                sysctls: [("net.ipv4.ip_forward".to_string(), "1".to_string())].into(),
                security_context: Some(LinuxSandboxSecurityContext {
                    namespace_options: Some(NamespaceOption {
                        network: net as i32,
                        pid: pid as i32,
                        ipc: NamespaceMode::Pod as i32,
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    static PAUSE_ARGS: std::sync::LazyLock<Vec<String>> =
        std::sync::LazyLock::new(|| vec!["/pause".to_string()]);

    fn inputs<'a>(netns: Option<&'a Path>) -> PauseInputs<'a> {
        PauseInputs {
            id: "sb1",
            rootfs: Path::new("/r"),
            args: &PAUSE_ARGS,
            netns,
            shm: Some(Path::new("/s/shm")),
            cgroups_path: "/peapod/abc",
            userns: None,
        }
    }

    fn ns_types(spec: &Spec) -> Vec<(LinuxNamespaceType, Option<String>)> {
        spec.linux()
            .as_ref()
            .unwrap()
            .namespaces()
            .as_ref()
            .unwrap()
            .iter()
            .map(|n| (n.typ(), n.path().as_ref().map(|p| p.display().to_string())))
            .collect()
    }

    #[test]
    fn pod_network_pause_joins_the_pinned_netns_and_gets_the_hostname() {
        let spec = pause_spec(
            &config(NamespaceMode::Pod, NamespaceMode::Pod),
            &inputs(Some(Path::new("/run/peapod/netns/x"))),
        )
        .unwrap();
        let ns = ns_types(&spec);
        assert!(ns.contains(&(
            LinuxNamespaceType::Network,
            Some("/run/peapod/netns/x".into())
        )));
        assert!(ns.contains(&(LinuxNamespaceType::Pid, None)));
        assert!(ns.contains(&(LinuxNamespaceType::Uts, None)));
        assert_eq!(spec.hostname().as_deref(), Some("pod-a"));
        // What a runtime with a sandbox of its own (runsc) makes the pod's sandbox from.
        let annotations = spec.annotations().as_ref().unwrap();
        assert_eq!(annotations["io.kubernetes.cri.container-type"], "sandbox");
        assert_eq!(annotations["io.kubernetes.cri.sandbox-id"], "sb1");
        let linux = spec.linux().as_ref().unwrap();
        assert_eq!(
            linux.cgroups_path().as_ref().unwrap().display().to_string(),
            "/peapod/abc"
        );
        assert_eq!(linux.sysctl().as_ref().unwrap()["net.ipv4.ip_forward"], "1");
        let process = spec.process().as_ref().unwrap();
        assert_eq!(process.user().uid(), PAUSE_USER);
        assert_eq!(
            process.args().as_ref().unwrap(),
            &vec!["/pause".to_string()]
        );
        let shm = spec
            .mounts()
            .as_ref()
            .unwrap()
            .iter()
            .find(|m| m.destination() == Path::new("/dev/shm"))
            .unwrap();
        assert_eq!(shm.source().as_ref().unwrap(), Path::new("/s/shm"));
    }

    #[test]
    fn host_network_and_pid_share_the_host_namespaces() {
        let spec = pause_spec(
            &config(NamespaceMode::Node, NamespaceMode::Node),
            &inputs(None),
        )
        .unwrap();
        let ns: Vec<_> = ns_types(&spec).into_iter().map(|(t, _)| t).collect();
        assert!(!ns.contains(&LinuxNamespaceType::Network));
        assert!(!ns.contains(&LinuxNamespaceType::Pid));
        assert!(!ns.contains(&LinuxNamespaceType::Uts));
        assert!(ns.contains(&LinuxNamespaceType::Ipc));
        assert_eq!(spec.hostname(), &None);
    }

    fn with_userns(length: u32) -> PodSandboxConfig {
        let mut c = config(NamespaceMode::Pod, NamespaceMode::Pod);
        let m = peapod_proto::v1::IdMapping {
            container_id: 0,
            host_id: 200000,
            length,
        };
        c.linux
            .as_mut()
            .and_then(|l| l.security_context.as_mut())
            .and_then(|s| s.namespace_options.as_mut())
            .unwrap()
            .userns_options = Some(peapod_proto::v1::UserNamespace {
            mode: NamespaceMode::Pod as i32,
            uids: vec![m],
            gids: vec![m],
        });
        c
    }

    #[test]
    fn a_pod_user_namespace_is_joined_from_its_pin_with_the_mappings() {
        let c = with_userns(65536);
        let mut i = inputs(Some(Path::new("/run/peapod/netns/x")));
        i.userns = Some(Path::new("/run/peapod/netns/x.userns"));
        let spec = pause_spec(&c, &i).unwrap();
        assert!(ns_types(&spec).contains(&(
            LinuxNamespaceType::User,
            Some("/run/peapod/netns/x.userns".into())
        )));
        let linux = spec.linux().as_ref().unwrap();
        let uids = linux.uid_mappings().as_ref().unwrap();
        assert_eq!(
            (uids[0].container_id(), uids[0].host_id(), uids[0].size()),
            (0, 200000, 65536)
        );
        assert_eq!(linux.gid_mappings().as_ref().unwrap()[0].host_id(), 200000);
        // 65535 is mapped: pause keeps the pause image's user.
        assert_eq!(spec.process().as_ref().unwrap().user().uid(), PAUSE_USER);
        // Without the pin there is nothing to join: an internal error, not a pod in the
        // host's user namespace.
        assert!(pause_spec(&c, &inputs(Some(Path::new("/n")))).is_err());
    }

    #[test]
    fn pause_is_root_of_a_namespace_too_small_for_65535() {
        let c = with_userns(1000);
        let mut i = inputs(Some(Path::new("/n")));
        i.userns = Some(Path::new("/n.userns"));
        let spec = pause_spec(&c, &i).unwrap();
        let user = spec.process().as_ref().unwrap().user().clone();
        assert_eq!((user.uid(), user.gid()), (0, 0));
    }

    #[test]
    fn the_user_namespace_check_before_anything_is_made() {
        let c = with_userns(65536);
        check_user_namespace(&c, &Ok(())).unwrap();
        let e = check_user_namespace(&c, &Err("no idmapped mounts".into())).unwrap_err();
        assert_eq!(e.code(), crate::error::Code::FailedPrecondition);
        assert!(e.to_string().contains("no idmapped mounts"), "{e}");
        // A pod in the host's user namespace runs on any host.
        let host = config(NamespaceMode::Pod, NamespaceMode::Pod);
        check_user_namespace(&host, &Err("no".into())).unwrap();
        // The pause's explicit uid must be mapped.
        let mut unmapped = with_userns(1000);
        unmapped
            .linux
            .as_mut()
            .and_then(|l| l.security_context.as_mut())
            .unwrap()
            .run_as_user = Some(peapod_proto::v1::Int64Value { value: 5000 });
        let e = check_user_namespace(&unmapped, &Ok(())).unwrap_err();
        assert_eq!(e.code(), crate::error::Code::InvalidArgument);
        assert!(e.to_string().contains("run_as_user 5000"), "{e}");
    }
}
