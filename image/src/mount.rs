//! Overlay and bind mounts for container root filesystems.
//!
//! mount(2) takes all overlay options in one page (4096 bytes), which caps the
//! number of lower layers at roughly 4096 / (path length). When the classic
//! option string would not fit, we use the new mount API (fsopen/fsconfig),
//! adding one lower directory per `lowerdir+` call (Linux 6.8+): no length limit,
//! only overlayfs's own stack limit of 500 layers.

use crate::Error;
use peapod_host::mount::{move_mount, FsContext, MOUNT_ATTR_RDONLY};
use peapod_host::userns::IdmappedBind;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// overlayfs refuses deeper stacks (OVL_MAX_STACK).
pub const MAX_OVERLAY_LAYERS: usize = 500;
const PAGE_LIMIT: usize = 4095;

fn overlay_index_supported() -> bool {
    Path::new("/sys/module/overlay/parameters/index").exists()
}

/// Escapes a path for the legacy option string: ':' separates lower dirs and
/// '\' escapes; ',' separates options and cannot be escaped there.
fn escape(p: &Path) -> Result<String, Error> {
    let s = p
        .to_str()
        .ok_or_else(|| Error::InvalidArgument(format!("non-UTF-8 overlay path {}", p.display())))?;
    if s.contains(',') {
        return Err(Error::InvalidArgument(format!(
            "overlay path {s:?} contains a comma"
        )));
    }
    Ok(s.replace('\\', "\\\\").replace(':', "\\:"))
}

/// Mounts `lowers` (top-most first) with an optional (upper, work) pair on `target`.
pub(crate) fn mount_overlay(
    lowers: &[PathBuf],
    upper: Option<(&Path, &Path)>,
    target: &Path,
    readonly: bool,
) -> Result<(), Error> {
    if lowers.is_empty() {
        return Err(Error::InvalidArgument(
            "overlay needs at least one lower directory".into(),
        ));
    }
    if lowers.len() > MAX_OVERLAY_LAYERS {
        return Err(Error::Unsupported(format!(
            "{} layers: overlayfs stacks at most {MAX_OVERLAY_LAYERS}",
            lowers.len()
        )));
    }
    let mut data = String::from("lowerdir=");
    let escaped: Result<Vec<String>, Error> = lowers.iter().map(|l| escape(l)).collect();
    data.push_str(&escaped?.join(":"));
    if let Some((u, w)) = upper {
        data.push_str(&format!(",upperdir={},workdir={}", escape(u)?, escape(w)?));
    }
    // index=on (a kernel default on some distros) ties lower layers to one
    // upper and makes sharing layers between containers fail; containerd
    // turns it off too.
    if overlay_index_supported() {
        data.push_str(",index=off");
    }
    if data.len() + VOLATILE.len() <= PAGE_LIMIT {
        let mut flags = nix::mount::MsFlags::empty();
        if readonly {
            flags |= nix::mount::MsFlags::MS_RDONLY;
        }
        let mount = |data: &str| {
            nix::mount::mount(Some("overlay"), target, Some("overlay"), flags, Some(data))
        };
        let result = match upper.is_some() && volatile_supported() {
            true => match mount(&format!("{data}{VOLATILE}")) {
                // A kernel before 5.10 does not know the option: if the same mount without
                // it works, later ones do without it too.
                Err(nix::errno::Errno::EINVAL) => {
                    let plain = mount(&data);
                    if plain.is_ok() {
                        VOLATILE_REFUSED.store(true, std::sync::atomic::Ordering::Relaxed);
                        tracing::info!("this kernel's overlayfs has no volatile option");
                    }
                    plain
                }
                other => other,
            },
            false => mount(&data),
        };
        return result.map_err(|e| {
            Error::io(
                format!(
                    "mounting overlay ({} layers) on {}",
                    lowers.len(),
                    target.display()
                ),
                e.into(),
            )
        });
    }
    tracing::debug!(
        layers = lowers.len(),
        "overlay options exceed a page; using fsconfig lowerdir+"
    );
    mount_overlay_fsconfig(lowers, upper, target, readonly).map_err(|e| {
        Error::io(
            format!(
                "mounting overlay of {} layers on {} with the new mount API (needs Linux 6.8+ for this many layers)",
                lowers.len(),
                target.display()
            ),
            e,
        )
    })
}

