//! An app container created without the OCI runtime (`peapod-shim nsexec --create`): what
//! `runc create` does for a container's spec, in a few milliseconds instead of runc's tens
//! (two Go programs starting, runc's state files, its init's re-exec and Go runtime).
//!
//! In this helper (single-threaded): the spec checked ([`unsupported`]), the seccomp program
//! compiled (with libseccomp, before any namespace changes), oom_score_adj; the
//! container's cgroup made in every hierarchy and joined, with the spec's resources and
//! device rules (`peapod_host::cgroup_limits`); the namespaces given by path joined (the
//! pod's) and the others unshared, `/` made a slave (runc's default) or given the spec's
//! root propagation; the hostname and sysctls. Then the init is cloned as the shim's child
//! (`CLONE_PARENT`, in a new PID namespace when asked): it makes its root and pivots
//! ([`super::rootfs`]), becomes the process as an exec's process does ([`super::enter`]),
//! finds its program, and tells the helper it is ready; the helper writes the init's pid and
//! leaves. The init waits for a byte on the start descriptor (the shim's start) and execs.
//!
//! ```text
//! peapod-shim nsexec --create --bundle DIR --pid-file FILE
//!     (fd 3: the start pipe's read end; fd 4: the container's stderr; errors on stderr)
//! ```

use super::enter;
use super::pause::{self, Namespace};
use super::rootfs::{self, SpecDevice, SpecMount};
use super::seccomp;
use super::spec::{self, Lsm, Process, Seccomp};
use serde::Deserialize;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// The start pipe's read end, as the shim hands it to the helper.
pub const START_FD: i32 = 3;
/// The container's stderr (the helper's own stderr is the shim's log of it).
pub const STDERR_FD: i32 = 4;

/// The parts of a container's `config.json` this module reads; [`unsupported`] refuses a
/// spec that asks for what it does not do.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContainerSpec {
    pub root: Option<Root>,
    pub hostname: Option<String>,
    pub domainname: Option<String>,
    pub process: Option<Process>,
    #[serde(default)]
    pub mounts: Vec<SpecMount>,
    pub hooks: Option<serde_json::Value>,
    #[serde(default)]
    pub linux: ContainerLinux,
}

