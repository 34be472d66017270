//! PodLifecycle as wholes: what spans a sandbox and its containers. StopPodSandbox and
//! RemovePodSandbox take the pod's locks and do the containers first, then the sandbox; the
//! pod's watch settles a pod whose shim died (sandbox and containers); recovery at start
//! reconciles both with the host. Each part's own work is the services' (`crate::sandbox`,
//! `crate::container`): this layer only orders it, so neither service names the other.
//!
//! One file per call or job: `run`, `stop`, `remove`, `watch`, `recovery`.

mod recovery;
mod remove;
mod run;
mod stop;
mod watch;

pub use recovery::{Recovery, SandboxRecovery};

use crate::container::ContainerService;
use crate::sandbox::SandboxService;
use crate::shim::Shims;
use std::sync::Arc;

/// The pod calls over the sandbox and container services.
pub struct PodLifecycle {
    sandboxes: Arc<SandboxService>,
    containers: Arc<ContainerService>,
    /// For the watch: each pod's shim, followed until it exits.
    shims: Arc<dyn Shims>,
}

impl PodLifecycle {
    pub fn new(
        sandboxes: Arc<SandboxService>,
        containers: Arc<ContainerService>,
        shims: Arc<dyn Shims>,
    ) -> Arc<PodLifecycle> {
        Arc::new(PodLifecycle {
            sandboxes,
            containers,
            shims,
        })
    }
}
