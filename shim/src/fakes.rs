//! Fakes of the OCI runtime CLI and of host processes for the Task service's unit tests.
//!
//! [`FakeRuntime`] keeps containers in a table and behaves as runc does where the service
//! depends on it (kill of a stopped container fails, `delete --force` kills a live init, an
//! unknown id fails); any command can be made to fail once. [`FakeProcesses`] hands out exits
//! on demand and records signals. Pids start above the kernel's `PID_MAX_LIMIT`, so they can
//! never name a real process.

use crate::backend::runtime_cli::{
    CheckpointCommand, CreateCommand, ExecCommand, ProcessIo, RuntimeCli, RuntimeCliError,
    RuntimeStatus,
};
use crate::oom_kill_counter::OomCounter;
use crate::process_control::ProcessControl;
use async_trait::async_trait;
use peapod_host::sync::LockUnpoisoned;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::sync::oneshot;

/// Above `PID_MAX_LIMIT` (4194304): never a real process.
const FIRST_PID: u32 = 5_000_000;

#[derive(Default)]
struct ProcessTable {
    waiting: HashMap<u32, oneshot::Sender<i32>>,
    exited: HashMap<u32, i32>,
    signals: Vec<(u32, i32)>,
    oom_files: HashMap<u32, PathBuf>,
}

/// Exits and signals of fake processes.
#[derive(Default)]
pub struct FakeProcesses {
    table: Mutex<ProcessTable>,
}

impl FakeProcesses {
    fn lock(&self) -> MutexGuard<'_, ProcessTable> {
        self.table.lock_unpoisoned()
    }

    /// Makes `pid` exit with `code` (once; later exits of the same pid are ignored).
    pub fn exit(&self, pid: u32, code: i32) {
        let mut t = self.lock();
        if t.exited.contains_key(&pid) {
            return;
        }
        t.exited.insert(pid, code);
        if let Some(tx) = t.waiting.remove(&pid) {
            let _ = tx.send(code);
        }
    }

    pub fn has_exited(&self, pid: u32) -> bool {
        self.lock().exited.contains_key(&pid)
    }

    /// The signals sent with `signal_tree`, in order.
    pub fn signals(&self) -> Vec<(u32, i32)> {
        self.lock().signals.clone()
    }

    /// The OOM counter file `oom_counter(pid)` will read (`oom_kill N` lines).
    pub fn set_oom_file(&self, pid: u32, file: PathBuf) {
        self.lock().oom_files.insert(pid, file);
    }
}

impl ProcessControl for FakeProcesses {
    fn subscribe_exit(&self, pid: u32) -> oneshot::Receiver<i32> {
        let (tx, rx) = oneshot::channel();
        let mut t = self.lock();
        match t.exited.get(&pid) {
            Some(code) => {
                let _ = tx.send(*code);
            }
            None => {
                t.waiting.insert(pid, tx);
            }
        }
        rx
    }

    fn signal_tree(&self, pid: u32, signal: i32) {
        self.lock().signals.push((pid, signal));
        if signal == libc::SIGKILL {
            self.exit(pid, 128 + signal);
        }
    }

    fn oom_counter(&self, pid: u32) -> Option<OomCounter> {
        let file = self.lock().oom_files.get(&pid).cloned()?;
        OomCounter::from_file(file)
    }
}

struct FakeContainer {
    pid: u32,
    status: RuntimeStatus,
}

#[derive(Default)]
struct RuntimeState {
    containers: HashMap<String, FakeContainer>,
    calls: Vec<String>,
    fail_next: HashMap<&'static str, RuntimeCliError>,
    next_pid: u32,
    /// Files the runtime was given, read when it was called (they are temporary).
    seen_files: Vec<(PathBuf, Vec<u8>)>,
}

/// A runc that keeps its containers in memory.
pub struct FakeRuntime {
    state: Mutex<RuntimeState>,
    processes: Arc<FakeProcesses>,
}

pub fn failed(command: &str) -> RuntimeCliError {
    RuntimeCliError::Failed {
        runtime: "fake-runc".into(),
        command: command.into(),
        exit_status: 1,
        message: format!("{command} failed on purpose"),
    }
}

impl FakeRuntime {
    pub fn new(processes: Arc<FakeProcesses>) -> FakeRuntime {
        FakeRuntime {
            state: Mutex::new(RuntimeState {
                next_pid: FIRST_PID,
                ..Default::default()
            }),
            processes,
        }
    }

    fn lock(&self) -> MutexGuard<'_, RuntimeState> {
        self.state.lock_unpoisoned()
    }

    /// The next call of `command` fails with `err`.
    pub fn fail_next(&self, command: &'static str, err: RuntimeCliError) {
        self.lock().fail_next.insert(command, err);
    }

    /// Forgets a container, as if it was deleted behind the shim's back.
    pub fn forget(&self, id: &str) {
        self.lock().containers.remove(id);
    }

    /// The runtime sees the container stopped (its init died) before the shim reaps it.
    pub fn mark_stopped(&self, id: &str) {
        self.set_status(id, RuntimeStatus::Stopped);
    }

    /// The commands called so far, `"kill c1 15"`-style.
    pub fn calls(&self) -> Vec<String> {
        self.lock().calls.clone()
    }

    pub fn status(&self, id: &str) -> Option<RuntimeStatus> {
        self.lock().containers.get(id).map(|c| c.status.clone())
    }

    /// The content the runtime saw in a file it was given.
    pub fn seen_file(&self, path: &Path) -> Option<Vec<u8>> {
        self.lock()
            .seen_files
            .iter()
            .rev()
            .find(|(p, _)| p == path)
            .map(|(_, d)| d.clone())
    }

    /// Records the call; the injected failure of `command`, if any.
    fn call(&self, command: &'static str, line: String) -> Result<(), RuntimeCliError> {
        let mut s = self.lock();
        s.calls.push(line);
        match s.fail_next.remove(command) {
            Some(err) => Err(err),
            None => Ok(()),
        }
    }

    fn pid_of(&self, id: &str, command: &str) -> Result<u32, RuntimeCliError> {
        self.lock()
            .containers
            .get(id)
            .map(|c| c.pid)
            .ok_or_else(|| failed(command))
    }

    fn set_status(&self, id: &str, status: RuntimeStatus) {
        if let Some(c) = self.lock().containers.get_mut(id) {
            c.status = status;
        }
    }

    fn new_pid(&self) -> u32 {
        let mut s = self.lock();
        s.next_pid += 1;
        s.next_pid
    }
}

