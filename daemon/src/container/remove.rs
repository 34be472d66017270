//! RemoveContainer, and removing every container of a pod (RemovePodSandbox).

use super::ContainerService;
use crate::error::{Error, Optional, Result};
use crate::store::container::{Container, ContainerRecord, ContainerState};
use peapod_proto::v1::ContainerEventType;
use std::sync::Arc;
use std::time::Duration;

impl ContainerService {
    /// RemoveContainer: kills it if running; succeeds for an unknown id.
    pub async fn remove_container(self: &Arc<Self>, id: &str) -> Result<()> {
        let Some(c) = self.containers.read().resolve(id).optional()? else {
            return Ok(());
        };
        let rt = self.clone();
        crate::detached::run_to_completion(async move {
            let _op = c.op.lock().await;
            if !rt.containers.read().by_id.contains_key(&c.id) {
                return Ok(()); // a concurrent RemoveContainer got there first
            }
            // A failure keeps the container listed, so that a later call tries again.
            rt.remove_locked(&c).await?;
            rt.nri.remove_container(&c.id).await;
            rt.containers.write().remove(&c.id);
            rt.events.emit(
                &c.id,
                &c.snapshot().sandbox_id,
                ContainerEventType::ContainerDeletedEvent,
            );
            Ok(())
        })
        .await
    }

    pub(super) async fn remove_locked(&self, c: &Container) -> Result<()> {
        let rec = c.get();
        self.processes.forget(&rec.id);
        let started = std::time::Instant::now();
        match self.shims.get(&rec.sandbox_id).await {
            Ok(shim) => {
                if rec.state == ContainerState::Running {
                    self.kill_and_wait(c, libc::SIGKILL, Duration::ZERO).await?;
                }
                shim.delete(&rec.id, "").await.optional()?;
                crate::failpoint::hit("container.remove.after-runtime-delete").await;
            }
            Err(e) => {
                // The pod's shim is gone: the OCI runtime itself kills and deletes what may
                // be left (its state outlives the shim).
                tracing::info!(container = %rec.id, error = %e, "no shim; removing through the OCI runtime");
                self.reap_lost(c).await?;
            }
        }
        let deleted = started.elapsed();
        self.release_files(&rec).await?;
        tracing::debug!(
            total_ms = started.elapsed().as_millis() as u64,
            runtime_ms = deleted.as_millis() as u64,
            "container removed"
        );
        Ok(())
    }

    /// Image volumes, the rootfs, the directories and with them the record.
    pub(super) async fn release_files(&self, rec: &ContainerRecord) -> Result<()> {
        self.release_image_volumes(&rec.image_volumes).await?;
        self.images.remove_rootfs(&rec.id, &rec.rootfs).await?;
        // A crash between staging a volume's idmapped bind and the runtime's create left it
        // mounted in the bundle: detached first, or the removal below would reach into it.
        super::idmapped_mounts::release_leftovers(
            self.host.as_ref(),
            &self.paths.container_state_dir(&rec.id),
        )?;
        for dir in [
            self.paths.container_state_dir(&rec.id),
            self.paths.container_root_dir(&rec.id),
        ] {
            peapod_host::fs::remove_dir_all_if_exists(&dir)
                .map_err(|e| Error::path("remove", &dir, e))?;
        }
        Ok(())
    }

    /// Removes every container of a sandbox, as RemovePodSandbox must.
    pub(crate) async fn remove_all_of(&self, sandbox_id: &str) -> Result<()> {
        for c in self.containers.of_sandbox(sandbox_id) {
            let _op = c.op.lock().await;
            self.remove_locked(&c).await?;
            self.containers.write().remove(&c.id);
            self.events
                .emit(&c.id, sandbox_id, ContainerEventType::ContainerDeletedEvent);
        }
        Ok(())
    }
}
