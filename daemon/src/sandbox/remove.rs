//! RemovePodSandbox's steps for the sandbox itself (`crate::pod_lifecycle::remove` runs them after the
//! pod's containers), also what a failed RunPodSandbox runs.

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
    /// RemovePodSandbox's end, once `destroy` (after the pod's containers) succeeded: the
    /// sandbox leaves the table and event watchers hear of it.
    pub(crate) fn forget_removed(&self, sandbox: &Sandbox) {
        self.sandboxes.write().remove(&sandbox.id);
        self.events.emit(
            &sandbox.id,
            &sandbox.id,
            ContainerEventType::ContainerDeletedEvent,
        );
    }

    /// A removal that failed keeps the sandbox listed, NOTREADY, so that a later call tries
    /// again.
    pub(crate) fn keep_after_failed_removal(&self, sandbox: &Sandbox) {
        if let Err(p) = sandbox.update(|r| r.state = SandboxState::NotReady) {
            tracing::error!(error = %p, "persisting a sandbox whose removal failed as not ready");
        }
    }

    /// Removes everything a sandbox has but its containers (`crate::pod_lifecycle` removes those
    /// first): pause, network, shm, shim, files, record. A sandbox still being made has no
    /// containers (CreateContainer needs it listed and READY), so RunPodSandbox's cleanup
    /// calls this alone.
    pub(crate) async fn destroy(&self, sandbox: &Arc<Sandbox>) -> Result<()> {
        self.nri.remove_pod_sandbox(&sandbox.id).await;
        self.stop_pause(sandbox).await?;
        let deleted = self.cni_del(sandbox).await.unwrap_or_else(|e| {
            tracing::warn!(error = %e, "CNI DEL failed on remove; the network namespace is removed anyway");
            false
        });
        // Unlike DEL, an unpin that fails fails the removal: the pod stays listed with the
        // namespace it names, and a retry unpins it.
        self.release_netns(sandbox, deleted)?;
        crate::failpoint::hit("sandbox.remove.after-cni-del").await;
        let rec = sandbox.get();
        if let Some(shm) = &rec.shm {
            self.host.unmount(shm)?;
        }
        let shim = self.live_shim(sandbox).await;
        let shim_started = std::time::Instant::now();
        if let Some(shim) = &shim {
            shim.delete(&sandbox.id, "").await.optional()?;
            shim.shutdown_and_wait().await?;
            crate::failpoint::hit("sandbox.remove.after-shim-shutdown").await;
        }
        tracing::debug!(
            shim_ms = shim_started.elapsed().as_millis() as u64,
            "the pod's shim ended"
        );
        // Without a shim (it died, or never started), and for a sandbox a crash left half-made
        // (the pause's runtime create may have been under way when the shim lost its caller,
        // unknown to the shim), the OCI runtime's state of the pause and the shim's socket
        // would outlive it.
        if shim.is_none() || rec.state == SandboxState::Creating {
            self.shims
                .reap_orphans(std::slice::from_ref(&sandbox.id))
                .await?;
            // A pause create cut short made its cgroups but no state the runtime's delete
            // would find them by.
            self.host.remove_cgroup(&rec.cgroups_path)?;
        }
        self.shims.forget(&sandbox.id);
        // Also without `rootfs_mounted`: a crash between the mount and its record leaves a
        // mount the record does not name (an owner the store does not know is fine).
        self.images
            .remove_rootfs(&sandbox.id, &rec.dir.join("rootfs"))
            .await?;
        remove_dir(&rec.dir)?;
        remove_dir(&self.paths.sandbox_root_dir(&sandbox.id))?;
        // The runtime's own state, not the pod's: the pod is gone whatever this meets (a
        // failure is logged, and the next removal of a pod on that handler tries again).
        if let Ok(handler) = self.settings.handlers.resolve(&rec.runtime_handler) {
            if let Err(e) = self.shims.release_idle_runtime(handler).await {
                tracing::warn!(error = %e, handler = %handler.name, "releasing an idle sandboxed runtime's state");
            }
        }
        Ok(())
    }
}
