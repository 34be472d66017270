//! RunPodSandbox: the sandbox service makes the pod; once it is listed, its watch starts.

use super::Pods;
use crate::error::Result;
use peapod_proto::v1::PodSandboxConfig;
use std::sync::Arc;

impl Pods {
    /// RunPodSandbox (see [`crate::sandbox::SandboxService::run`]), the new pod followed by
    /// its watch from the moment it is listed.
    pub async fn run(
        self: &Arc<Self>,
        config: PodSandboxConfig,
        runtime_handler: String,
    ) -> Result<String> {
        let pods = self.clone();
        self.sandboxes
            .run(config, runtime_handler, move |sandbox| pods.watch(sandbox))
            .await
    }
}
