//! StopContainer, and stopping every container of a pod (StopPodSandbox).

use super::ContainerService;
use crate::error::{Error, Optional, Result};
use crate::store::container::{Container, ContainerState};
use std::sync::Arc;
use std::time::Duration;

/// How long a container may take to die after SIGKILL.
const KILL_TIMEOUT: Duration = Duration::from_secs(10);

impl ContainerService {
    /// StopContainer: succeeds for an unknown or already stopped container.
    pub async fn stop_container(self: &Arc<Self>, id: &str, timeout_s: i64) -> Result<()> {
        let Some(c) = self.containers.read().resolve(id).optional()? else {
            return Ok(());
        };
        let rt = self.clone();
        crate::detached::run_to_completion(async move {
            let _op = c.op.lock().await;
            rt.stop_locked(&c, Duration::from_secs(timeout_s.max(0) as u64))
                .await?;
            rt.nri.container_stopped(&c.get()).await;
            Ok(())
        })
        .await
    }

    pub(super) async fn stop_locked(&self, c: &Container, grace: Duration) -> Result<()> {
        let rec = c.get();
        match rec.state {
            ContainerState::Running => self.kill_and_wait(c, rec.stop_signal, grace).await,
            // Its shim is gone: only the OCI runtime can still kill it.
            ContainerState::Unknown => self.reap_lost(c).await,
            ContainerState::Creating | ContainerState::Created | ContainerState::Exited => Ok(()),
        }
    }

    /// Sends `signal`, waits up to `grace`, then SIGKILLs everything in the container.
    pub(super) async fn kill_and_wait(
        &self,
        c: &Container,
        signal: i32,
        grace: Duration,
    ) -> Result<()> {
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
        crate::failpoint::hit("container.stop.after-kill").await;
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

    /// Stops (SIGKILL) every container of a sandbox, as StopPodSandbox must: all at once, each
    /// under its own lock; the first error, once every stop has ended.
    pub(crate) async fn stop_all_of(&self, sandbox_id: &str) -> Result<()> {
        let stops = self
            .containers
            .of_sandbox(sandbox_id)
            .into_iter()
            .map(|c| async move {
                let _op = c.op.lock().await;
                self.stop_locked(&c, Duration::ZERO).await
            });
        futures_util::future::join_all(stops)
            .await
            .into_iter()
            .collect()
    }
}
