//! RemovePodSandbox, and the removal of everything a sandbox has (also what a failed
//! RunPodSandbox runs).

use super::SandboxService;
use crate::error::{Error, Optional, Result};
use crate::store::sandbox::{Sandbox, SandboxState};
use peapod_proto::v1::ContainerEventType;
use std::path::Path;
use std::sync::Arc;

fn remove_dir(path: &Path) -> Result<()> {
    peapod_host::fs::remove_dir_all_if_exists(path).map_err(|e| Error::path("remove", path, e))
}

impl SandboxService {
    /// RemovePodSandbox: succeeds for an unknown id. Runs to its end if the caller goes away;
    /// a failure keeps the sandbox listed, so that a later call tries again.
    pub async fn remove(self: &Arc<Self>, id: &str) -> Result<()> {
        let Some(sandbox) = self.sandboxes.read().resolve(id).optional()? else {
            return Ok(());
        };
        let rt = self.clone();
        crate::detached::run_to_completion(async move { rt.remove_sandbox(sandbox).await }).await
    }

    async fn remove_sandbox(&self, sandbox: Arc<Sandbox>) -> Result<()> {
        let _op = sandbox.op.lock().await;
        let _members = sandbox.members.write().await;
        if !self.sandboxes.read().by_id.contains_key(&sandbox.id) {
            return Ok(()); // a concurrent RemovePodSandbox got there first
        }
        if let Err(e) = self.destroy_sandbox(&sandbox).await {
            if let Err(p) = sandbox.update(|r| r.state = SandboxState::NotReady) {
                tracing::error!(error = %p, "persisting a sandbox whose removal failed as not ready");
            }
            return Err(e);
        }
        self.sandboxes.write().remove(&sandbox.id);
        self.events.emit(
            &sandbox.id,
            &sandbox.id,
            ContainerEventType::ContainerDeletedEvent,
        );
        Ok(())
    }

    /// Removes everything of a sandbox: containers, pause, network, shm, shim, files, record.
    pub(super) async fn destroy_sandbox(&self, sandbox: &Arc<Sandbox>) -> Result<()> {
        self.containers.remove_all_of(&sandbox.id).await?;
        self.nri.remove_pod_sandbox(&sandbox.id).await;
        self.stop_pause(sandbox).await?;
        if let Err(e) = self.teardown_network(sandbox, true).await {
            tracing::warn!(error = %e, "CNI DEL failed on remove; the network namespace is removed anyway");
        }
        crate::failpoint::hit("sandbox.remove.after-cni-del").await;
        let rec = sandbox.get();
        if let Some(shm) = &rec.shm {
            self.host.unmount(shm)?;
        }
        let shim = self.live_shim(sandbox).await;
        if let Some(shim) = &shim {
            shim.delete(&sandbox.id, "").await.optional()?;
            shim.shutdown_and_wait().await?;
            crate::failpoint::hit("sandbox.remove.after-shim-shutdown").await;
        }
        // Without a shim (it died, or never started), and for a sandbox a crash left half-made
        // (the pause's runtime create may have been under way when the shim lost its caller,
        // unknown to the shim), the OCI runtime's state of the pause and the shim's socket
        // would outlive it.
        if shim.is_none() || rec.state == SandboxState::Creating {
            self.shims
                .reap_orphans(std::slice::from_ref(&sandbox.id))
                .await?;
        }
        self.shims.forget(&sandbox.id);
        // Also without `rootfs_mounted`: a crash between the mount and its record leaves a
        // mount the record does not name (an owner the store does not know is fine).
        self.images
            .remove_rootfs(&sandbox.id, &rec.dir.join("rootfs"))
            .await?;
        remove_dir(&rec.dir)?;
        remove_dir(&self.paths.sandbox_root_dir(&sandbox.id))?;
        Ok(())
    }
}
