//! A container's cgroups as the native paths make, limit, freeze, list, signal and remove
//! them, behind one type chosen once per host and cgroup driver: [`Cgroups`] (`Host::detect`
//! reads it in the shim at its start and in each helper, which the shim tells the driver).
//!
//! - [`hierarchies`]: what every layout does alike: a cgroup made in every mounted hierarchy
//!   and joined, another process's cgroups joined, a cgroup's processes listed and signalled;
//! - [`v1`]: a container's resources and its freezer on a v1 (or hybrid) host, written as runc
//!   1.1's cgroupfs manager writes them;
//! - [`v2`]: the same on the unified hierarchy, as runc 1.1's fs2 manager writes them, with
//!   [`device_filter`] (the device rules as a BPF program, v2 having no devices controller);
//! - [`systemd`]: the systemd driver (a `cgroupsPath` of `slice:prefix:name`): the
//!   container's scope made by systemd over D-Bus, as runc's systemd v2 manager asks for it,
//!   then written as [`v2`] writes any cgroup;
//! - [`devices`]: the device rules as runc's emulator folds them, which each of those writes
//!   its own way.
//!
//! The systemd driver on a v1 host is left to the runtime CLI, as are the specs
//! [`Cgroups::unsupported`] names.

pub mod device_filter;
pub mod devices;
pub mod hierarchies;
pub mod systemd;
pub mod v1;
pub mod v2;

use crate::spec::{Resources, Spec};
use std::path::{Path, PathBuf};
use systemd::Scope;

pub use hierarchies::join_those_of;

/// How a container's `cgroupsPath` is read (the daemon's `[cgroup] driver`, the shim's and the
/// helpers' `--cgroup-driver`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Driver {
    /// A path from the hierarchy's root: `/kubepods/pod1/abc`.
    #[default]
    Cgroupfs,
    /// `slice:prefix:name`: the scope `prefix-name.scope` that systemd makes in that slice.
    Systemd,
}

/// How this host's cgroups are driven, chosen once ([`Cgroups::detect`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cgroups {
    root: PathBuf,
    /// cgroup v2 alone: the unified hierarchy at the root. Otherwise v1: each controller its
    /// own hierarchy under the root, with or without a controller-less v2 hierarchy at
    /// `<root>/unified` (hybrid, this development machine).
    unified: bool,
    driver: Driver,
}

impl Cgroups {
    /// The host's cgroups under the usual mount, named by `driver`.
    pub fn detect(driver: Driver) -> Cgroups {
        Cgroups::at(Path::new(peapod_host::cgroup::DEFAULT_ROOT), driver)
    }

    /// The cgroups mounted at `root`.
    pub fn at(root: &Path, driver: Driver) -> Cgroups {
        Cgroups {
            root: root.to_path_buf(),
            unified: peapod_host::cgroup::is_unified(root),
            driver,
        }
    }

    /// Whether the host runs the unified hierarchy alone (cgroup v2).
    pub fn is_unified(&self) -> bool {
        self.unified
    }

    pub fn driver(&self) -> Driver {
        self.driver
    }

