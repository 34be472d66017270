//! StartContainer, StopContainer, RemoveContainer, UpdateContainerResources,
//! ReopenContainerLog.

use super::not_running;
use crate::error::{Error, Optional, Result};
use crate::runtime::Runtime;
use crate::store::container::{Container, ContainerState};
use peapod_proto::v1::{ContainerEventType, LinuxContainerResources};
use peapod_shim::timefmt;
use std::sync::Arc;
use std::time::Duration;

/// How long a container may take to die after SIGKILL.
const KILL_TIMEOUT: Duration = Duration::from_secs(10);

impl Runtime {
    pub async fn start_container(self: &Arc<Self>, id: &str) -> Result<()> {
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

    /// Sends `signal`, waits up to `grace`, then SIGKILLs everything in the container.
    async fn kill_and_wait(&self, c: &Container, signal: i32, grace: Duration) -> Result<()> {
        let rec = c.get();
        let shim = self.shims.get(&rec.sandbox_id).await?;
        if !grace.is_zero() {
            shim.kill(&rec.id, "", signal as u32, false).await?;
            if let Ok(exit) = tokio::time::timeout(grace, shim.wait(&rec.id, "")).await {
                let exit = exit?;
                self.record_exit(c, exit.code as i32, exit.at_ns);
                return Ok(());
            }
            tracing::info!(container = %rec.id, ?grace, "stop signal not heeded; sending SIGKILL");
        }
        shim.kill(&rec.id, "", libc::SIGKILL as u32, true).await?;
        match tokio::time::timeout(KILL_TIMEOUT, shim.wait(&rec.id, "")).await {
            Ok(exit) => {
                let exit = exit?;
                self.record_exit(c, exit.code as i32, exit.at_ns);
                Ok(())
            }
            Err(_) => Err(Error::deadline_exceeded(format!(
                "container {} did not exit within {KILL_TIMEOUT:?} of SIGKILL",
                rec.id
            ))),
        }
    }

    /// StopContainer: succeeds for an unknown or already stopped container.
    pub async fn stop_container(self: &Arc<Self>, id: &str, timeout_s: i64) -> Result<()> {
        let Some(c) = self.containers.read().resolve(id).optional()? else {
            return Ok(());
        };
        let _op = c.op.lock().await;
        self.stop_locked(&c, Duration::from_secs(timeout_s.max(0) as u64))
            .await
    }

    async fn stop_locked(&self, c: &Container, grace: Duration) -> Result<()> {
        let rec = c.get();
        if rec.state != ContainerState::Running {
            return Ok(());
        }
        self.kill_and_wait(c, rec.stop_signal, grace).await
    }

    /// RemoveContainer: kills it if running; succeeds for an unknown id.
    pub async fn remove_container(self: &Arc<Self>, id: &str) -> Result<()> {
        let Some(c) = self.containers.read().resolve(id).optional()? else {
            return Ok(());
        };
        let _op = c.op.lock().await;
        self.remove_locked(&c).await?;
        self.containers.write().remove(&c.id);
        self.events.emit(
            &c.id,
            &c.get().sandbox_id,
            ContainerEventType::ContainerDeletedEvent,
        );
        Ok(())
    }

    async fn remove_locked(&self, c: &Container) -> Result<()> {
        let rec = c.get();
        if rec.state == ContainerState::Running {
            self.kill_and_wait(c, libc::SIGKILL, Duration::ZERO).await?;
        }
        match self.shims.get(&rec.sandbox_id).await {
            Ok(shim) => {
                shim.delete(&rec.id, "").await.optional()?;
            }
            Err(e) => {
                tracing::debug!(container = %rec.id, error = %e, "no shim to delete the task in")
            }
        }
        self.image_ops.remove_rootfs(&rec.id, &rec.rootfs).await?;
        for dir in [
            self.container_state_dir(&rec.id),
            self.container_root_dir(&rec.id),
        ] {
            match std::fs::remove_dir_all(&dir) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(Error::path("remove", &dir, e)),
            }
        }
        Ok(())
    }

    /// Stops (SIGKILL) every container of a sandbox, as StopPodSandbox must.
    pub(crate) async fn stop_containers_of(&self, sandbox_id: &str) -> Result<()> {
        for c in self.containers.of_sandbox(sandbox_id) {
            let _op = c.op.lock().await;
            self.stop_locked(&c, Duration::ZERO).await?;
        }
        Ok(())
    }

    /// Removes every container of a sandbox, as RemovePodSandbox must.
    pub(crate) async fn remove_containers_of(&self, sandbox_id: &str) -> Result<()> {
        for c in self.containers.of_sandbox(sandbox_id) {
            let _op = c.op.lock().await;
            self.remove_locked(&c).await?;
            self.containers.write().remove(&c.id);
            self.events
                .emit(&c.id, sandbox_id, ContainerEventType::ContainerDeletedEvent);
        }
        Ok(())
    }

    pub async fn update_container_resources(
        self: &Arc<Self>,
        id: &str,
        resources: LinuxContainerResources,
    ) -> Result<()> {
        let c = self.containers.read().resolve(id)?;
        let _op = c.op.lock().await;
        let rec = c.get();
        if !matches!(rec.state, ContainerState::Created | ContainerState::Running) {
            return Err(not_running(&rec, "update its resources"));
        }
        let linux =
            peapod_spec::linux_resources(&resources, &self.host_facts()).map_err(Error::from)?;
        let json = serde_json::to_vec(&linux).map_err(|e| Error::internal(e.to_string()))?;
        self.shims
            .get(&rec.sandbox_id)
            .await?
            .update(&rec.id, json)
            .await?;
        c.update(|r| r.resources = Some(resources))?;
        Ok(())
    }

    pub async fn reopen_container_log(self: &Arc<Self>, id: &str) -> Result<()> {
        let c = self.containers.read().resolve(id)?;
        let rec = c.get();
        if rec.state != ContainerState::Running {
            return Err(not_running(&rec, "reopen its log"));
        }
        self.shims
            .get(&rec.sandbox_id)
            .await?
            .reopen_log(&rec.id)
            .await
    }
}
