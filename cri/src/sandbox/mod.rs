//! Pod sandboxes: a pinned network namespace set up by CNI, held by a pause container that
//! runs under the pod's shim. [`SandboxService`] owns the sandbox records and serves the
//! sandbox calls, one file per call (run, stop, remove, status, list); `watch` follows pause
//! containers, `spec` writes the pause's runtime spec, `pause_image` picks its image.

#[cfg(test)]
mod dead_shim_tests;
#[cfg(test)]
mod lifecycle_tests;
mod list;
mod pause_image;
mod recover;
mod remove;
mod run;
pub mod spec;
mod status;
mod stop;
mod watch;

pub use recover::SandboxRecovery;
pub use status::verbose_info;

use crate::config::CgroupDriver;
use crate::container::ContainerService;
use crate::events::Events;
use crate::host_ops::HostOps;
use crate::images::Images;
use crate::network::PodNetwork;
use crate::paths::Paths;
use crate::shim::Shims;
use crate::store::sandbox::SandboxRecords;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// What the sandbox calls take from the daemon's configuration.
#[derive(Debug, Clone)]
pub struct SandboxSettings {
    pub cgroup_driver: CgroupDriver,
    /// The cgroup parent of pods whose config names none.
    pub default_cgroup_parent: String,
    /// The OCI runtime (its file name is the one runtime handler).
    pub runtime_path: String,
    /// The configured sandbox (pause) image.
    pub sandbox_image: String,
    /// The built-in pause root filesystem.
    pub pause_rootfs: PathBuf,
    /// Whether pods can have their own user namespace on this host, or why not.
    pub user_namespaces: std::result::Result<(), String>,
}

/// The sandbox calls, over the sandbox records and the services they use; stopping and
/// removing a pod stops and removes its containers through the [`ContainerService`].
pub struct SandboxService {
    sandboxes: Arc<SandboxRecords>,
    containers: Arc<ContainerService>,
    shims: Arc<dyn Shims>,
    network: Arc<dyn PodNetwork>,
    host: Arc<dyn HostOps>,
    images: Arc<dyn Images>,
    events: Arc<Events>,
    /// NRI plugins, told of each pod event.
    nri: Arc<crate::nri::Nri>,
    paths: Paths,
    settings: SandboxSettings,
}

/// What a [`SandboxService`] is made of.
pub struct SandboxDeps {
    pub sandboxes: Arc<SandboxRecords>,
    pub containers: Arc<ContainerService>,
    pub shims: Arc<dyn Shims>,
    pub network: Arc<dyn PodNetwork>,
    pub host: Arc<dyn HostOps>,
    pub images: Arc<dyn Images>,
    pub events: Arc<Events>,
    pub nri: Arc<crate::nri::Nri>,
    pub paths: Paths,
    pub settings: SandboxSettings,
}

impl SandboxService {
    pub fn new(d: SandboxDeps) -> SandboxService {
        SandboxService {
            sandboxes: d.sandboxes,
            containers: d.containers,
            shims: d.shims,
            network: d.network,
            host: d.host,
            images: d.images,
            events: d.events,
            nri: d.nri,
            paths: d.paths,
            settings: d.settings,
        }
    }

    /// The sandbox records, for the calls that only read them (exec, stats).
    pub fn records(&self) -> &SandboxRecords {
        &self.sandboxes
    }

    /// Whether a pod with a user namespace of its own (NamespaceMode POD) can run here: what
    /// Status advertises as the runtime handler's `user_namespaces` feature.
    pub fn user_namespaces_supported(&self) -> bool {
        self.settings.user_namespaces.is_ok()
    }

    /// The same, with the reason when not (for Status's verbose info).
    pub fn user_namespaces_support(&self) -> serde_json::Value {
        match &self.settings.user_namespaces {
            Ok(()) => serde_json::json!({"supported": true}),
            Err(why) => serde_json::json!({"supported": false, "reason": why}),
        }
    }

    /// The name of the one runtime handler peapod has (the OCI runtime's file name).
    pub fn runtime_handler_name(&self) -> String {
        Path::new(&self.settings.runtime_path)
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "runc".into())
    }
}
