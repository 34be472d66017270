//! A container's root made as `runc create` makes it (libcontainer's `prepareRootfs` and
//! `finalizeRootfs`, runc 1.1), in the init process before it pivots: the spec's mounts in
//! order inside the root, the default device nodes in a tmpfs `/dev` with their symlinks,
//! `pivot_root`, then the masked and read-only paths and a read-only root.
//!
//! [`Plan::new`] reads and checks everything in the helper, before anything changes; what it
//! cannot do (a shared propagation, an id-mapped or recursively read-only mount, a filesystem
//! type other than the kernel's own and binds) is refused there, and the runtime creates the
//! container instead. [`Plan::enter`] runs in the cloned init, in the container's mount
//! namespace (the helper's, unshared) and PID namespace (so that `/proc` shows it).

use crate::spec::{Device, Mount};
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

/// One mount of the spec, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountOp {
    /// Inside the root, as the spec gives it (resolved in the root at mount time).
    pub destination: String,
    pub kind: Kind,
    pub source: String,
    pub flags: libc::c_ulong,
    /// Propagation changes applied after the mount, in order.
    pub propagation: Vec<libc::c_ulong>,
    /// The filesystem's own options (`mode=755,size=65536k`).
    pub data: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Bind,
    /// The cgroup hierarchies, as runc mounts them on a v1 host: a tmpfs with each
    /// hierarchy's directory of this container bound in.
    CgroupV1,
    /// proc, sysfs, tmpfs, devpts, mqueue: mounted by type; and on a v2 host the spec's
    /// `cgroup` as runc mounts it there, `cgroup2` (in the container's own cgroup namespace,
    /// its cgroup as the root). runc falls back to a bind of the hierarchy where the kernel
    /// refuses that mount (a user namespace without a cgroup namespace), which the native
    /// paths never make: a failure leaves the container to runc.
    Kernel(&'static str),
}

/// A device node to make in `/dev`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceNode {
    pub path: String,
    /// `S_IFCHR`, `S_IFBLK` or `S_IFIFO`, with the permission bits.
    pub mode: libc::mode_t,
    pub major: u32,
    pub minor: u32,
    pub uid: u32,
    pub gid: u32,
}

/// The devices every container gets when its `/dev` is a tmpfs (runc's defaults).
fn default_devices() -> Vec<DeviceNode> {
    [
        ("/dev/null", 1, 3),
        ("/dev/zero", 1, 5),
        ("/dev/full", 1, 7),
        ("/dev/tty", 5, 0),
        ("/dev/urandom", 1, 9),
        ("/dev/random", 1, 8),
    ]
    .into_iter()
    .map(|(path, major, minor)| DeviceNode {
        path: path.into(),
        mode: libc::S_IFCHR | 0o666,
        major,
        minor,
        uid: 0,
        gid: 0,
    })
    .collect()
}

/// Everything the init does to its root.
#[derive(Debug)]
pub struct Plan {
    pub root: PathBuf,
    /// Given to `/` first, in the init's new mount namespace.
    pub root_propagation: libc::c_ulong,
    pub mounts: Vec<MountOp>,
    /// Made when `/dev` is a mount of the spec that is not a bind (runc's `needsSetupDev`).
    pub devices: Vec<DeviceNode>,
    pub setup_dev: bool,
    pub masked: Vec<String>,
    pub readonly: Vec<String>,
    pub readonly_root: bool,
    /// `/proc/kcore` exists on the host: `/dev/core` links to it.
    pub kcore: bool,
    /// The process's umask once the root is made.
    pub umask: libc::mode_t,
}

/// What [`parse_options`] makes of a mount's options.
#[derive(Debug, Default, PartialEq, Eq)]
struct Options {
    flags: libc::c_ulong,
    clear: libc::c_ulong,
    propagation: Vec<libc::c_ulong>,
    data: Vec<String>,
}

