//! Pod sandboxes: a pinned network namespace set up by CNI, held by a pause container that
//! runs under the pod's shim. [`SandboxService`] owns the sandbox records and serves the
//! sandbox calls, one file per call (run, stop, remove, status, list, update_resources: for
//! stop and remove, the sandbox's own steps); `ending` is a pause's exit and a dead shim's
//! reaping, `recover` the sandbox's part of recovery, `spec` writes the pause's runtime spec,
//! `pause_image` picks its image.

#[cfg(test)]
mod dead_shim_tests;
mod ending;
#[cfg(test)]
mod lifecycle_tests;
mod list;
mod pause_image;
mod recover;
mod remove;
mod run;
#[cfg(test)]
mod runtime_handler_tests;
pub mod spec;
mod status;
mod stop;
mod torn;
mod update_resources;

pub use status::verbose_info;

use crate::config::CgroupDriver;
use crate::events::Events;
use crate::host_ops::HostOps;
use crate::images::Images;
use crate::network::PodNetwork;
use crate::paths::Paths;
use crate::shim::Shims;
use crate::store::sandbox::SandboxRecords;
use std::path::PathBuf;
use std::sync::Arc;

/// What the sandbox calls take from the daemon's configuration.
#[derive(Debug, Clone)]
pub struct SandboxSettings {
    pub cgroup_driver: CgroupDriver,
    /// The cgroup parent of pods whose config names none.
    pub default_cgroup_parent: String,
    /// The runtime handlers pods choose from.
    pub handlers: Arc<crate::runtime_handlers::RuntimeHandlers>,
    /// The configured sandbox (pause) image.
    pub sandbox_image: String,
    /// The built-in pause root filesystem.
    pub pause_rootfs: PathBuf,
    /// Ask the shim to start the pause itself where it can (`[sandbox] native_pause`).
    pub native_pause: bool,
    /// Whether pods can have their own user namespace on this host, or why not.
    pub user_namespaces: std::result::Result<(), String>,
}

/// The sandbox calls, over the sandbox records and the side effects they use. What spans a
/// pod and its containers (stopping and removing both, a dead shim, recovery) is
/// `crate::pod_lifecycle`, which calls this for the sandbox's part.
pub struct SandboxService {
    sandboxes: Arc<SandboxRecords>,
    shims: Arc<dyn Shims>,
    network: Arc<dyn PodNetwork>,
    host: Arc<dyn HostOps>,
    images: Arc<dyn Images>,
    events: Arc<Events>,
    /// NRI plugins, told of each pod event.
    nri: Arc<dyn crate::nri::Nri>,
    paths: Paths,
    settings: SandboxSettings,
}

/// What a [`SandboxService`] is made of.
pub struct SandboxDeps {
    pub sandboxes: Arc<SandboxRecords>,
    pub shims: Arc<dyn Shims>,
    pub network: Arc<dyn PodNetwork>,
    pub host: Arc<dyn HostOps>,
    pub images: Arc<dyn Images>,
    pub events: Arc<Events>,
    pub nri: Arc<dyn crate::nri::Nri>,
    pub paths: Paths,
    pub settings: SandboxSettings,
}

impl SandboxService {
    pub fn new(d: SandboxDeps) -> SandboxService {
        SandboxService {
            sandboxes: d.sandboxes,
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

    /// The runtime handlers pods choose from.
    pub fn runtime_handlers(&self) -> &crate::runtime_handlers::RuntimeHandlers {
        &self.settings.handlers
    }
}