/// A container's writable layer is mounted `volatile`: overlayfs then skips the sync of the
/// whole upper filesystem that its unmount (and every syncfs in the container) would make:
/// 5-90 ms per RemoveContainer here, growing with what else is dirty on the disk. Nothing
/// is lost to Kubernetes by it: a writable layer lives as long as its container, and a
/// container does not outlive the machine's crash (the kubelet makes a new one, with a new
/// layer); what overlayfs gives up after such a crash is remounting that upper directory,
/// which peapod never does (it removes it). containerd and CRI-O sync (podman mounts its
/// `--rm` containers volatile).
const VOLATILE: &str = ",volatile";

/// Set once the kernel refused `volatile` (before 5.10): later mounts do without it.
static VOLATILE_REFUSED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

fn volatile_supported() -> bool {
    !VOLATILE_REFUSED.load(std::sync::atomic::Ordering::Relaxed)
}

fn mount_overlay_fsconfig(
    lowers: &[PathBuf],
    upper: Option<(&Path, &Path)>,
    target: &Path,
    readonly: bool,
) -> io::Result<()> {
    let fs = FsContext::open("overlay")?;
    fs.set_string("source", b"overlay")?;
    for l in lowers {
        fs.set_string("lowerdir+", l.as_os_str().as_bytes())?;
    }
    if let Some((u, w)) = upper {
        fs.set_string("upperdir", u.as_os_str().as_bytes())?;
        fs.set_string("workdir", w.as_os_str().as_bytes())?;
        // (lowerdir+ needs Linux 6.8, which knows volatile.)
        fs.set_flag("volatile")?;
    }
    if overlay_index_supported() {
        fs.set_string("index", b"off")?;
    }
    let mnt = fs.mount(if readonly { MOUNT_ATTR_RDONLY } else { 0 })?;
    move_mount(&mnt, target)
}

/// The root filesystem of a container in its pod's user namespace: the same overlay as
/// [`mount_overlay`], but the shared image layers go in through read-only idmapped binds
/// under `scratch`, so that files owned by host root show as owned by root inside without
/// chowning the layers. The container's own writable layer (`rw`: the directory holding
/// `upper` and `work`) is not idmapped — overlayfs works in it with the mounter's (host
/// root's) credentials, which an idmapping would not map (EOVERFLOW, and a silently read-only
/// overlay) — but its `upper` is given to the namespace's root, so what container root
/// writes is stored with its host ids, in its own layer only. overlayfs keeps private clones
/// of its layers' mounts, so the binds are detached again as soon as the overlay is mounted
/// and `scratch` is removed: only the overlay at `target` remains, as without a user
/// namespace. A read-only single-layer rootfs is one idmapped read-only bind. On failure
/// nothing is left.
pub(crate) fn mount_overlay_idmapped(
    lowers: &[PathBuf],
    rw: Option<&Path>,
    target: &Path,
    readonly: bool,
    userns: &peapod_host::userns::PinnedUserns,
    scratch: &Path,
) -> Result<(), Error> {
    let idmap = |src: &Path, dst: &Path, ro: bool| {
        let bind = IdmappedBind {
            source: src,
            target: dst,
            readonly: ro,
        };
        peapod_host::userns::idmapped_bind(&bind, &userns.path).map_err(|e| {
            Error::io(
                format!(
                    "idmapped mount of {} on {} for the user namespace {}",
                    src.display(),
                    dst.display(),
                    userns.path.display()
                ),
                e,
            )
        })
    };
    if readonly && rw.is_none() && lowers.len() == 1 {
        return idmap(&lowers[0], target, true);
    }
    let mut binds: Vec<PathBuf> = Vec::new();
    let result = (|| {
        let mut idmapped_lowers = Vec::with_capacity(lowers.len());
        for (i, lower) in lowers.iter().enumerate() {
            let dst = scratch.join(format!("l{i}"));
            std::fs::create_dir_all(&dst)
                .map_err(|e| Error::io(format!("creating {}", dst.display()), e))?;
            idmap(lower, &dst, true)?;
            binds.push(dst.clone());
            idmapped_lowers.push(dst);
        }
        let upper = match rw {
            Some(dir) => {
                let upper = dir.join("upper");
                std::os::unix::fs::chown(&upper, Some(userns.root_uid), Some(userns.root_gid))
                    .map_err(|e| Error::io(format!("chown {}", upper.display()), e))?;
                Some((upper, dir.join("work")))
            }
            None => None,
        };
        mount_overlay(
            &idmapped_lowers,
            upper.as_ref().map(|(u, w)| (u.as_path(), w.as_path())),
            target,
            readonly,
        )?;
        let ro = peapod_host::userns::is_readonly(target)
            .map_err(|e| Error::io(format!("statvfs {}", target.display()), e))?;
        if ro && !readonly {
            let _ = unmount(target);
            return Err(Error::io(
                format!("the overlay at {} came up read-only", target.display()),
                std::io::Error::other("see the kernel log (overlayfs)"),
            ));
        }
        Ok(())
    })();
    for b in &binds {
        if let Err(e) = peapod_host::mount::detach(b) {
            tracing::warn!(path = %b.display(), error = %e, "detaching an idmapped layer bind");
        }
    }
    if let Err(e) = peapod_host::fs::remove_dir_all_if_exists(scratch) {
        tracing::warn!(path = %scratch.display(), error = %e, "removing the idmapped binds' directory");
    }
    result
}