/// runc's `parseMountOptions`; an option this module cannot honour is an error.
fn parse_options(options: &[String]) -> Result<Options, String> {
    let mut o = Options::default();
    for opt in options {
        let (set, clear): (libc::c_ulong, libc::c_ulong) = match opt.as_str() {
            "async" => (0, libc::MS_SYNCHRONOUS),
            "atime" => (0, libc::MS_NOATIME),
            "bind" => (libc::MS_BIND, 0),
            "defaults" => (0, 0),
            "dev" => (0, libc::MS_NODEV),
            "diratime" => (0, libc::MS_NODIRATIME),
            "dirsync" => (libc::MS_DIRSYNC, 0),
            "exec" => (0, libc::MS_NOEXEC),
            "mand" => (libc::MS_MANDLOCK, 0),
            "noatime" => (libc::MS_NOATIME, 0),
            "nodev" => (libc::MS_NODEV, 0),
            "nodiratime" => (libc::MS_NODIRATIME, 0),
            "noexec" => (libc::MS_NOEXEC, 0),
            "nomand" => (0, libc::MS_MANDLOCK),
            "norelatime" => (0, libc::MS_RELATIME),
            "nostrictatime" => (0, libc::MS_STRICTATIME),
            "nosuid" => (libc::MS_NOSUID, 0),
            "rbind" => (libc::MS_BIND | libc::MS_REC, 0),
            "relatime" => (libc::MS_RELATIME, 0),
            "ro" => (libc::MS_RDONLY, 0),
            "rw" => (0, libc::MS_RDONLY),
            "strictatime" => (libc::MS_STRICTATIME, 0),
            "suid" => (0, libc::MS_NOSUID),
            "sync" => (libc::MS_SYNCHRONOUS, 0),
            "private" | "rprivate" | "slave" | "rslave" | "unbindable" | "runbindable" => {
                let base = match opt.trim_start_matches('r') {
                    "private" => libc::MS_PRIVATE,
                    "slave" => libc::MS_SLAVE,
                    _ => libc::MS_UNBINDABLE,
                };
                let rec = if opt.starts_with('r') {
                    libc::MS_REC
                } else {
                    0
                };
                o.propagation.push(base | rec);
                continue;
            }
            "shared" | "rshared" => return Err(format!("the mount option {opt:?}")),
            "remount" | "rro" | "rrw" | "rnosuid" | "rsuid" | "rnodev" | "rdev" | "rnoexec"
            | "rexec" | "rnodiratime" | "rdiratime" | "rrelatime" | "rnorelatime" | "rnoatime"
            | "ratime" | "rstrictatime" | "rnostrictatime" | "rnosymfollow" | "rsymfollow"
            | "nosymfollow" | "symfollow" | "tmpcopyup" | "idmap" | "ridmap" => {
                return Err(format!("the mount option {opt:?}"))
            }
            data => {
                o.data.push(data.to_string());
                continue;
            }
        };
        o.flags = (o.flags | set) & !clear;
        o.clear = (o.clear | clear) & !set;
    }
    Ok(o)
}

