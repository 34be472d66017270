//! Following container exits: a task per running container waits on the shim; the exit record
//! the shim wrote says whether the memory cgroup killed it.

use super::exit_reason;
use super::ContainerService;
use crate::store::container::{Container, ContainerState};
use peapod_shim::protocol::ExitRecord;
use std::sync::Arc;

/// How a container ended, as its record will say.
struct Ending {
    code: i32,
    at_ns: i64,
    reason: String,
    /// Replaces the record's message when set.
    message: Option<String>,
}

impl Ending {
    /// The exit the shim recorded durably.
    fn recorded(exit: &ExitRecord) -> Ending {
        Ending {
            code: exit.exit_code,
            at_ns: exit.exited_at_ns,
            reason: exit_reason(exit.exit_code, exit.oom_killed).to_string(),
            message: None,
        }
    }
}

impl ContainerService {
    /// Moves the container to EXITED once, if `from` holds for its state (checked under the
    /// record's lock), then tells NRI plugins and event watchers: the one way every exit is
    /// recorded, whoever saw it.
    fn finish(&self, c: &Container, from: impl FnOnce(ContainerState) -> bool, end: Ending) {
        let result = c.update_if(
            |r| from(r.state),
            |r| {
                r.state = ContainerState::Exited;
                r.exit_code = end.code;
                r.finished_at_ns = end.at_ns;
                r.reason = end.reason.clone();
                if let Some(message) = &end.message {
                    r.message = message.clone();
                }
            },
        );
        match result {
            Ok(false) => {}
            Ok(true) => {
                tracing::info!(container = %c.id, code = end.code, reason = %end.reason, "container exited");
                self.nri.container_exited(&c.id, end.code, end.at_ns);
                self.events.emit(
                    &c.id,
                    &c.get().sandbox_id,
                    peapod_proto::v1::ContainerEventType::ContainerStoppedEvent,
                );
            }
            Err(e) => tracing::error!(container = %c.id, error = %e, "persisting an exit"),
        }
    }

    /// The container's state is not known any more (its shim is gone and nothing killed it).
    fn mark_unknown(&self, c: &Container, message: String) {
        let result = c.update_if(
            |r| r.state != ContainerState::Exited,
            |r| {
                r.state = ContainerState::Unknown;
                r.message = message;
            },
        );
        if let Err(e) = result {
            tracing::error!(container = %c.id, error = %e, "persisting an unknown state");
        }
    }

    /// Records the exit of a running container (once: later calls for the same exit change
    /// nothing); the shim's durable record, if there is one, adds the OOM kill and the time.
    pub(super) fn record_exit(&self, c: &Container, code: i32, at_ns: i64) {
        let rec = c.get();
        if rec.state != ContainerState::Running {
            return;
        }
        let durable = ExitRecord::read(&rec.exit_file).ok().flatten();
        let oom = durable.as_ref().is_some_and(|d| d.oom_killed);
        let end = Ending {
            code,
            at_ns: durable.map_or(at_ns, |d| d.exited_at_ns),
            reason: exit_reason(code, oom).to_string(),
            message: None,
        };
        self.finish(c, |s| s == ContainerState::Running, end);
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
                self.mark_unknown(c, format!("the shim is gone: {why}"));
            }
        }
    }

    /// The pod's shim died and [`crate::shim::Shims::reap_orphans`] ran (`reaped`: it
    /// worked): every container not yet exited is reported exited, with the exit the shim
    /// recorded if it wrote one, else 137 (SIGKILL: what the reaping sent) and reason
    /// `ShimDied`. If the reaping failed they stay unknown, and Stop/Remove try again.
    pub(crate) fn settle_dead_shim(&self, sandbox_id: &str, why: &str, reaped: bool) {
        for c in self.containers.of_sandbox(sandbox_id) {
            self.settle_one(&c, why, reaped);
        }
    }

    /// One container of [`Self::settle_dead_shim`].
    pub(super) fn settle_one(&self, c: &Container, why: &str, reaped: bool) {
        let rec = c.get();
        if rec.state == ContainerState::Exited {
            return;
        }
        let not_exited = |s| s != ContainerState::Exited;
        match (ExitRecord::read(&rec.exit_file).ok().flatten(), reaped) {
            (Some(exit), _) => self.finish(c, not_exited, Ending::recorded(&exit)),
            (None, true) => {
                let end = Ending {
                    code: 128 + libc::SIGKILL,
                    at_ns: peapod_shim::timefmt::now_ns(),
                    reason: "ShimDied".into(),
                    message: Some(format!("{why}; the container was killed")),
                };
                self.finish(c, not_exited, end);
            }
            (None, false) => self.mark_unknown(c, format!("{why}; killing the container failed")),
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
            self.settle_one(c, "the pod's shim is gone", true);
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