/// Bind-mounts `src` read-only on `target` (a single-layer read-only rootfs
/// needs no overlay at all).
pub(crate) fn bind_readonly(src: &Path, target: &Path) -> Result<(), Error> {
    use nix::mount::{mount, MsFlags};
    let ctx = |e: nix::Error| {
        Error::io(
            format!("bind-mounting {} on {}", src.display(), target.display()),
            e.into(),
        )
    };
    mount(
        Some(src),
        target,
        None::<&str>,
        MsFlags::MS_BIND,
        None::<&str>,
    )
    .map_err(ctx)?;
    if let Err(e) = mount(
        None::<&str>,
        target,
        None::<&str>,
        MsFlags::MS_BIND | MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY,
        None::<&str>,
    ) {
        let _ = nix::mount::umount2(target, nix::mount::MntFlags::MNT_DETACH);
        return Err(ctx(e));
    }
    Ok(())
}

/// Unmounts `target`; a busy mount is detached lazily. Not mounted or
/// missing is success, so callers can retry cleanup.
pub(crate) fn unmount(target: &Path) -> Result<(), Error> {
    use nix::mount::MntFlags;
    match peapod_host::mount::unmount(target, MntFlags::UMOUNT_NOFOLLOW) {
        Ok(_) => Ok(()),
        Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {
            tracing::warn!(target = %target.display(), "rootfs busy, detaching lazily");
            peapod_host::mount::unmount(target, MntFlags::MNT_DETACH | MntFlags::UMOUNT_NOFOLLOW)
                .map(drop)
                .map_err(|e| Error::io(format!("detaching {}", target.display()), e))
        }
        Err(e) => Err(Error::io(format!("unmounting {}", target.display()), e)),
    }
}

/// Whether `path` is a mount point, from /proc/self/mountinfo.
pub fn is_mountpoint(path: &Path) -> bool {
    let Ok(info) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return false;
    };
    let want = path.as_os_str().as_bytes();
    info.lines().any(|l| {
        l.split(' ')
            .nth(4)
            .map(|m| unescape_mountinfo(m).as_slice() == want)
            .unwrap_or(false)
    })
}

/// mountinfo escapes space, tab, newline and backslash as \ooo.
fn unescape_mountinfo(s: &str) -> Vec<u8> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            let v = (b[i + 1] - b'0') as u32 * 64
                + (b[i + 2] - b'0') as u32 * 8
                + (b[i + 3] - b'0') as u32;
            out.push(v as u8);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    out
}

/// Whether an overlay mounted on this host has its upper directory in `dir` (a container's
/// writable layer in use), from /proc/self/mountinfo; false when it cannot be read.
pub(crate) fn any_overlay_upper_in(dir: &Path) -> bool {
    let Ok(info) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return false;
    };
    let needle = format!("upperdir={}/", dir.display());
    info.lines()
        .any(|l| l.contains(" - overlay ") && l.contains(&needle))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaping() {
        assert_eq!(escape(Path::new("/a:b\\c")).unwrap(), "/a\\:b\\\\c");
        assert!(escape(Path::new("/a,b")).is_err());
        assert_eq!(unescape_mountinfo("/a\\040b"), b"/a b");
    }
}
