//! Following pause containers: a pod whose pause exits is not ready any more.

use super::SandboxService;
use crate::store::sandbox::{Sandbox, SandboxState};
use peapod_proto::v1::ContainerEventType;
use std::sync::Arc;

impl SandboxService {
    /// After a restart: follow every pod that was ready when the daemon went away.
    pub fn resume(self: &Arc<Self>) {
        for sb in self.sandboxes.all() {
            if sb.get().state == SandboxState::Ready {
                self.watch_pause(sb);
            }
        }
    }

    /// Marks the sandbox not ready when its pause container exits.
    pub(super) fn watch_pause(self: &Arc<Self>, sandbox: Arc<Sandbox>) {
        let rt = self.clone();
        tokio::spawn(async move {
            let Ok(shim) = rt.shims.get(&sandbox.id).await else {
                return;
            };
            if shim.wait(&sandbox.id, "").await.is_ok() {
                match sandbox.update_if(
                    |r| r.state == SandboxState::Ready,
                    |r| r.state = SandboxState::NotReady,
                ) {
                    Ok(true) => {
                        tracing::info!(sandbox = %sandbox.id, "pause exited; pod sandbox not ready");
                        rt.events.emit(
                            &sandbox.id,
                            &sandbox.id,
                            ContainerEventType::ContainerStoppedEvent,
                        );
                    }
                    Ok(false) => {}
                    Err(e) => {
                        tracing::warn!(sandbox = %sandbox.id, error = %e, "persisting NotReady")
                    }
                }
            }
        });
    }
}