impl Plan {
    /// The plan for a container whose root is `root`; `Err` names what this module does not
    /// do (the runtime then creates the container).
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        root: PathBuf,
        root_propagation: libc::c_ulong,
        mounts: &[Mount],
        devices: &[Device],
        masked: &[String],
        readonly: &[String],
        readonly_root: bool,
        umask: Option<u32>,
        unified: bool,
    ) -> Result<Plan, String> {
        let mut ops = Vec::with_capacity(mounts.len());
        for m in mounts {
            if m.uid_mappings.is_some() || m.gid_mappings.is_some() {
                return Err(format!("an id-mapped mount at {}", m.destination));
            }
            if !m.destination.starts_with('/') {
                return Err(format!("a relative mount destination {:?}", m.destination));
            }
            let o = parse_options(&m.options)
                .map_err(|e| format!("{e} (mount at {})", m.destination))?;
            let bind = m.kind == "bind" || o.flags & libc::MS_BIND != 0;
            let mut flags = o.flags;
            let kind = if bind {
                flags |= libc::MS_BIND;
                Kind::Bind
            } else {
                match m.kind.as_str() {
                    "proc" => Kind::Kernel("proc"),
                    "sysfs" => Kind::Kernel("sysfs"),
                    "tmpfs" => Kind::Kernel("tmpfs"),
                    "devpts" => Kind::Kernel("devpts"),
                    "mqueue" => Kind::Kernel("mqueue"),
                    "cgroup" if unified => Kind::Kernel("cgroup2"),
                    "cgroup" => Kind::CgroupV1,
                    other => return Err(format!("a mount of type {other:?}")),
                }
            };
            if kind == Kind::CgroupV1 && !o.data.is_empty() {
                return Err("a cgroup mount with options of its own".into());
            }
            ops.push(MountOp {
                destination: m.destination.clone(),
                kind,
                source: m.source.clone(),
                flags,
                propagation: o.propagation,
                data: o.data.join(","),
            });
        }
        let setup_dev = ops
            .iter()
            .any(|m| clean(&m.destination) == "/dev" && m.kind != Kind::Bind);
        let mut nodes = default_devices();
        for d in devices {
            let kind = match d.kind.as_str() {
                "c" | "u" => libc::S_IFCHR,
                "b" => libc::S_IFBLK,
                "p" => libc::S_IFIFO,
                other => return Err(format!("a device of type {other:?} at {}", d.path)),
            };
            if !d.path.starts_with("/dev/") {
                return Err(format!("a device outside /dev: {}", d.path));
            }
            let node = DeviceNode {
                path: d.path.clone(),
                mode: kind | (d.file_mode.unwrap_or(0o666) & 0o7777),
                major: u32::try_from(d.major).map_err(|_| format!("device {} major", d.path))?,
                minor: u32::try_from(d.minor).map_err(|_| format!("device {} minor", d.path))?,
                uid: d.uid.unwrap_or(0),
                gid: d.gid.unwrap_or(0),
            };
            // The spec's entry replaces a default of the same path.
            nodes.retain(|n| n.path != node.path);
            nodes.push(node);
        }
        Ok(Plan {
            root,
            root_propagation,
            mounts: ops,
            devices: nodes,
            setup_dev,
            masked: masked.to_vec(),
            readonly: readonly.to_vec(),
            readonly_root,
            kcore: Path::new("/proc/kcore").exists(),
            umask: umask.unwrap_or(0o022) as libc::mode_t,
        })
    }

    /// In the container's init: makes the root and pivots into it.
    pub fn enter(&self) -> Result<(), String> {
        // Directories made on the way are 0755 as runc's (device nodes get their mode by
        // chmod whatever the umask).
        // SAFETY: umask has no preconditions.
        unsafe { libc::umask(0o022) };
        // Nothing mounted here reaches the host (a slave, runc's default, still receives).
        mount(None, Path::new("/"), None, self.root_propagation, None)
            .map_err(|e| format!("set the propagation of /: {e}"))?;
        // The root must be a mount of its own for pivot_root: bound onto itself.
        mount(
            Some(&self.root),
            &self.root,
            None,
            libc::MS_BIND | libc::MS_REC,
            None,
        )
        .map_err(|e| format!("bind the root {}: {e}", self.root.display()))?;
        for m in &self.mounts {
            self.mount_one(m)?;
        }
        if self.setup_dev {
            self.make_devices()?;
        }
        pivot_root(&self.root)?;
        for path in &self.readonly {
            readonly_path(path)?;
        }
        for path in &self.masked {
            mask_path(path)?;
        }
        if self.readonly_root {
            remount_readonly(Path::new("/"))?;
        }
        // SAFETY: as above.
        unsafe { libc::umask(self.umask) };
        Ok(())
    }

    fn mount_one(&self, m: &MountOp) -> Result<(), String> {
        let dest = secure_join(&self.root, &m.destination)?;
        let at = |e: String| format!("mount {} at {}: {e}", m.source, m.destination);
        match m.kind {
            Kind::Bind => {
                let source = Path::new(&m.source);
                let meta = std::fs::metadata(source).map_err(|e| at(e.to_string()))?;
                make_mountpoint(&dest, meta.is_dir()).map_err(at)?;
                mount(
                    Some(source),
                    &dest,
                    None,
                    m.flags & (libc::MS_BIND | libc::MS_REC),
                    None,
                )
                .map_err(at)?;
                let rest = m.flags & !(libc::MS_BIND | libc::MS_REC | libc::MS_REMOUNT);
                if rest != 0 {
                    remount_bind(&dest, m.flags).map_err(at)?;
                }
            }
            Kind::Kernel(fstype) => {
                make_mountpoint(&dest, true).map_err(at)?;
                let data = (!m.data.is_empty()).then_some(m.data.as_str());
                if fstype == "tmpfs" && m.flags & libc::MS_RDONLY != 0 {
                    // Made writable, then read-only (runc: so that its mode applies).
                    mount(
                        Some(Path::new(&m.source)),
                        &dest,
                        Some(fstype),
                        m.flags & !libc::MS_RDONLY,
                        data,
                    )
                    .map_err(at)?;
                    mount(None, &dest, None, m.flags | libc::MS_REMOUNT, data).map_err(at)?;
                } else {
                    mount(
                        Some(Path::new(&m.source)),
                        &dest,
                        Some(fstype),
                        m.flags,
                        data,
                    )
                    .map_err(at)?;
                }
            }
            Kind::CgroupV1 => self.mount_cgroups(m, &dest).map_err(at)?,
        }
        for flag in &m.propagation {
            mount(None, &dest, None, *flag, None).map_err(at)?;
        }
        Ok(())
    }

    /// runc's `mountCgroupV1`: a tmpfs, and in it each v1 hierarchy's directory of this
    /// process's cgroup (joined by the helper) bound at the hierarchy's name, with a link for
    /// each controller of a co-mount (`cpu` -> `cpu,cpuacct`).
    fn mount_cgroups(&self, m: &MountOp, dest: &Path) -> Result<(), String> {
        make_mountpoint(dest, true)?;
        let tmpfs_flags = libc::MS_NOSUID | libc::MS_NOEXEC | libc::MS_NODEV;
        mount(
            Some(Path::new("tmpfs")),
            dest,
            Some("tmpfs"),
            tmpfs_flags,
            Some("mode=755"),
        )?;
        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo")
            .map_err(|e| format!("read /proc/self/mountinfo: {e}"))?;
        let own = std::fs::read_to_string("/proc/self/cgroup")
            .map_err(|e| format!("read /proc/self/cgroup: {e}"))?;
        for h in v1_hierarchies(&mountinfo, &own) {
            let name = match Path::new(&h.mountpoint).file_name() {
                Some(n) => n.to_string_lossy().into_owned(),
                None => continue,
            };
            let host_dir = PathBuf::from(format!(
                "{}{}",
                h.mountpoint,
                h.path.strip_prefix(&h.root).unwrap_or(&h.path)
            ));
            let target = dest.join(&name);
            make_mountpoint(&target, true)?;
            mount(
                Some(&host_dir),
                &target,
                None,
                libc::MS_BIND | libc::MS_REC,
                None,
            )?;
            remount_bind(&target, m.flags | libc::MS_BIND | libc::MS_REC)?;
            if name.contains(',') {
                for part in name.split(',') {
                    let link = dest.join(part);
                    std::os::unix::fs::symlink(&name, &link)
                        .map_err(|e| format!("link {}: {e}", link.display()))?;
                }
            }
        }
        // The tmpfs itself stays writable, as runc 1.1 leaves it: only the binds are
        // read-only.
        Ok(())
    }

    /// runc's `createDevices`, `setupDevSymlinks` and `setupPtmx`, in the root's `/dev`.
    fn make_devices(&self) -> Result<(), String> {
        for d in &self.devices {
            let dest = secure_join(&self.root, &d.path)?;
            if let Some(parent) = dest.parent() {
                std::fs::create_dir_all(parent)
                    .map_err(|e| format!("mkdir {}: {e}", parent.display()))?;
            }
            let c = cstring(&dest)?;
            let dev = libc::makedev(d.major, d.minor);
            // SAFETY: valid C string.
            if unsafe { libc::mknod(c.as_ptr(), d.mode, dev) } < 0 {
                let e = std::io::Error::last_os_error();
                if e.kind() != std::io::ErrorKind::AlreadyExists {
                    return Err(format!("mknod {}: {e}", d.path));
                }
            }
            // SAFETY: valid C string; the mode whatever the umask.
            if unsafe { libc::chmod(c.as_ptr(), d.mode & 0o7777) } < 0
                || unsafe { libc::chown(c.as_ptr(), d.uid, d.gid) } < 0
            {
                return Err(format!(
                    "chmod/chown {}: {}",
                    d.path,
                    std::io::Error::last_os_error()
                ));
            }
        }
        let mut links = vec![
            ("/proc/self/fd", "/dev/fd"),
            ("/proc/self/fd/0", "/dev/stdin"),
            ("/proc/self/fd/1", "/dev/stdout"),
            ("/proc/self/fd/2", "/dev/stderr"),
        ];
        if self.kcore {
            links.push(("/proc/kcore", "/dev/core"));
        }
        for (target, link) in links {
            let at = secure_join(&self.root, link)?;
            match std::os::unix::fs::symlink(target, &at) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(format!("link {link}: {e}")),
            }
        }
        let ptmx = secure_join(&self.root, "/dev/ptmx")?;
        match std::fs::remove_file(&ptmx) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(format!("remove /dev/ptmx: {e}")),
        }
        std::os::unix::fs::symlink("pts/ptmx", &ptmx).map_err(|e| format!("link /dev/ptmx: {e}"))
    }
}

