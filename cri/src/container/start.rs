//! StartContainer.

use super::ContainerService;
use crate::error::{Error, Result};
use crate::store::container::ContainerState;
use peapod_proto::v1::ContainerEventType;
use peapod_shim::timefmt;
use std::sync::Arc;

impl ContainerService {
    /// StartContainer: only a created container starts; one that fails to start has exited.
    pub async fn start(self: &Arc<Self>, id: &str) -> Result<()> {
        let c = self.containers.read().resolve(id)?;
        let _op = c.op.lock().await;
        let rec = c.get();
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
        match shim.start(&rec.id, "").await {
            Ok(pid) => {
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
