//! Where pods and containers go in the cgroup tree, per cgroup driver.
//!
//! With cgroupfs, runc gets `cgroupsPath = <parent>/<id>`. With systemd it gets
//! `<slice>:<prefix>:<id>`, where a cgroupfs-style parent such as `/kubepods/burstable/pod1`
//! becomes the slice `kubepods-burstable-pod1.slice`, as the kubelet names them
//! (`peapod_host::systemd::slice_name`).

use crate::config::CgroupDriver;

/// The prefix of scope units peapod creates with the systemd driver.
pub const SYSTEMD_PREFIX: &str = "peapod";

/// The runtime-spec `cgroupsPath` for object `id` under `parent`.
pub fn cgroups_path(driver: CgroupDriver, parent: &str, id: &str) -> String {
    match driver {
        CgroupDriver::Cgroupfs => {
            let parent = parent.trim_end_matches('/');
            let parent = if parent.starts_with('/') {
                parent.to_string()
            } else {
                format!("/{parent}")
            };
            format!("{}/{id}", parent.trim_end_matches('/'))
        }
        CgroupDriver::Systemd => format!(
            "{}:{SYSTEMD_PREFIX}:{id}",
            peapod_host::systemd::slice_name(parent)
        ),
    }
}

/// The cgroup directory (from the hierarchy's root) a `cgroupsPath` of `driver` names: the
/// path itself with cgroupfs, the scope's directory with systemd.
pub fn cgroup_dir(driver: CgroupDriver, cgroups_path: &str) -> Option<String> {
    match driver {
        CgroupDriver::Cgroupfs => Some(cgroups_path.to_string()),
        CgroupDriver::Systemd => peapod_host::systemd::scope_of(cgroups_path).map(|(_, p)| p),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn directories_per_driver() {
        use CgroupDriver::{Cgroupfs, Systemd};
        assert_eq!(
            cgroup_dir(Cgroupfs, "/kubepods/pod1/abc").as_deref(),
            Some("/kubepods/pod1/abc")
        );
        assert_eq!(
            cgroup_dir(Systemd, "kubepods-pod1.slice:peapod:abc").as_deref(),
            Some("/kubepods.slice/kubepods-pod1.slice/peapod-abc.scope")
        );
        assert_eq!(cgroup_dir(Systemd, "not-systemd"), None);
    }

    #[test]
    fn paths_per_driver() {
        use CgroupDriver::{Cgroupfs, Systemd};
        for (driver, parent, id, want) in [
            (Cgroupfs, "/kubepods/pod1", "abc", "/kubepods/pod1/abc"),
            (Cgroupfs, "kubepods/", "abc", "/kubepods/abc"),
            (Cgroupfs, "/", "abc", "/abc"),
            (
                Systemd,
                "/kubepods/burstable/pod1",
                "abc",
                "kubepods-burstable-pod1.slice:peapod:abc",
            ),
            (
                Systemd,
                "kubepods-besteffort-pod2.slice",
                "x",
                "kubepods-besteffort-pod2.slice:peapod:x",
            ),
            (Systemd, "", "x", "system.slice:peapod:x"),
            (
                Systemd,
                "/kubepods/burstable/pod22a6c8c0-a1ce-4368",
                "x",
                "kubepods-burstable-pod22a6c8c0_a1ce_4368.slice:peapod:x",
            ),
        ] {
            assert_eq!(
                cgroups_path(driver, parent, id),
                want,
                "{driver:?} {parent:?}"
            );
        }
    }
}
