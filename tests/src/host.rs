//! Looking at the host: mounts, links, cgroups, processes — what a test checks was left behind.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Writes an executable script (a fake plugin, shim or runtime) at `path`.
pub fn write_script(path: &Path, text: &str) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, text).expect("write the script");
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
}

/// A runc that logs each command line to `<dir>/runtime-calls` and runs the real one:
/// `<dir>/bin/runc` (named runc, as the shim's native paths ask of the runtime), for tests
/// that count which calls a pod's life made.
pub fn logging_runc(dir: &Path) -> PathBuf {
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).expect("create the wrapper's directory");
    let real = Command::new("sh")
        .args(["-c", "command -v runc"])
        .output()
        .expect("command -v runc");
    let real = String::from_utf8_lossy(&real.stdout).trim().to_string();
    assert!(!real.is_empty(), "runc is not installed");
    let script = bin.join("runc");
    write_script(
        &script,
        &format!(
            "#!/bin/sh\necho \"$*\" >> {}\nexec {real} \"$@\"\n",
            dir.join("runtime-calls").display()
        ),
    );
    script
}

/// The command lines the [`logging_runc`] of `dir` has run.
pub fn runtime_calls(dir: &Path) -> Vec<String> {
    std::fs::read_to_string(dir.join("runtime-calls"))
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

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

/// Every cgroup directory at any depth below `parent`, in any hierarchy.
pub fn cgroups_below(parent: &str) -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        if let Ok(d) = std::fs::read_dir(dir) {
            for e in d.flatten() {
                if e.path().is_dir() {
                    out.push(e.path());
                    walk(&e.path(), out);
                }
            }
        }
    }
    let mut out = Vec::new();
    for root in cgroup_roots() {
        walk(&root.join(parent.trim_start_matches('/')), &mut out);
    }
    out
}

/// Whether a cgroup named `name` exists under `parent` in any hierarchy.
pub fn cgroup_exists(parent: &str, name: &str) -> bool {
    cgroup_path_exists(&format!("{}/{name}", parent.trim_end_matches('/')))
}

/// Whether cgroup `path` (from the hierarchy's root) exists in any hierarchy.
pub fn cgroup_path_exists(path: &str) -> bool {
    cgroup_roots()
        .iter()
        .any(|r| r.join(path.trim_start_matches('/')).is_dir())
}

/// Whether the host runs the unified hierarchy alone (cgroup v2).
pub fn unified_cgroups() -> bool {
    peapod_host::cgroup::is_unified(Path::new("/sys/fs/cgroup"))
}

/// The directory of cgroup `path` where a file of `v1_controller` is: that controller's
/// hierarchy on a v1 host, the unified hierarchy on v2.
pub fn cgroup_fs_dir(path: &str, v1_controller: &str) -> PathBuf {
    let root = Path::new("/sys/fs/cgroup");
    let rel = path.trim_start_matches('/');
    if unified_cgroups() {
        root.join(rel)
    } else {
        root.join(v1_controller).join(rel)
    }
}

/// The processes in cgroup `path` (its `pids` hierarchy on v1).
pub fn cgroup_procs(path: &str) -> Vec<u32> {
    std::fs::read_to_string(cgroup_fs_dir(path, "pids").join("cgroup.procs"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

/// Where the cgroups under a CRI cgroup parent are: the parent itself, or with the systemd
/// driver its slice's directory.
pub fn cgroup_dir_of(parent: &str, systemd: bool) -> String {
    if !systemd {
        return parent.to_string();
    }
    let slice = peapod_host::systemd::slice_name(parent);
    peapod_host::systemd::slice_path(&slice).unwrap_or_else(|| format!("/{slice}"))
}

/// Removes what a test daemon's pods left under cgroup parent `parent`: with the systemd
/// driver, its slice is stopped first (systemd stops the scopes in it and kills what runs
/// there), then whatever directories remain go.
pub fn remove_cgroups_of(parent: &str, systemd: bool) {
    if systemd {
        let slice = peapod_host::systemd::slice_name(parent);
        if let Ok(mut sd) =
            peapod_host::systemd::Systemd::connect(std::time::Duration::from_secs(120))
        {
            let _ = sd.stop_unit(&slice);
        }
    }
    remove_cgroup_tree(&cgroup_dir_of(parent, systemd));
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

/// CPU time a process has used so far, user and system, in clock ticks (every thread, dead
/// ones too): `/proc/<proc>/stat`'s utime and stime, `proc` a pid or "self".
pub fn cpu_ticks(proc: &str) -> Option<(u64, u64)> {
    let stat = std::fs::read_to_string(format!("/proc/{proc}/stat")).ok()?;
    // After the command's ")": state is field 3, utime 14 and stime 15.
    let (_, rest) = stat.rsplit_once(')')?;
    let f: Vec<&str> = rest.split_whitespace().collect();
    Some((f.get(11)?.parse().ok()?, f.get(12)?.parse().ok()?))
}

/// Clock ticks per second, the unit of [`cpu_ticks`].
pub fn ticks_per_second() -> f64 {
    // SAFETY: sysconf only reads a constant of the system.
    unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_ticks_reads_a_process_that_has_worked_and_not_one_that_is_gone() {
        let start = std::time::Instant::now();
        while start.elapsed() < std::time::Duration::from_millis(50) {
            std::hint::black_box(start.elapsed());
        }
        let (user, system) = cpu_ticks("self").expect("this process's stat");
        assert!(
            user + system > 0,
            "50 ms of spinning shows: {user} {system}"
        );
        assert_eq!(cpu_ticks("0"), None);
    }
}