#[async_trait]
impl RuntimeCli for FakeRuntime {
    async fn create(&self, id: &str, cmd: CreateCommand<'_>) -> Result<u32, RuntimeCliError> {
        let verb = match (cmd.restore, cmd.start) {
            (Some(_), _) => "restore",
            (None, true) => "run",
            (None, false) => "create",
        };
        self.call("create", format!("{verb} {id}"))?;
        if self.lock().containers.contains_key(id) {
            return Err(failed("create"));
        }
        let pid = self.new_pid();
        let status = if cmd.start || cmd.restore.is_some() {
            RuntimeStatus::Running
        } else {
            RuntimeStatus::Created
        };
        self.lock()
            .containers
            .insert(id.to_string(), FakeContainer { pid, status });
        // `cmd.io` drops here: the container's end of its stdio closes, as the real runtime's
        // copy does when it exits.
        Ok(pid)
    }

    async fn start(&self, id: &str, _io: Option<ProcessIo>) -> Result<(), RuntimeCliError> {
        self.call("start", format!("start {id}"))?;
        self.pid_of(id, "start")?;
        self.set_status(id, RuntimeStatus::Running);
        Ok(())
    }

    async fn state(&self, id: &str) -> Result<Option<RuntimeStatus>, RuntimeCliError> {
        self.call("state", format!("state {id}"))?;
        Ok(self.status(id))
    }

    async fn kill(&self, id: &str, signal: u32, all: bool) -> Result<(), RuntimeCliError> {
        let all = if all { " --all" } else { "" };
        self.call("kill", format!("kill{all} {id} {signal}"))?;
        let pid = self.pid_of(id, "kill")?;
        if self.status(id) == Some(RuntimeStatus::Stopped) || self.processes.has_exited(pid) {
            return Err(failed("kill"));
        }
        self.set_status(id, RuntimeStatus::Stopped);
        self.processes.exit(pid, 128 + signal as i32);
        Ok(())
    }

    async fn delete(&self, id: &str, force: bool) -> Result<(), RuntimeCliError> {
        let f = if force { " --force" } else { "" };
        self.call("delete", format!("delete{f} {id}"))?;
        let pid = self.pid_of(id, "delete")?;
        let live = !self.processes.has_exited(pid);
        if live && !force {
            return Err(failed("delete"));
        }
        self.lock().containers.remove(id);
        if live {
            self.processes.exit(pid, 128 + libc::SIGKILL);
        }
        Ok(())
    }

    async fn exec(&self, id: &str, cmd: ExecCommand<'_>) -> Result<u32, RuntimeCliError> {
        let spec = std::fs::read(cmd.process_json).unwrap_or_default();
        self.lock()
            .seen_files
            .push((cmd.process_json.to_path_buf(), spec));
        self.call("exec", format!("exec {id}"))?;
        if self.status(id) != Some(RuntimeStatus::Running) {
            return Err(failed("exec"));
        }
        Ok(self.new_pid())
    }

    async fn update(&self, id: &str, resources_json: &Path) -> Result<(), RuntimeCliError> {
        let data = std::fs::read(resources_json).unwrap_or_default();
        self.lock()
            .seen_files
            .push((resources_json.to_path_buf(), data));
        self.call("update", format!("update {id}"))?;
        self.pid_of(id, "update").map(drop)
    }

    async fn pause(&self, id: &str) -> Result<(), RuntimeCliError> {
        self.call("pause", format!("pause {id}"))?;
        self.pid_of(id, "pause")?;
        self.set_status(id, RuntimeStatus::Paused);
        Ok(())
    }

    async fn resume(&self, id: &str) -> Result<(), RuntimeCliError> {
        self.call("resume", format!("resume {id}"))?;
        self.pid_of(id, "resume")?;
        self.set_status(id, RuntimeStatus::Running);
        Ok(())
    }

    async fn wait(&self, id: &str) -> Result<i32, RuntimeCliError> {
        self.call("wait", format!("wait {id}"))?;
        Ok(0)
    }

    async fn ps(&self, id: &str) -> Result<Vec<u32>, RuntimeCliError> {
        self.call("ps", format!("ps {id}"))?;
        Ok(vec![self.pid_of(id, "ps")?])
    }

    async fn checkpoint(
        &self,
        id: &str,
        cmd: CheckpointCommand<'_>,
    ) -> Result<(), RuntimeCliError> {
        let line = format!(
            "checkpoint {id} {} {}",
            cmd.image_path.display(),
            cmd.work_path.display()
        );
        self.call("checkpoint", line)?;
        self.pid_of(id, "checkpoint").map(drop)
    }
}
