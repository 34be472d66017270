//! # peapod-spec: the OCI runtime spec of an application container
//!
//! The pure heart of CreateContainer: a CRI `ContainerConfig`, the pod's `PodSandboxConfig`
//! and the image's config go in, an [`oci_spec::runtime::Spec`] comes out, built the way
//! containerd's CRI plugin builds it (where the CRI is silent, containerd's behaviour is the
//! reference).
//!
//! ## How the daemon uses it
//!
//! ```text
//! let req   = user_to_resolve(&config, &image)?;            // what to look up
//! let user  = resolve_user(&req, passwd_text, group_text)?;  // from <rootfs>/etc/{passwd,group}
//! let host  = HostFacts::detect(runtime_supports_rro(&features)); // once: `runc features`
//! let cdi   = if cdi::requested_devices(&config)?.is_empty() { CdiRegistry::empty() }
//!             else { CdiRegistry::new(specs_read_from_the_cdi_dirs, unreadable_files) };
//! let spec  = container_spec(&ContainerInputs {
//!     id, config: &config, image: &image, user: &user, rootfs, cgroups_path,
//!     sandbox: SandboxRef { id: sandbox_id, config: &sandbox_config, pause_pid, netns, dir, shm },
//!     target_pid, host: &host, paths: &RealHost, cdi: &cdi,
//! })?;
//! std::fs::write(bundle.join("config.json"), spec_json(&spec)?)?;
//! ```
//!
//! * [`container_spec`] does no I/O of its own except reading a seccomp Localhost profile.
//!   Host facts come in [`HostFacts`]; per-container look-ups go through [`HostPaths`]:
//!   bind-mount sources are created when missing and resolved through symlinks there
//!   ([`RealHost`] does it as containerd does), device nodes are stat'ed there, and the
//!   propagation of host mounts is checked there. CDI spec files come parsed, in a
//!   [`CdiRegistry`] (the daemon reads the directories).
//! * Errors are [`SpecError::InvalidArgument`] naming the CRI field (gRPC InvalidArgument)
//!   or [`SpecError::Internal`].
//! * [`process_args`], [`linux_resources`] (UpdateContainerResources), [`exec_process`]
//!   (ExecSync/Exec), [`stop_signal`] (StopContainer: the config's `stop_signal`, else the
//!   image's `StopSignal`, else SIGTERM; with the CRI `Signal` ContainerStatus reports) stand
//!   alone.
//!
//! ## What the spec contains
//!
//! * **process**: args ([`process_args`]), env (`PATH`, `TERM` with a tty, `HOSTNAME`, the
//!   image's, the config's), cwd (config, image, `/`), user uid/gid and additional gids (the
//!   primary gid, the image memberships unless `Strict`, the CRI `supplemental_groups`; sorted),
//!   terminal = `tty`, `noNewPrivileges`, `oomScoreAdj` (raised to the host floor), AppArmor and
//!   SELinux labels, capabilities ([`DEFAULT_CAPABILITIES`], add/drop with "ALL", ambient),
//!   no rlimits (containerd removes the default RLIMIT_NOFILE: the container inherits the
//!   runtime's).
//! * **namespaces**: new mount; pod network by path, pause's IPC and UTS unless NODE; PID per
//!   mode; cgroup on v2 for unprivileged containers; the pause's user namespace, with the
//!   pod's uid/gid mappings, when the pod has one ([`pod_user_namespace`]: mode POD, one
//!   mapping each of container id 0; the process's ids must be mapped).
//! * **mounts**: /proc, /dev, /dev/pts, /dev/mqueue, /sys and /sys/fs/cgroup (read-only unless
//!   privileged), the pod's /dev/shm (host's with host IPC), /etc/hostname, /etc/hosts,
//!   /etc/resolv.conf from the sandbox directory (read-only only with a read-only rootfs,
//!   replaced by a CRI mount at the same path), then the CRI bind mounts sorted parents first,
//!   with their `mount_options` (only [`MOUNT_OPTIONS`]: noexec, nosuid, nodev).
//! * **devices**, **resources**, **cgroupsPath** (as given), masked/read-only paths, seccomp,
//!   `root.readonly`, `io.kubernetes.cri.*` annotations plus the config's.
//! * **CDI devices** (`cdi_devices`, then `cdi.k8s.io/*` annotations): resolved in
//!   [`ContainerInputs::cdi`], their `containerEdits` applied last ([`cdi`]): env, device
//!   nodes (numbers from the host's node where the CDI spec leaves them out) with an allow
//!   rule in the device cgroup, mounts, OCI hooks, additional gids.
//! * No hostname (containers share the pause's UTS namespace) and no sysctls: the pod's
//!   sysctls are namespaced ones applied to the pause container, whose namespaces the
//!   containers join (containerd and CRI-O do the same; the CRI has no container sysctls).
//!
//! ## Choices where the CRI is silent or cannot say
//!
//! * Masked and read-only paths: the CRI's lists as given, an empty one meaning none (the
//!   kubelet's `procMount: Unmasked`; it sends [`DEFAULT_MASKED_PATHS`] and
//!   [`DEFAULT_READONLY_PATHS`] otherwise), as containerd and CRI-O read them; see
//!   `masked_and_readonly`.
//! * No seccomp profile asked for (neither `seccomp` nor `seccomp_profile_path`) means
//!   unconfined, as the CRI documents; no AppArmor profile asked for means RuntimeDefault.
//! * Config annotations are copied except `io.kubernetes.cri.*` (ours), `run.oci.*` and
//!   `org.criu.*` (read by OCI runtimes).
//! * Memory swap: the requested swap limit, else the memory limit (no swapping), only where
//!   swap is accounted ([`HostFacts::swap_controller`]).
//!
//! ## Not supported (refused with InvalidArgument)
//!
//! Image volume mounts (`Mount.image`), id-mapped CRI mounts (`Mount.uidMappings`), user
//! namespaces of mode CONTAINER or TARGET, recursive read-only mounts where the host lacks
//! them, and of CDI: `intelRdt` and `netDevices` edits, and mounts into a pod with its own
//! user namespace. (The root filesystem of a pod with its own user namespace is idmapped by
//! the daemon before the runtime sees it: runc 1.1 cannot.) Image `VOLUME`s are not turned into
//! anonymous volumes (the rootfs holds their content, writable unless `readonly_rootfs`).

