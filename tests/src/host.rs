//! Looking at the host: mounts, links, cgroups, processes — what a test checks was left behind.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Mount points at or under `dir`, from /proc/self/mountinfo (deepest first).
pub fn mounts_under(dir: &Path) -> Vec<PathBuf> {
    let text = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let mut out: Vec<PathBuf> = text
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .map(|p| PathBuf::from(p.replace("\\040", " ")))
        .filter(|p| p.starts_with(dir))
        .collect();
    out.sort_by_key(|p| std::cmp::Reverse(p.as_os_str().len()));
    out
}

/// Lazily unmounts everything under `dir`.
pub fn unmount_all_under(dir: &Path) {
    for m in mounts_under(dir) {
        let _ = nix::mount::umount2(&m, nix::mount::MntFlags::MNT_DETACH);
    }
}

pub fn link_exists(name: &str) -> bool {
    Path::new("/sys/class/net").join(name).exists()
}

/// Interfaces enslaved to a bridge (the host ends of pods' veth pairs).
pub fn bridge_ports(bridge: &str) -> Vec<String> {
    std::fs::read_dir(Path::new("/sys/class/net").join(bridge).join("brif"))
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

pub fn delete_link(name: &str) {
    let _ = Command::new("ip").args(["link", "del", name]).output();
}

/// The v1 controllers (and the unified hierarchy) mounted under /sys/fs/cgroup.
fn cgroup_roots() -> Vec<PathBuf> {
    let root = Path::new("/sys/fs/cgroup");
    if root.join("cgroup.controllers").exists() {
        return vec![root.to_path_buf()];
    }
    std::fs::read_dir(root)
        .map(|d| {
            d.flatten()
                .map(|e| e.path())
                .filter(|p| p.is_dir())
                .collect()
        })
        .unwrap_or_default()
}

/// Every cgroup directory below `parent` (not `parent` itself), in any hierarchy.
pub fn cgroups_under(parent: &str) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for root in cgroup_roots() {
        let base = root.join(parent.trim_start_matches('/'));
        if let Ok(d) = std::fs::read_dir(&base) {
            out.extend(d.flatten().map(|e| e.path()).filter(|p| p.is_dir()));
        }
    }
    out
}

/// Whether a cgroup named `name` exists under `parent` in any hierarchy.
pub fn cgroup_exists(parent: &str, name: &str) -> bool {
    cgroup_roots()
        .iter()
        .any(|r| r.join(parent.trim_start_matches('/')).join(name).is_dir())
}

/// Removes `parent` and everything below it, in every hierarchy (children first), killing
/// any process still in it.
pub fn remove_cgroup_tree(parent: &str) {
    fn kill_all(dir: &Path) -> bool {
        let mut any = false;
        if let Ok(procs) = std::fs::read_to_string(dir.join("cgroup.procs")) {
            for pid in procs
                .split_whitespace()
                .filter_map(|p| p.parse::<i32>().ok())
            {
                // SAFETY: kill has no memory-safety preconditions.
                unsafe { libc::kill(pid, libc::SIGKILL) };
                any = true;
            }
        }
        if let Ok(d) = std::fs::read_dir(dir) {
            for e in d.flatten() {
                if e.path().is_dir() {
                    any |= kill_all(&e.path());
                }
            }
        }
        any
    }
    fn rm(dir: &Path) {
        if let Ok(d) = std::fs::read_dir(dir) {
            for e in d.flatten() {
                if e.path().is_dir() {
                    rm(&e.path());
                }
            }
        }
        let _ = std::fs::remove_dir(dir);
    }
    let mut killed = false;
    for root in cgroup_roots() {
        let base = root.join(parent.trim_start_matches('/'));
        if base != root {
            killed |= kill_all(&base);
        }
    }
    if killed {
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    for root in cgroup_roots() {
        let base = root.join(parent.trim_start_matches('/'));
        if base != root {
            rm(&base);
        }
    }
}

/// Live (non-zombie) processes whose command line contains `needle`.
pub fn processes_with(needle: &str) -> Vec<u32> {
    let mut out = Vec::new();
    let Ok(d) = std::fs::read_dir("/proc") else {
        return out;
    };
    for e in d.flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        if pid == std::process::id() {
            continue;
        }
        let Ok(cmd) = std::fs::read(e.path().join("cmdline")) else {
            continue;
        };
        let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
        if cmd.contains(needle) {
            out.push(pid);
        }
    }
    out
}

/// Runs a command inside the network namespace pinned at `netns`.
pub fn in_netns(netns: &Path, args: &[&str]) -> Output {
    Command::new("nsenter")
        .arg(format!("--net={}", netns.display()))
        .arg("--")
        .args(args)
        .output()
        .expect("run nsenter")
}

/// Runs a command in namespaces of process `pid` (`--uts`, `--ipc`, ...).
pub fn in_namespaces_of(pid: u32, ns_flags: &[&str], args: &[&str]) -> Output {
    Command::new("nsenter")
        .arg(format!("--target={pid}"))
        .args(ns_flags)
        .arg("--")
        .args(args)
        .output()
        .expect("run nsenter")
}

/// IPv4 addresses of `ifname` inside a netns (`ip -o -4 addr show`).
pub fn ipv4_addrs_in(netns: &Path, ifname: &str) -> Vec<String> {
    let out = in_netns(netns, &["ip", "-o", "-4", "addr", "show", "dev", ifname]);
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let mut it = l.split_whitespace();
            it.position(|w| w == "inet")?;
            it.next()
                .map(|a| a.split('/').next().unwrap_or(a).to_string())
        })
        .collect()
}
