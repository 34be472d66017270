//! Following each pod's shim and pause container.
//!
//! - The pause exits: the pod is not ready any more.
//! - The shim dies (OOM killer, a crash, a kill -9; noticed at once through a pidfd of the
//!   shim's process): nothing would ever stop or report the pod's containers again, so the
//!   daemon kills and deletes them (and the pause) through the OCI runtime itself, reports
//!   them exited (the exit the shim recorded, else 137 with reason `ShimDied`), drops the
//!   connection and marks the pod not ready. Stop and Remove then find nothing running.
//! - After a daemon restart every pod whose shim answers is followed again; one whose shim
//!   cannot be reached (it died while the daemon was down, or the machine rebooted) was
//!   settled the same way by recovery (`super::recovery`) before the daemon served.

use super::PodLifecycle;
use crate::shim::Shim;
use crate::store::sandbox::{Sandbox, SandboxState};
use std::sync::Arc;

impl PodLifecycle {
    /// After a restart and recovery: follow every pod that finished being made. Recovery
    /// already settled each pod whose shim could not be reached, so such a pod is left alone
    /// here rather than reaped through the OCI runtime a second time.
    pub(super) fn resume_watches(self: &Arc<Self>) {
        for sb in self.sandboxes.records().all() {
            if sb.snapshot().state == SandboxState::Creating {
                continue;
            }
            let pods = self.clone();
            tokio::spawn(async move {
                if let Ok(shim) = pods.shims.get(&sb.id).await {
                    pods.follow(sb, shim).await;
                }
            });
        }
    }

    /// Follows a pod that RunPodSandbox just made, for as long as its shim lives.
    pub(super) fn watch(self: &Arc<Self>, sandbox: Arc<Sandbox>) {
        let pods = self.clone();
        tokio::spawn(async move {
            match pods.shims.get(&sandbox.id).await {
                Ok(shim) => pods.follow(sandbox, shim).await,
                Err(e) => {
                    let why = format!("the pod's shim cannot be reached: {e}");
                    pods.shim_lost(&sandbox, &why).await;
                }
            }
        });
    }

    /// The pod's pause container and its shim: the pause's exit makes the pod not ready, the
    /// shim's end settles it as a dead shim.
    async fn follow(&self, sandbox: Arc<Sandbox>, shim: Arc<dyn Shim>) {
        let pause = async {
            if shim.wait(&sandbox.id, "").await.is_ok() {
                self.sandboxes.pause_exited(&sandbox);
            }
            // A failed wait is the shim going away: `gone` says so.
            std::future::pending::<()>().await
        };
        tokio::select! {
            _ = pause => {}
            _ = shim.gone() => {}
        }
        drop(shim);
        self.shim_lost(&sandbox, "the pod's shim exited").await;
    }

    /// The watch saw the shim go. RemovePodSandbox shuts shims down on purpose: a pod that is
    /// no longer in the table by the time its lock is free was removed, and needs nothing.
    async fn shim_lost(&self, sandbox: &Arc<Sandbox>, why: &str) {
        let _op = sandbox.op.lock().await;
        let current = self
            .sandboxes
            .records()
            .read()
            .by_id
            .get(&sandbox.id)
            .is_some_and(|s| Arc::ptr_eq(s, sandbox));
        if current {
            self.settle_dead_shim(sandbox, why).await;
        }
    }

    /// Kills and deletes through the OCI runtime what the dead shim held, reports its
    /// containers exited and the pod not ready. Idempotent; the caller holds the pod's lock.
    pub(super) async fn settle_dead_shim(&self, sandbox: &Sandbox, why: &str) {
        let id = &sandbox.id;
        tracing::warn!(sandbox = %id, why, "pod shim gone; killing what is left through the OCI runtime");
        let containers = self
            .containers
            .records()
            .of_sandbox(id)
            .iter()
            .map(|c| c.id.clone())
            .collect();
        let reaped = self.sandboxes.reap_dead_shim(sandbox, containers).await;
        self.containers.settle_dead_shim(id, why, reaped);
        self.sandboxes.ready_to_not_ready(sandbox);
    }
}