mod caps;
pub mod cdi;
mod devices;
mod error;
mod host;
mod mounts;
mod process;
mod resources;
mod seccomp;
mod security;
mod spec;
mod user;
mod userns;
mod util;

#[cfg(test)]
mod tests;

pub use caps::{
    canonical_capability, capabilities_from_mask, ALL_CAPABILITIES, DEFAULT_CAPABILITIES,
};
pub use cdi::CdiRegistry;
pub use error::{Result, SpecError};
pub use host::{
    host_devices, runtime_supports_rro, HostDevice, HostFacts, HostPaths, HostPropagation,
    RealHost, DEFAULT_APPARMOR_PROFILE,
};
pub use mounts::{mount_options, MOUNT_OPTIONS};
pub use process::{
    cri_signal, exec_process, parse_signal, process_args, signal_number, stop_signal, StopSignal,
    DEFAULT_PATH_ENV,
};
pub use resources::linux_resources;
pub use seccomp::default_profile_json;
pub use security::{DEFAULT_MASKED_PATHS, DEFAULT_READONLY_PATHS};
pub use spec::{annotations, spec_json, OCI_VERSION};
pub use user::{parse_user_spec, resolve_user, user_to_resolve, ResolvedUser, UserId, UserRequest};
pub use userns::{pod_user_namespace, PodUserNamespace};

use peapod_proto::v1::{ContainerConfig, PodSandboxConfig};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::path::Path;

