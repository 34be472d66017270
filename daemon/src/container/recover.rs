//! The container side of recovery at start (see `crate::pod_lifecycle::recovery` for the invariants):
//! half-made containers are rolled back, and every created or running one is checked against
//! its pod's shim.

use super::ContainerService;
use crate::error::{Optional, Result};
use crate::store::container::{Container, ContainerState};
use containerd_shim_protos::types::task::Status;
use peapod_host::timefmt;
use std::collections::HashSet;
use std::sync::Arc;

/// What [`ContainerService::recover`] did, for the start-up log and tests.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ContainerRecovery {
    pub rolled_back: usize,
    /// Created containers whose task the (live) shim does not have: now exited.
    pub lost: usize,
    /// Created in the record, started in the runtime (a crash between the two).
    pub found_running: usize,
    /// Records that could not be read, replaced by placeholders (see `torn`).
    pub torn: usize,
}

impl ContainerService {
    /// Reconciles every container record with the runtime; call before serving.
    pub async fn recover(self: &Arc<Self>) -> ContainerRecovery {
        let mut report = ContainerRecovery {
            torn: self.replace_torn_records(),
            ..Default::default()
        };
        for c in self.containers.all() {
            let rec = c.get();
            match rec.state {
                ContainerState::Creating => match self.roll_back(&c).await {
                    Ok(()) => report.rolled_back += 1,
                    Err(e) => {
                        tracing::error!(container = %c.id, error = %e, "rolling back a half-made container; it stays for RemoveContainer");
                        let why =
                            format!("half-made before a restart, then its cleanup failed: {e}");
                        self.settle_one(&c, &why, true);
                    }
                },
                ContainerState::Created | ContainerState::Running => {
                    match self.reconcile(&c).await {
                        Reconciled::Lost => report.lost += 1,
                        Reconciled::FoundRunning => report.found_running += 1,
                        Reconciled::AsRecorded => {}
                    }
                }
                ContainerState::Exited | ContainerState::Unknown => {}
            }
        }
        report
    }

    /// Removes a container a crash left half-made (record in `Creating`), and its record.
    async fn roll_back(&self, c: &Arc<Container>) -> Result<()> {
        let rec = c.get();
        // A runtime create the dead daemon had the shim start may still run: it must not land
        // after the rollback (a container holding the pod's namespaces nobody knows of).
        let (id, handlers) = (rec.id.clone(), self.handlers.clone());
        crate::blocking::off_runtime(|| {
            for runtime in handlers.runtimes() {
                crate::orphan_helpers::kill_and_wait(&id, &runtime.path);
            }
        });
        if let Ok(shim) = self.shims.get(&rec.sandbox_id).await {
            if rec.runtime_create_sent {
                crate::shim::until_task_lands(shim.as_ref(), &rec.id).await;
            }
            shim.delete(&rec.id, "").await.optional()?;
        }
        if rec.runtime_create_sent {
            // Whatever the runtime has of it, even if the shim never registered it.
            self.shims
                .reap_orphans(std::slice::from_ref(&rec.id))
                .await?;
            // A runtime create cut short (by the daemon's death or the kill above) made the
            // container's cgroups but no state the runtime's delete would find them by.
            self.remove_cgroup_of(&rec)?;
        }
        self.release_files(&rec).await?;
        self.processes.forget(&rec.id);
        self.containers.write().remove(&rec.id);
        tracing::info!(container = %rec.id, "rolled back a container a crash left half-made");
        Ok(())
    }

    /// A created or running container of a pod whose shim answers (the pods whose shim is
    /// gone were settled by the sandboxes' recovery, through the OCI runtime).
    async fn reconcile(&self, c: &Arc<Container>) -> Reconciled {
        let rec = c.get();
        if rec.state != ContainerState::Created {
            // Running: the exit watcher `resume` starts asks the shim for the exit (one that
            // happened while the daemon was down comes with its code and time).
            return Reconciled::AsRecorded;
        }
        let Ok(shim) = self.shims.get(&rec.sandbox_id).await else {
            return Reconciled::AsRecorded;
        };
        let state = match shim.state(&rec.id, "").await.optional() {
            Ok(Some(s)) => s,
            Ok(None) if self.pending_restore(&rec).is_some() => {
                // A restore's task is made at its start: none yet is as recorded.
                return Reconciled::AsRecorded;
            }
            Ok(None) => {
                // The shim lives but lost the task (it was never made): exited.
                self.settle_one(c, "its task is gone from the pod's shim", true);
                return Reconciled::Lost;
            }
            Err(e) => {
                tracing::warn!(container = %c.id, error = %e, "asking the shim for a container's state");
                return Reconciled::AsRecorded;
            }
        };
        match state.status {
            Status::RUNNING | Status::PAUSED | Status::PAUSING => {
                // Started by a StartContainer that the daemon's end interrupted.
                let updated = c.update(|r| {
                    r.state = ContainerState::Running;
                    r.pid = state.pid;
                    r.started_at_ns = timefmt::now_ns();
                });
                if let Err(e) = updated {
                    tracing::error!(container = %c.id, error = %e, "persisting a found start");
                }
                Reconciled::FoundRunning
            }
            Status::STOPPED => {
                // It was started and has exited since: report it as that exit.
                let _ = c.update(|r| r.state = ContainerState::Running);
                let (code, at) = state
                    .exit
                    .map_or((137, timefmt::now_ns()), |e| (e.code as i32, e.at_ns));
                self.record_exit(c, code, at);
                Reconciled::FoundRunning
            }
            _ => Reconciled::AsRecorded,
        }
    }

    /// The ids of every container with a record.
    pub(crate) fn known_ids(&self) -> HashSet<String> {
        self.containers.read().by_id.keys().cloned().collect()
    }
}

enum Reconciled {
    AsRecorded,
    Lost,
    FoundRunning,
}