    /// Why a container of `spec` cannot have its cgroup made and limited here, if so (the
    /// runtime CLI then creates it).
    pub fn unsupported(&self, spec: &Spec) -> Option<&'static str> {
        let path = &spec.linux.cgroups_path;
        match (self.driver, self.unified) {
            (Driver::Cgroupfs, _) if !is_cgroupfs_path(path) => {
                return Some("a cgroup that is not a cgroupfs path")
            }
            (Driver::Cgroupfs, _) => {}
            (Driver::Systemd, false) => {
                return Some("the systemd cgroup driver on a cgroup v1 host")
            }
            (Driver::Systemd, true) => {
                if Scope::of(path).is_none() {
                    return Some("a cgroup path that is not a systemd scope (slice:prefix:name)");
                }
                if let Some(why) = systemd::unsupported_annotation(spec.annotations.keys()) {
                    return Some(why);
                }
            }
        }
        spec.linux
            .resources
            .as_ref()
            .and_then(|r| self.unsupported_update(r))
    }

    /// Why `resources` cannot be written here, if so: at a create ([`Cgroups::unsupported`])
    /// or an update.
    pub fn unsupported_update(&self, resources: &Resources) -> Option<&'static str> {
        for (key, value) in &resources.others {
            if value.is_null() {
                continue;
            }
            match key.as_str() {
                "unified" if self.unified && v2::unified(resources).is_err() => {
                    return Some("unified resources that are not file names and strings")
                }
                "unified" if self.unified => {}
                "unified" if value.as_object().is_some_and(|m| m.is_empty()) => {}
                "unified" => return Some("unified (cgroup v2) resources"),
                "network" => return Some("network class or priorities"),
                "rdma" => return Some("RDMA limits"),
                _ => return Some("a resource this shim does not know"),
            }
        }
        if resources.cpu.as_ref().is_some_and(|c| c.idle.is_some()) {
            return Some("a CPU idle setting");
        }
        if resources
            .memory
            .as_ref()
            .is_some_and(|m| m.check_before_update.is_some())
        {
            return Some("a memory check before update");
        }
        None
    }

    /// The container's cgroup from the hierarchy's root: the path itself, or the scope's
    /// path with the systemd driver (a path that names none is taken as it is).
    fn resolve<'a>(&self, path: &'a str) -> std::borrow::Cow<'a, str> {
        match self.scope(path) {
            Some(scope) => scope.path.into(),
            None => path.into(),
        }
    }

    fn scope(&self, path: &str) -> Option<Scope> {
        (self.driver == Driver::Systemd)
            .then(|| Scope::of(path))
            .flatten()
    }

    /// Makes cgroup `path` in every hierarchy and moves process `pid` into it; its directory
    /// in each hierarchy. (What a native pause does on a v1 host.)
    pub fn create_and_join(&self, path: &str, pid: u32) -> std::io::Result<Vec<PathBuf>> {
        hierarchies::create_and_join(&self.root, path, pid)
    }

    /// The container's cgroup made at its create, process `pid` moved into it and
    /// `resources` written (the device rules too): the cgroup made in every hierarchy (v1),
    /// with the controllers enabled above it (v2), or the scope started by systemd.
    pub fn create(&self, path: &str, pid: u32, resources: &Resources) -> Result<(), String> {
        if !self.unified {
            self.create_and_join(path, pid)
                .map_err(|e| format!("join the cgroup {path}: {e}"))?;
            return v1::apply(&self.root, path, resources, true);
        }
        let dir = match self.scope(path) {
            Some(scope) => {
                scope.start(pid, resources)?;
                // Controllers enabled above it, as runc does after the start.
                v2::make_path(&self.root, &scope.path)?
            }
            None => {
                let dir = v2::make_path(&self.root, path)?;
                v2::join(&dir, pid).map_err(|e| format!("join the cgroup {path}: {e}"))?;
                dir
            }
        };
        v2::apply(&dir, resources, true)
    }

    /// `runc update`: `resources` written to cgroup `path` (its device rules stay as they
    /// are); with the systemd driver, as unit properties first.
    pub fn update(&self, path: &str, resources: &Resources) -> Result<(), String> {
        if !self.unified {
            return v1::apply(&self.root, path, resources, false);
        }
        if let Some(scope) = self.scope(path) {
            scope.update(resources)?;
        }
        v2::apply(&self.dir(path), resources, false)
    }

    /// Cgroup `path`'s directory in the unified hierarchy.
    fn dir(&self, path: &str) -> PathBuf {
        self.root.join(self.resolve(path).trim_start_matches('/'))
    }

    /// Freezes (`runc pause`) or thaws (`runc resume`) cgroup `path`.
    pub fn freeze(&self, path: &str, frozen: bool) -> Result<(), String> {
        if self.unified {
            v2::freeze(&self.dir(path), frozen)
        } else {
            v1::freeze(&self.root, path, frozen)
        }
    }

    /// The processes in cgroup `path` and the cgroups below it.
    pub fn members(&self, path: &str) -> Vec<i32> {
        hierarchies::members(&self.root, &self.resolve(path))
    }

    /// `signal` to every process of cgroup `path` (`kill --all`), once.
    pub fn signal_all(&self, path: &str, signal: u32) {
        let path = self.resolve(path);
        hierarchies::signal_all(&self.root, &path, signal, &mut Default::default());
    }

    /// SIGKILL to every process of cgroup `path`: at once through `cgroup.kill` where the
    /// kernel has it, else read again until none is new.
    pub fn kill_all(&self, path: &str) {
        if self.unified && v2::kill(&self.dir(path)) {
            return;
        }
        hierarchies::kill_all(&self.root, &self.resolve(path))
    }

    /// Removes cgroup `path` from every hierarchy, killing what still runs in it first; with
    /// the systemd driver, its scope stopped first.
    pub fn remove(&self, path: &str) -> std::io::Result<()> {
        if !self.unified {
            return peapod_host::cgroup::remove(&self.root, path);
        }
        self.kill_all(path);
        let stopped = match self.scope(path) {
            Some(scope) => scope.stop().map_err(std::io::Error::other),
            None => Ok(()),
        };
        // What systemd leaves (it may not remove cgroups made below a delegated scope).
        peapod_host::cgroup::remove(&self.root, &self.resolve(path))?;
        stopped
    }
}

