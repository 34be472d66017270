//! StartContainer.

use super::ContainerService;
use crate::error::{Error, Result};
use crate::store::container::{Container, ContainerRecord, ContainerState};
use containerd_shim_protos::types::task::Status;
use peapod_host::timefmt;
use peapod_proto::v1::ContainerEventType;
use std::path::Path;
use std::sync::Arc;

impl ContainerService {
    /// StartContainer: only a created container starts; one that fails to start has exited.
    /// The work runs to its end even if the caller goes away, so a retry of a start whose
    /// deadline expired finds the container running: that is success, not an error.
    pub async fn start_container(self: &Arc<Self>, id: &str) -> Result<()> {
        let c = self.containers.read().resolve(id)?;
        let rt = self.clone();
        crate::detached::run_to_completion(async move { rt.start_resolved(c).await }).await
    }

    /// A restored container's start: its processes restored from CRIU's images (the shim's
    /// create with `restore`, which runs them at once), then the images removed.
    async fn restore_task(&self, rec: &ContainerRecord, images: &Path) -> Result<u32> {
        self.criu_usable()?;
        let shim = self.shims.get(&rec.sandbox_id).await?;
        let restored = std::time::Instant::now();
        shim.create(&self.init_task(rec, Some(images))).await?;
        let pid = shim.start(&rec.id, "").await?;
        tracing::info!(
            restore_ms = restored.elapsed().as_millis() as u64,
            pid,
            "container restored from its checkpoint"
        );
        if let Err(e) = peapod_host::fs::remove_dir_all_if_exists(images) {
            tracing::warn!(error = %e, "removing a restored checkpoint's images");
        }
        Ok(pid)
    }

    async fn start_resolved(self: &Arc<Self>, c: Arc<Container>) -> Result<()> {
        let _op = c.op.lock().await;
        let rec = c.get();
        if rec.state == ContainerState::Running {
            tracing::info!(container = %rec.id, "StartContainer of a running container: already started");
            return Ok(());
        }
        if rec.state != ContainerState::Created {
            return Err(Error::failed_precondition(format!(
                "container {} is {:?}; only a created container can be started",
                rec.id, rec.state
            )));
        }
        let shim = self.shims.get(&rec.sandbox_id).await?;
        self.nri.start_container(&rec.id).await?;
        // Taken before the start: a process that exits at once must not finish before it
        // started.
        let started_at = timefmt::now_ns();
        let started = match self.pending_restore(&rec) {
            Some(images) => self.restore_task(&rec, &images).await,
            None => shim.start(&rec.id, "").await,
        };
        let started = match started {
            // A start sent by a daemon that died before recording it may have landed since:
            // the container runs, and that is this call's success.
            Err(err) => match shim.state(&rec.id, "").await {
                Ok(s) if s.status == Status::RUNNING => {
                    tracing::info!(container = %rec.id, "already started by an earlier call");
                    Ok(s.pid)
                }
                _ => Err(err),
            },
            ok => ok,
        };
        match started {
            Ok(pid) => {
                crate::failpoint::hit("container.start.after-runtime-start").await;
                c.update(|r| {
                    r.state = ContainerState::Running;
                    r.pid = pid;
                    r.started_at_ns = started_at;
                })?;
                self.watch_exit(c.clone());
                self.nri
                    .post_start_container(&rec.id, pid, started_at)
                    .await;
                self.events.emit(
                    &rec.id,
                    &rec.sandbox_id,
                    ContainerEventType::ContainerStartedEvent,
                );
                Ok(())
            }
            Err(err) => {
                // As containerd: a container that failed to start has exited with 128.
                let message = err.to_string();
                c.update(|r| {
                    r.state = ContainerState::Exited;
                    r.exit_code = 128;
                    r.reason = "StartError".into();
                    r.message = message;
                    r.finished_at_ns = timefmt::now_ns();
                })?;
                Err(err)
            }
        }
    }
}
