//! A pod's pause started without the OCI runtime (`peapod-shim nsexec --pause`): what
//! `runc run --detach` does for the pause's spec, which asks for little (no mounts it needs,
//! no privilege, no seccomp), in a few milliseconds instead of runc's tens (two Go programs
//! starting, runc's state files, the mounts of a root nothing reads).
//!
//! In this helper (single-threaded: unsharing a mount namespace and forking are allowed):
//! oom_score_adj; the spec's cgroup made in every hierarchy and joined (the pause is born in
//! it), with the pause's CPU shares and device denial; the namespaces given by path joined
//! (the pod's network namespace) and the others unshared (IPC, UTS, mount; a PID namespace
//! is made by the clone, the pause being its init); the hostname and the pod's sysctls set
//! in those namespaces. Then the pause is cloned as the shim's child (`CLONE_PARENT`),
//! chroots into its root, takes its user, capabilities and no_new_privs as an exec's process
//! does (`enter`), and execs. The helper writes the pause's pid to the pid file and leaves.
//!
//! What it does not do is told by [`unsupported`], before anything starts: the shim then runs
//! the pause through the runtime as before.
//!
//! ```text
//! peapod-shim nsexec --pause --bundle DIR --pid-file FILE    (errors on stderr; exit 1)
//! ```

use super::enter;
use super::spec::{self, Lsm, Process};
use serde::Deserialize;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// The parts of a pause's `config.json` this module reads; [`unsupported`] refuses a spec
/// that asks for more than it does.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PauseSpec {
    pub root: Option<Root>,
    pub hostname: Option<String>,
    pub process: Option<Process>,
    #[serde(default)]
    pub linux: PauseLinux,
}

#[derive(Debug, Default, Deserialize)]
pub struct Root {
    pub path: PathBuf,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PauseLinux {
    #[serde(default)]
    pub namespaces: Vec<Namespace>,
    #[serde(default)]
    pub sysctl: HashMap<String, String>,
    #[serde(default)]
    pub cgroups_path: String,
    pub resources: Option<Resources>,
    pub uid_mappings: Option<serde_json::Value>,
    pub seccomp: Option<serde_json::Value>,
    pub personality: Option<serde_json::Value>,
    pub intel_rdt: Option<serde_json::Value>,
}

#[derive(Debug, Deserialize)]
pub struct Namespace {
    #[serde(rename = "type")]
    pub kind: String,
    pub path: Option<PathBuf>,
}

#[derive(Debug, Default, Deserialize)]
pub struct Resources {
    pub cpu: Option<Cpu>,
}

#[derive(Debug, Default, Deserialize)]
pub struct Cpu {
    pub shares: Option<u64>,
}

/// Why this pause is left to the runtime, if it is.
pub fn unsupported(spec: &PauseSpec, lsm: &Lsm) -> Option<&'static str> {
    let Some(process) = &spec.process else {
        return Some("no process");
    };
    if let Some(why) = spec::unsupported_process(process, lsm) {
        return Some(why);
    }
    if spec.root.is_none() {
        return Some("no root");
    }
    let linux = &spec.linux;
    if linux.uid_mappings.is_some() {
        return Some("a user namespace");
    }
    if linux.seccomp.is_some() || linux.personality.is_some() || linux.intel_rdt.is_some() {
        return Some("a seccomp profile, personality or RDT class");
    }
    // `slice:prefix:name`: the systemd driver, whose scopes only systemd makes.
    if linux.cgroups_path.is_empty() || linux.cgroups_path.contains(':') {
        return Some("a cgroup that is not a cgroupfs path");
    }
    for ns in &linux.namespaces {
        let known = ["network", "ipc", "uts", "mount", "pid"].contains(&ns.kind.as_str());
        if !known {
            return Some("a user, cgroup or time namespace");
        }
        if ns.path.is_some() && ns.kind == "mount" {
            return Some("a mount namespace to join");
        }
    }
    None
}

/// The clone flag of a namespace kind [`unsupported`] lets through.
pub(super) fn flag(kind: &str) -> libc::c_int {
    match kind {
        "network" => libc::CLONE_NEWNET,
        "ipc" => libc::CLONE_NEWIPC,
        "uts" => libc::CLONE_NEWUTS,
        "mount" => libc::CLONE_NEWNS,
        _ => libc::CLONE_NEWPID,
    }
}

/// The helper's entry point; returns its exit status.
pub fn main(bundle: &Path, pid_file: &Path) -> i32 {
    report(start(bundle), pid_file)
}

