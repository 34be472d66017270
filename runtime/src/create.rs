//! An app container created without the OCI runtime (`peapod-shim nsexec --create`): what
//! `runc create` does for a container's spec, in a few milliseconds instead of runc's tens
//! (two Go programs starting, runc's state files, its init's re-exec and Go runtime).
//!
//! In this helper (single-threaded): the spec checked ([`unsupported`]), the seccomp program
//! compiled (with libseccomp, before any namespace changes), oom_score_adj; the
//! container's cgroup made and joined, with the spec's resources and device rules
//! ([`crate::cgroups`]: every v1 hierarchy, the unified one, or systemd's scope); the
//! namespaces given by path joined (the pod's) and the others unshared, `/` made a slave
//! (runc's default) or given the spec's root propagation; the hostname and sysctls. Then the
//! init is cloned as the shim's child (`CLONE_PARENT`, in a new PID namespace and a new
//! cgroup namespace when asked, the latter rooted at the cgroup just joined, as runc's init
//! unshares it once its cgroup is set): it makes its root and pivots
//! ([`crate::rootfs`]), becomes the process as an exec's process does ([`crate::process`]),
//! finds its program, and tells the helper it is ready; the helper writes the init's pid and
//! leaves. The init waits for a byte on the start descriptor (the shim's start) and execs.
//!
//! ```text
//! peapod-shim nsexec --create --bundle DIR --pid-file FILE
//!     (fd 3: the start pipe's read end; fd 4: the container's stderr; errors on stderr)
//! ```

use crate::cgroups::Driver;
use crate::host::Host;
use crate::rootfs::Plan;
use crate::spec::{self, Namespace, Spec};
use crate::{namespaces, process, seccomp, started};
use std::path::Path;

/// The start pipe's read end, as the shim hands it to the helper.
pub const START_FD: i32 = 3;
/// The container's stderr (the helper's own stderr is the shim's log of it).
pub const STDERR_FD: i32 = 4;

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
pub fn unsupported(spec: &Spec, host: &Host) -> Option<String> {
    let Some(process) = &spec.process else {
        return Some("no process".into());
    };
    if let Some(why) = process::unsupported_init(process, &host.lsm) {
        return Some(why.into());
    }
    if process.user.umask.is_some() {
        return Some("a umask".into());
    }
    if spec.root.is_none() {
        return Some("no root".into());
    }
    if spec.hooks.is_some() {
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
    if linux.seccomp.as_ref().is_some_and(|s| s.notifies()) {
        return Some("a seccomp notify listener".into());
    }
    if root_propagation(&linux.rootfs_propagation).is_none() {
        return Some(format!("root propagation {:?}", linux.rootfs_propagation));
    }
    if let Some(why) = host.cgroups.unsupported(spec) {
        return Some(why.into());
    }
    for ns in &linux.namespaces {
        let known = ["network", "ipc", "uts", "mount", "pid", "cgroup"].contains(&ns.kind.as_str());
        if !known {
            return Some(format!("a {} namespace", ns.kind));
        }
        if ns.path.is_some() && ["mount", "cgroup"].contains(&ns.kind.as_str()) {
            return Some(format!("a {} namespace to join", ns.kind));
        }
    }
    if !linux
        .namespaces
        .iter()
        .any(|n| n.kind == "mount" && n.path.is_none())
    {
        return Some("no mount namespace of its own".into());
    }
    if let Err(why) = plan(spec, Path::new("/"), host) {
        return Some(why);
    }
    None
}

fn plan(spec: &Spec, bundle: &Path, host: &Host) -> Result<Plan, String> {
    let root = spec.root.as_ref().ok_or("no root")?;
    let linux = &spec.linux;
    let propagation =
        root_propagation(&linux.rootfs_propagation).ok_or("an unknown root propagation")?;
    Plan::new(
        bundle.join(&root.path),
        propagation,
        &spec.mounts,
        &linux.devices,
        &linux.masked_paths,
        &linux.readonly_paths,
        root.readonly,
        None,
        host.cgroups.is_unified(),
    )
}

/// The helper's entry point; returns its exit status.
pub fn main(bundle: &Path, pid_file: &Path, driver: Driver) -> i32 {
    started::report(create(bundle, driver), pid_file)
}

fn create(bundle: &Path, driver: Driver) -> Result<i32, String> {
    let spec = spec::of_bundle(bundle)?;
    let host = Host::detect(driver);
    if let Some(why) = unsupported(&spec, &host) {
        return Err(format!("a native create cannot do {why}"));
    }
    let Some(process) = &spec.process else {
        return Err("no process".into());
    };
    let linux = &spec.linux;
    let bpf = seccomp::program(linux.seccomp.as_ref())?;
    // Made before anything changes, so that every failure below is this process's alone.
    let plan = plan(&spec, bundle, &host)?;
    let mut prepared = process::prepare(process, bpf, &host.lsm)?.created(plan, START_FD);
    if let Some(adj) = process.oom_score_adj {
        std::fs::write("/proc/self/oom_score_adj", adj.to_string())
            .map_err(|e| format!("set oom_score_adj {adj}: {e}"))?;
    }
    let no_resources = spec::Resources::default();
    host.cgroups.create(
        &linux.cgroups_path,
        std::process::id(),
        linux.resources.as_ref().unwrap_or(&no_resources),
    )?;
    // The mount namespace is the init's alone (made by its clone): the helper stays in the
    // host's, where the pid file is, while the init pivots (which moves every process of
    // its namespace to the new root).
    let others: Vec<Namespace> = linux
        .namespaces
        .iter()
        .filter(|n| n.kind != "mount")
        .cloned()
        .collect();
    let by_clone = namespaces::enter(&others, 0)?;
    namespaces::set_hostname_and_sysctls(spec.hostname.as_deref(), &linux.sysctl)?;
    process::start(
        &mut prepared,
        [0, 1, STDERR_FD],
        libc::CLONE_NEWNS | by_clone,
    )
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

    fn spec(json: &str) -> Spec {
        serde_json::from_str(json).unwrap()
    }

    fn v1() -> Host {
        Host {
            lsm: Default::default(),
            cgroups: crate::cgroups::Cgroups::at(Path::new("/nonexistent"), Driver::Cgroupfs),
        }
    }

    #[test]
    fn peapods_app_container_spec_is_created_natively() {
        assert_eq!(unsupported(&spec(APP), &v1()), None);
        // On a v2 host it has a cgroup namespace of its own.
        let v2 = APP.replace(
            r#"{"type": "mount"}, "#,
            r#"{"type": "mount"}, {"type": "cgroup"}, "#,
        );
        assert_eq!(unsupported(&spec(&v2), &v1()), None);
        let joined = APP.replace(
            r#"{"type": "mount"}, "#,
            r#"{"type": "mount"}, {"type": "cgroup", "path": "/x"}, "#,
        );
        assert!(unsupported(&spec(&joined), &v1())
            .unwrap()
            .contains("cgroup namespace"));
    }

    #[test]
    fn what_a_native_create_leaves_to_the_runtime() {
        let with = |from: &str, to: &str| {
            assert!(APP.contains(from), "{from}");
            unsupported(&spec(&APP.replace(from, to)), &v1())
        };
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
