//! The built-in pause root filesystem: one static binary, embedded in the daemon.

use crate::error::{Error, Result};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// The static pause binary built by build.rs from `pause/pause.rs`.
pub const PAUSE_BINARY: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/pause"));

/// The uid/gid pause runs as (the pause image's `65535:65535`).
pub const PAUSE_USER: u32 = 65535;

/// The mount points of the pause's spec that must exist in its root (the rest are inside the
/// /dev tmpfs and sysfs): with them there, the runtime writes nothing into the shared root,
/// which a pod with its own user namespace gets through a read-only idmapped bind.
const MOUNT_POINTS: [&str; 3] = ["proc", "dev", "sys"];

/// Writes `<dir>/rootfs/pause` if it is missing or differs, and the mount points, and returns
/// the rootfs path.
pub fn materialize(dir: &Path) -> Result<PathBuf> {
    let rootfs = dir.join("rootfs");
    let binary = rootfs.join("pause");
    if std::fs::read(&binary).ok().as_deref() == Some(PAUSE_BINARY) {
        make_mount_points(&rootfs)?;
        return Ok(rootfs);
    }
    std::fs::create_dir_all(&rootfs).map_err(|e| Error::path("create", &rootfs, e))?;
    // The pause runs as 65535: its `/` must be 0755 whatever the daemon's umask.
    std::fs::set_permissions(&rootfs, std::fs::Permissions::from_mode(0o755))
        .map_err(|e| Error::path("chmod", &rootfs, e))?;
    let tmp = rootfs.join(".pause.tmp");
    std::fs::write(&tmp, PAUSE_BINARY).map_err(|e| Error::path("write", &tmp, e))?;
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o755))
        .map_err(|e| Error::path("chmod", &tmp, e))?;
    std::fs::rename(&tmp, &binary).map_err(|e| Error::path("install", &binary, e))?;
    make_mount_points(&rootfs)?;
    Ok(rootfs)
}

fn make_mount_points(rootfs: &Path) -> Result<()> {
    for d in MOUNT_POINTS {
        let p = rootfs.join(d);
        std::fs::create_dir_all(&p).map_err(|e| Error::path("create", &p, e))?;
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755))
            .map_err(|e| Error::path("chmod", &p, e))?;
    }
    Ok(())
}
