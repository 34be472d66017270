//! RunPodSandbox: the sandbox service makes the pod; once it is listed, its watch starts.

use super::PodLifecycle;
use crate::error::Result;
use peapod_proto::v1::PodSandboxConfig;
use std::sync::Arc;

impl PodLifecycle {
    /// RunPodSandbox (see [`crate::sandbox::SandboxService::run_pod_sandbox`]), the new pod followed by
    /// its watch from the moment it is listed.
    pub async fn run_pod_sandbox(
        self: &Arc<Self>,
        config: PodSandboxConfig,
        runtime_handler: String,
    ) -> Result<String> {
        let pods = self.clone();
        self.sandboxes
            .run_pod_sandbox(config, runtime_handler, move |sandbox| pods.watch(sandbox))
            .await
    }
}
