//! User namespaces for pods (CRI `NamespaceMode::POD` user namespaces) and idmapped mounts.
//!
//! A pod with its own user namespace needs three things from the host before the OCI runtime
//! runs:
//! - the user namespace itself, with the pod's mapping, pinned on a file so that the pause
//!   container joins it by path ([`pin_namespaces`]);
//! - the pod's network namespace made *inside* that user namespace (owned by it): otherwise
//!   root of the pod cannot mount sysfs, set `net.*` sysctls or configure its own network, as
//!   the kernel checks capabilities against the owner of the network namespace;
//! - its root filesystems made of idmapped mounts ([`idmapped_bind`]), so that files owned by
//!   host root in the image appear owned by root inside, and what container root writes lands
//!   on disk as uid 0 (the layers stay shared and untouched: no chown).
//!
//! runc 1.1 has no idmapped mounts of its own (they came in runc 1.2), hence this module.
//! overlayfs cannot be idmapped as a whole (`mount_setattr` answers EINVAL on an overlay
//! mount, kernel 6.18 here), but it accepts idmapped *layers*: the image store mounts the
//! overlay of a pod's container over idmapped binds of each layer (see `peapod-image`), as
//! containerd's overlay snapshotter does with runc 1.2. [`probe`] checks exactly that.
//!
//! The namespaces are made by a short-lived child cloned straight into them (a plain
//! `clone(CLONE_NEWUSER | CLONE_NEWNET)`: the kernel makes the user namespace first, so the
//! new network namespace is owned by it); the parent writes the child's uid/gid maps, pins
//! the namespace files with bind mounts and kills the child. Nothing of the child survives.

use crate::mount::detach;
use std::ffi::CString;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// One contiguous id mapping: `size` ids from `container_id` inside are `host_id...` outside.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IdMap {
    pub container_id: u32,
    pub host_id: u32,
    pub size: u32,
}

impl IdMap {
    /// The line of `/proc/<pid>/uid_map` (and `gid_map`) for this mapping.
    pub fn map_line(&self) -> String {
        format!("{} {} {}\n", self.container_id, self.host_id, self.size)
    }

    /// Whether the container id `id` is mapped.
    pub fn maps(&self, id: u32) -> bool {
        id >= self.container_id
            && u64::from(id) < u64::from(self.container_id) + u64::from(self.size)
    }
}

/// A pod's pinned user namespace as its root filesystems need it: where it is pinned, and the
/// host ids of root inside (the owner of a container's writable layer).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PinnedUserns {
    pub path: std::path::PathBuf,
    pub root_uid: u32,
    pub root_gid: u32,
}

/// A child process parked in new namespaces; killed and reaped on drop.
struct Parked {
    pid: libc::pid_t,
}

impl Drop for Parked {
    fn drop(&mut self) {
        // SAFETY: plain syscalls on our own child's pid.
        unsafe {
            libc::kill(self.pid, libc::SIGKILL);
            let mut status = 0;
            while libc::waitpid(self.pid, &mut status, 0) < 0
                && io::Error::last_os_error().raw_os_error() == Some(libc::EINTR)
            {}
        }
    }
}

/// Clones a child into a new user namespace (and a new network namespace with `with_net`)
/// and writes its uid and gid maps. The child does nothing but wait to be killed.
fn park(uids: &IdMap, gids: &IdMap, with_net: bool) -> io::Result<Parked> {
    let mut flags = libc::CLONE_NEWUSER | libc::SIGCHLD;
    if with_net {
        flags |= libc::CLONE_NEWNET;
    }
    // SAFETY: a fork-like clone (no CLONE_VM, no new stack). The child only makes
    // async-signal-safe system calls (prctl, pause) and never returns into Rust code, so the
    // state of other threads copied with the address space does not matter.
    let pid = unsafe {
        libc::syscall(
            libc::SYS_clone,
            flags as libc::c_ulong,
            0usize,
            0usize,
            0usize,
            0usize,
        )
    };
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    if pid == 0 {
        // The child: die with the thread that made us, wait for SIGKILL otherwise.
        // SAFETY: in the fork-like child, only async-signal-safe calls with integer arguments
        // (prctl, pause), and it never leaves this block: no state copied from other threads
        // is touched.
        unsafe {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            loop {
                libc::pause();
            }
        }
    }
    let parked = Parked {
        pid: pid as libc::pid_t,
    };
    std::fs::write(format!("/proc/{pid}/uid_map"), uids.map_line())?;
    std::fs::write(format!("/proc/{pid}/gid_map"), gids.map_line())?;
    Ok(parked)
}

