//! What this host lets the native paths do, read once where it is needed (the shim at its
//! start; each helper in its own process): the Linux security modules it enforces and how it
//! mounts cgroups.

use crate::cgroups::Cgroups;
use std::path::Path;

/// The host as the native paths see it.
#[derive(Debug, Clone)]
pub struct Host {
    pub lsm: Lsm,
    pub cgroups: Cgroups,
}

impl Host {
    pub fn detect() -> Host {
        Host {
            lsm: Lsm::of_host(),
            cgroups: Cgroups::detect(),
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
    pub fn of_host() -> Lsm {
        let apparmor = std::fs::read_to_string("/sys/module/apparmor/parameters/enabled")
            .map(|s| s.trim() == "Y")
            .unwrap_or(false);
        let selinux = Path::new("/sys/fs/selinux/enforce").exists();
        Lsm { apparmor, selinux }
    }
}