/// A helper's exit status for `started`: 0 with the process's pid written to `pid_file`, or
/// 1 with why on stderr.
pub(super) fn report(started: Result<i32, String>, pid_file: &Path) -> i32 {
    match started {
        Ok(pid) => {
            // Written whole, then renamed: the shim reads it only after this exits, but a
            // torn file must never name a wrong process.
            let tmp = pid_file.with_extension("tmp");
            match std::fs::write(&tmp, pid.to_string())
                .and_then(|()| std::fs::rename(&tmp, pid_file))
            {
                Ok(()) => 0,
                Err(e) => {
                    eprintln!("write {}: {e}", pid_file.display());
                    1
                }
            }
        }
        Err(message) => {
            eprintln!("{message}");
            1
        }
    }
}

/// The spec's hostname and sysctls, in this process's (new or joined) namespaces.
pub(super) fn set_hostname_and_sysctls(
    hostname: Option<&str>,
    sysctls: &HashMap<String, String>,
) -> Result<(), String> {
    if let Some(name) = hostname.filter(|h| !h.is_empty()) {
        // SAFETY: a pointer and length of a live string.
        if unsafe { libc::sethostname(name.as_ptr().cast(), name.len()) } < 0 {
            return Err(format!(
                "set the hostname {name:?}: {}",
                std::io::Error::last_os_error()
            ));
        }
    }
    for (key, value) in sysctls {
        write_sysctl(key, value)?;
    }
    Ok(())
}

fn start(bundle: &Path) -> Result<i32, String> {
    let spec: PauseSpec = spec::read(&bundle.join("config.json"))?;
    if let Some(why) = unsupported(&spec, &Lsm::of_host()) {
        return Err(format!("a native pause cannot do {why}"));
    }
    let (Some(process), Some(root)) = (&spec.process, &spec.root) else {
        return Err("no process or root".into());
    };
    let root = bundle.join(&root.path);
    // Made before anything changes, so that every failure below is this process's alone.
    let mut prepared = enter::prepare(process, None)?.with_root(&root)?;
    if let Some(adj) = process.oom_score_adj {
        std::fs::write("/proc/self/oom_score_adj", adj.to_string())
            .map_err(|e| format!("set oom_score_adj {adj}: {e}"))?;
    }
    join_cgroup(&spec.linux)?;
    // Nothing mounted in the pause's namespace reaches the host, as with runc's rprivate.
    let new_pid_ns = enter_namespaces(&spec.linux.namespaces, libc::MS_REC | libc::MS_PRIVATE)?;
    set_hostname_and_sysctls(spec.hostname.as_deref(), &spec.linux.sysctl)?;
    let flags = if new_pid_ns { libc::CLONE_NEWPID } else { 0 };
    enter::start_process(&mut prepared, [0, 1, 2], flags)
}

/// The spec's cgroup in every hierarchy, joined, with the pause's resources: CPU shares (v1
/// `cpu.shares`, v2 `cpu.weight` by runc's conversion) and, on v1, every device denied.
fn join_cgroup(linux: &PauseLinux) -> Result<(), String> {
    let root = Path::new(peapod_host::cgroup::DEFAULT_ROOT);
    let dirs = peapod_host::cgroup::create_and_join(root, &linux.cgroups_path, std::process::id())
        .map_err(|e| format!("join the cgroup {}: {e}", linux.cgroups_path))?;
    let shares = linux
        .resources
        .as_ref()
        .and_then(|r| r.cpu.as_ref())
        .and_then(|c| c.shares);
    for dir in dirs {
        let write_if_there = |file: &str, value: &str| -> Result<(), String> {
            let path = dir.join(file);
            if !path.exists() {
                return Ok(());
            }
            std::fs::write(&path, value).map_err(|e| format!("write {}: {e}", path.display()))
        };
        if let Some(shares) = shares {
            write_if_there("cpu.shares", &shares.to_string())?;
            let weight = 1 + ((shares.clamp(2, 262_144) - 2) * 9999) / 262_142;
            write_if_there("cpu.weight", &weight.to_string())?;
        }
        write_if_there("devices.deny", "a")?;
    }
    Ok(())
}

