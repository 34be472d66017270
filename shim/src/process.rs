//! The processes of a container as the shim tracks them: its init (the container's main
//! process) and the processes exec'd into it. Each has a pid, stdio and an exit that is
//! published once, to every waiter, after the output has been copied.

use crate::oom_kill_counter::OomCounter;
use crate::stdio::IoHandle;
use containerd_shim_protos::api;
use containerd_shim_protos::types::task::Status;
use peapod_host::timefmt;
use peapod_shim::protocol::ExitRecord;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{oneshot, watch};

/// How long an exit waits for the process's output to be copied before it is reported anyway
/// (a daemonized grandchild may hold the pipe open forever).
const OUTPUT_DRAIN: Duration = Duration::from_secs(2);

/// A process's exit, `None` while it runs.
pub type ExitWatch = watch::Receiver<Option<ExitRecord>>;

/// The container's main process.
pub struct InitProcess {
    pub pid: u32,
    pub started: bool,
    pub paused: bool,
    pub terminal: bool,
    pub exit: ExitWatch,
    pub io: Arc<IoHandle>,
}

impl InitProcess {
    pub fn exited(&self) -> Option<ExitRecord> {
        *self.exit.borrow()
    }

    pub fn status(&self) -> Status {
        if self.exited().is_some() {
            Status::STOPPED
        } else if self.paused {
            Status::PAUSED
        } else if self.started {
            Status::RUNNING
        } else {
            Status::CREATED
        }
    }
}

/// A process exec'd into a container: registered by Exec, running from Start.
pub struct ExecProcess {
    pub request: api::ExecProcessRequest,
    /// 0 until started.
    pub pid: u32,
    pub exit: ExitWatch,
    pub io: Option<Arc<IoHandle>>,
}

impl ExecProcess {
    pub fn new(request: api::ExecProcessRequest) -> ExecProcess {
        ExecProcess {
            request,
            pid: 0,
            exit: watch::channel(None).1,
            io: None,
        }
    }

    pub fn exited(&self) -> Option<ExitRecord> {
        *self.exit.borrow()
    }

    pub fn status(&self) -> Status {
        match (self.pid, self.exited()) {
            (_, Some(_)) => Status::STOPPED,
            (0, None) => Status::CREATED,
            _ => Status::RUNNING,
        }
    }
}

/// Where an init's exit is recorded before it is reported.
pub struct InitExit {
    /// The exit file, written durably (the daemon reads it after a restart).
    pub file: PathBuf,
    pub oom: Option<OomCounter>,
}

/// Publishes the exit of `pid` once `exit_code` arrives: after its output is copied (bounded
/// by [`OUTPUT_DRAIN`]) and, for an init, after the exit is recorded in its file.
pub fn watch_exit(
    pid: u32,
    exit_code: oneshot::Receiver<i32>,
    io: Option<Arc<IoHandle>>,
    init: Option<InitExit>,
) -> ExitWatch {
    let (tx, rx) = watch::channel(None);
    tokio::spawn(async move {
        let code = exit_code.await.unwrap_or(255);
        let exited_at_ns = timefmt::now_ns();
        // Read at once, not after the output: under the systemd driver the cgroup goes as
        // soon as its last process has, and the fallback (the kernel's log) can miss a kill.
        let oom_killed = init
            .as_ref()
            .and_then(|i| i.oom.as_ref())
            .is_some_and(|o| o.fired());
        if let Some(io) = &io {
            let _ = tokio::time::timeout(OUTPUT_DRAIN, io.wait_output_done()).await;
        }
        let mut record = ExitRecord {
            pid,
            exit_code: code,
            exited_at_ns,
            oom_killed: false,
        };
        if let Some(init) = init {
            if let Some(io) = &io {
                io.close_output();
            }
            record.oom_killed = oom_killed;
            if let Err(err) = record.write(&init.file) {
                eprintln!(
                    "peapod-shim: recording the exit in {}: {err}",
                    init.file.display()
                );
            }
        }
        let _ = tx.send(Some(record));
    });
    rx
}
