//! What the spec depends on that only the host knows.
//!
//! [`container_spec`](crate::container_spec) itself does no I/O (except reading a Localhost
//! seccomp profile). Facts about the host come in as a [`HostFacts`] value, and the few
//! per-container look-ups (bind-mount sources, device nodes, mount propagation) go through
//! the [`HostPaths`] trait. [`HostFacts::detect`] and [`RealHost`] are the real
//! implementations for the daemon; tests use plain values and fakes.

use crate::caps::capabilities_from_mask;
use std::io;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

/// A device node on the host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostDevice {
    /// Where it is on the host (for host devices of privileged containers, also where it
    /// goes in the container).
    pub path: PathBuf,
    /// 'c' (character) or 'b' (block).
    pub kind: char,
    pub major: i64,
    pub minor: i64,
    /// Permission bits (`mode & 0o7777`).
    pub file_mode: u32,
    pub uid: u32,
    pub gid: u32,
}

/// Facts about the host and the OCI runtime that shape every container's spec.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostFacts {
    /// `CAP_*` names in the daemon's bounding set: all that "privileged" or "ALL" may grant
    /// (runc refuses capabilities outside it: "unable to apply caps"). Empty: not known, every
    /// capability is assumed grantable.
    pub bounding_caps: Vec<String>,
    /// Without CAP_SYS_RESOURCE: the daemon's own oom_score_adj. Requested values below it
    /// are raised to it, since the runtime could not lower it (containerd's
    /// `restrict_oom_score_adj`).
    pub oom_score_adj_floor: Option<i32>,
    /// The unified cgroup v2 hierarchy (not v1, not hybrid).
    pub cgroup_v2: bool,
    /// Swap accounting exists (v1 `memory.memsw.limit_in_bytes`, v2 `memory.swap.max`).
    pub swap_controller: bool,
    /// The hugetlb controller exists; hugepage limits are dropped when it does not
    /// (containerd's default `tolerate_missing_hugetlb_controller`).
    pub hugetlb_controller: bool,
    /// The kernel has seccomp. When false, asking for a profile is an error.
    pub seccomp_enabled: bool,
    /// AppArmor is enabled and the daemon has loaded [`DEFAULT_APPARMOR_PROFILE`]
    /// (RuntimeDefault uses it).
    pub apparmor_enabled: bool,
    /// SELinux labels are to be applied.
    pub selinux_enabled: bool,
    /// The host's device nodes, for privileged containers (see [`host_devices`]).
    pub host_devices: Vec<HostDevice>,
    /// Recursive read-only mounts ("rro") work: kernel >= 5.12 and the OCI runtime knows
    /// the option (runc >= 1.2; see [`runtime_supports_rro`]).
    pub rro_supported: bool,
}

/// The AppArmor profile RuntimeDefault selects. The daemon loads it (as containerd loads
/// `cri-containerd.apparmor.d`) before reporting `apparmor_enabled`.
pub const DEFAULT_APPARMOR_PROFILE: &str = "peapod-default";

impl Default for HostFacts {
    /// Conservative facts: nothing known about capabilities, no floor, cgroup v1, seccomp on,
    /// no LSMs, no host devices, no rro.
    fn default() -> Self {
        HostFacts {
            bounding_caps: Vec::new(),
            oom_score_adj_floor: None,
            cgroup_v2: false,
            swap_controller: false,
            hugetlb_controller: false,
            seccomp_enabled: true,
            apparmor_enabled: false,
            selinux_enabled: false,
            host_devices: Vec::new(),
            rro_supported: false,
        }
    }
}

fn status_mask(status: &str, field: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
}

/// Whether the kernel release (`6.1.0-13-amd64`) is at least `major.minor`.
fn release_at_least(release: &str, major: u32, minor: u32) -> bool {
    let mut nums = release
        .split(|c: char| !c.is_ascii_digit())
        .filter(|s| !s.is_empty())
        .map(|s| s.parse::<u32>().unwrap_or(0));
    let (a, b) = (nums.next().unwrap_or(0), nums.next().unwrap_or(0));
    (a, b) >= (major, minor)
}

/// Whether `runc features` (or crun's) JSON lists the "rro" mount option.
pub fn runtime_supports_rro(features_json: &[u8]) -> bool {
    serde_json::from_slice::<serde_json::Value>(features_json)
        .ok()
        .and_then(|v| {
            v.get("mountOptions")?
                .as_array()
                .map(|a| a.iter().any(|o| o == "rro"))
        })
        .unwrap_or(false)
}

fn own_cgroup_v2_dir() -> Option<PathBuf> {
    let cg = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let rel = cg.lines().find_map(|l| l.strip_prefix("0::"))?;
    Some(Path::new("/sys/fs/cgroup").join(rel.trim_start_matches('/')))
}

