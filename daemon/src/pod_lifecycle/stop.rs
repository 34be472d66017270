//! StopPodSandbox: the pod's containers and pause killed while its network is deleted, then
//! the sandbox's last steps, under the pod's locks.

use super::PodLifecycle;
use crate::error::{Optional, Result};
use crate::store::sandbox::{Sandbox, SandboxState};
use std::sync::Arc;

impl PodLifecycle {
    /// StopPodSandbox: succeeds for an unknown id. Runs to its end if the caller goes away.
    pub async fn stop_pod_sandbox(self: &Arc<Self>, id: &str) -> Result<()> {
        let Some(sandbox) = self.sandboxes.records().read().resolve(id).optional()? else {
            return Ok(());
        };
        let pods = self.clone();
        crate::detached::run_to_completion(async move {
            let _op = sandbox.op.lock().await;
            let _members = sandbox.members.write().await;
            pods.stop_locked(&sandbox).await
        })
        .await
    }

    async fn stop_locked(&self, sandbox: &Arc<Sandbox>) -> Result<()> {
        if sandbox.snapshot().state != SandboxState::Creating
            && self.sandboxes.live_shim(sandbox).await.is_none()
        {
            // Before the watch got to it (or after a restart): what the shim held is killed
            // through the OCI runtime, so that "stopped" is true.
            self.settle_dead_shim(sandbox, "the pod's shim is gone")
                .await;
        }
        let was_ready = self.sandboxes.begin_stop(sandbox)?;
        // The kills and CNI DEL side by side: StopPodSandbox kills with SIGKILL, so no process
        // of the pod has a graceful end that needs its network, and DEL (three plugins' runs,
        // most of this call) need not wait for the exits. The pod is NOTREADY from the start
        // (`begin_stop`): a crash or a failed kill leaves it so, for a retry to finish.
        let started = std::time::Instant::now();
        let processes = async {
            self.containers.stop_all_of(&sandbox.id).await?;
            let containers = started.elapsed();
            self.sandboxes.stop_processes(sandbox).await?;
            Ok::<_, crate::error::Error>((containers, started.elapsed()))
        };
        let network = async {
            self.sandboxes.stop_network(sandbox).await;
            started.elapsed()
        };
        let (stopped, network_time) = tokio::join!(processes, network);
        match stopped {
            Ok((containers_time, processes_time)) => tracing::info!(
                total_ms = started.elapsed().as_millis() as u64,
                containers_ms = containers_time.as_millis() as u64,
                pause_ms = processes_time.as_millis() as u64,
                network_ms = network_time.as_millis() as u64,
                "pod sandbox stopped"
            ),
            Err(e) => {
                if was_ready {
                    self.sandboxes.announce_stopped(sandbox);
                }
                return Err(e);
            }
        }
        self.sandboxes.stop_finish(sandbox, was_ready)
    }
}