/// Joins the namespaces given by path (all opened first: a path may be relative to a
/// namespace being left) and unshares the others but PID, a new mount namespace's `/` given
/// `propagation`; true if a new PID namespace is wanted (the clone makes it).
pub(super) fn enter_namespaces(
    namespaces: &[Namespace],
    propagation: libc::c_ulong,
) -> Result<bool, String> {
    let mut joins = Vec::new();
    for ns in namespaces {
        if let Some(path) = &ns.path {
            let file = std::fs::File::open(path)
                .map_err(|e| format!("open the {} namespace {}: {e}", ns.kind, path.display()))?;
            joins.push((file, flag(&ns.kind), path));
        }
    }
    for (file, kind, path) in &joins {
        use std::os::fd::AsRawFd;
        // SAFETY: setns on a live descriptor.
        if unsafe { libc::setns(file.as_raw_fd(), *kind) } < 0 {
            return Err(format!(
                "join the namespace {}: {}",
                path.display(),
                std::io::Error::last_os_error()
            ));
        }
    }
    let fresh = |kind: &str| {
        namespaces
            .iter()
            .any(|n| n.kind == kind && n.path.is_none())
    };
    let unshare = ["network", "ipc", "uts", "mount"]
        .into_iter()
        .filter(|k| fresh(k))
        .fold(0, |acc, k| acc | flag(k));
    // SAFETY: unshare with namespace flags, in a single-threaded process.
    if unshare != 0 && unsafe { libc::unshare(unshare) } < 0 {
        return Err(format!(
            "unshare namespaces: {}",
            std::io::Error::last_os_error()
        ));
    }
    if unshare & libc::CLONE_NEWNS != 0 && propagation != 0 {
        // SAFETY: valid C strings; no data.
        let made_private = unsafe {
            libc::mount(
                std::ptr::null(),
                c"/".as_ptr(),
                std::ptr::null(),
                propagation,
                std::ptr::null(),
            )
        };
        if made_private < 0 {
            return Err(format!(
                "set the propagation of /: {}",
                std::io::Error::last_os_error()
            ));
        }
    }
    Ok(fresh("pid"))
}

/// A sysctl of the pod, written in this process's namespaces (/proc/sys resolves net.*,
/// kernel IPC and UTS keys by the writer's namespaces).
pub(super) fn write_sysctl(key: &str, value: &str) -> Result<(), String> {
    if key.is_empty() || key.split(['.', '/']).any(|p| p.is_empty() || p == "..") {
        return Err(format!("sysctl {key:?} is not a name"));
    }
    let path = Path::new("/proc/sys").join(key.replace('.', "/"));
    std::fs::write(&path, value).map_err(|e| format!("sysctl {key}={value}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(json: &str) -> PauseSpec {
        serde_json::from_str(json).unwrap()
    }

    const PAUSE: &str = r#"{
        "root": {"path": "rootfs", "readonly": true},
        "hostname": "pod-a",
        "process": {"args": ["/pause"], "user": {"uid": 65535, "gid": 65535}, "cwd": "/",
            "capabilities": {}, "noNewPrivileges": true, "oomScoreAdj": -998},
        "linux": {"namespaces": [{"type": "mount"}, {"type": "pid"}, {"type": "ipc"},
            {"type": "uts"}, {"type": "network", "path": "/run/peapod/netns/abc"}],
            "cgroupsPath": "/kubepods/pod1/abc", "sysctl": {"net.ipv4.ip_forward": "1"},
            "resources": {"cpu": {"shares": 2}, "devices": [{"allow": false, "access": "rwm"}]},
            "maskedPaths": ["/proc/kcore"]}
    }"#;

    #[test]
    fn peapods_pause_spec_is_started_natively() {
        assert_eq!(unsupported(&spec(PAUSE), &Lsm::default()), None);
    }

    #[test]
    fn what_a_native_pause_leaves_to_the_runtime() {
        let none = Lsm::default();
        let with = |from: &str, to: &str| {
            assert!(PAUSE.contains(from), "{from}");
            unsupported(&spec(&PAUSE.replace(from, to)), &none)
        };
        assert!(with(r#""linux": {"#, r#""linux": {"uidMappings": [],"#)
            .unwrap()
            .contains("user namespace"));
        assert!(with(r#"{"type": "mount"}"#, r#"{"type": "user"}"#).is_some());
        assert!(with(r#"{"type": "mount"}"#, r#"{"type": "mount", "path": "/x"}"#).is_some());
        assert!(with("/kubepods/pod1/abc", "kubepods.slice:cri:abc")
            .unwrap()
            .contains("cgroupfs"));
        assert!(with(r#""linux": {"#, r#""linux": {"seccomp": {},"#).is_some());
        assert!(with(r#""args": ["/pause"]"#, r#""args": []"#).is_some());
        assert!(with(r#""cwd": "/""#, r#""cwd": "/", "terminal": true"#).is_some());
        assert!(unsupported(&spec("{}"), &none).is_some());
    }

    #[test]
    fn sysctl_names_cannot_leave_proc_sys() {
        assert!(write_sysctl("../../etc/x", "1").is_err());
        assert!(write_sysctl("net..x", "1").is_err());
        assert!(write_sysctl("", "1").is_err());
    }

    #[test]
    fn namespace_kinds_map_to_their_clone_flags() {
        assert_eq!(flag("network"), libc::CLONE_NEWNET);
        assert_eq!(flag("ipc"), libc::CLONE_NEWIPC);
        assert_eq!(flag("uts"), libc::CLONE_NEWUTS);
        assert_eq!(flag("mount"), libc::CLONE_NEWNS);
        assert_eq!(flag("pid"), libc::CLONE_NEWPID);
    }
}