impl HostFacts {
    /// Reads the facts of this host: the daemon's capabilities and oom_score_adj
    /// (`/proc/self/status`, `/proc/self/oom_score_adj`), the cgroup layout and controllers,
    /// seccomp, AppArmor (`/sys/module/apparmor/parameters/enabled`; the daemon must still
    /// load [`DEFAULT_APPARMOR_PROFILE`], or clear the flag), SELinux (selinuxfs mounted;
    /// containerd leaves SELinux off unless configured, so the daemon may clear it), the
    /// devices under /dev, and rro (kernel >= 5.12 and `runtime_rro`, which the daemon gets
    /// from [`runtime_supports_rro`] on `<runtime> features`).
    pub fn detect(runtime_rro: bool) -> HostFacts {
        let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        let bounding_caps = status_mask(&status, "CapBnd:")
            .map(capabilities_from_mask)
            .unwrap_or_default();
        let has_sys_resource = status_mask(&status, "CapEff:")
            .map(|m| m & (1 << 24) != 0)
            .unwrap_or(true);
        let oom_score_adj_floor = if has_sys_resource {
            None
        } else {
            std::fs::read_to_string("/proc/self/oom_score_adj")
                .ok()
                .and_then(|s| s.trim().parse().ok())
        };
        let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
        let cgroup_v2 = mounts.lines().any(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            f.len() > 2 && f[1] == "/sys/fs/cgroup" && f[2] == "cgroup2"
        });
        let (swap_controller, hugetlb_controller) = if cgroup_v2 {
            let controllers =
                std::fs::read_to_string("/sys/fs/cgroup/cgroup.controllers").unwrap_or_default();
            let swap = own_cgroup_v2_dir()
                .map(|d| d.join("memory.swap.max").exists())
                .unwrap_or(false);
            (swap, controllers.split_whitespace().any(|c| c == "hugetlb"))
        } else {
            (
                Path::new("/sys/fs/cgroup/memory/memory.memsw.limit_in_bytes").exists(),
                Path::new("/sys/fs/cgroup/hugetlb").exists(),
            )
        };
        let seccomp_enabled = status.lines().any(|l| l.starts_with("Seccomp:"));
        let apparmor_enabled = std::fs::read_to_string("/sys/module/apparmor/parameters/enabled")
            .map(|s| s.trim() == "Y")
            .unwrap_or(false);
        let selinux_enabled = Path::new("/sys/fs/selinux/enforce").exists();
        let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
        HostFacts {
            bounding_caps,
            oom_score_adj_floor,
            cgroup_v2,
            swap_controller,
            hugetlb_controller,
            seccomp_enabled,
            apparmor_enabled,
            selinux_enabled,
            host_devices: host_devices().unwrap_or_default(),
            rro_supported: runtime_rro && release_at_least(&release, 5, 12),
        }
    }
}

/// How the mount holding a host path propagates (from `/proc/self/mountinfo`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostPropagation {
    Shared,
    Slave,
    Private,
}

/// The per-container host look-ups `container_spec` needs.
pub trait HostPaths {
    /// The source for a CRI bind mount of `host_path`: created as a directory when it does
    /// not exist (containerd's behaviour), then with symlinks resolved (the CRI asks runtimes
    /// to follow them).
    fn mount_source(&self, host_path: &Path) -> io::Result<PathBuf>;
    /// The propagation of the mount that holds `path` (already resolved).
    fn propagation(&self, path: &Path) -> io::Result<HostPropagation>;
    /// The device nodes at `host_path`: the node itself (symlinks followed), or every node
    /// under it when it is a directory, as containerd walks them.
    fn devices(&self, host_path: &Path) -> io::Result<Vec<HostDevice>>;
    /// Whether the AppArmor profile `name` is loaded in the kernel. Only asked for a profile
    /// a container names (Localhost), on a host with AppArmor. The default (fakes) says yes.
    fn apparmor_profile_loaded(&self, _name: &str) -> io::Result<bool> {
        Ok(true)
    }
    /// Gives `path` (recursively) the SELinux `label` for a `selinux_relabel` mount.
    /// Only called when SELinux is enabled. The default does nothing.
    fn relabel(&self, _path: &Path, _label: &str) -> io::Result<()> {
        Ok(())
    }
}

/// The real [`HostPaths`], for the daemon.
#[derive(Debug, Clone, Copy, Default)]
pub struct RealHost;

/// Linux's encoding of a `dev_t`.
fn dev_major(rdev: u64) -> i64 {
    (((rdev >> 32) & 0xffff_f000) | ((rdev >> 8) & 0xfff)) as i64
}

fn dev_minor(rdev: u64) -> i64 {
    (((rdev >> 12) & 0xffff_ff00) | (rdev & 0xff)) as i64
}

