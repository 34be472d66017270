//! The pod cgroup `kubepods[/burstable|/besteffort]/pod<uid>` with its pod-level limits,
//! created before the sandbox (which is placed in it) and removed after the pod is gone, and
//! the QoS-level values above it, by the daemon's cgroup driver: directories of the cgroup
//! mount ([`fs`]) or slices of systemd ([`systemd`]), chosen once in the settings.
//!
//! Paths are cgroupfs-style either way (`/kubepods/burstable/pod<uid>`): it is what the
//! sandbox's `cgroup_parent` says, and the daemon turns it into the slice the systemd driver
//! names (`kubepods-burstable-pod<uid>.slice`) as this module does.

pub mod fs;
pub mod systemd;

use crate::resources::{CgroupValues, QosClass};
use std::io;
use std::path::PathBuf;

/// The pod cgroup's absolute path under `parent` (the configured `kubepods`).
pub fn pod_cgroup_path(parent: &str, qos: QosClass, uid: &str) -> String {
    let mut p = format!("/{}", parent.trim_matches('/'));
    if !qos.cgroup_dir().is_empty() {
        p.push('/');
        p.push_str(qos.cgroup_dir());
    }
    p.push_str("/pod");
    p.push_str(uid);
    p.replace("//", "/")
}

/// Where pod cgroups are made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PodCgroups {
    /// Directories under the cgroup mount `root` (/sys/fs/cgroup).
    Fs { root: PathBuf },
    /// Transient slice units, through systemd's D-Bus API.
    Systemd,
}

impl PodCgroups {
    /// Makes the pod cgroup at `path` with `values` (zero quota/memory: unlimited), or gives
    /// an existing one those values.
    pub fn create(&self, path: &str, values: &CgroupValues) -> io::Result<()> {
        match self {
            PodCgroups::Fs { root } => fs::create(root, path, values),
            PodCgroups::Systemd => systemd::create(path, values),
        }
    }

    /// Removes the pod cgroup at `path` (its containers gone) and, with cgroupfs, the QoS
    /// levels up to `parent` left empty. Missing is fine. systemd's QoS slices stay, as the
    /// kubelet's do: stopping a slice stops whatever another pod just placed in it.
    pub fn remove(&self, path: &str, parent: &str) -> io::Result<()> {
        match self {
            PodCgroups::Fs { root } => {
                let r = fs::remove(root, path);
                fs::prune_empty_parents(root, path, parent);
                r
            }
            PodCgroups::Systemd => systemd::remove(path),
        }
    }

    /// `parent` (kubepods) holds the node's allocatable: cpu weight from its CPUs, memory
    /// limited to its memory (the kubelet's enforce-node-allocatable for pods).
    pub fn set_node_allocatable(&self, parent: &str, cpu_milli: i64, memory: i64) {
        match self {
            PodCgroups::Fs { root } => fs::set_node_allocatable(root, parent, cpu_milli, memory),
            PodCgroups::Systemd => systemd::set_node_allocatable(parent, cpu_milli, memory),
        }
    }

    /// The Burstable QoS level's cpu weight: the sum of its pods' cpu requests.
    pub fn set_burstable_shares(&self, parent: &str, cpu_milli: i64) {
        match self {
            PodCgroups::Fs { root } => fs::set_burstable_shares(root, parent, cpu_milli),
            PodCgroups::Systemd => systemd::set_burstable_shares(parent, cpu_milli),
        }
    }

    /// The BestEffort QoS level gets the least cpu weight.
    pub fn set_besteffort_shares(&self, parent: &str) {
        match self {
            PodCgroups::Fs { root } => fs::set_besteffort_shares(root, parent),
            PodCgroups::Systemd => systemd::set_besteffort_shares(parent),
        }
    }
}