#[derive(Debug, Default, Deserialize)]
pub struct Root {
    pub path: PathBuf,
    #[serde(default)]
    pub readonly: bool,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContainerLinux {
    #[serde(default)]
    pub namespaces: Vec<Namespace>,
    #[serde(default)]
    pub sysctl: HashMap<String, String>,
    #[serde(default)]
    pub cgroups_path: String,
    pub resources: Option<serde_json::Value>,
    #[serde(default)]
    pub devices: Vec<SpecDevice>,
    #[serde(default)]
    pub masked_paths: Vec<String>,
    #[serde(default)]
    pub readonly_paths: Vec<String>,
    #[serde(default)]
    pub rootfs_propagation: String,
    #[serde(default)]
    pub mount_label: String,
    pub seccomp: Option<Seccomp>,
    pub uid_mappings: Option<serde_json::Value>,
    pub gid_mappings: Option<serde_json::Value>,
    pub personality: Option<serde_json::Value>,
    pub intel_rdt: Option<serde_json::Value>,
    pub time_offsets: Option<serde_json::Value>,
}

/// What this host allows the helper to do.
#[derive(Debug, Clone, Copy, Default)]
pub struct Host {
    pub lsm: Lsm,
    /// cgroup v2 only: the helper makes v1 (and hybrid) cgroups and their mounts alone.
    pub unified: bool,
}

impl Host {
    pub fn detect() -> Host {
        Host {
            lsm: Lsm::of_host(),
            unified: peapod_host::cgroup::is_unified(Path::new(peapod_host::cgroup::DEFAULT_ROOT)),
        }
    }
}

/// The propagation of `/` in the container's mount namespace (runc's default: a slave).
fn root_propagation(spec: &str) -> Option<libc::c_ulong> {
    Some(match spec {
        "" | "rslave" => libc::MS_SLAVE | libc::MS_REC,
        "slave" => libc::MS_SLAVE,
        "rprivate" => libc::MS_PRIVATE | libc::MS_REC,
        "private" => libc::MS_PRIVATE,
        _ => return None,
    })
}

/// Why this container is left to the runtime, if it is.
pub fn unsupported(spec: &ContainerSpec, host: &Host) -> Option<String> {
    let Some(process) = &spec.process else {
        return Some("no process".into());
    };
    if let Some(why) = spec::unsupported_process(process, &host.lsm) {
        return Some(why.into());
    }
    if process.user.umask.is_some() {
        return Some("a umask".into());
    }
    if spec.root.is_none() {
        return Some("no root".into());
    }
    if host.unified {
        return Some("a cgroup v2 host".into());
    }
    if spec.hooks.as_ref().is_some_and(|h| !h.is_null()) {
        return Some("hooks".into());
    }
    if spec.domainname.as_deref().is_some_and(|d| !d.is_empty()) {
        return Some("a domain name".into());
    }
    let linux = &spec.linux;
    if linux.uid_mappings.is_some() || linux.gid_mappings.is_some() {
        return Some("a user namespace".into());
    }
    if linux.personality.is_some() || linux.intel_rdt.is_some() || linux.time_offsets.is_some() {
        return Some("a personality, RDT class or time offsets".into());
    }
    if !linux.mount_label.is_empty() && host.lsm.selinux {
        return Some("an SELinux mount label".into());
    }
    if let Some(s) = &linux.seccomp {
        let notify = !s.listener_path.is_empty()
            || s.default_action == "SCMP_ACT_NOTIFY"
            || s.syscalls.iter().any(|c| c.action == "SCMP_ACT_NOTIFY");
        if notify {
            return Some("a seccomp notify listener".into());
        }
    }
    if root_propagation(&linux.rootfs_propagation).is_none() {
        return Some(format!("root propagation {:?}", linux.rootfs_propagation));
    }
    // `slice:prefix:name`: the systemd driver, whose scopes only systemd makes.
    if linux.cgroups_path.is_empty() || linux.cgroups_path.contains(':') {
        return Some("a cgroup that is not a cgroupfs path".into());
    }
    for ns in &linux.namespaces {
        let known = ["network", "ipc", "uts", "mount", "pid"].contains(&ns.kind.as_str());
        if !known {
            return Some(format!("a {} namespace", ns.kind));
        }
        if ns.path.is_some() && ns.kind == "mount" {
            return Some("a mount namespace to join".into());
        }
    }
    if !linux
        .namespaces
        .iter()
        .any(|n| n.kind == "mount" && n.path.is_none())
    {
        return Some("no mount namespace of its own".into());
    }
    if let Some(why) = linux
        .resources
        .as_ref()
        .and_then(peapod_host::cgroup_limits::unsupported)
    {
        return Some(why.into());
    }
    if let Err(why) = plan(spec, Path::new("/")) {
        return Some(why);
    }
    None
}

fn plan(spec: &ContainerSpec, bundle: &Path) -> Result<rootfs::Plan, String> {
    let root = spec.root.as_ref().ok_or("no root")?;
    let linux = &spec.linux;
    let propagation =
        root_propagation(&linux.rootfs_propagation).ok_or("an unknown root propagation")?;
    rootfs::Plan::new(
        bundle.join(&root.path),
        propagation,
        &spec.mounts,
        &linux.devices,
        &linux.masked_paths,
        &linux.readonly_paths,
        root.readonly,
        None,
    )
}

/// The helper's entry point; returns its exit status.
pub fn main(bundle: &Path, pid_file: &Path) -> i32 {
    pause::report(create(bundle), pid_file)
}

fn create(bundle: &Path) -> Result<i32, String> {
    let spec: ContainerSpec = spec::read(&bundle.join("config.json"))?;
    if let Some(why) = unsupported(&spec, &Host::detect()) {
        return Err(format!("a native create cannot do {why}"));
    }
    let Some(process) = &spec.process else {
        return Err("no process".into());
    };
    let linux = &spec.linux;
    let bpf = match &linux.seccomp {
        Some(profile) => Some((seccomp::compile(profile)?, seccomp::load_flags(profile)?)),
        None => None,
    };
    // Made before anything changes, so that every failure below is this process's alone.
    let plan = plan(&spec, bundle)?;
    let mut prepared = enter::prepare(process, bpf)?.created(plan, START_FD);
    if let Some(adj) = process.oom_score_adj {
        std::fs::write("/proc/self/oom_score_adj", adj.to_string())
            .map_err(|e| format!("set oom_score_adj {adj}: {e}"))?;
    }
    let cgroup_root = Path::new(peapod_host::cgroup::DEFAULT_ROOT);
    peapod_host::cgroup::create_and_join(cgroup_root, &linux.cgroups_path, std::process::id())
        .map_err(|e| format!("join the cgroup {}: {e}", linux.cgroups_path))?;
    let no_resources = serde_json::Value::Null;
    peapod_host::cgroup_limits::apply_v1(
        cgroup_root,
        &linux.cgroups_path,
        linux.resources.as_ref().unwrap_or(&no_resources),
        true,
    )?;
    // The mount namespace is the init's alone (made by its clone): the helper stays in the
    // host's, where the pid file is, while the init pivots (which moves every process of
    // its namespace to the new root).
    let others: Vec<Namespace> = linux
        .namespaces
        .iter()
        .filter(|n| n.kind != "mount")
        .map(|n| Namespace {
            kind: n.kind.clone(),
            path: n.path.clone(),
        })
        .collect();
    let new_pid_ns = pause::enter_namespaces(&others, 0)?;
    pause::set_hostname_and_sysctls(spec.hostname.as_deref(), &linux.sysctl)?;
    let flags = libc::CLONE_NEWNS | if new_pid_ns { libc::CLONE_NEWPID } else { 0 };
    enter::start_process(&mut prepared, [0, 1, STDERR_FD], flags)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The shape of peapod's own spec for an app container (spec crate), trimmed.
    const APP: &str = r#"{
        "root": {"path": "rootfs", "readonly": false},
        "hostname": "pod-a",
        "process": {"args": ["sh"], "user": {"uid": 0, "gid": 0}, "cwd": "/",
            "capabilities": {"bounding": ["CAP_CHOWN"]}, "oomScoreAdj": 1000},
        "mounts": [
            {"destination": "/proc", "type": "proc", "source": "proc", "options": ["nosuid"]},
            {"destination": "/dev", "type": "tmpfs", "source": "tmpfs", "options": ["mode=755"]},
            {"destination": "/sys/fs/cgroup", "type": "cgroup", "source": "cgroup",
             "options": ["ro"]},
            {"destination": "/etc/hosts", "type": "bind", "source": "/x/hosts",
             "options": ["rbind", "rprivate", "rw"]}
        ],
        "linux": {"namespaces": [{"type": "mount"}, {"type": "pid", "path": "/proc/1/ns/pid"},
            {"type": "ipc", "path": "/proc/1/ns/ipc"}, {"type": "network", "path": "/n"}],
            "cgroupsPath": "/kubepods/pod1/abc",
            "resources": {"memory": {"limit": 1000000}, "devices": [{"allow": false, "access": "rwm"}]},
            "maskedPaths": ["/proc/kcore"], "readonlyPaths": ["/proc/sys"]}
    }"#;

