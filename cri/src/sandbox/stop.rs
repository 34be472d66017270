//! StopPodSandbox, and the steps it shares with RemovePodSandbox and with the cleanup of a
//! failed RunPodSandbox.
//!
//! Every step is idempotent and tolerates the piece being absent, so the same code cleans up a
//! sandbox that failed half-way, one that was stopped before, and one a crash left behind.

use super::SandboxService;
use crate::error::{Error, Optional, Result};
use crate::shim::Shim;
use crate::store::sandbox::{Sandbox, SandboxState};
use containerd_shim_protos::types::task::Status;
use peapod_proto::v1::ContainerEventType;
use std::sync::Arc;
use std::time::Duration;

/// How long a killed pause container may take to be reported dead.
const PAUSE_EXIT_TIMEOUT: Duration = Duration::from_secs(10);

impl SandboxService {
    /// StopPodSandbox: succeeds for an unknown id. Runs to its end if the caller goes away.
    pub async fn stop(self: &Arc<Self>, id: &str) -> Result<()> {
        let Some(sandbox) = self.sandboxes.read().resolve(id).optional()? else {
            return Ok(());
        };
        let rt = self.clone();
        crate::detached::run_to_completion(async move {
            let _op = sandbox.op.lock().await;
            let _members = sandbox.members.write().await;
            rt.stop_sandbox(&sandbox).await
        })
        .await
    }

    pub(super) async fn stop_sandbox(&self, sandbox: &Arc<Sandbox>) -> Result<()> {
        if sandbox.get().state != SandboxState::Creating && self.live_shim(sandbox).await.is_none()
        {
            // Before the watch got to it (or after a restart): what the shim held is killed
            // through the OCI runtime, so that "stopped" is true.
            self.settle_dead_shim(sandbox, "the pod's shim is gone")
                .await;
        }
        self.containers.stop_all_of(&sandbox.id).await?;
        self.nri.stop_pod_sandbox(&sandbox.id).await;
        self.stop_pause(sandbox).await?;
        if let Err(e) = self.teardown_network(sandbox, false).await {
            // Kept in the record: RemovePodSandbox tries again.
            tracing::warn!(error = %e, "CNI DEL failed; will retry on remove");
        }
        crate::failpoint::hit("sandbox.stop.after-cni-del").await;
        if let Some(shm) = sandbox.get().shm {
            self.host.unmount(&shm)?;
        }
        let changed = sandbox.update_if(
            |r| r.state != SandboxState::NotReady,
            |r| r.state = SandboxState::NotReady,
        )?;
        if changed {
            self.events.emit(
                &sandbox.id,
                &sandbox.id,
                ContainerEventType::ContainerStoppedEvent,
            );
        }
        Ok(())
    }

    /// The sandbox's shim, if it is (still) there.
    pub(super) async fn live_shim(&self, sandbox: &Sandbox) -> Option<Arc<dyn Shim>> {
        match self.shims.get(&sandbox.id).await {
            Ok(c) => Some(c),
            Err(e) => {
                tracing::debug!(sandbox = %sandbox.id, error = %e, "no shim");
                None
            }
        }
    }

    /// Kills the pause container and waits for its exit.
    pub(super) async fn stop_pause(&self, sandbox: &Sandbox) -> Result<()> {
        let Some(shim) = self.live_shim(sandbox).await else {
            return Ok(());
        };
        match shim.state(&sandbox.id, "").await.optional()? {
            Some(state) if state.status != Status::STOPPED => {}
            _ => return Ok(()),
        }
        // Pause exits 0 on SIGTERM at once; SIGKILL is what containerd sends and cannot be
        // ignored, and nothing in pause needs a graceful end.
        let killed = shim
            .kill(&sandbox.id, "", libc::SIGKILL as u32, false)
            .await
            .optional()?;
        if killed.is_none() {
            return Ok(());
        }
        match tokio::time::timeout(PAUSE_EXIT_TIMEOUT, shim.wait(&sandbox.id, "")).await {
            Ok(waited) => waited.optional().map(drop),
            Err(_) => Err(Error::deadline_exceeded(format!(
                "pause of sandbox {} did not exit within {PAUSE_EXIT_TIMEOUT:?} of SIGKILL",
                sandbox.id
            ))),
        }
    }

    /// CNI DEL and unpinning of the netns. With `force`, the netns goes even if DEL failed.
    pub(super) async fn teardown_network(&self, sandbox: &Sandbox, force: bool) -> Result<()> {
        let rec = sandbox.get();
        let mut result = Ok(());
        if let (Some(cni), Some(ns)) = (rec.cni.as_ref(), rec.netns.as_ref()) {
            if !cni.deleted {
                match self.network.teardown(&sandbox.id, ns, cni).await {
                    Ok(()) => {
                        sandbox.update(|r| {
                            if let Some(c) = r.cni.as_mut() {
                                c.deleted = true;
                            }
                        })?;
                    }
                    Err(e) => result = Err(e),
                }
            }
        }
        if result.is_ok() || force {
            if let Some(ns) = &rec.netns {
                self.host.unpin_netns(ns)?;
                sandbox.update(|r| r.netns = None)?;
            }
        }
        result
    }
}