/// A v1 hierarchy as this process sees it.
#[derive(Debug, PartialEq, Eq)]
struct Hierarchy {
    mountpoint: String,
    /// The mount's root in the hierarchy (`/` on a host).
    root: String,
    /// This process's cgroup in the hierarchy.
    path: String,
}

/// The v1 hierarchies mounted under /sys/fs/cgroup (runc binds those, not the v2 `unified`
/// of a hybrid host), each with this process's cgroup from `/proc/self/cgroup`.
fn v1_hierarchies(mountinfo: &str, own_cgroups: &str) -> Vec<Hierarchy> {
    let mut out = Vec::new();
    for line in mountinfo.lines() {
        let Some((left, right)) = line.split_once(" - ") else {
            continue;
        };
        let l: Vec<&str> = left.split(' ').collect();
        let r: Vec<&str> = right.split(' ').collect();
        if l.len() < 5 || r.len() < 3 || r[0] != "cgroup" {
            continue;
        }
        let (root, mountpoint) = (l[3], l[4]);
        if !mountpoint.starts_with("/sys/fs/cgroup/") {
            continue;
        }
        let supers: Vec<&str> = r[2].split(',').collect();
        let path = own_cgroups.lines().find_map(|c| {
            let mut parts = c.splitn(3, ':');
            let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
            let matches =
                !controllers.is_empty() && controllers.split(',').all(|c| supers.contains(&c));
            matches.then(|| path.to_string())
        });
        if let Some(path) = path {
            out.push(Hierarchy {
                mountpoint: mountpoint.to_string(),
                root: if root == "/" {
                    String::new()
                } else {
                    root.to_string()
                },
                path,
            });
        }
    }
    out
}

