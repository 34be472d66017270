//! The container's root filesystem from the mounts containerd sends with Create (typically one
//! overlay from its snapshotter), mounted at `<bundle>/rootfs`, where the bundle's config.json
//! expects it. containerd leaves this to the shim, as runc-v2 does it.

use containerd_shim_protos::api::Mount;
use nix::mount::{MntFlags, MsFlags};
use std::path::{Path, PathBuf};

/// Mount options that are flags, not data (`mount(8)`'s names); the rest is the data string.
fn flag_of(option: &str) -> Option<(bool, MsFlags)> {
    // (clear, flag): `rw` clears RDONLY, and so on.
    Some(match option {
        "ro" => (false, MsFlags::MS_RDONLY),
        "rw" => (true, MsFlags::MS_RDONLY),
        "bind" => (false, MsFlags::MS_BIND),
        "rbind" => (false, MsFlags::MS_BIND | MsFlags::MS_REC),
        "nosuid" => (false, MsFlags::MS_NOSUID),
        "suid" => (true, MsFlags::MS_NOSUID),
        "nodev" => (false, MsFlags::MS_NODEV),
        "dev" => (true, MsFlags::MS_NODEV),
        "noexec" => (false, MsFlags::MS_NOEXEC),
        "exec" => (true, MsFlags::MS_NOEXEC),
        "noatime" => (false, MsFlags::MS_NOATIME),
        "relatime" => (false, MsFlags::MS_RELATIME),
        "sync" => (false, MsFlags::MS_SYNCHRONOUS),
        "async" => (true, MsFlags::MS_SYNCHRONOUS),
        "remount" => (false, MsFlags::MS_REMOUNT),
        "defaults" => (false, MsFlags::empty()),
        _ => return None,
    })
}

/// Flags and data of a mount's options.
fn parse_options(options: &[String]) -> (MsFlags, String) {
    let mut flags = MsFlags::empty();
    let mut data = Vec::new();
    for option in options {
        match flag_of(option) {
            Some((true, f)) => flags.remove(f),
            Some((false, f)) => flags.insert(f),
            None => data.push(option.as_str()),
        }
    }
    (flags, data.join(","))
}

pub fn rootfs(bundle: &Path) -> PathBuf {
    bundle.join("rootfs")
}

/// Mounts `mounts`, in order, on `<bundle>/rootfs`; on failure unmounts what it mounted.
pub fn mount_rootfs(bundle: &Path, mounts: &[Mount]) -> Result<(), String> {
    let target = rootfs(bundle);
    std::fs::create_dir_all(&target).map_err(|e| format!("create {}: {e}", target.display()))?;
    for (done, m) in mounts.iter().enumerate() {
        let (flags, data) = parse_options(&m.options);
        // A bind mount has no filesystem type; the request may still name one ("bind").
        let fstype =
            (!m.type_.is_empty() && !flags.contains(MsFlags::MS_BIND)).then_some(m.type_.as_str());
        let data = (!data.is_empty()).then_some(data.as_str());
        let mounted = nix::mount::mount(Some(m.source.as_str()), &target, fstype, flags, data);
        if let Err(err) = mounted {
            for _ in 0..done {
                let _ = nix::mount::umount2(&target, MntFlags::MNT_DETACH);
            }
            return Err(format!(
                "mount {} {} on {}: {err}",
                m.type_,
                m.source,
                target.display()
            ));
        }
    }
    Ok(())
}

/// Unmounts everything on `<bundle>/rootfs`; nothing mounted there is success.
pub fn unmount_rootfs(bundle: &Path) -> Result<(), String> {
    let target = rootfs(bundle);
    loop {
        match nix::mount::umount2(&target, MntFlags::empty()) {
            Ok(()) => continue,
            // Not a mount point (any more), or no such directory: done.
            Err(nix::errno::Errno::EINVAL) | Err(nix::errno::Errno::ENOENT) => return Ok(()),
            // Still busy (a process of the container lingers): detach it instead.
            Err(nix::errno::Errno::EBUSY) => {
                return nix::mount::umount2(&target, MntFlags::MNT_DETACH)
                    .map_err(|e| format!("unmount {}: {e}", target.display()))
            }
            Err(err) => return Err(format!("unmount {}: {err}", target.display())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_split_into_flags_and_data() {
        let opts: Vec<String> = ["ro", "nosuid", "index=off", "lowerdir=/a:/b", "rw"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let (flags, data) = parse_options(&opts);
        assert_eq!(flags, MsFlags::MS_NOSUID);
        assert_eq!(data, "index=off,lowerdir=/a:/b");
        let (flags, data) = parse_options(&["rbind".to_string(), "ro".to_string()]);
        assert_eq!(
            flags,
            MsFlags::MS_BIND | MsFlags::MS_REC | MsFlags::MS_RDONLY
        );
        assert_eq!(data, "");
    }

    #[test]
    fn unmounting_what_is_not_mounted_is_success() {
        let dir = tempfile::tempdir().unwrap();
        unmount_rootfs(dir.path()).unwrap();
        std::fs::create_dir(rootfs(dir.path())).unwrap();
        unmount_rootfs(dir.path()).unwrap();
    }
}
