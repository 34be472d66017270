//! A pod's pause started without the OCI runtime (`peapod-shim nsexec --pause`): what
//! `runc run --detach` does for the pause's spec, which asks for little (no mounts it needs,
//! no privilege, no seccomp), in a few milliseconds instead of runc's tens (two Go programs
//! starting, runc's state files, the mounts of a root nothing reads).
//!
//! In this helper (single-threaded: unsharing a mount namespace and forking are allowed):
//! oom_score_adj; the spec's cgroup made in every hierarchy and joined (the pause is born in
//! it), with the pause's CPU shares and device denial on a v1 host, and on v2 (cgroupfs or
//! systemd's scope) made and limited as an app container's is ([`Cgroups::create`]: runc's
//! managers, the device filter included); the namespaces given by path joined
//! (the pod's network namespace) and the others unshared (IPC, UTS, mount; a PID namespace
//! is made by the clone, the pause being its init); the hostname and the pod's sysctls set
//! in those namespaces. Then the pause is cloned as the shim's child (`CLONE_PARENT`),
//! chroots into its root, takes its user, capabilities and no_new_privs as an exec's process
//! does (`process`), and execs. The helper writes the pause's pid to the pid file and leaves.
//!
//! What it does not do is told by [`unsupported`], before anything starts: the shim then runs
//! the pause through the runtime as before.
//!
//! ```text
//! peapod-shim nsexec --pause --bundle DIR --pid-file FILE [--cgroup-driver systemd]
//!     (errors on stderr; exit 1)
//! ```

use crate::cgroups::{Cgroups, Driver};
use crate::host::Host;
use crate::process;
use crate::spec::{self, Linux, Spec};
use crate::{namespaces, started};
use std::path::Path;

/// Why this pause is left to the runtime, if it is.
pub fn unsupported(spec: &Spec, host: &Host) -> Option<&'static str> {
    let Some(process) = &spec.process else {
        return Some("no process");
    };
    if let Some(why) = process::unsupported_init(process, &host.lsm) {
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
    if let Some(why) = host.cgroups.unsupported(spec) {
        return Some(why);
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

/// The helper's entry point; returns its exit status.
pub fn main(bundle: &Path, pid_file: &Path, driver: Driver) -> i32 {
    started::report(start(bundle, driver), pid_file)
}

fn start(bundle: &Path, driver: Driver) -> Result<i32, String> {
    let spec = spec::of_bundle(bundle)?;
    let host = Host::detect(driver);
    if let Some(why) = unsupported(&spec, &host) {
        return Err(format!("a native pause cannot do {why}"));
    }
    let (Some(process), Some(root)) = (&spec.process, &spec.root) else {
        return Err("no process or root".into());
    };
    let root = bundle.join(&root.path);
    // Made before anything changes, so that every failure below is this process's alone.
    let mut prepared = process::prepare(process, None, &host.lsm)?.with_root(&root)?;
    if let Some(adj) = process.oom_score_adj {
        std::fs::write("/proc/self/oom_score_adj", adj.to_string())
            .map_err(|e| format!("set oom_score_adj {adj}: {e}"))?;
    }
    if host.cgroups.is_unified() {
        let none = spec::Resources::default();
        let resources = spec.linux.resources.as_ref().unwrap_or(&none);
        host.cgroups
            .create(&spec.linux.cgroups_path, std::process::id(), resources)?;
    } else {
        join_cgroup(&host.cgroups, &spec.linux)?;
    }
    // Nothing mounted in the pause's namespace reaches the host, as with runc's rprivate.
    let propagation = libc::MS_REC | libc::MS_PRIVATE;
    let by_clone = namespaces::enter(&spec.linux.namespaces, propagation)?;
    namespaces::set_hostname_and_sysctls(spec.hostname.as_deref(), &spec.linux.sysctl)?;
    process::start(&mut prepared, [0, 1, 2], by_clone)
}

/// On a v1 host, the spec's cgroup in every hierarchy, joined, with the pause's resources:
/// CPU shares (v1 `cpu.shares`, and `cpu.weight` by runc's conversion where a hierarchy has
/// it) and every device denied. Each file is written where the hierarchy has it.
fn join_cgroup(cgroups: &Cgroups, linux: &Linux) -> Result<(), String> {
    let dirs = cgroups
        .create_and_join(&linux.cgroups_path, std::process::id())
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

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(json: &str) -> Spec {
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

    fn host(driver: Driver) -> Host {
        Host {
            lsm: Default::default(),
            cgroups: Cgroups::at(Path::new("/nonexistent"), driver),
        }
    }

    #[test]
    fn peapods_pause_spec_is_started_natively() {
        assert_eq!(unsupported(&spec(PAUSE), &host(Driver::Cgroupfs)), None);
    }

    #[test]
    fn what_a_native_pause_leaves_to_the_runtime() {
        let none = host(Driver::Cgroupfs);
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
        // The systemd driver on this (v1-shaped) root: the runtime's.
        let sd = PAUSE.replace("/kubepods/pod1/abc", "kubepods.slice:peapod:abc");
        assert!(unsupported(&spec(&sd), &host(Driver::Systemd))
            .unwrap()
            .contains("v1"));
    }
}
