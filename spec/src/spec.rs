//! Assembling the runtime spec of an application container.

use crate::caps::capabilities;
use crate::devices::container_devices;
use crate::error::{Result, SpecError};
use crate::mounts::{container_mounts, MountInputs};
use crate::process::{process_args, process_cwd, process_env};
use crate::resources::{oom_score_adj, resources_json};
use crate::seccomp::{default_profile_json, load_localhost_profile, seccomp_choice, Seccomp};
use crate::security::{apparmor_profile, masked_and_readonly, selinux_labels};
use crate::user::additional_gids;
use crate::userns::{container_user_namespace, PodUserNamespace};
use crate::ContainerInputs;
use oci_spec::runtime::Spec;
use peapod_proto::v1::{
    LinuxContainerSecurityContext, LinuxSandboxSecurityContext, NamespaceMode, NamespaceOption,
    SupplementalGroupsPolicy,
};
use serde_json::{json, Map, Value};

/// The runtime-spec version peapod writes (what runc 1.1 reports as its own).
pub const OCI_VERSION: &str = "1.0.2";

/// Annotation keys peapod sets on every container (containerd's names, so tools that read
/// them work unchanged: gVisor's runsc tells a pod's sandbox from the containers that join it
/// by the first two).
pub mod annotations {
    pub const CONTAINER_TYPE: &str = "io.kubernetes.cri.container-type";
    pub const CONTAINER_TYPE_CONTAINER: &str = "container";
    /// The container type of a pod's pause.
    pub const CONTAINER_TYPE_SANDBOX: &str = "sandbox";
    pub const SANDBOX_LOG_DIRECTORY: &str = "io.kubernetes.cri.sandbox-log-directory";
    pub const SANDBOX_ID: &str = "io.kubernetes.cri.sandbox-id";
    pub const SANDBOX_NAME: &str = "io.kubernetes.cri.sandbox-name";
    pub const SANDBOX_NAMESPACE: &str = "io.kubernetes.cri.sandbox-namespace";
    pub const SANDBOX_UID: &str = "io.kubernetes.cri.sandbox-uid";
    pub const CONTAINER_NAME: &str = "io.kubernetes.cri.container-name";
    pub const IMAGE_NAME: &str = "io.kubernetes.cri.image-name";
}

/// Prefixes of config annotations that are not copied into the spec: our own keys (a client
/// must not forge them) and keys OCI runtimes act upon (crun reads `run.oci.*`, runc/CRIU
/// `org.criu.*`).
const RESERVED_ANNOTATION_PREFIXES: &[&str] = &["io.kubernetes.cri.", "run.oci.", "org.criu."];

fn mode(m: i32) -> NamespaceMode {
    NamespaceMode::try_from(m).unwrap_or(NamespaceMode::Pod)
}

fn ns(typ: &str, path: Option<String>) -> Value {
    match path {
        Some(p) => json!({"type": typ, "path": p}),
        None => json!({"type": typ}),
    }
}

