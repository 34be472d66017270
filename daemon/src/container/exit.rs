//! Following container exits: a task per running container waits on the shim; the exit record
//! the shim wrote says whether the memory cgroup killed it.

use super::exit_reason;
use super::ContainerService;
use crate::store::container::{Container, ContainerRecord, ContainerState};
use peapod_shim::protocol::ExitRecord;
use std::sync::Arc;
use std::time::Duration;

/// The first pause before waiting again for a container whose wait failed while its shim
/// lives, and the longest.
const WAIT_RETRY_FIRST: Duration = Duration::from_millis(50);
const WAIT_RETRY_MAX: Duration = Duration::from_secs(5);

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
        // In memory even on a full disk: the shim's exit record is the durable one.
        let (applied, unwritten) = c.update_if_in_memory_first(
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
        if let Some(e) = unwritten {
            tracing::warn!(container = %c.id, error = %e, "an exit is recorded in memory only for now (the shim's exit record keeps it)");
        }
        if applied {
            tracing::info!(container = %c.id, code = end.code, reason = %end.reason, "container exited");
            self.nri.container_exited(&c.id, end.code, end.at_ns);
            self.events.emit(
                &c.id,
                &c.snapshot().sandbox_id,
                peapod_proto::v1::ContainerEventType::ContainerStoppedEvent,
            );
        }
    }

    /// The container's state is not known any more (its shim cannot tell, and nothing killed
    /// it).
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
    ///
    /// A wait can fail while the pod's shim lives (a dropped connection, a call cut short):
    /// that is not an exit, so the wait is made again after a pause (doubling up to
    /// [`WAIT_RETRY_MAX`]) for as long as the container is recorded running. Only a shim that
    /// is gone (its process exited) or that no longer knows the container settles it without
    /// the shim: the exit the shim recorded, else UNKNOWN — the pod's watch then reaps what is
    /// left through the OCI runtime. A shim that cannot be reached is left to the pod's
    /// watch, which follows the shim's process and settles the pod when it ends.
    pub(super) fn watch_exit(self: &Arc<Self>, c: Arc<Container>) {
        let rt = self.clone();
        tokio::spawn(async move {
            let mut pause = WAIT_RETRY_FIRST;
            loop {
                let rec = c.get();
                if rec.state != ContainerState::Running {
                    return; // recorded by someone else (StopContainer, the pod's watch)
                }
                let error = match rt.shims.get(&rec.sandbox_id).await {
                    Ok(shim) => match shim.wait(&rec.id, "").await {
                        Ok(exit) => return rt.record_exit(&c, exit.code as i32, exit.at_ns),
                        Err(e) if !shim.alive() || e.is_not_found() => {
                            return rt.settle_without_shim(&c, &e.to_string());
                        }
                        Err(e) => e,
                    },
                    Err(e) => e,
                };
                tracing::info!(container = %c.id, error = %error, retry_in = ?pause, "waiting for the container's exit failed; the shim lives, waiting again");
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(WAIT_RETRY_MAX);
            }
        });
    }

    /// The shim cannot tell (it is gone, or no longer knows the container): use the exit
    /// record if there is one, else the state is unknown.
    pub(super) fn settle_without_shim(&self, c: &Container, why: &str) {
        let rec = c.get();
        if rec.state != ContainerState::Running {
            return;
        }
        match ExitRecord::read(&rec.exit_file).ok().flatten() {
            Some(exit) => self.record_exit(c, exit.exit_code, exit.exited_at_ns),
            None => {
                tracing::warn!(container = %c.id, why, "lost track of a running container");
                self.mark_unknown(c, format!("the shim cannot tell its exit: {why}"));
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
                    at_ns: peapod_host::timefmt::now_ns(),
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
        self.remove_cgroup_of(&rec)?;
        if rec.state != ContainerState::Exited {
            self.settle_one(c, "the pod's shim is gone", true);
        }
        Ok(())
    }

    /// Removes the container's cgroups where a runtime create cut short left them (see
    /// [`crate::host_ops::HostOps::remove_cgroup`]). They are under its pod's parent; with the
    /// pod's record already gone there is nothing to find them by.
    pub(super) fn remove_cgroup_of(&self, rec: &ContainerRecord) -> crate::error::Result<()> {
        let parent = match self.sandboxes.read().by_id.get(&rec.sandbox_id) {
            Some(sb) => sb.snapshot().cgroup_parent.clone(),
            None => return Ok(()),
        };
        let path = crate::cgroups::cgroups_path(self.cgroup_driver, &parent, &rec.id);
        self.host.remove_cgroup(&path)
    }

    /// After a restart: follow every container that was running when the daemon went
    /// away.
    pub fn resume(self: &Arc<Self>) {
        self.reload_processes();
        for c in self.containers.read().all() {
            if c.snapshot().state == ContainerState::Running {
                self.watch_exit(c);
            }
        }
    }
}
