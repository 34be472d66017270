//! What this host lets the native paths do, read once where it is needed (the shim at its
//! start; each helper in its own process): the Linux security modules it enforces and how it
//! mounts cgroups (with the cgroup driver the shim was started with).

use crate::cgroups::{Cgroups, Driver};
use std::path::Path;

/// The host as the native paths see it.
#[derive(Debug, Clone)]
pub struct Host {
    pub lsm: Lsm,
    pub cgroups: Cgroups,
}

impl Host {
    pub fn detect(driver: Driver) -> Host {
        Host {
            lsm: Lsm::of_host(),
            cgroups: Cgroups::detect(driver),
        }
    }
}

/// Which Linux security modules this host enforces (a label the host does not enforce is
/// ignored by the runtime too).
#[derive(Debug, Clone, Copy, Default)]
pub struct Lsm {
    pub apparmor: bool,
    pub selinux: bool,
}

impl Lsm {
    /// AppArmor as runc sees it: the module enabled and its securityfs there (a profile a
    /// runtime applies without it fails).
    pub fn of_host() -> Lsm {
        let apparmor = std::fs::read_to_string("/sys/module/apparmor/parameters/enabled")
            .map(|s| s.trim() == "Y")
            .unwrap_or(false)
            && Path::new("/sys/kernel/security/apparmor").exists();
        let selinux = Path::new("/sys/fs/selinux/enforce").exists();
        Lsm { apparmor, selinux }
    }
}