/// `path` cleaned lexically: `/a/./b/../c/` -> `/a/c`.
fn clean(path: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for c in path.split('/') {
        match c {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            c => parts.push(c),
        }
    }
    format!("/{}", parts.join("/"))
}

/// `unsafe_path` inside `root`, its symlinks resolved as if `root` were `/` (so that no link
/// in an image leads a mount outside it): filepath-securejoin's rule.
pub fn secure_join(root: &Path, unsafe_path: &str) -> Result<PathBuf, String> {
    let mut pending: Vec<String> = clean(unsafe_path)
        .split('/')
        .filter(|c| !c.is_empty())
        .rev()
        .map(str::to_string)
        .collect();
    let mut resolved: Vec<String> = Vec::new();
    let mut links = 0;
    while let Some(part) = pending.pop() {
        if part == ".." {
            resolved.pop();
            continue;
        }
        if part == "." {
            continue;
        }
        let mut candidate = root.to_path_buf();
        candidate.extend(&resolved);
        candidate.push(&part);
        match std::fs::symlink_metadata(&candidate) {
            Ok(m) if m.file_type().is_symlink() => {
                links += 1;
                if links > 255 {
                    return Err(format!("too many links resolving {unsafe_path}"));
                }
                let target = std::fs::read_link(&candidate)
                    .map_err(|e| format!("readlink {}: {e}", candidate.display()))?;
                if target.is_absolute() {
                    resolved.clear();
                }
                let target = target.to_string_lossy().into_owned();
                for c in target.split('/').filter(|c| !c.is_empty()).rev() {
                    pending.push(c.to_string());
                }
            }
            _ => resolved.push(part),
        }
    }
    let mut out = root.to_path_buf();
    for c in &resolved {
        for comp in Path::new(c).components() {
            if let Component::Normal(n) = comp {
                out.push(n);
            }
        }
    }
    Ok(out)
}

