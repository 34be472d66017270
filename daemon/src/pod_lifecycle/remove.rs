//! RemovePodSandbox: the pod's containers, then everything the sandbox has, under the pod's
//! locks; a failure keeps the pod listed for a later call.

use super::PodLifecycle;
use crate::error::{Optional, Result};
use crate::store::sandbox::Sandbox;
use std::sync::Arc;

impl PodLifecycle {
    /// RemovePodSandbox: succeeds for an unknown id. Runs to its end if the caller goes away;
    /// a failure keeps the sandbox listed, so that a later call tries again.
    pub async fn remove_pod_sandbox(self: &Arc<Self>, id: &str) -> Result<()> {
        let Some(sandbox) = self.sandboxes.records().read().resolve(id).optional()? else {
            return Ok(());
        };
        let pods = self.clone();
        crate::detached::run_to_completion(async move { pods.remove_sandbox(sandbox).await }).await
    }

    async fn remove_sandbox(&self, sandbox: Arc<Sandbox>) -> Result<()> {
        let _op = sandbox.op.lock().await;
        let _members = sandbox.members.write().await;
        if !self
            .sandboxes
            .records()
            .read()
            .by_id
            .contains_key(&sandbox.id)
        {
            return Ok(()); // a concurrent RemovePodSandbox got there first
        }
        if let Err(e) = self.destroy(&sandbox).await {
            self.sandboxes.keep_after_failed_removal(&sandbox);
            return Err(e);
        }
        self.sandboxes.forget_removed(&sandbox);
        Ok(())
    }

    /// Everything of a pod: its containers, then the sandbox's own pieces (pause, network,
    /// shm, shim, files, record).
    pub(super) async fn destroy(&self, sandbox: &Arc<Sandbox>) -> Result<()> {
        let started = std::time::Instant::now();
        self.containers.remove_all_of(&sandbox.id).await?;
        let containers = started.elapsed();
        self.sandboxes.destroy(sandbox).await?;
        tracing::info!(
            total_ms = started.elapsed().as_millis() as u64,
            containers_ms = containers.as_millis() as u64,
            "pod sandbox removed"
        );
        Ok(())
    }
}
