//! The container's mounts: the kernel filesystems every container gets, the pod's files
//! (`/etc/hostname`, `/etc/hosts`, `/etc/resolv.conf`, `/dev/shm`), and the CRI mounts.

use crate::error::{Result, SpecError};
use crate::host::{HostPaths, HostPropagation};
use crate::util::clean_path;
use peapod_proto::v1::{Mount, MountPropagation};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

/// A mount in OCI JSON form.
fn mount(dest: &str, typ: &str, source: &str, options: &[&str]) -> Value {
    json!({"destination": dest, "type": typ, "source": source, "options": options})
}

/// The kernel filesystems of every container, containerd's defaults without `/run`; `/sys`
/// and the cgroup filesystem are read-only unless privileged. The `/dev/shm` tmpfs is only
/// used when the pod has no shm of its own to bind.
pub(crate) fn default_mounts(privileged: bool) -> Vec<Value> {
    let ro_or_rw = if privileged { "rw" } else { "ro" };
    vec![
        mount("/proc", "proc", "proc", &["nosuid", "noexec", "nodev"]),
        mount(
            "/dev",
            "tmpfs",
            "tmpfs",
            &["nosuid", "strictatime", "mode=755", "size=65536k"],
        ),
        mount(
            "/dev/pts",
            "devpts",
            "devpts",
            &[
                "nosuid",
                "noexec",
                "newinstance",
                "ptmxmode=0666",
                "mode=0620",
                "gid=5",
            ],
        ),
        mount(
            "/dev/shm",
            "tmpfs",
            "shm",
            &["nosuid", "noexec", "nodev", "mode=1777", "size=65536k"],
        ),
        mount(
            "/dev/mqueue",
            "mqueue",
            "mqueue",
            &["nosuid", "noexec", "nodev"],
        ),
        mount(
            "/sys",
            "sysfs",
            "sysfs",
            &["nosuid", "noexec", "nodev", ro_or_rw],
        ),
        mount(
            "/sys/fs/cgroup",
            "cgroup",
            "cgroup",
            &["nosuid", "noexec", "nodev", "relatime", ro_or_rw],
        ),
    ]
}

/// A bind mount to make: from a CRI mount or one of the pod's files.
struct Bind {
    /// The container path, cleaned.
    dest: String,
    source: PathBuf,
    /// The index in `config.mounts` (for error messages and host look-ups), `None` for the
    /// pod's own files.
    cri_index: Option<usize>,
    readonly: bool,
    recursive_readonly: bool,
    propagation: MountPropagation,
    relabel: bool,
    /// `Mount.mount_options`, checked: appended to the bind's OCI options.
    extra_options: Vec<&'static str>,
}

/// What the mount computation decides beyond the mount list.
pub(crate) struct MountPlan {
    pub mounts: Vec<Value>,
    /// `linux.rootfsPropagation`, set when a mount needs propagation from or to the host.
    pub rootfs_propagation: Option<&'static str>,
}

/// The inputs the mount list depends on.
pub(crate) struct MountInputs<'a> {
    pub cri_mounts: &'a [Mount],
    pub sandbox_dir: &'a Path,
    /// The pod's /dev/shm; `None` with `host_ipc` means the host's.
    pub shm: Option<&'a Path>,
    pub host_ipc: bool,
    pub readonly_rootfs: bool,
    pub privileged: bool,
    pub rro_supported: bool,
    /// The SELinux mount label, when SELinux labels are applied.
    pub mount_label: Option<&'a str>,
}

fn field(i: usize, name: &str) -> String {
    format!("config.mounts[{i}].{name}")
}

/// The options `Mount.mount_options` may carry: what the Pod API allows in a volume mount's
/// `bindMountOptions` (KEP-5785). Anything else (`exec`, `suid`, `rw`, a filesystem's own
/// options) could undo what the runtime or the other fields decide, so it is refused.
pub const MOUNT_OPTIONS: [&str; 3] = ["noexec", "nosuid", "nodev"];