/// Bind-mounts the namespace file `/proc/<pid>/ns/<kind>` on `target` (created empty).
fn pin(pid: libc::pid_t, kind: &str, target: &Path) -> io::Result<()> {
    File::create(target)?;
    let source = format!("/proc/{pid}/ns/{kind}");
    let res = nix::mount::mount(
        Some(source.as_str()),
        target,
        None::<&str>,
        nix::mount::MsFlags::MS_BIND,
        None::<&str>,
    );
    if let Err(e) = res {
        let _ = std::fs::remove_file(target);
        return Err(io::Error::from(e));
    }
    Ok(())
}

/// Unpins a namespace file made by [`pin_namespaces`] and removes it; a missing one is fine.
pub fn unpin(path: &Path) -> io::Result<()> {
    detach(path)?;
    crate::fs::remove_file_if_exists(path)
}

/// Makes a new user namespace with the given maps, pinned at `userns_pin`, and, with
/// `netns_pin`, a new network namespace owned by it, pinned there. The pin files are created
/// (their directories must exist). On failure nothing is left.
pub fn pin_namespaces(
    uids: &IdMap,
    gids: &IdMap,
    userns_pin: &Path,
    netns_pin: Option<&Path>,
) -> io::Result<()> {
    let parked = park(uids, gids, netns_pin.is_some())?;
    pin(parked.pid, "user", userns_pin)?;
    if let Some(netns) = netns_pin {
        if let Err(e) = pin(parked.pid, "net", netns) {
            let _ = unpin(userns_pin);
            return Err(e);
        }
    }
    Ok(())
}

fn cpath(p: &Path) -> io::Result<CString> {
    CString::new(p.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path has a NUL byte"))
}

/// `struct mount_attr` of `mount_setattr(2)` (`MOUNT_ATTR_SIZE_VER0`).
#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

const OPEN_TREE_CLONE: libc::c_uint = 1;
const MOUNT_ATTR_IDMAP: u64 = 0x0010_0000;

/// One bind for [`idmapped_bind`]: `source` on `target`. The user namespace is passed apart,
/// as its callers make several binds through one (a pod's image layers, its idmapped mounts).
#[derive(Debug, Clone, Copy)]
pub struct IdmappedBind<'a> {
    /// A directory; the mount it is in must allow idmapping (ext4, xfs, btrfs, tmpfs do,
    /// overlayfs does not).
    pub source: &'a Path,
    /// An existing mount point.
    pub target: &'a Path,
    pub readonly: bool,
}

/// Mounts an idmapped clone of `bind.source` on `bind.target`, read-only with
/// `bind.readonly`. Files owned by host uid/gid `k` show, to processes in the user namespace
/// pinned at `userns`, as owned by `k` inside; what they create is stored with their
/// container ids. Not recursive: mounts below the source are not carried.
pub fn idmapped_bind(bind: &IdmappedBind<'_>, userns: &Path) -> io::Result<()> {
    let ns = File::open(userns)?;
    let src = cpath(bind.source)?;
    // SAFETY: open_tree with a valid C string; the result is a new fd or -1.
    let tree = unsafe {
        libc::syscall(
            libc::SYS_open_tree,
            libc::AT_FDCWD,
            src.as_ptr(),
            OPEN_TREE_CLONE | libc::O_CLOEXEC as libc::c_uint,
        )
    };
    if tree < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the fd was just returned to us and nothing else owns it.
    let tree = unsafe { OwnedFd::from_raw_fd(tree as i32) };
    let attr = MountAttr {
        attr_set: MOUNT_ATTR_IDMAP
            | if bind.readonly {
                crate::mount::MOUNT_ATTR_RDONLY as u64
            } else {
                0
            },
        attr_clr: 0,
        propagation: 0,
        userns_fd: ns.as_raw_fd() as u64,
    };
    let empty = c"";
    // SAFETY: the attr struct outlives the call and its size is passed.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            tree.as_raw_fd(),
            empty.as_ptr(),
            libc::AT_EMPTY_PATH,
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    crate::mount::move_mount(&tree, bind.target)
}

