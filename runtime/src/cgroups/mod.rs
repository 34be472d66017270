//! A container's cgroups as the native paths make, limit, freeze, list, signal and remove
//! them, behind one type chosen once per host: [`Cgroups`] (`Host::detect` reads it in the
//! shim at its start and in each helper).
//!
//! - [`hierarchies`]: what every layout does alike: a cgroup made in every mounted hierarchy
//!   and joined, another process's cgroups joined, a cgroup's processes listed and signalled;
//! - [`v1`]: a container's resources and its freezer on a v1 (or hybrid) host, written as runc
//!   1.1's cgroupfs manager writes them.
//!
//! What comes next (the "mainstream node" work) lands here: `v2` (the unified hierarchy's
//! files: `memory.max`, `cpu.max`, `cpu.weight`, `io.max`, `pids.max`, `cgroup.freeze`, the
//! device rules as a BPF program) behind [`Cgroups::V2`] where the functions below say
//! `v2: next`; and the systemd driver (a `cgroupsPath` of the form `slice:prefix:name`, the
//! container's scope made by systemd over D-Bus), a third variant chosen by the path's form
//! where [`is_cgroupfs_path`] refuses it today. Until then the native paths leave such
//! containers to the runtime CLI: nothing here assumes v1 without saying so.

pub mod hierarchies;
pub mod v1;

use crate::spec::Resources;
use std::path::{Path, PathBuf};

pub use hierarchies::join_those_of;

/// How this host's cgroups are driven, chosen once ([`Cgroups::detect`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cgroups {
    /// cgroup v1: each controller its own hierarchy under the root, with or without a
    /// controller-less v2 hierarchy at `<root>/unified` (hybrid, this development machine).
    V1 { root: PathBuf },
    /// cgroup v2 alone: the unified hierarchy at the root. Its cgroups are made, joined,
    /// listed and removed as v1's are (a pod's pause, the resident exec helpers); a
    /// container's resources and the freezer are v2: next.
    V2 { root: PathBuf },
}

impl Cgroups {
    /// The host's cgroups under the usual mount.
    pub fn detect() -> Cgroups {
        Cgroups::at(Path::new(peapod_host::cgroup::DEFAULT_ROOT))
    }

    /// The cgroups mounted at `root`.
    pub fn at(root: &Path) -> Cgroups {
        let root = root.to_path_buf();
        if peapod_host::cgroup::is_unified(&root) {
            Cgroups::V2 { root }
        } else {
            Cgroups::V1 { root }
        }
    }

    fn root(&self) -> &Path {
        match self {
            Cgroups::V1 { root } | Cgroups::V2 { root } => root,
        }
    }

    /// Why a container with these resources cannot have its cgroup made and limited here, if
    /// so (the runtime CLI then creates it).
    pub fn unsupported(&self, resources: Option<&Resources>) -> Option<&'static str> {
        match self {
            Cgroups::V1 { .. } => resources.and_then(v1::unsupported),
            // v2: next.
            Cgroups::V2 { .. } => Some("a cgroup v2 host"),
        }
    }

    /// Makes cgroup `path` in every hierarchy and moves process `pid` into it; its directory
    /// in each hierarchy.
    pub fn create_and_join(&self, path: &str, pid: u32) -> std::io::Result<Vec<PathBuf>> {
        hierarchies::create_and_join(self.root(), path, pid)
    }

    /// Writes `resources` to cgroup `path`: at the container's create (`at_create`: its device
    /// rules too) or at an update (`runc update`'s).
    pub fn apply(&self, path: &str, resources: &Resources, at_create: bool) -> Result<(), String> {
        match self {
            Cgroups::V1 { root } => v1::apply(root, path, resources, at_create),
            // v2: next (a native create is refused on v2, so no container gets here yet).
            Cgroups::V2 { .. } => Err(format!("cgroup {path}: resources on cgroup v2")),
        }
    }

    /// Freezes (`runc pause`) or thaws (`runc resume`) cgroup `path`.
    pub fn freeze(&self, path: &str, frozen: bool) -> Result<(), String> {
        match self {
            Cgroups::V1 { root } => v1::freeze(root, path, frozen),
            // v2: next (`cgroup.freeze`).
            Cgroups::V2 { .. } => Err(format!("cgroup {path}: the freezer on cgroup v2")),
        }
    }

    /// The processes in cgroup `path` and the cgroups below it.
    pub fn members(&self, path: &str) -> Vec<i32> {
        hierarchies::members(self.root(), path)
    }

    /// `signal` to every process of cgroup `path` (`kill --all`), once.
    pub fn signal_all(&self, path: &str, signal: u32) {
        hierarchies::signal_all(self.root(), path, signal, &mut Default::default());
    }

    /// SIGKILL to every process of cgroup `path`, read again until none is new.
    pub fn kill_all(&self, path: &str) {
        hierarchies::kill_all(self.root(), path)
    }

    /// Removes cgroup `path` from every hierarchy, killing what still runs in it first.
    pub fn remove(&self, path: &str) -> std::io::Result<()> {
        peapod_host::cgroup::remove(self.root(), path)
    }
}

/// Whether `path` (a spec's `cgroupsPath`) names a cgroup by its path, as the cgroupfs driver
/// does. The systemd driver's `slice:prefix:name` is a scope only systemd makes: systemd:
/// next.
pub fn is_cgroupfs_path(path: &str) -> bool {
    !path.is_empty() && !path.contains(':')
}
