//! A container's namespaces as the helpers enter them: those the spec gives by path joined and
//! the others made (`enter`, with the hostname and the pod's sysctls set in them), and
//! every namespace of a running container's init joined at once (`to_join`, for an exec).

use crate::spec::Namespace;
use std::collections::HashMap;
use std::path::Path;

/// The clone flag of a namespace kind the native paths let through (`pause::unsupported`,
/// `create::unsupported`); PID for any other.
pub fn flag(kind: &str) -> libc::c_int {
    match kind {
        "network" => libc::CLONE_NEWNET,
        "ipc" => libc::CLONE_NEWIPC,
        "uts" => libc::CLONE_NEWUTS,
        "mount" => libc::CLONE_NEWNS,
        "cgroup" => libc::CLONE_NEWCGROUP,
        _ => libc::CLONE_NEWPID,
    }
}

/// Joins the namespaces given by path (all opened first: a path may be relative to a
/// namespace being left) and unshares the others but PID and cgroup, a new mount namespace's
/// `/` given `propagation`. Returns the clone flags of the new namespaces the process to
/// start must be cloned into: a PID namespace (the clone makes its init) and a cgroup
/// namespace (rooted where the clone is born: its container's cgroup, joined by then).
pub fn enter(namespaces: &[Namespace], propagation: libc::c_ulong) -> Result<libc::c_int, String> {
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
    Ok(["pid", "cgroup"]
        .into_iter()
        .filter(|k| fresh(k))
        .fold(0, |acc, k| acc | flag(k)))
}

/// A sysctl of the pod, written in this process's namespaces (/proc/sys resolves net.*,
/// kernel IPC and UTS keys by the writer's namespaces).
pub fn write_sysctl(key: &str, value: &str) -> Result<(), String> {
    if key.is_empty() || key.split(['.', '/']).any(|p| p.is_empty() || p == "..") {
        return Err(format!("sysctl {key:?} is not a name"));
    }
    let path = Path::new("/proc/sys").join(key.replace('.', "/"));
    std::fs::write(&path, value).map_err(|e| format!("sysctl {key}={value}: {e}"))
}

/// The spec's hostname and sysctls, in this process's (new or joined) namespaces.
pub fn set_hostname_and_sysctls(
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

/// Namespaces an exec joins, by their /proc/PID/ns names (user first: the kernel joins the
/// user namespace first anyway when several are given to one setns).
const NAMESPACES: [(&str, libc::c_int); 8] = [
    ("user", libc::CLONE_NEWUSER),
    ("mnt", libc::CLONE_NEWNS),
    ("net", libc::CLONE_NEWNET),
    ("ipc", libc::CLONE_NEWIPC),
    ("uts", libc::CLONE_NEWUTS),
    ("pid", libc::CLONE_NEWPID),
    ("cgroup", libc::CLONE_NEWCGROUP),
    ("time", 0x80), // CLONE_NEWTIME
];

/// The setns flags for every namespace of `pid` that this process is not in.
pub fn to_join(pid: i32) -> Result<libc::c_int, String> {
    let mut flags = 0;
    for (name, flag) in NAMESPACES {
        let theirs = std::fs::read_link(format!("/proc/{pid}/ns/{name}"));
        let ours = std::fs::read_link(format!("/proc/self/ns/{name}"));
        match (theirs, ours) {
            (Ok(t), Ok(o)) if t != o => flags |= flag,
            (Ok(_), Ok(_)) => {}
            // A kernel without this namespace kind.
            (Err(e), _) | (_, Err(e)) if e.kind() == std::io::ErrorKind::NotFound => {}
            (Err(e), _) | (_, Err(e)) => return Err(format!("namespace {name} of {pid}: {e}")),
        }
    }
    Ok(flags)
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert_eq!(flag("cgroup"), libc::CLONE_NEWCGROUP);
    }
}