/// Whether `path` (a spec's `cgroupsPath`) names a cgroup by its path, as the cgroupfs driver
/// does (the systemd driver's `slice:prefix:name` is a scope).
pub fn is_cgroupfs_path(path: &str) -> bool {
    !path.is_empty() && !path.contains(':')
}

/// Writes `value` to `dir/file`, an error naming both.
fn write(dir: &Path, file: &str, value: &str) -> Result<(), String> {
    let path = dir.join(file);
    std::fs::write(&path, value).map_err(|e| format!("write {} = {value}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec(json: &str) -> Spec {
        serde_json::from_str(json).unwrap()
    }

    fn host(unified: bool, driver: Driver) -> Cgroups {
        Cgroups {
            root: "/sys/fs/cgroup".into(),
            unified,
            driver,
        }
    }

    #[test]
    fn what_each_driver_leaves_to_the_runtime() {
        let fs = spec(r#"{"linux":{"cgroupsPath":"/k/abc","resources":{"memory":{"limit":1}}}}"#);
        let sd = spec(r#"{"linux":{"cgroupsPath":"k.slice:peapod:abc"}}"#);
        let unified = spec(
            r#"{"linux":{"cgroupsPath":"/k/abc","resources":{"unified":{"memory.high":"1"}}}}"#,
        );
        let props = spec(
            r#"{"annotations":{"org.systemd.property.TimeoutStopUSec":"uint64 1"},
                "linux":{"cgroupsPath":"k.slice:peapod:abc"}}"#,
        );
        let v1 = host(false, Driver::Cgroupfs);
        let v2 = host(true, Driver::Cgroupfs);
        let v2sd = host(true, Driver::Systemd);
        let v1sd = host(false, Driver::Systemd);
        assert_eq!(v1.unsupported(&fs), None);
        assert_eq!(v2.unsupported(&fs), None);
        assert!(v1.unsupported(&sd).is_some());
        assert!(v2.unsupported(&sd).is_some());
        assert_eq!(v2sd.unsupported(&sd), None);
        assert!(v2sd.unsupported(&fs).unwrap().contains("systemd scope"));
        assert!(v1sd.unsupported(&sd).unwrap().contains("v1"));
        assert!(v1.unsupported(&unified).is_some());
        assert_eq!(v2.unsupported(&unified), None);
        assert!(v2sd.unsupported(&props).unwrap().contains("annotations"));
    }

    #[test]
    fn resources_left_to_the_runtime() {
        let res = |v: serde_json::Value| -> Resources { serde_json::from_value(v).unwrap() };
        let (v1, v2) = (host(false, Driver::Cgroupfs), host(true, Driver::Cgroupfs));
        let unsupported = |r: serde_json::Value| v1.unsupported_update(&res(r));
        assert_eq!(
            unsupported(json!({"memory": {"limit": 1}, "unified": {}})),
            None
        );
        assert!(unsupported(json!({"unified": {"memory.max": "1"}})).is_some());
        assert!(unsupported(json!({"network": {"classID": 1}})).is_some());
        assert!(unsupported(json!({"cpu": {"idle": 1}})).is_some());
        assert!(unsupported(json!({"whatever": 1})).is_some());
        assert!(unsupported(json!({"memory": {"checkBeforeUpdate": true}})).is_some());
        assert_eq!(unsupported(json!({"rdma": null, "unified": null})), None);
        let unsupported = |r: serde_json::Value| v2.unsupported_update(&res(r));
        assert_eq!(unsupported(json!({"unified": {"memory.high": "1"}})), None);
        assert!(unsupported(json!({"unified": {"../x": "1"}})).is_some());
        assert!(unsupported(json!({"unified": {"nodot": "1"}})).is_some());
        assert!(unsupported(json!({"unified": {"memory.high": 1}})).is_some());
        assert!(unsupported(json!({"network": {"classID": 1}})).is_some());
        assert!(unsupported(json!({"cpu": {"idle": 1}})).is_some());
    }

    #[test]
    fn a_systemd_path_is_its_scopes_cgroup() {
        let sd = host(true, Driver::Systemd);
        assert_eq!(
            sd.dir("k.slice:peapod:abc"),
            Path::new("/sys/fs/cgroup/k.slice/peapod-abc.scope")
        );
        let fs = host(true, Driver::Cgroupfs);
        assert_eq!(fs.dir("/k/abc"), Path::new("/sys/fs/cgroup/k/abc"));
    }
}