    fn spec(json: &str) -> ContainerSpec {
        serde_json::from_str(json).unwrap()
    }

    fn v1() -> Host {
        Host {
            lsm: Lsm::default(),
            unified: false,
        }
    }

    #[test]
    fn peapods_app_container_spec_is_created_natively() {
        assert_eq!(unsupported(&spec(APP), &v1()), None);
    }

    #[test]
    fn what_a_native_create_leaves_to_the_runtime() {
        let with = |from: &str, to: &str| {
            assert!(APP.contains(from), "{from}");
            unsupported(&spec(&APP.replace(from, to)), &v1())
        };
        let v2 = Host {
            unified: true,
            ..v1()
        };
        assert!(unsupported(&spec(APP), &v2).unwrap().contains("v2"));
        assert!(with(r#""linux": {"#, r#""linux": {"uidMappings": [],"#)
            .unwrap()
            .contains("user namespace"));
        assert!(
            with(r#""root": {"#, r#""hooks": {"prestart": []}, "root": {"#)
                .unwrap()
                .contains("hooks")
        );
        assert!(with(r#""cwd": "/""#, r#""cwd": "/", "terminal": true"#)
            .unwrap()
            .contains("terminal"));
        assert!(with(r#""type": "proc""#, r#""type": "overlay""#).is_some());
        assert!(with(r#""rprivate", "rw""#, r#""rshared", "rw""#).is_some());
        assert!(with(r#"{"type": "mount"}, "#, "")
            .unwrap()
            .contains("mount namespace"));
        assert!(with("/kubepods/pod1/abc", "kubepods.slice:cri:abc").is_some());
        assert!(with(
            r#""linux": {"#,
            r#""linux": {"rootfsPropagation": "rshared","#
        )
        .is_some());
        assert!(with(r#""memory": {"#, r#""unified": {"a": "b"}, "memory": {"#).is_some());
        assert!(with(
            r#""linux": {"#,
            r#""linux": {"seccomp": {"defaultAction": "SCMP_ACT_NOTIFY"},"#
        )
        .unwrap()
        .contains("notify"));
        assert!(unsupported(&spec("{}"), &v1()).is_some());
    }
}