fn cstring(path: &Path) -> Result<CString, String> {
    CString::new(path.as_os_str().as_bytes()).map_err(|_| format!("{} holds a NUL", path.display()))
}

fn mount(
    source: Option<&Path>,
    target: &Path,
    fstype: Option<&str>,
    flags: libc::c_ulong,
    data: Option<&str>,
) -> Result<(), String> {
    let source = source.map(cstring).transpose()?;
    let target_c = cstring(target)?;
    let fstype = fstype
        .map(|f| CString::new(f).map_err(|_| "a NUL in a type".to_string()))
        .transpose()?;
    let data = data
        .map(|d| CString::new(d).map_err(|_| "a NUL in mount data".to_string()))
        .transpose()?;
    let ptr = |c: &Option<CString>| c.as_ref().map_or(std::ptr::null(), |c| c.as_ptr());
    // SAFETY: C strings that outlive the call, or null.
    let r = unsafe {
        libc::mount(
            ptr(&source),
            target_c.as_ptr(),
            ptr(&fstype),
            flags,
            ptr(&data).cast(),
        )
    };
    if r < 0 {
        return Err(format!(
            "mount {}: {}",
            target.display(),
            std::io::Error::last_os_error()
        ));
    }
    Ok(())
}

/// The flags a mount cannot lose by a bind remount without privilege over its superblock
/// (statfs's, as runc adds them when a remount is refused).
fn locked_flags(path: &Path) -> libc::c_ulong {
    let Ok(c) = cstring(path) else { return 0 };
    // SAFETY: a plain C struct, for which all zeroes is a valid value.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: statvfs of a valid C string into that struct.
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } < 0 {
        return 0;
    }
    let mut flags = 0;
    for (st_flag, ms) in [
        (libc::ST_NOSUID, libc::MS_NOSUID),
        (libc::ST_NODEV, libc::MS_NODEV),
        (libc::ST_NOEXEC, libc::MS_NOEXEC),
        (libc::ST_NOATIME, libc::MS_NOATIME),
        (libc::ST_NODIRATIME, libc::MS_NODIRATIME),
        (libc::ST_RELATIME, libc::MS_RELATIME),
    ] {
        if st.f_flag & st_flag != 0 {
            flags |= ms;
        }
    }
    flags
}

/// A bind mount remounted with `flags` (runc's `remount`); retried with the mount's own
/// locked flags if the kernel refuses.
fn remount_bind(dest: &Path, flags: libc::c_ulong) -> Result<(), String> {
    let flags = flags | libc::MS_BIND | libc::MS_REMOUNT;
    match mount(None, dest, None, flags, None) {
        Ok(()) => Ok(()),
        Err(first) => mount(None, dest, None, flags | locked_flags(dest), None).map_err(|_| first),
    }
}

/// Makes the directory or empty file a mount of that kind needs, and its parents.
fn make_mountpoint(dest: &Path, dir: bool) -> Result<(), String> {
    if dir {
        return std::fs::create_dir_all(dest).map_err(|e| format!("mkdir {}: {e}", dest.display()));
    }
    if let Some(parent) = dest.parent() {
        std::fs::create_dir_all(parent).map_err(|e| format!("mkdir {}: {e}", parent.display()))?;
    }
    match std::fs::symlink_metadata(dest) {
        Ok(_) => Ok(()),
        Err(_) => std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .open(dest)
            .map(drop)
            .map_err(|e| format!("create {}: {e}", dest.display())),
    }
}

