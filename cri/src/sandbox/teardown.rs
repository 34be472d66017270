//! StopPodSandbox and RemovePodSandbox, and the teardown a failed RunPodSandbox runs.
//!
//! Every step is idempotent and tolerates the piece being absent, so the same code cleans up a
//! sandbox that failed half-way, one that was stopped before, and one a crash left behind.

use crate::error::{Error, Result};
use crate::network::netns;
use crate::runtime::Runtime;
use crate::shim::ShimClient;
use crate::store::sandbox::{Sandbox, SandboxState};
use containerd_shim_protos::types::task::Status;
use nix::mount::{umount2, MntFlags};
use peapod_proto::v1::ContainerEventType;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// How long a killed pause container may take to be reported dead.
const PAUSE_EXIT_TIMEOUT: Duration = Duration::from_secs(10);

fn unmount(path: &Path) -> Result<()> {
    match umount2(path, MntFlags::MNT_DETACH) {
        Ok(()) | Err(nix::errno::Errno::EINVAL) | Err(nix::errno::Errno::ENOENT) => Ok(()),
        Err(e) => Err(Error::path("unmount", path, e.into())),
    }
}

fn remove_dir(path: &Path) -> Result<()> {
    match std::fs::remove_dir_all(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Error::path("remove", path, e)),
    }
}

impl Runtime {
    /// The sandbox's shim, if it is (still) there.
    pub(crate) async fn shim_of(&self, sandbox: &Sandbox) -> Option<Arc<ShimClient>> {
        let socket = sandbox.get().shim_socket;
        match self.shims.get(&sandbox.id, &socket).await {
            Ok(c) => Some(c),
            Err(e) => {
                tracing::debug!(sandbox = %sandbox.id, error = %e, "no shim");
                None
            }
        }
    }

    /// StopPodSandbox: succeeds for an unknown id.
    pub async fn stop_pod_sandbox(self: &Arc<Self>, id: &str) -> Result<()> {
        let sandbox = match self.sandboxes().resolve(id) {
            Ok(s) => s,
            Err(e) if e.is_not_found() => return Ok(()),
            Err(e) => return Err(e),
        };
        let _op = sandbox.op.lock().await;
        self.stop_sandbox(&sandbox).await
    }

    async fn stop_sandbox(&self, sandbox: &Arc<Sandbox>) -> Result<()> {
        let span = tracing::info_span!("stop", sandbox = %sandbox.id);
        let _e = span.enter();
        self.stop_containers_of(&sandbox.id).await?;
        self.stop_pause(sandbox).await?;
        if let Err(e) = self.teardown_network(sandbox, false).await {
            // Kept in the record: RemovePodSandbox tries again.
            tracing::warn!(error = %e, "CNI DEL failed; will retry on remove");
        }
        if let Some(shm) = sandbox.get().shm {
            unmount(&shm)?;
        }
        let root = self.root().to_path_buf();
        let changed = sandbox.update_if(
            &root,
            |r| r.state != SandboxState::NotReady,
            |r| r.state = SandboxState::NotReady,
        )?;
        if changed {
            self.emit(
                &sandbox.id,
                &sandbox.id,
                ContainerEventType::ContainerStoppedEvent,
            );
        }
        Ok(())
    }

    /// Kills the pause container and waits for its exit.
    async fn stop_pause(&self, sandbox: &Sandbox) -> Result<()> {
        let Some(shim) = self.shim_of(sandbox).await else {
            return Ok(());
        };
        match shim.state(&sandbox.id, "").await {
            Ok(state) if state.status == Status::STOPPED => return Ok(()),
            Ok(_) => {}
            Err(e) if e.is_not_found() => return Ok(()),
            Err(e) => return Err(e),
        }
        // Pause exits 0 on SIGTERM at once; SIGKILL is what containerd sends and cannot be
        // ignored, and nothing in pause needs a graceful end.
        match shim
            .kill(&sandbox.id, "", libc::SIGKILL as u32, false)
            .await
        {
            Ok(()) => {}
            Err(e) if e.is_not_found() => return Ok(()),
            Err(e) => return Err(e),
        }
        match tokio::time::timeout(PAUSE_EXIT_TIMEOUT, shim.wait(&sandbox.id, "")).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) if e.is_not_found() => Ok(()),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(Error::deadline_exceeded(format!(
                "pause of sandbox {} did not exit within {PAUSE_EXIT_TIMEOUT:?} of SIGKILL",
                sandbox.id
            ))),
        }
    }

    /// CNI DEL and unpinning of the netns. With `force`, the netns goes even if DEL failed.
    async fn teardown_network(&self, sandbox: &Sandbox, force: bool) -> Result<()> {
        let root = self.root().to_path_buf();
        let rec = sandbox.get();
        let mut result = Ok(());
        if let (Some(cni), Some(ns)) = (rec.cni.as_ref(), rec.netns.as_ref()) {
            if !cni.deleted {
                match self.network.teardown(&sandbox.id, ns, cni).await {
                    Ok(()) => {
                        sandbox.update(&root, |r| {
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
                netns::remove(ns)?;
                sandbox.update(&root, |r| r.netns = None)?;
            }
        }
        result
    }

    /// RemovePodSandbox: succeeds for an unknown id.
    pub async fn remove_pod_sandbox(self: &Arc<Self>, id: &str) -> Result<()> {
        let sandbox = match self.sandboxes().resolve(id) {
            Ok(s) => s,
            Err(e) if e.is_not_found() => return Ok(()),
            Err(e) => return Err(e),
        };
        let _op = sandbox.op.lock().await;
        self.destroy_sandbox(&sandbox).await?;
        self.sandboxes_mut().remove(&sandbox.id);
        self.emit(
            &sandbox.id,
            &sandbox.id,
            ContainerEventType::ContainerDeletedEvent,
        );
        Ok(())
    }

    /// Removes everything of a sandbox: containers, pause, network, shm, shim, files, record.
    pub(crate) async fn destroy_sandbox(&self, sandbox: &Arc<Sandbox>) -> Result<()> {
        let span = tracing::info_span!("remove", sandbox = %sandbox.id);
        let _e = span.enter();
        self.remove_containers_of(&sandbox.id).await?;
        self.stop_pause(sandbox).await?;
        if let Err(e) = self.teardown_network(sandbox, true).await {
            tracing::warn!(error = %e, "CNI DEL failed on remove; the network namespace is removed anyway");
        }
        let rec = sandbox.get();
        if let Some(shm) = &rec.shm {
            unmount(shm)?;
        }
        if let Some(shim) = self.shim_of(sandbox).await {
            match shim.delete(&sandbox.id, "").await {
                Ok(_) => {}
                Err(e) if e.is_not_found() => {}
                Err(e) => return Err(e),
            }
            shim.shutdown_and_wait().await?;
        }
        self.shims.forget(&sandbox.id);
        if rec.rootfs_mounted {
            self.images
                .remove_rootfs(&sandbox.id, &rec.dir.join("rootfs"))
                .await?;
        }
        remove_dir(&rec.dir)?;
        remove_dir(&self.sandbox_root_dir(&sandbox.id))?;
        Ok(())
    }
}
