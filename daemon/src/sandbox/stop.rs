//! StopPodSandbox's steps for the sandbox itself (`crate::pod_lifecycle::stop` orders them with the
//! pod's containers), and the steps it shares with RemovePodSandbox and with the cleanup of a
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
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// How long a killed pause container may take to be reported dead.
const PAUSE_EXIT_TIMEOUT: Duration = Duration::from_secs(10);

impl SandboxService {
    /// StopPodSandbox's part for the pod's processes, once its containers are stopped
    /// (`crate::pod_lifecycle` stops them, holding the pod's locks): NRI, then the pause.
    pub(crate) async fn stop_processes(&self, sandbox: &Sandbox) -> Result<()> {
        self.nri.stop_pod_sandbox(&sandbox.id).await;
        self.stop_pause(sandbox).await
    }

    /// StopPodSandbox's part for the pod's network: CNI DEL, then the namespace unpinned. A
    /// failure is logged and kept in the record: RemovePodSandbox tries again.
    pub(crate) async fn stop_network(&self, sandbox: &Sandbox) {
        if let Err(e) = self.teardown_network(sandbox).await {
            tracing::warn!(error = %e, "CNI DEL failed; will retry on remove");
        }
        crate::failpoint::hit("sandbox.stop.after-cni-del").await;
    }

    /// StopPodSandbox's first step: the pod NOTREADY, persisted before any of it is stopped,
    /// so that neither a crash half-way nor a kill that fails leaves it READY without the
    /// network its CNI DEL (run beside the kills) took. Returns whether it was READY: then
    /// [`SandboxService::stop_finish`] tells event watchers, once it is stopped.
    ///
    /// StopPodSandbox writes steps only (no fsync): what it ends, a reboot ends too, and a
    /// record that falls back to READY with its network after one is found with a dead pause
    /// (NOTREADY) and its DEL is run again on removal (DEL tolerates what is gone).
    pub(crate) fn begin_stop(&self, sandbox: &Sandbox) -> Result<bool> {
        sandbox.update_step_if(
            |r| r.state != SandboxState::NotReady,
            |r| r.state = SandboxState::NotReady,
        )
    }

    /// StopPodSandbox's last part, once its processes and network are gone: /dev/shm, and
    /// the event of its stop if [`SandboxService::begin_stop`] changed its state.
    pub(crate) fn stop_finish(&self, sandbox: &Sandbox, was_ready: bool) -> Result<()> {
        if let Some(shm) = sandbox.get().shm {
            self.host.unmount(&shm)?;
        }
        if was_ready {
            self.announce_stopped(sandbox);
        }
        Ok(())
    }

    /// Tells event watchers that the sandbox stopped.
    pub(crate) fn announce_stopped(&self, sandbox: &Sandbox) {
        self.events.emit(
            &sandbox.id,
            &sandbox.id,
            ContainerEventType::ContainerStoppedEvent,
        );
    }

    /// The sandbox's shim, if it is (still) there.
    pub(crate) async fn live_shim(&self, sandbox: &Sandbox) -> Option<Arc<dyn Shim>> {
        match self.shims.get(&sandbox.id).await {
            Ok(c) => Some(c),
            Err(e) => {
                tracing::debug!(sandbox = %sandbox.id, error = %e, "no shim");
                None
            }
        }
    }

    /// Kills the pause container and waits for its exit.
    pub(crate) async fn stop_pause(&self, sandbox: &Sandbox) -> Result<()> {
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

    /// CNI DEL, then the netns unpinned (StopPodSandbox): a failed DEL keeps the namespace
    /// for RemovePodSandbox to try again.
    pub(super) async fn teardown_network(&self, sandbox: &Sandbox) -> Result<()> {
        let deleted = self.cni_del(sandbox).await?;
        self.release_netns(sandbox, deleted)
    }

    /// Before CNI DEL of a pod on a sandboxed handler: the addresses its runtime took off the
    /// pod's interfaces (gVisor's runsc does, to give them to its own network stack) go back,
    /// so that the plugins' DEL finds what their ADD set up by them (the bridge plugin's
    /// masquerade rules outlived every gVisor pod). Best effort: DEL runs whatever happens.
    fn give_back_addresses(&self, handler: &str, netns: &Path, result: &serde_json::Value) {
        if !self
            .settings
            .handlers
            .resolve(handler)
            .is_ok_and(|h| h.sandboxed)
        {
            return;
        }
        let addresses = crate::network::cni::pod_interface_addresses(result)
            .into_iter()
            .map(
                |(interface, address, prefix)| crate::host_ops::netns::InterfaceAddress {
                    interface,
                    address,
                    prefix,
                },
            )
            .collect();
        if let Err(e) = self.host.give_back_addresses(netns, addresses) {
            tracing::warn!(error = %e, "giving the pod's interface its addresses back before CNI DEL");
        }
    }

    /// CNI DEL with what ADD used, if ADD started and DEL has not succeeded yet; whether it
    /// ran. [`SandboxService::release_netns`] records it.
    pub(super) async fn cni_del(&self, sandbox: &Sandbox) -> Result<bool> {
        let rec = sandbox.snapshot();
        match (rec.cni.as_ref(), rec.netns.as_ref()) {
            (Some(cni), Some(ns)) if !cni.deleted => {
                self.give_back_addresses(&rec.runtime_handler, ns, &cni.result);
                self.network.teardown(&sandbox.id, ns, cni).await?;
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    /// Unpins the pod's network namespace (and the user namespace pinned with it), and
    /// records that with a CNI DEL that just `deleted`, in one write (a crash before it
    /// repeats both, and each tolerates what is gone). A failed unpin still records the DEL.
    pub(super) fn release_netns(&self, sandbox: &Sandbox, deleted: bool) -> Result<()> {
        let unpinned = match &sandbox.snapshot().netns {
            Some(ns) => self.host.unpin_netns(ns).map(|()| true),
            None => Ok(false),
        };
        let unpinned_now = matches!(unpinned, Ok(true));
        if deleted || unpinned_now {
            sandbox.update_step(|r| {
                if let Some(c) = r.cni.as_mut().filter(|_| deleted) {
                    c.deleted = true;
                }
                if unpinned_now {
                    r.netns = None;
                }
            })?;
        }
        unpinned.map(drop)
    }
}