/// The device at `path` (not following a final symlink), `None` when it is no device node.
fn device_at(path: &Path) -> io::Result<Option<HostDevice>> {
    let md = std::fs::symlink_metadata(path)?;
    let ft = md.file_type();
    let kind = if ft.is_char_device() {
        'c'
    } else if ft.is_block_device() {
        'b'
    } else {
        return Ok(None);
    };
    Ok(Some(HostDevice {
        path: path.to_path_buf(),
        kind,
        major: dev_major(md.rdev()),
        minor: dev_minor(md.rdev()),
        file_mode: md.mode() & 0o7777,
        uid: md.uid(),
        gid: md.gid(),
    }))
}

/// Directories under /dev that hold no devices to pass on (runc's and containerd's list).
const SKIPPED_DEV_DIRS: &[&str] = &["pts", "shm", "fd", "mqueue", ".lxc", ".lxd-mounts", ".udev"];

fn walk_devices(dir: &Path, out: &mut Vec<HostDevice>, depth: usize) -> io::Result<()> {
    if depth > 16 {
        return Ok(());
    }
    let mut entries: Vec<_> = std::fs::read_dir(dir)?.filter_map(|e| e.ok()).collect();
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        let path = entry.path();
        let Ok(ft) = entry.file_type() else { continue };
        let name = entry.file_name();
        if ft.is_dir() {
            if SKIPPED_DEV_DIRS.iter().any(|s| name == *s) {
                continue;
            }
            walk_devices(&path, out, depth + 1)?;
        } else if name == "console" {
            continue;
        } else if let Ok(Some(dev)) = device_at(&path) {
            out.push(dev);
        }
    }
    Ok(())
}

/// Every device node under /dev (symlinks are not followed, so each node appears once),
/// skipping /dev/pts, /dev/shm, /dev/mqueue, /dev/fd and /dev/console.
pub fn host_devices() -> io::Result<Vec<HostDevice>> {
    let mut out = Vec::new();
    walk_devices(Path::new("/dev"), &mut out, 0)?;
    Ok(out)
}

/// The mount point and optional fields of the mountinfo line whose mount point is the
/// longest prefix of `path`.
fn mount_of<'a>(mountinfo: &'a str, path: &Path) -> Option<(&'a str, Vec<&'a str>)> {
    let mut best: Option<(&str, Vec<&str>)> = None;
    for line in mountinfo.lines() {
        let fields: Vec<&str> = line.split(' ').collect();
        if fields.len() < 7 {
            continue;
        }
        let mount_point = fields[4];
        let decoded = mount_point.replace("\\040", " ");
        if !path.starts_with(&decoded) {
            continue;
        }
        let optional: Vec<&str> = fields[6..]
            .iter()
            .take_while(|f| **f != "-")
            .copied()
            .collect();
        // Later lines are mounted on top of earlier ones: ties go to the later line.
        if best
            .as_ref()
            .is_none_or(|(b, _)| mount_point.len() >= b.len())
        {
            best = Some((mount_point, optional));
        }
    }
    best
}

pub(crate) fn propagation_from_mountinfo(mountinfo: &str, path: &Path) -> HostPropagation {
    match mount_of(mountinfo, path) {
        Some((_, opts)) if opts.iter().any(|o| o.starts_with("shared:")) => HostPropagation::Shared,
        Some((_, opts)) if opts.iter().any(|o| o.starts_with("master:")) => HostPropagation::Slave,
        _ => HostPropagation::Private,
    }
}

impl HostPaths for RealHost {
    fn apparmor_profile_loaded(&self, name: &str) -> io::Result<bool> {
        peapod_host::apparmor::is_loaded(name)
    }

    fn mount_source(&self, host_path: &Path) -> io::Result<PathBuf> {
        if let Err(e) = std::fs::metadata(host_path) {
            if e.kind() != io::ErrorKind::NotFound {
                return Err(e);
            }
            std::fs::DirBuilder::new()
                .recursive(true)
                .create(host_path)?;
        }
        std::fs::canonicalize(host_path)
    }

    fn propagation(&self, path: &Path) -> io::Result<HostPropagation> {
        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo")?;
        Ok(propagation_from_mountinfo(&mountinfo, path))
    }

    fn devices(&self, host_path: &Path) -> io::Result<Vec<HostDevice>> {
        let md = std::fs::metadata(host_path)?;
        if md.is_dir() {
            let mut out = Vec::new();
            walk_devices(host_path, &mut out, 0)?;
            return Ok(out);
        }
        let resolved = std::fs::canonicalize(host_path)?;
        match device_at(&resolved)? {
            Some(mut dev) => {
                dev.path = host_path.to_path_buf();
                Ok(vec![dev])
            }
            None => Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{} is not a device node", host_path.display()),
            )),
        }
    }

    fn relabel(&self, path: &Path, label: &str) -> io::Result<()> {
        relabel_tree(path, label, 0)
    }
}