/// runc's `pivotRoot`: the root becomes `/`, the old root is detached.
fn pivot_root(root: &Path) -> Result<(), String> {
    let c = cstring(root)?;
    // SAFETY: valid C strings and descriptors this function owns.
    unsafe {
        let old = libc::open(
            c"/".as_ptr(),
            libc::O_DIRECTORY | libc::O_RDONLY | libc::O_CLOEXEC,
        );
        let new = libc::open(
            c.as_ptr(),
            libc::O_DIRECTORY | libc::O_RDONLY | libc::O_CLOEXEC,
        );
        if old < 0 || new < 0 {
            return Err(format!(
                "open the roots: {}",
                std::io::Error::last_os_error()
            ));
        }
        let step = |ok: bool, what: &str| {
            if ok {
                Ok(())
            } else {
                Err(format!("{what}: {}", std::io::Error::last_os_error()))
            }
        };
        step(libc::fchdir(new) == 0, "fchdir to the root")?;
        step(
            libc::syscall(libc::SYS_pivot_root, c".".as_ptr(), c".".as_ptr()) == 0,
            "pivot_root",
        )?;
        step(libc::fchdir(old) == 0, "fchdir to the old root")?;
        // Nothing the unmount does may reach the host.
        step(
            libc::mount(
                std::ptr::null(),
                c".".as_ptr(),
                std::ptr::null(),
                libc::MS_SLAVE | libc::MS_REC,
                std::ptr::null(),
            ) == 0,
            "make the old root a slave",
        )?;
        step(
            libc::umount2(c".".as_ptr(), libc::MNT_DETACH) == 0,
            "detach the old root",
        )?;
        step(libc::chdir(c"/".as_ptr()) == 0, "chdir /")?;
        libc::close(old);
        libc::close(new);
    }
    Ok(())
}

fn is_not_found(e: &str) -> bool {
    e.ends_with(&std::io::Error::from_raw_os_error(libc::ENOENT).to_string())
}

/// runc's `readonlyPath`: bound onto itself and remounted read-only; absent is fine.
fn readonly_path(path: &str) -> Result<(), String> {
    let p = Path::new(path);
    if let Err(e) = mount(Some(p), p, None, libc::MS_BIND | libc::MS_REC, None) {
        return if is_not_found(&e) { Ok(()) } else { Err(e) };
    }
    remount_bind(
        p,
        libc::MS_BIND | libc::MS_REC | libc::MS_RDONLY | locked_flags(p),
    )
}

/// runc's `maskPath`: /dev/null over a file, an empty read-only tmpfs over a directory;
/// absent is fine.
fn mask_path(path: &str) -> Result<(), String> {
    let p = Path::new(path);
    match mount(Some(Path::new("/dev/null")), p, None, libc::MS_BIND, None) {
        Ok(()) => Ok(()),
        Err(e) if is_not_found(&e) => Ok(()),
        Err(e) if e.ends_with(&std::io::Error::from_raw_os_error(libc::ENOTDIR).to_string()) => {
            mount(
                Some(Path::new("tmpfs")),
                p,
                Some("tmpfs"),
                libc::MS_RDONLY,
                None,
            )
        }
        Err(e) => Err(e),
    }
}