/// The namespaces: a new mount namespace; the pod's network (by its pinned path), IPC and
/// UTS (the pause's) unless the pod uses the host's; PID per the container's mode (POD: the
/// pause's, CONTAINER: a new one, NODE: the host's, TARGET: the target container's); a new
/// cgroup namespace on cgroup v2 for unprivileged containers (as containerd: v1 and
/// privileged containers keep the host's view); the pod's user namespace (the pause's) when
/// the pod has one.
fn namespaces(
    inputs: &ContainerInputs<'_>,
    container_ns: &NamespaceOption,
    sandbox_ns: &NamespaceOption,
    privileged: bool,
    userns: Option<&PodUserNamespace>,
) -> Result<Vec<Value>> {
    let pause = inputs.sandbox.pause_pid;
    let proc_ns = |pid: u32, kind: &str| Some(format!("/proc/{pid}/ns/{kind}"));
    let mut out = vec![ns("mount", None)];
    if mode(sandbox_ns.network) != NamespaceMode::Node {
        let path = match inputs.sandbox.netns {
            Some(p) => Some(p.display().to_string()),
            None => proc_ns(pause, "net"),
        };
        out.push(ns("network", path));
        out.push(ns("uts", proc_ns(pause, "uts")));
    }
    if mode(sandbox_ns.ipc) != NamespaceMode::Node && mode(container_ns.ipc) != NamespaceMode::Node
    {
        out.push(ns("ipc", proc_ns(pause, "ipc")));
    }
    match mode(container_ns.pid) {
        NamespaceMode::Pod => out.push(ns("pid", proc_ns(pause, "pid"))),
        NamespaceMode::Container => out.push(ns("pid", None)),
        NamespaceMode::Node => {}
        NamespaceMode::Target => {
            let pid = inputs.target_pid.ok_or_else(|| {
                SpecError::invalid(format!(
                    "config.linux.security_context.namespace_options.target_id {:?}: \
                     PID namespace TARGET needs a running target container",
                    container_ns.target_id
                ))
            })?;
            out.push(ns("pid", proc_ns(pid, "pid")));
        }
    }
    if inputs.host.cgroup_v2 && !privileged {
        out.push(ns("cgroup", None));
    }
    if userns.is_some() {
        // Joined like the pod's other namespaces; the mappings go in the spec too, as runc
        // 1.1 needs them to know the host id of root inside.
        out.push(ns("user", proc_ns(pause, "user")));
    }
    Ok(out)
}

/// In a user namespace a process can only be ids that are mapped: say which one is not, rather
/// than let the runtime fail on setuid.
fn check_mapped(u: &PodUserNamespace, uid: u32, gid: u32, additional: &[u32]) -> Result<()> {
    if !u.maps_uid(uid) {
        return Err(SpecError::invalid(format!(
            "config.linux.security_context.run_as_user (or the image's user): uid {uid} is not \
             mapped in the pod's user namespace (sandbox_config ... userns_options.uids)"
        )));
    }
    if let Some(g) = std::iter::once(&gid)
        .chain(additional)
        .find(|g| !u.maps_gid(**g))
    {
        return Err(SpecError::invalid(format!(
            "config.linux.security_context.run_as_group or supplemental_groups (or the image's \
             groups): gid {g} is not mapped in the pod's user namespace (sandbox_config ... \
             userns_options.gids)"
        )));
    }
    Ok(())
}

fn annotations_json(inputs: &ContainerInputs<'_>) -> Map<String, Value> {
    let config = inputs.config;
    let mut out = Map::new();
    let mut keys: Vec<&String> = config.annotations.keys().collect();
    keys.sort();
    for k in keys {
        if RESERVED_ANNOTATION_PREFIXES
            .iter()
            .any(|p| k.starts_with(p))
        {
            continue;
        }
        out.insert(k.clone(), Value::String(config.annotations[k].clone()));
    }
    let meta = inputs.sandbox.config.metadata.clone().unwrap_or_default();
    let image = config
        .image
        .as_ref()
        .map(|i| {
            if i.user_specified_image.is_empty() {
                i.image.clone()
            } else {
                i.user_specified_image.clone()
            }
        })
        .unwrap_or_default();
    let name = config
        .metadata
        .as_ref()
        .map(|m| m.name.clone())
        .unwrap_or_default();
    use annotations::*;
    for (k, v) in [
        (CONTAINER_TYPE, CONTAINER_TYPE_CONTAINER.to_string()),
        (SANDBOX_ID, inputs.sandbox.id.to_string()),
        (SANDBOX_NAME, meta.name),
        (SANDBOX_NAMESPACE, meta.namespace),
        (SANDBOX_UID, meta.uid),
        (CONTAINER_NAME, name),
        (IMAGE_NAME, image),
    ] {
        out.insert(k.to_string(), Value::String(v));
    }
    out
}