/// Checks that this host can give a pod its own user namespace: a user namespace with a
/// mapping, a network namespace owned by it, and a writable overlay of an idmapped lower layer
/// and a plain upper layer owned by the mapping's root, made in `scratch` (a fresh directory
/// on the filesystem where the layers live; it is removed again). Returns what failed.
pub fn probe(scratch: &Path) -> io::Result<()> {
    let map = IdMap {
        container_id: 0,
        host_id: 1_000_000,
        size: 65536,
    };
    // A daemon killed half-way through an earlier probe left its mounts: clean first too.
    clean_probe(scratch);
    std::fs::create_dir_all(scratch)?;
    let result = probe_in(scratch, &map);
    clean_probe(scratch);
    result
}

fn clean_probe(scratch: &Path) {
    for m in ["merged", "idmapped-lower"] {
        let _ = detach(&scratch.join(m));
    }
    let _ = unpin(&scratch.join("netns"));
    let _ = unpin(&scratch.join("userns"));
    let _ = crate::fs::remove_dir_all_if_exists(scratch);
}

fn context(what: &'static str) -> impl Fn(io::Error) -> io::Error {
    move |e| io::Error::new(e.kind(), format!("{what}: {e}"))
}

fn probe_in(scratch: &Path, map: &IdMap) -> io::Result<()> {
    for d in ["lower", "rw/upper", "rw/work", "merged", "idmapped-lower"] {
        std::fs::create_dir_all(scratch.join(d))?;
    }
    std::fs::write(scratch.join("lower/file"), b"x")?;
    let userns = scratch.join("userns");
    pin_namespaces(map, map, &userns, Some(&scratch.join("netns")))
        .map_err(context("a user namespace owning a network namespace"))?;
    let lower = scratch.join("idmapped-lower");
    let rw = scratch.join("rw");
    let bind = IdmappedBind {
        source: &scratch.join("lower"),
        target: &lower,
        readonly: true,
    };
    idmapped_bind(&bind, &userns).map_err(context("an idmapped mount"))?;
    std::os::unix::fs::chown(rw.join("upper"), Some(map.host_id), Some(map.host_id))?;
    let opts = format!(
        "lowerdir={},upperdir={},workdir={}",
        lower.display(),
        rw.join("upper").display(),
        rw.join("work").display()
    );
    let merged = scratch.join("merged");
    nix::mount::mount(
        Some("overlay"),
        &merged,
        Some("overlay"),
        nix::mount::MsFlags::empty(),
        Some(opts.as_str()),
    )
    .map_err(|e| context("an overlay of idmapped layers")(e.into()))?;
    // Through the layers' idmapping, the host-root-owned file shows as owned by the mapping's
    // host id.
    use std::os::unix::fs::MetadataExt;
    let owner = std::fs::metadata(merged.join("file"))?.uid();
    if owner != map.host_id {
        return Err(io::Error::other(format!(
            "an overlay of idmapped layers shows uid {owner}, not {}",
            map.host_id
        )));
    }
    // overlayfs mounts read-only, with only a kernel log line, when its upper layer does not
    // work: a container could not write its own root filesystem.
    if is_readonly(&merged)? {
        return Err(io::Error::other(
            "an overlay of idmapped layers is mounted read-only by the kernel",
        ));
    }
    Ok(())
}

/// Whether the filesystem at `path` is mounted read-only.
pub fn is_readonly(path: &Path) -> io::Result<bool> {
    let st = nix::sys::statvfs::statvfs(path).map_err(io::Error::from)?;
    Ok(st.flags().contains(nix::sys::statvfs::FsFlags::ST_RDONLY))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mapping_covers_its_range_only() {
        let m = IdMap {
            container_id: 0,
            host_id: 1000,
            size: 10,
        };
        assert!(m.maps(0));
        assert!(m.maps(9));
        assert!(!m.maps(10));
        assert_eq!(m.map_line(), "0 1000 10\n");
        let top = IdMap {
            container_id: u32::MAX - 1,
            host_id: 0,
            size: u32::MAX,
        };
        assert!(top.maps(u32::MAX));
    }

    /// Needs root (as the daemon does): whatever the host answers, nothing is left.
    #[test]
    fn the_probe_leaves_nothing_behind() {
        assert!(nix::unistd::geteuid().is_root(), "this test needs root");
        let dir = tempfile::tempdir().unwrap();
        let scratch = dir.path().join("probe");
        let res = probe(&scratch);
        assert!(!scratch.exists(), "probe left {}", scratch.display());
        let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
        assert!(
            !mounts.contains(&scratch.display().to_string()),
            "probe left a mount: {res:?}"
        );
        // This host (kernel 6.18) can; a host that cannot says why.
        res.unwrap();
    }
}