/// `config.mounts[i].mount_options`, checked, without repeats, in the order given
/// (CreateContainer checks them before it makes anything).
pub fn mount_options(i: usize, m: &Mount) -> Result<Vec<&'static str>> {
    let mut out: Vec<&'static str> = Vec::new();
    for (j, o) in m.mount_options.iter().enumerate() {
        let known = MOUNT_OPTIONS
            .iter()
            .find(|k| **k == o.as_str())
            .ok_or_else(|| {
                SpecError::invalid(format!(
                    "{}[{j}]: {o:?} is not a supported bind mount option (supported: {})",
                    field(i, "mount_options"),
                    MOUNT_OPTIONS.join(", ")
                ))
            })?;
        if !out.contains(known) {
            out.push(known);
        }
    }
    Ok(out)
}

fn validate(i: usize, m: &Mount, rro_supported: bool) -> Result<MountPropagation> {
    if m.image.as_ref().is_some_and(|img| !img.image.is_empty()) {
        return Err(SpecError::invalid(format!(
            "{}: image volume mounts are not supported",
            field(i, "image")
        )));
    }
    if m.container_path.is_empty() || !m.container_path.starts_with('/') {
        return Err(SpecError::invalid(format!(
            "{}: {:?} must be an absolute path",
            field(i, "container_path"),
            m.container_path
        )));
    }
    if m.host_path.is_empty() {
        return Err(SpecError::invalid(format!(
            "{} is empty",
            field(i, "host_path")
        )));
    }
    if !m.uid_mappings.is_empty() || !m.gid_mappings.is_empty() {
        return Err(SpecError::invalid(format!(
            "{}: id-mapped mounts are made by the daemon, only in a pod with its own user \
             namespace and with the pod's mapping",
            field(i, "uid_mappings")
        )));
    }
    let propagation = MountPropagation::try_from(m.propagation).map_err(|_| {
        SpecError::invalid(format!(
            "{}: unknown propagation {}",
            field(i, "propagation"),
            m.propagation
        ))
    })?;
    if m.recursive_read_only {
        if !m.readonly {
            return Err(SpecError::invalid(format!(
                "{}: recursive read-only requires readonly (host_path {:?})",
                field(i, "recursive_read_only"),
                m.host_path
            )));
        }
        if propagation != MountPropagation::PropagationPrivate {
            return Err(SpecError::invalid(format!(
                "{}: recursive read-only requires PROPAGATION_PRIVATE, got {} (host_path {:?})",
                field(i, "recursive_read_only"),
                propagation.as_str_name(),
                m.host_path
            )));
        }
        if !rro_supported {
            return Err(SpecError::invalid(format!(
                "{}: recursive read-only mounts are not supported by this runtime \
                 (needs Linux >= 5.12 and an OCI runtime with \"rro\") (host_path {:?})",
                field(i, "recursive_read_only"),
                m.host_path
            )));
        }
    }
    Ok(propagation)
}

/// Number of path elements, containerd's sort key: parents sort before children.
fn depth(dest: &str) -> usize {
    dest.matches('/').count()
}