fn set_selinux_label(path: &Path, label: &str) -> io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let c_path = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    let name = c"security.selinux";
    // SAFETY: both strings are NUL-terminated and outlive the call; the value is a valid
    // buffer of the given length.
    let rc = unsafe {
        libc::lsetxattr(
            c_path.as_ptr(),
            name.as_ptr(),
            label.as_ptr().cast(),
            label.len(),
            0,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        let e = io::Error::last_os_error();
        // Filesystems without xattrs (ENOTSUP) are skipped, as containerd does.
        if e.raw_os_error() == Some(libc::ENOTSUP) {
            Ok(())
        } else {
            Err(e)
        }
    }
}

fn relabel_tree(path: &Path, label: &str, depth: usize) -> io::Result<()> {
    set_selinux_label(path, label)?;
    let md = std::fs::symlink_metadata(path)?;
    if md.is_dir() && depth < 64 {
        for entry in std::fs::read_dir(path)? {
            relabel_tree(&entry?.path(), label, depth + 1)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_release_comparison() {
        assert!(release_at_least("6.18.44-fc-v782", 5, 12));
        assert!(release_at_least("5.12.0", 5, 12));
        assert!(!release_at_least("5.11.22-generic", 5, 12));
        assert!(!release_at_least("4.19.0", 5, 12));
        assert!(!release_at_least("", 5, 12));
    }

    #[test]
    fn rro_from_runtime_features() {
        assert!(runtime_supports_rro(
            br#"{"mountOptions":["ro","rro","rbind"]}"#
        ));
        assert!(!runtime_supports_rro(br#"{"mountOptions":["ro","rbind"]}"#));
        assert!(!runtime_supports_rro(b"not json"));
    }

    #[test]
    fn dev_numbers() {
        // /dev/null is 1:3, a big one 259:65536.
        assert_eq!((dev_major(0x103), dev_minor(0x103)), (1, 3));
        let (major, minor): (u64, u64) = (259, 65536);
        let rdev = ((major & 0xfff) << 8) | (minor & 0xff) | ((minor & !0xff) << 12);
        assert_eq!((dev_major(rdev), dev_minor(rdev)), (259, 65536));
    }

    #[test]
    fn mountinfo_propagation() {
        let mi = "22 1 0:21 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n\
                  30 22 0:25 / /mnt rw shared:5 master:2 - tmpfs tmpfs rw\n\
                  31 30 0:26 / /mnt/private rw - tmpfs tmpfs rw\n\
                  32 22 0:27 / /var/lib/kubelet rw master:7 - ext4 /dev/sdb rw\n";
        assert_eq!(
            propagation_from_mountinfo(mi, Path::new("/data")),
            HostPropagation::Shared
        );
        assert_eq!(
            propagation_from_mountinfo(mi, Path::new("/mnt/x")),
            HostPropagation::Shared
        );
        assert_eq!(
            propagation_from_mountinfo(mi, Path::new("/mnt/private/y")),
            HostPropagation::Private
        );
        assert_eq!(
            propagation_from_mountinfo(mi, Path::new("/var/lib/kubelet/pods")),
            HostPropagation::Slave
        );
        assert_eq!(
            propagation_from_mountinfo("", Path::new("/x")),
            HostPropagation::Private
        );
    }

    #[test]
    fn real_host_devices_and_mount_sources() {
        let devs = RealHost.devices(Path::new("/dev/null")).unwrap();
        assert_eq!(devs.len(), 1);
        assert_eq!((devs[0].kind, devs[0].major, devs[0].minor), ('c', 1, 3));
        assert!(RealHost.devices(Path::new("/etc/hostname")).is_err());
        let dir = tempfile::tempdir().unwrap();
        let made = RealHost.mount_source(&dir.path().join("a/b")).unwrap();
        assert!(made.is_dir());
        std::os::unix::fs::symlink(&made, dir.path().join("link")).unwrap();
        assert_eq!(
            RealHost.mount_source(&dir.path().join("link")).unwrap(),
            made
        );
        let all = host_devices().unwrap();
        assert!(all.iter().any(|d| d.path == Path::new("/dev/null")));
        assert!(!all.iter().any(|d| d.path.starts_with("/dev/pts")));
    }

    #[test]
    fn detect_this_host() {
        let f = HostFacts::detect(false);
        assert!(f.bounding_caps.contains(&"CAP_CHOWN".to_string()));
        assert!(!f.rro_supported);
        assert!(f.seccomp_enabled);
    }
}