pub(crate) fn build(inputs: &ContainerInputs<'_>) -> Result<Spec> {
    serde_json::from_value(build_value(inputs)?).map_err(|e| SpecError::internal("runtime spec", e))
}

/// The spec as JSON, before it is parsed into the OCI type (tests compare the two).
pub(crate) fn build_value(inputs: &ContainerInputs<'_>) -> Result<Value> {
    let config = inputs.config;
    let host = inputs.host;
    let sc: LinuxContainerSecurityContext = config
        .linux
        .as_ref()
        .and_then(|l| l.security_context.clone())
        .unwrap_or_default();
    let sandbox_sc: LinuxSandboxSecurityContext = inputs
        .sandbox
        .config
        .linux
        .as_ref()
        .and_then(|l| l.security_context.clone())
        .unwrap_or_default();
    let privileged = sc.privileged;
    if privileged && !sandbox_sc.privileged {
        return Err(SpecError::invalid(
            "config.linux.security_context.privileged: the pod sandbox is not privileged \
             (sandbox_config.linux.security_context.privileged), so no container in it may be",
        ));
    }
    let container_ns = sc.namespace_options.clone().unwrap_or_default();
    let sandbox_ns = sandbox_sc.namespace_options.clone().unwrap_or_default();
    let userns = container_user_namespace(&container_ns, &sandbox_ns)?;

    // process
    let args = process_args(config, inputs.image)?;
    let env = process_env(config, inputs.image, &inputs.sandbox.config.hostname)?;
    let cwd = process_cwd(config, inputs.image);
    let caps = capabilities(sc.capabilities.as_ref(), privileged, &host.bounding_caps)?;
    let policy = SupplementalGroupsPolicy::try_from(sc.supplemental_groups_policy)
        .unwrap_or(SupplementalGroupsPolicy::Merge);
    let gids = additional_gids(
        inputs.user,
        &sc.supplemental_groups,
        policy == SupplementalGroupsPolicy::Strict,
    )?;
    let resources = config.linux.as_ref().and_then(|l| l.resources.clone());
    let oom = resources
        .as_ref()
        .map(|r| oom_score_adj(r.oom_score_adj, host.oom_score_adj_floor))
        .transpose()?;
    let apparmor = apparmor_profile(&sc, host, inputs.paths)?;
    let (process_label, mount_label) = selinux_labels(
        sc.selinux_options.as_ref(),
        sandbox_sc.selinux_options.as_ref(),
        privileged,
        host,
    );

    if let Some(u) = &userns {
        check_mapped(u, inputs.user.uid, inputs.user.gid, &gids)?;
    }

    let mut capabilities = json!({
        "bounding": caps.bounding,
        "effective": caps.effective,
        "permitted": caps.permitted,
    });
    if !caps.inheritable.is_empty() {
        capabilities["inheritable"] = json!(caps.inheritable);
    }
    if !caps.ambient.is_empty() {
        capabilities["ambient"] = json!(caps.ambient);
    }
    let mut process = json!({
        "terminal": config.tty,
        "user": {"uid": inputs.user.uid, "gid": inputs.user.gid, "additionalGids": gids},
        "args": args,
        "env": env,
        "cwd": cwd,
        "capabilities": capabilities,
        "noNewPrivileges": sc.no_new_privs,
    });
    if let Some(adj) = oom {
        process["oomScoreAdj"] = json!(adj);
    }
    if let Some(p) = apparmor {
        process["apparmorProfile"] = json!(p);
    }
    if let Some(l) = &process_label {
        process["selinuxLabel"] = json!(l);
    }

    // mounts
    let host_ipc = mode(container_ns.ipc) == NamespaceMode::Node
        || mode(sandbox_ns.ipc) == NamespaceMode::Node;
    let plan = container_mounts(
        &MountInputs {
            cri_mounts: &config.mounts,
            sandbox_dir: inputs.sandbox.dir,
            shm: inputs.sandbox.shm,
            host_ipc,
            readonly_rootfs: sc.readonly_rootfs,
            privileged,
            rro_supported: host.rro_supported,
            mount_label: mount_label.as_deref(),
        },
        inputs.paths,
    )?;

    // devices and resources
    let devices = container_devices(
        &config.devices,
        &config.mounts,
        config.tty,
        privileged,
        &host.host_devices,
        inputs.paths,
    )?;
    let mut res = resources
        .as_ref()
        .map(|r| resources_json(r, host))
        .transpose()?
        .unwrap_or_default();
    res.insert("devices".into(), Value::Array(devices.rules));

    let mut linux = json!({
        "namespaces": namespaces(inputs, &container_ns, &sandbox_ns, privileged, userns.as_ref())?,
        "resources": res,
    });
    if let Some(u) = &userns {
        let (uids, gids) = u.spec_mappings();
        linux["uidMappings"] = uids;
        linux["gidMappings"] = gids;
    }
    if !inputs.cgroups_path.is_empty() {
        linux["cgroupsPath"] = json!(inputs.cgroups_path);
    }
    if !devices.devices.is_empty() {
        linux["devices"] = Value::Array(devices.devices);
    }
    if let Some((masked, readonly)) = masked_and_readonly(&sc) {
        linux["maskedPaths"] = json!(masked);
        linux["readonlyPaths"] = json!(readonly);
    }
    if let Some(p) = plan.rootfs_propagation {
        linux["rootfsPropagation"] = json!(p);
    }
    if let Some(l) = &mount_label {
        linux["mountLabel"] = json!(l);
    }

    // seccomp: never for privileged containers
    #[allow(deprecated)]
    let choice = seccomp_choice(sc.seccomp.as_ref(), &sc.seccomp_profile_path)?;
    if !privileged && choice != Seccomp::Unconfined {
        if !host.seccomp_enabled {
            return Err(SpecError::invalid(
                "config.linux.security_context.seccomp: seccomp is not supported on this host",
            ));
        }
        linux["seccomp"] = match choice {
            Seccomp::RuntimeDefault => default_profile_json(&caps.bounding),
            Seccomp::Localhost(path) => load_localhost_profile(&path)?,
            Seccomp::Unconfined => Value::Null,
        };
    }

    let mut spec = json!({
        "ociVersion": OCI_VERSION,
        "root": {"path": inputs.rootfs, "readonly": sc.readonly_rootfs},
        "process": process,
        "mounts": plan.mounts,
        "annotations": annotations_json(inputs),
        "linux": linux,
    });
    // Last, over the finished spec: a device's edits may replace a mount, a device node or an
    // env variable made above (as containerd applies CDI after its other spec options).
    crate::cdi::apply(&mut spec, config, inputs.cdi, inputs.paths)?;
    Ok(spec)
}

/// Sorts the capability sets of a spec's JSON (oci-spec keeps them in hash sets).
pub(crate) fn sort_capabilities(v: &mut Value) {
    if let Some(caps) = v
        .pointer_mut("/process/capabilities")
        .and_then(Value::as_object_mut)
    {
        for set in caps.values_mut() {
            if let Some(list) = set.as_array_mut() {
                list.sort_by(|a, b| a.as_str().cmp(&b.as_str()));
            }
        }
    }
}

/// The spec as `config.json` bytes, with capability sets sorted so the same spec always
/// serializes the same (oci-spec keeps them in hash sets).
pub fn spec_json(spec: &Spec) -> Result<Vec<u8>> {
    let mut v = serde_json::to_value(spec).map_err(|e| SpecError::internal("runtime spec", e))?;
    sort_capabilities(&mut v);
    serde_json::to_vec_pretty(&v).map_err(|e| SpecError::internal("runtime spec", e))
}