/// All mounts of the container, in order: the default kernel filesystems (minus those a
/// supplied mount replaces, and minus everything under `/dev` when `/dev` itself is
/// supplied), then the CRI mounts and the pod's files, sorted by depth (stable, so equal
/// depths keep the CRI order, CRI mounts first). A CRI mount at `/etc/hosts`,
/// `/etc/resolv.conf`, `/etc/hostname` or `/dev/shm` replaces the pod's file (the kubelet
/// mounts its own `/etc/hosts`).
///
/// CRI mounts are `rbind` with `rprivate`, `rslave` (HostToContainer: the host mount must
/// be shared or a slave) or `rshared` (Bidirectional: the host mount must be shared), and
/// `ro`, `rro` or `rw`, then their `mount_options` ([`MOUNT_OPTIONS`]). The pod's files are read-only only with a read-only rootfs.
pub(crate) fn container_mounts(inp: &MountInputs<'_>, paths: &dyn HostPaths) -> Result<MountPlan> {
    let mut binds: Vec<Bind> = Vec::new();
    for (i, m) in inp.cri_mounts.iter().enumerate() {
        let propagation = validate(i, m, inp.rro_supported)?;
        binds.push(Bind {
            dest: clean_path(&m.container_path),
            source: PathBuf::from(&m.host_path),
            cri_index: Some(i),
            readonly: m.readonly,
            recursive_readonly: m.recursive_read_only,
            propagation,
            relabel: m.selinux_relabel,
            extra_options: mount_options(i, m)?,
        });
    }

    let mut pod_files: Vec<(&str, PathBuf, bool)> = vec![
        (
            "/etc/hostname",
            inp.sandbox_dir.join("hostname"),
            inp.readonly_rootfs,
        ),
        (
            "/etc/hosts",
            inp.sandbox_dir.join("hosts"),
            inp.readonly_rootfs,
        ),
        (
            "/etc/resolv.conf",
            inp.sandbox_dir.join("resolv.conf"),
            inp.readonly_rootfs,
        ),
    ];
    match (inp.host_ipc, inp.shm) {
        (true, _) => pod_files.push(("/dev/shm", PathBuf::from("/dev/shm"), false)),
        (false, Some(shm)) => pod_files.push(("/dev/shm", shm.to_path_buf(), false)),
        (false, None) => {}
    }
    for (dest, source, readonly) in pod_files {
        if binds
            .iter()
            .any(|b| b.cri_index.is_some() && b.dest == dest)
        {
            continue;
        }
        let relabel = !(dest == "/dev/shm" && inp.host_ipc);
        binds.push(Bind {
            dest: dest.to_string(),
            source,
            cri_index: None,
            readonly,
            recursive_readonly: false,
            propagation: MountPropagation::PropagationPrivate,
            relabel,
            extra_options: Vec::new(),
        });
    }
    binds.sort_by_key(|b| depth(&b.dest));

    let supplied_dev = binds.iter().any(|b| b.dest == "/dev");
    let mut mounts: Vec<Value> = default_mounts(inp.privileged)
        .into_iter()
        .filter(|m| {
            let dest = m["destination"].as_str().unwrap_or_default();
            let replaced = binds.iter().any(|b| b.dest == dest);
            let under_supplied_dev = supplied_dev && dest.starts_with("/dev/");
            !replaced && !under_supplied_dev
        })
        .collect();

    let mut rootfs_propagation = None;
    for b in &binds {
        let source = match b.cri_index {
            Some(i) => paths.mount_source(&b.source).map_err(|e| {
                SpecError::invalid(format!(
                    "{}: {}: {e}",
                    field(i, "host_path"),
                    b.source.display()
                ))
            })?,
            None => b.source.clone(),
        };
        let mut options = vec!["rbind"];
        match b.propagation {
            MountPropagation::PropagationPrivate => options.push("rprivate"),
            MountPropagation::PropagationBidirectional => {
                let p = host_propagation(paths, &source, b)?;
                if p != HostPropagation::Shared {
                    return Err(SpecError::invalid(format!(
                        "{}: PROPAGATION_BIDIRECTIONAL needs {} to be on a shared mount",
                        field(b.cri_index.unwrap_or(0), "propagation"),
                        source.display()
                    )));
                }
                options.push("rshared");
                rootfs_propagation = Some("rshared");
            }
            MountPropagation::PropagationHostToContainer => {
                let p = host_propagation(paths, &source, b)?;
                if p == HostPropagation::Private {
                    return Err(SpecError::invalid(format!(
                        "{}: PROPAGATION_HOST_TO_CONTAINER needs {} to be on a shared or slave mount",
                        field(b.cri_index.unwrap_or(0), "propagation"),
                        source.display()
                    )));
                }
                options.push("rslave");
                if rootfs_propagation != Some("rshared") {
                    rootfs_propagation = Some("rslave");
                }
            }
        }
        options.push(match (b.readonly, b.recursive_readonly) {
            (true, true) => "rro",
            (true, false) => "ro",
            (false, _) => "rw",
        });
        // The runtime remounts the bind with these flags (runc: MS_REMOUNT|MS_BIND).
        options.extend(&b.extra_options);
        if let (true, Some(label)) = (b.relabel, inp.mount_label) {
            paths.relabel(&source, label).map_err(|e| {
                SpecError::internal(format!("relabel {} with {label}", source.display()), e)
            })?;
        }
        mounts.push(json!({
            "destination": b.dest,
            "type": "bind",
            "source": source,
            "options": options,
        }));
    }
    Ok(MountPlan {
        mounts,
        rootfs_propagation,
    })
}

fn host_propagation(paths: &dyn HostPaths, source: &Path, b: &Bind) -> Result<HostPropagation> {
    paths.propagation(source).map_err(|e| {
        SpecError::internal(
            format!(
                "{}: cannot read the propagation of {}",
                field(b.cri_index.unwrap_or(0), "propagation"),
                source.display()
            ),
            e,
        )
    })
}
