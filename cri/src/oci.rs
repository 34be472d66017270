//! OCI runtime-spec pieces shared by the pause container and app containers.

use crate::error::{Error, Result};
use oci_spec::runtime::{
    LinuxNamespace, LinuxNamespaceBuilder, LinuxNamespaceType, Mount, MountBuilder,
};
use std::path::Path;

/// The runtime-spec version peapod writes.
pub const OCI_VERSION: &str = "1.0.2";

pub fn spec_err(e: oci_spec::OciSpecError) -> Error {
    Error::Internal(format!("runtime spec: {e}"))
}

/// Paths masked in every unprivileged container (containerd's defaults).
pub const MASKED_PATHS: &[&str] = &[
    "/proc/acpi",
    "/proc/asound",
    "/proc/kcore",
    "/proc/keys",
    "/proc/latency_stats",
    "/proc/timer_list",
    "/proc/timer_stats",
    "/proc/sched_debug",
    "/proc/scsi",
    "/sys/firmware",
    "/sys/devices/virtual/powercap",
];

/// Paths read-only in every unprivileged container (containerd's defaults).
pub const READONLY_PATHS: &[&str] = &[
    "/proc/bus",
    "/proc/fs",
    "/proc/irq",
    "/proc/sys",
    "/proc/sysrq-trigger",
];

pub fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

pub fn mount(dest: &str, typ: &str, source: &str, options: &[&str]) -> Result<Mount> {
    MountBuilder::default()
        .destination(dest)
        .typ(typ)
        .source(source)
        .options(strings(options))
        .build()
        .map_err(spec_err)
}

pub fn bind(dest: &str, source: &Path, options: &[&str]) -> Result<Mount> {
    let mut opts = vec!["rbind"];
    opts.extend_from_slice(options);
    MountBuilder::default()
        .destination(dest)
        .typ("bind")
        .source(source)
        .options(strings(&opts))
        .build()
        .map_err(spec_err)
}

/// The kernel filesystems every container gets; /dev/shm is added by the caller (the pod's).
pub fn default_mounts(sys_readonly: bool) -> Result<Vec<Mount>> {
    let sys_opts: &[&str] = if sys_readonly {
        &["nosuid", "noexec", "nodev", "ro"]
    } else {
        &["nosuid", "noexec", "nodev"]
    };
    let cgroup_opts: &[&str] = if sys_readonly {
        &["nosuid", "noexec", "nodev", "relatime", "ro"]
    } else {
        &["nosuid", "noexec", "nodev", "relatime"]
    };
    Ok(vec![
        mount("/proc", "proc", "proc", &["nosuid", "noexec", "nodev"])?,
        mount(
            "/dev",
            "tmpfs",
            "tmpfs",
            &["nosuid", "strictatime", "mode=755", "size=65536k"],
        )?,
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
        )?,
        mount(
            "/dev/mqueue",
            "mqueue",
            "mqueue",
            &["nosuid", "noexec", "nodev"],
        )?,
        mount("/sys", "sysfs", "sysfs", sys_opts)?,
        mount("/sys/fs/cgroup", "cgroup", "cgroup", cgroup_opts)?,
    ])
}

pub fn namespace(typ: LinuxNamespaceType, path: Option<&Path>) -> Result<LinuxNamespace> {
    let mut b = LinuxNamespaceBuilder::default().typ(typ);
    if let Some(p) = path {
        b = b.path(p);
    }
    b.build().map_err(spec_err)
}

/// `/proc/<pid>/ns/<kind>`: how containers join the pause container's namespaces.
pub fn proc_ns(pid: u32, kind: &str) -> std::path::PathBuf {
    format!("/proc/{pid}/ns/{kind}").into()
}