/// runc's `setReadonly`: the root remounted read-only.
fn remount_readonly(path: &Path) -> Result<(), String> {
    let flags = libc::MS_BIND | libc::MS_REMOUNT | libc::MS_RDONLY | libc::MS_REC;
    match mount(Some(path), path, Some("bind"), flags, None) {
        Ok(()) => Ok(()),
        Err(first) => mount(
            Some(path),
            path,
            Some("bind"),
            flags | locked_flags(path),
            None,
        )
        .map_err(|_| first),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(o: &[&str]) -> Result<Options, String> {
        parse_options(&o.iter().map(|s| s.to_string()).collect::<Vec<_>>())
    }

    #[test]
    fn mount_options_become_flags_propagation_and_data() {
        let o = opts(&["nosuid", "noexec", "mode=755", "size=65536k", "ro"]).unwrap();
        assert_eq!(o.flags, libc::MS_NOSUID | libc::MS_NOEXEC | libc::MS_RDONLY);
        assert_eq!(o.data, vec!["mode=755", "size=65536k"]);
        let o = opts(&["rbind", "rprivate", "ro", "rw"]).unwrap();
        assert_eq!(o.flags, libc::MS_BIND | libc::MS_REC);
        assert_eq!(o.propagation, vec![libc::MS_PRIVATE | libc::MS_REC]);
        let o = opts(&["bind", "slave"]).unwrap();
        assert_eq!(o.propagation, vec![libc::MS_SLAVE]);
        assert!(opts(&["rshared"]).is_err());
        assert!(opts(&["rro"]).is_err());
        assert!(opts(&["idmap"]).is_err());
    }

    fn spec_mount(dest: &str, kind: &str, options: &[&str]) -> Mount {
        Mount {
            destination: dest.into(),
            kind: kind.into(),
            source: kind.into(),
            options: options.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        }
    }

    #[test]
    fn a_plan_refuses_what_it_cannot_mount() {
        let plan = |m: Vec<Mount>| {
            Plan::new(
                "/r".into(),
                libc::MS_SLAVE,
                &m,
                &[],
                &[],
                &[],
                false,
                None,
                false,
            )
        };
        let p = plan(vec![
            spec_mount("/proc", "proc", &["nosuid"]),
            spec_mount("/dev", "tmpfs", &["mode=755"]),
            spec_mount("/sys/fs/cgroup", "cgroup", &["ro"]),
            spec_mount("/data", "bind", &["rbind", "rprivate"]),
        ])
        .unwrap();
        assert!(p.setup_dev);
        assert_eq!(p.mounts[2].kind, Kind::CgroupV1);
        assert_eq!(p.mounts[3].kind, Kind::Bind);
        assert_eq!(p.devices.len(), 6);
        assert!(plan(vec![spec_mount("/x", "overlay", &[])]).is_err());
        let v2 = [spec_mount("/sys/fs/cgroup", "cgroup", &["ro", "nosuid"])];
        let v2 = Plan::new(
            "/r".into(),
            libc::MS_SLAVE,
            &v2,
            &[],
            &[],
            &[],
            false,
            None,
            true,
        );
        assert_eq!(v2.unwrap().mounts[0].kind, Kind::Kernel("cgroup2"));
        assert!(plan(vec![spec_mount("x", "tmpfs", &[])]).is_err());
        assert!(plan(vec![spec_mount("/x", "bind", &["rbind", "rshared"])]).is_err());
        let dev_bound = plan(vec![spec_mount("/dev", "bind", &["rbind"])]).unwrap();
        assert!(!dev_bound.setup_dev);
    }

    #[test]
    fn spec_devices_replace_the_defaults_of_their_path() {
        let d = Device {
            path: "/dev/null".into(),
            kind: "c".into(),
            major: 1,
            minor: 3,
            file_mode: Some(0o600),
            uid: Some(7),
            gid: None,
        };
        let p = Plan::new(
            "/r".into(),
            libc::MS_SLAVE,
            &[],
            &[d],
            &[],
            &[],
            false,
            None,
            false,
        )
        .unwrap();
        let null: Vec<_> = p.devices.iter().filter(|n| n.path == "/dev/null").collect();
        assert_eq!(null.len(), 1);
        assert_eq!(null[0].mode, libc::S_IFCHR | 0o600);
        assert_eq!(null[0].uid, 7);
    }

    #[test]
    fn joined_paths_stay_in_the_root_whatever_the_links_say() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("etc")).unwrap();
        std::os::unix::fs::symlink("/etc", root.join("abs")).unwrap();
        std::os::unix::fs::symlink("../../../..", root.join("up")).unwrap();
        assert_eq!(
            secure_join(root, "/abs/hosts").unwrap(),
            root.join("etc/hosts")
        );
        assert_eq!(secure_join(root, "/up/etc").unwrap(), root.join("etc"));
        assert_eq!(secure_join(root, "/../../x").unwrap(), root.join("x"));
        std::os::unix::fs::symlink("loop", root.join("loop")).unwrap();
        assert!(secure_join(root, "/loop/x").is_err());
    }

    #[test]
    fn each_v1_hierarchy_binds_this_processs_cgroup() {
        let mountinfo = "\
30 23 0:26 / /sys/fs/cgroup ro,nosuid - tmpfs tmpfs ro,mode=755
31 30 0:27 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw,nsdelegate
32 30 0:28 / /sys/fs/cgroup/systemd rw - cgroup cgroup rw,xattr,name=systemd
33 30 0:29 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct
34 30 0:30 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory
";
        let own = "0::/k/c\n1:name=systemd:/k/c\n3:cpu,cpuacct:/k/c\n4:memory:/k/m\n";
        let h = v1_hierarchies(mountinfo, own);
        let names: Vec<(&str, &str)> = h
            .iter()
            .map(|h| (h.mountpoint.as_str(), h.path.as_str()))
            .collect();
        assert_eq!(
            names,
            vec![
                ("/sys/fs/cgroup/systemd", "/k/c"),
                ("/sys/fs/cgroup/cpu,cpuacct", "/k/c"),
                ("/sys/fs/cgroup/memory", "/k/m"),
            ]
        );
    }
}