/// An OCI image's config (`config` in its config blob) as peapod keeps it: what a container's
/// spec is made from, and what ImageStatus reports. The image store records it with each image
/// (`peapod_image::ImageConfig` is this type). Empty strings and lists mean "not set".
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageConfig {
    /// `User`: `user`, `uid`, `user:group`, `uid:gid`, ...
    pub user: String,
    /// `Env`: `KEY=value` (a bare `KEY` unsets it).
    pub env: Vec<String>,
    pub entrypoint: Vec<String>,
    pub cmd: Vec<String>,
    pub working_dir: String,
    /// `StopSignal`: `SIGTERM`, `TERM`, `15`, ...
    pub stop_signal: String,
    pub labels: HashMap<String, String>,
    /// `ExposedPorts`: `80/tcp`, ...
    pub exposed_ports: Vec<String>,
    /// `Volumes`: paths the image declares as volumes.
    pub volumes: Vec<String>,
}

/// The pod a container joins.
#[derive(Debug, Clone, Copy)]
pub struct SandboxRef<'a> {
    /// The sandbox id (for the `io.kubernetes.cri.sandbox-id` annotation).
    pub id: &'a str,
    pub config: &'a PodSandboxConfig,
    /// The pause process, whose IPC, UTS (and PID, for POD) namespaces are joined.
    pub pause_pid: u32,
    /// The pinned network namespace; `None` falls back to the pause's (`/proc/<pid>/ns/net`).
    /// Ignored when the pod uses the host network.
    pub netns: Option<&'a Path>,
    /// The sandbox directory holding `hostname`, `hosts` and `resolv.conf`.
    pub dir: &'a Path,
    /// The pod's /dev/shm mount; `None` when the pod uses the host IPC namespace (the host's
    /// /dev/shm is bound then) — otherwise `None` leaves the container a private tmpfs.
    pub shm: Option<&'a Path>,
}

/// Everything [`container_spec`] needs.
#[derive(Clone, Copy)]
pub struct ContainerInputs<'a> {
    /// The container id (the daemon's).
    pub id: &'a str,
    pub config: &'a ContainerConfig,
    pub sandbox: SandboxRef<'a>,
    pub image: &'a ImageConfig,
    /// The user resolved from [`user_to_resolve`] (see [`resolve_user`]).
    pub user: &'a ResolvedUser,
    /// The container's root filesystem (absolute; writable, even with `readonly_rootfs`: the
    /// runtime makes it read-only after creating mount points).
    pub rootfs: &'a Path,
    /// `linux.cgroupsPath`, as the daemon's cgroup driver wants it (the daemon builds it).
    /// Empty: not set.
    pub cgroups_path: &'a str,
    /// The pid of the target container's process, for PID namespace mode TARGET.
    pub target_pid: Option<u32>,
    pub host: &'a HostFacts,
    /// Host look-ups for bind mounts and devices (the daemon passes [`RealHost`]).
    pub paths: &'a (dyn HostPaths + Sync),
    /// The CDI devices there are, to resolve the config's (`cdi_devices`, `cdi.k8s.io/*`
    /// annotations) in: the daemon reads its CDI spec directories into it when the config asks
    /// for any ([`cdi::requested_devices`]), else passes [`CdiRegistry::empty`].
    pub cdi: &'a CdiRegistry,
}

/// The kernel filesystems every container gets (/proc, /dev, /dev/pts, /dev/mqueue, /sys and
/// the cgroup filesystem; `/sys` and cgroup read-only unless privileged), without `/dev/shm`,
/// which the caller binds from the pod. The daemon's pause container uses these too.
pub fn kernel_mounts(privileged: bool) -> Result<Vec<oci_spec::runtime::Mount>> {
    mounts::default_mounts(privileged)
        .into_iter()
        .filter(|m| m["destination"] != "/dev/shm")
        .map(|m| serde_json::from_value(m).map_err(|e| SpecError::internal("default mount", e)))
        .collect()
}

/// The OCI runtime spec of an application container. See the crate documentation for what
/// it contains; errors name the offending CRI field.
pub fn container_spec(inputs: &ContainerInputs<'_>) -> Result<oci_spec::runtime::Spec> {
    spec::build(inputs)
}
