//! Following container exits: a task per running container waits on the shim; the exit record
//! the shim wrote says whether the memory cgroup killed it.

use super::exit_reason;
use super::ContainerService;
use crate::store::container::{Container, ContainerState};
use peapod_shim::protocol::ExitRecord;
use std::sync::Arc;

impl ContainerService {
    /// Records an exit (once: later calls for the same exit change nothing).
    pub(super) fn record_exit(&self, c: &Container, code: i32, at_ns: i64) {
        let rec = c.get();
        if rec.state != ContainerState::Running {
            return;
        }
        let durable = ExitRecord::read(&rec.exit_file).ok().flatten();
        let oom = durable.is_some_and(|d| d.oom_killed);
        let finished = durable.map_or(at_ns, |d| d.exited_at_ns);
        let result = c.update_if(
            |r| r.state == ContainerState::Running,
            |r| {
                r.state = ContainerState::Exited;
                r.exit_code = code;
                r.finished_at_ns = finished;
                r.reason = exit_reason(code, oom).to_string();
            },
        );
        match result {
            Ok(false) => {}
            Ok(true) => {
                tracing::info!(container = %c.id, code, oom, "container exited");
                self.nri.container_exited(&c.id, code, finished);
                self.events.emit(
                    &c.id,
                    &rec.sandbox_id,
                    peapod_proto::v1::ContainerEventType::ContainerStoppedEvent,
                );
            }
            Err(e) => tracing::error!(container = %c.id, error = %e, "persisting an exit"),
        }
    }

    /// Waits (in the background) for a running container to exit and records it.
    pub(super) fn watch_exit(self: &Arc<Self>, c: Arc<Container>) {
        let rt = self.clone();
        tokio::spawn(async move {
            let rec = c.get();
            let waited = match rt.shims.get(&rec.sandbox_id).await {
                Ok(shim) => shim.wait(&rec.id, "").await,
                Err(e) => Err(e),
            };
            match waited {
                Ok(exit) => rt.record_exit(&c, exit.code as i32, exit.at_ns),
                Err(e) => rt.settle_without_shim(&c, &e.to_string()),
            }
        });
    }

    /// The shim cannot tell: use the exit record if there is one, else the state is unknown.
    pub(super) fn settle_without_shim(&self, c: &Container, why: &str) {
        let rec = c.get();
        if rec.state != ContainerState::Running {
            return;
        }
        match ExitRecord::read(&rec.exit_file).ok().flatten() {
            Some(exit) => self.record_exit(c, exit.exit_code, exit.exited_at_ns),
            None => {
                tracing::warn!(container = %c.id, why, "lost track of a running container");
                let message = format!("the shim is gone: {why}");
                if let Err(e) = c.update(|r| {
                    r.state = ContainerState::Unknown;
                    r.message = message;
                }) {
                    tracing::error!(container = %c.id, error = %e, "persisting an unknown state");
                }
            }
        }
    }

    /// The pod's shim died and [`crate::shim::Shims::reap_orphans`] ran (`reaped`: it
    /// worked): every container not yet exited is reported exited, with the exit the shim
    /// recorded if it wrote one, else 137 (SIGKILL: what the reaping sent) and reason
    /// `ShimDied`. If the reaping failed they stay unknown, and Stop/Remove try again.
    pub(crate) fn settle_dead_shim(&self, sandbox_id: &str, why: &str, reaped: bool) {
        for c in self.containers.of_sandbox(sandbox_id) {
            self.settle_one(&c, sandbox_id, why, reaped);
        }
    }

    pub(super) fn settle_one(&self, c: &Container, sandbox_id: &str, why: &str, reaped: bool) {
        let rec = c.get();
        if rec.state == ContainerState::Exited {
            return;
        }
        let durable = ExitRecord::read(&rec.exit_file).ok().flatten();
        let now = peapod_shim::timefmt::now_ns();
        let result = c.update_if(
            |r| r.state != ContainerState::Exited,
            |r| match (&durable, reaped) {
                (Some(exit), _) => {
                    r.state = ContainerState::Exited;
                    r.exit_code = exit.exit_code;
                    r.finished_at_ns = exit.exited_at_ns;
                    r.reason = exit_reason(exit.exit_code, exit.oom_killed).to_string();
                }
                (None, true) => {
                    r.state = ContainerState::Exited;
                    r.exit_code = 128 + libc::SIGKILL;
                    r.finished_at_ns = now;
                    r.reason = "ShimDied".into();
                    r.message = format!("{why}; the container was killed");
                }
                (None, false) => {
                    r.state = ContainerState::Unknown;
                    r.message = format!("{why}; killing the container failed");
                }
            },
        );
        match result {
            Ok(true) if c.get().state == ContainerState::Exited => {
                tracing::info!(container = %c.id, "container settled after its shim died");
                self.events.emit(
                    &c.id,
                    sandbox_id,
                    peapod_proto::v1::ContainerEventType::ContainerStoppedEvent,
                );
            }
            Ok(_) => {}
            Err(e) => tracing::error!(container = %c.id, error = %e, "persisting an exit"),
        }
    }

    /// A container whose shim is gone: killed and deleted through the OCI runtime, then
    /// reported exited (unless it already was).
    pub(super) async fn reap_lost(&self, c: &Container) -> crate::error::Result<()> {
        let rec = c.get();
        self.shims
            .reap_orphans(std::slice::from_ref(&rec.id))
            .await?;
        if rec.state != ContainerState::Exited {
            self.settle_one(c, &rec.sandbox_id, "the pod's shim is gone", true);
        }
        Ok(())
    }

    /// After a restart: follow every container that was running when the daemon went
    /// away.
    pub fn resume(self: &Arc<Self>) {
        self.reload_processes();
        for c in self.containers.read().all() {
            if c.get().state == ContainerState::Running {
                self.watch_exit(c);
            }
        }
    }
}
