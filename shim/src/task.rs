//! The Task service: containerd's shim v2 Task API for every container of the pod, as plain
//! methods returning [`ShimError`] (the ttrpc adapter is `task_api.rs`).
//!
//! It runs each container through its backend ([`Backends`]: chosen at create, kept in the
//! container's record, matched on by each call) and host processes through
//! [`ProcessControl`]; over a fake runtime CLI ([`Backends::runtime_only`]) and fake
//! processes every path, failures included, runs in unit tests. The only peapod-specific
//! input is [`CreateOptions`] (log path, exit file, attach socket, stdin), carried in the
//! standard `CreateTaskRequest.options` field.

use crate::backend::runtime_cli::{
    CheckpointCommand, CreateCommand, ExecCommand, ProcessIo, RuntimeCliError, RuntimeStatus,
    COMMAND_TIMEOUT,
};
use crate::backend::{Backend, Backends, Uncheckpointable};
use crate::container::{Container, Containers};
use crate::error::{Result, ShimError};
use crate::process::{self, ExecProcess, InitExit, InitProcess};
use crate::process_control::ProcessControl;
use crate::stdio::init::{FifoPaths, PreparedStdio};
use crate::stdio::{self, IoHandle};
use containerd_shim_protos::api;
use containerd_shim_protos::protobuf::well_known_types::any::Any;
use containerd_shim_protos::types::task::Status;
use peapod_shim::protocol::{self, CreateOptions, ExitRecord};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{watch, Notify};

/// How long Delete waits for the exit of an init the runtime's delete just killed.
const DELETE_EXIT_WAIT: Duration = Duration::from_secs(10);

/// What State reports of one process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessState {
    pub pid: u32,
    pub status: Status,
    pub terminal: bool,
    /// The container's log path (init only).
    pub stdout: String,
    pub bundle: PathBuf,
    pub exit: Option<ExitRecord>,
}

pub struct TaskService {
    backends: Backends,
    processes: Arc<dyn ProcessControl>,
    containers: Containers,
    /// Where console sockets are made (unix socket paths are limited to 108 bytes).
    console_dir: PathBuf,
    console_counter: AtomicU64,
    shutdown: Arc<Notify>,
}

impl TaskService {
    pub fn new(
        backends: Backends,
        processes: Arc<dyn ProcessControl>,
        console_dir: PathBuf,
        shutdown: Arc<Notify>,
    ) -> TaskService {
        TaskService {
            backends,
            processes,
            containers: Containers::default(),
            console_dir,
            console_counter: AtomicU64::new(0),
            shutdown,
        }
    }

    /// A short, unique path for a console socket.
    fn console_path(&self) -> PathBuf {
        let n = self.console_counter.fetch_add(1, Ordering::Relaxed);
        self.console_dir
            .join(format!("c{}-{n}", std::process::id()))
    }

    /// Container `id`'s backend; the runtime CLI's for an id the shim does not hold (the
    /// runtime, which does not know it either, then says so).
    fn backend(&self, id: &str) -> Arc<Backend> {
        self.containers
            .with(id, |c| Ok(c.backend.clone()))
            .unwrap_or_else(|_| Arc::new(Backend::runc()))
    }

    /// Turns a failed command on container `id` into an error, asking its backend whether it
    /// knows the container: NotFound when it does not.
    async fn runtime_failure(&self, id: &str, b: &Backend, err: RuntimeCliError) -> ShimError {
        match self.backends.state(id, b).await {
            Ok(None) => ShimError::RuntimeNotFound {
                id: id.to_string(),
                source: err,
            },
            _ => ShimError::Runtime(err),
        }
    }

    /// Create: the container's stdio, its create (or `run`) by the backend its spec and the
    /// configuration choose, the exit watch and the attach socket. On any failure the
    /// container is deleted again and nothing is recorded.
    pub async fn create(&self, req: api::CreateTaskRequest) -> Result<u32> {
        if req.id.is_empty() || req.bundle.is_empty() {
            return Err(ShimError::InvalidArgument(
                "id and bundle are required".into(),
            ));
        }
        if self.containers.contains(&req.id) {
            return Err(ShimError::AlreadyExists(format!("container {}", req.id)));
        }
        let bundle = PathBuf::from(&req.bundle);
        // containerd sends no peapod options: its FIFOs are the process's stdio.
        let fifo_stdio = req.options.is_none();
        let options = create_options(&req, &bundle)?;
        let console = req.terminal.then(|| self.console_path());
        let prepared = if fifo_stdio {
            let paths = FifoPaths {
                stdin: &req.stdin,
                stdout: &req.stdout,
                stderr: &req.stderr,
            };
            PreparedStdio::fifos(&req.id, paths, console.as_deref())
        } else {
            stdio::prepare_init(
                &options.log_path,
                options.stdin,
                options.stdin_once,
                console.as_deref(),
            )
            .map(PreparedStdio::Own)
        };
        let mut prepared = prepared.map_err(|e| ShimError::io("container stdio", e))?;
        let process_io = prepared.take_process_io();
        let console_path = prepared.console_path();
        let pid_file = bundle.join("init.pid");
        let created = self
            .backends
            .create(
                &req.id,
                CreateCommand {
                    bundle: &bundle,
                    pid_file: &pid_file,
                    console_socket: console_path.as_deref(),
                    io: process_io,
                    start: options.start,
                    native: options.native,
                    restore: (!options.restore.is_empty()).then(|| Path::new(&options.restore)),
                },
            )
            .await;
        let (pid, backend) = match created {
            Ok(created) => created,
            Err(err) => {
                // What a failed create left is the runtime's to remove.
                self.undo_create(&req.id, &Backend::runc()).await;
                return Err(ShimError::Runtime(err));
            }
        };
        // A container in a runtime's own sandbox shares its pid with the sandbox: its exit
        // is the runtime's to tell.
        let exit_code = backend
            .exit_from_runtime()
            .unwrap_or_else(|| self.processes.subscribe_exit(pid));
        let oom = self.processes.oom_counter(pid);
        let io = match prepared.start().await {
            Ok(io) => io,
            Err(err) => {
                self.undo_create(&req.id, &backend).await;
                return Err(ShimError::io("container stdio", err));
            }
        };
        let (stop_attach, stop_rx) = watch::channel(false);
        if !options.attach_socket.is_empty() {
            if let Err(err) =
                stdio::serve_attach(Path::new(&options.attach_socket), io.clone(), stop_rx)
            {
                io.close_output();
                self.undo_create(&req.id, &backend).await;
                return Err(ShimError::io(
                    format!("attach socket {}", options.attach_socket),
                    err,
                ));
            }
        }
        let exit = process::watch_exit(
            pid,
            exit_code,
            Some(io.clone()),
            Some(InitExit {
                file: PathBuf::from(&options.exit_file),
                oom,
            }),
        );
        self.containers.insert(Container {
            id: req.id.clone(),
            bundle,
            backend: Arc::new(backend),
            init: InitProcess {
                pid,
                started: options.start,
                paused: false,
                terminal: req.terminal,
                exit,
                io,
            },
            options,
            stop_attach,
            execs: HashMap::new(),
        });
        Ok(pid)
    }

    /// Removes what a failed create left (its error is the create's).
    async fn undo_create(&self, id: &str, backend: &Backend) {
        let _ = self.backends.delete(id, backend, true).await;
    }

    /// Start of the init (empty `exec_id`) or of a registered exec; returns the pid.
    pub async fn start(&self, id: &str, exec_id: &str) -> Result<u32> {
        if !exec_id.is_empty() {
            return self.start_exec(id, exec_id).await;
        }
        let (pid, backend) = self.containers.with(id, |c| {
            if c.options.start {
                // Created with `run`: already started; Start only reports the pid.
                return Ok((c.init.pid, None));
            }
            if c.init.started || !c.is_running() {
                return Err(ShimError::FailedPrecondition(format!(
                    "container {id} was already started"
                )));
            }
            Ok((c.init.pid, Some(c.backend.clone())))
        })?;
        let Some(backend) = backend else {
            return Ok(pid);
        };
        if let Err(err) = self.backends.start(id, &backend).await {
            return Err(self.runtime_failure(id, &backend, err).await);
        }
        // The container may have been deleted meanwhile; then there is nothing to mark.
        let _ = self.containers.with(id, |c| {
            c.init.started = true;
            Ok(())
        });
        Ok(pid)
    }

    async fn start_exec(&self, id: &str, exec_id: &str) -> Result<u32> {
        let (request, bundle, init_pid, backend) = self.containers.with(id, |c| {
            let running = c.is_running();
            let e = c.exec(exec_id)?;
            if e.pid != 0 {
                return Err(ShimError::FailedPrecondition(format!(
                    "exec {exec_id} already started"
                )));
            }
            if !running {
                return Err(ShimError::FailedPrecondition(format!(
                    "container {id} is not running"
                )));
            }
            Ok((
                e.request.clone(),
                c.bundle.clone(),
                c.init.pid,
                c.backend.clone(),
            ))
        })?;
        let spec = request
            .spec
            .as_ref()
            .map(|a| a.value.clone())
            .unwrap_or_default();
        let process_json = bundle.join(format!("exec-{exec_id}.json"));
        let pid_file = bundle.join(format!("exec-{exec_id}.pid"));
        let _files = RemoveOnDrop(vec![process_json.clone(), pid_file.clone()]);
        std::fs::write(&process_json, &spec)
            .map_err(|e| ShimError::io("write exec process spec", e))?;
        let console = request.terminal.then(|| self.console_path());
        let mut prepared = stdio::prepare_exec(
            &request.stdin,
            &request.stdout,
            &request.stderr,
            console.as_deref(),
        )
        .map_err(|e| ShimError::io("exec stdio", e))?;
        let process_io = std::mem::replace(&mut prepared.process_io, ProcessIo::null());
        let console_path = prepared.console.as_ref().map(|c| c.path().to_path_buf());
        let pid = self
            .backends
            .exec(
                id,
                &backend,
                ExecCommand {
                    bundle: &bundle,
                    init_pid,
                    process_json: &process_json,
                    pid_file: &pid_file,
                    console_socket: console_path.as_deref(),
                    io: process_io,
                },
            )
            .await
            .map_err(ShimError::Runtime)?;
        let exit_code = self.processes.subscribe_exit(pid);
        let io = prepared.start().await.ok();
        let exit = process::watch_exit(pid, exit_code, io.clone(), None);
        // A Delete of the exec or its container meanwhile leaves nothing to record it in.
        let _ = self.containers.with(id, |c| {
            let e = c.exec_mut(exec_id)?;
            e.pid = pid;
            e.exit = exit;
            e.io = io;
            Ok(())
        });
        Ok(pid)
    }

    pub fn state(&self, id: &str, exec_id: &str) -> Result<ProcessState> {
        self.containers.with(id, |c| {
            if exec_id.is_empty() {
                return Ok(ProcessState {
                    pid: c.init.pid,
                    status: c.init.status(),
                    terminal: c.init.terminal,
                    stdout: c.options.log_path.clone(),
                    bundle: c.bundle.clone(),
                    exit: c.init.exited(),
                });
            }
            let e = c.exec(exec_id)?;
            Ok(ProcessState {
                pid: e.pid,
                status: e.status(),
                terminal: e.request.terminal,
                stdout: String::new(),
                bundle: c.bundle.clone(),
                exit: e.exited(),
            })
        })
    }

    /// Delete of an exec (killed if still running) or of a container that is not running.
    /// Returns the pid and, when known, the exit.
    pub async fn delete(&self, id: &str, exec_id: &str) -> Result<(u32, Option<ExitRecord>)> {
        if !exec_id.is_empty() {
            let e = self.containers.with(id, |c| c.remove_exec(exec_id))?;
            let exit = e.exited();
            if e.pid != 0 && exit.is_none() {
                self.processes.signal_tree(e.pid, libc::SIGKILL);
            }
            return Ok((e.pid, exit));
        }
        let (mut exit, backend) = self.containers.with(id, |c| {
            if c.init.started && c.is_running() {
                return Err(ShimError::FailedPrecondition(format!(
                    "container {id} is running; kill it first"
                )));
            }
            Ok((c.init.exit.clone(), c.backend.clone()))
        })?;
        if let Err(err) = self.backends.delete(id, &backend, true).await {
            // Already gone from the runtime is what Delete wants.
            if let err @ ShimError::Runtime(_) = self.runtime_failure(id, &backend, err).await {
                return Err(err);
            }
        }
        // A created-but-never-started init is killed by the delete; wait for its record.
        let record = tokio::time::timeout(DELETE_EXIT_WAIT, exit.wait_for(|e| e.is_some()))
            .await
            .ok()
            .and_then(|r| r.ok().and_then(|e| *e));
        let pid = match self.containers.remove(id) {
            Some(c) => {
                c.close();
                c.init.pid
            }
            None => 0,
        };
        Ok((pid, record))
    }

    pub async fn pids(&self, id: &str) -> Result<Vec<u32>> {
        let backend = self.backend(id);
        match self.backends.ps(id, &backend).await {
            Ok(pids) => Ok(pids),
            Err(err) => Err(self.runtime_failure(id, &backend, err).await),
        }
    }

    /// Checkpoint: CRIU's images of a running container's processes in `image_path`, its log
    /// and work files in the options' `work_path`; the container goes on running.
    pub async fn checkpoint(
        &self,
        id: &str,
        image_path: &str,
        options: Option<&Any>,
    ) -> Result<()> {
        if image_path.is_empty() {
            return Err(ShimError::InvalidArgument(
                "path (where the images go) is required".into(),
            ));
        }
        let options = checkpoint_options(options)?;
        let backend = self.containers.with(id, |c| {
            if !c.is_running() || !c.init.started {
                return Err(ShimError::FailedPrecondition(format!(
                    "container {id} is not running: nothing to checkpoint"
                )));
            }
            Ok(c.backend.clone())
        })?;
        let timeout = match options.timeout_ms {
            0 => COMMAND_TIMEOUT,
            ms => Duration::from_millis(ms),
        };
        let cmd = CheckpointCommand {
            image_path: Path::new(image_path),
            work_path: Path::new(&options.work_path),
            timeout,
        };
        match self.backends.checkpoint(id, &backend, cmd).await {
            Ok(()) => Ok(()),
            Err(Uncheckpointable::Kind(why)) => Err(ShimError::FailedPrecondition(why)),
            // The dump was stopped at the caller's limit (CRIU goes with runc's end, and the
            // processes run on): the caller's deadline, not a failure of the runtime.
            Err(Uncheckpointable::Runtime(err @ RuntimeCliError::Timeout { .. })) => {
                Err(ShimError::DeadlineExceeded(err.to_string()))
            }
            Err(Uncheckpointable::Runtime(err)) => {
                Err(self.runtime_failure(id, &backend, err).await)
            }
        }
    }

    pub async fn pause(&self, id: &str) -> Result<()> {
        self.freeze(id, true).await
    }

    pub async fn resume(&self, id: &str) -> Result<()> {
        self.freeze(id, false).await
    }

    /// Pause (`frozen`) or Resume.
    async fn freeze(&self, id: &str, frozen: bool) -> Result<()> {
        let backend = self.backend(id);
        if let Err(err) = self.backends.freeze(id, &backend, frozen).await {
            return Err(self.runtime_failure(id, &backend, err).await);
        }
        let _ = self.containers.with(id, |c| {
            c.init.paused = frozen;
            Ok(())
        });
        Ok(())
    }

    /// Kill of an exec (its process tree, for SIGKILL) or of the container through the
    /// runtime. A process that already exited is not an error.
    pub async fn kill(&self, id: &str, exec_id: &str, signal: u32, all: bool) -> Result<()> {
        if !exec_id.is_empty() {
            let pid = self.containers.with(id, |c| {
                let e = c.exec(exec_id)?;
                Ok((e.exited().is_none() && e.pid != 0).then_some(e.pid))
            })?;
            if let Some(pid) = pid {
                self.processes.signal_tree(pid, signal as i32);
            }
            return Ok(());
        }
        let (running, backend) = self
            .containers
            .with(id, |c| Ok((c.is_running(), c.backend.clone())))?;
        if !running {
            return Ok(());
        }
        let Err(err) = self.backends.kill(id, &backend, signal, all).await else {
            return Ok(());
        };
        // The init may have exited between our check and the runtime's: stopped is success.
        match self.backends.state(id, &backend).await {
            Ok(Some(RuntimeStatus::Stopped)) => Ok(()),
            Ok(None) => Err(ShimError::RuntimeNotFound {
                id: id.to_string(),
                source: err,
            }),
            _ => Err(ShimError::Runtime(err)),
        }
    }

    /// Exec: registers a process to be started by Start.
    pub fn exec(&self, req: api::ExecProcessRequest) -> Result<()> {
        if req.exec_id.is_empty() {
            return Err(ShimError::InvalidArgument("exec_id is required".into()));
        }
        match req.spec.as_ref() {
            Some(any) if any.type_url == protocol::PROCESS_TYPE_URL => {}
            _ => {
                return Err(ShimError::InvalidArgument(format!(
                    "spec must be a {}",
                    protocol::PROCESS_TYPE_URL
                )))
            }
        }
        let id = req.id.clone();
        self.containers.with(&id, |c| {
            if !c.is_running() || !c.init.started {
                return Err(ShimError::FailedPrecondition(format!(
                    "container {id} is not running"
                )));
            }
            if c.execs.contains_key(&req.exec_id) {
                return Err(ShimError::AlreadyExists(format!(
                    "exec {} in {id}",
                    req.exec_id
                )));
            }
            c.execs.insert(req.exec_id.clone(), ExecProcess::new(req));
            Ok(())
        })
    }

    /// The stdio of the init (empty `exec_id`) or of a started exec.
    pub fn io(&self, id: &str, exec_id: &str) -> Result<Arc<IoHandle>> {
        self.containers.with(id, |c| c.io(exec_id))
    }

    pub fn resize_pty(&self, id: &str, exec_id: &str, width: u32, height: u32) -> Result<()> {
        let clamp = |v: u32| v.min(u16::MAX as u32) as u16;
        self.io(id, exec_id)?
            .resize(clamp(width), clamp(height))
            .map_err(|e| ShimError::FailedPrecondition(format!("resize the terminal: {e}")))
    }

    pub async fn close_stdin(&self, id: &str, exec_id: &str) -> Result<()> {
        self.io(id, exec_id)?.close_stdin().await;
        Ok(())
    }

    /// Update: applies runtime-spec LinuxResources (JSON) through the container's backend.
    pub async fn update(&self, id: &str, resources: Option<&Any>) -> Result<()> {
        let (bundle, backend) = self
            .containers
            .with(id, |c| Ok((c.bundle.clone(), c.backend.clone())))?;
        let Some(any) = resources else {
            return Err(ShimError::InvalidArgument("resources are required".into()));
        };
        if any.type_url != protocol::RESOURCES_TYPE_URL {
            return Err(ShimError::InvalidArgument(format!(
                "resources must be a {}",
                protocol::RESOURCES_TYPE_URL
            )));
        }
        let file = bundle.join("update-resources.json");
        let _file = RemoveOnDrop(vec![file.clone()]);
        std::fs::write(&file, &any.value).map_err(|e| ShimError::io("write resources", e))?;
        match self.backends.update(id, &backend, &file).await {
            Ok(()) => Ok(()),
            Err(err) => Err(self.runtime_failure(id, &backend, err).await),
        }
    }

    /// Wait: the exit of the init or of an exec, once it happens.
    pub async fn wait(&self, id: &str, exec_id: &str) -> Result<ExitRecord> {
        let mut exit = self.containers.with(id, |c| {
            Ok(if exec_id.is_empty() {
                c.init.exit.clone()
            } else {
                c.exec(exec_id)?.exit.clone()
            })
        })?;
        let what = if exec_id.is_empty() {
            format!("container {id}")
        } else {
            format!("exec {exec_id} in {id}")
        };
        let record = match exit.wait_for(|e| e.is_some()).await {
            Ok(e) => *e,
            Err(_) => None,
        };
        record.ok_or(ShimError::Removed(what))
    }

    /// The init's pid, if the container is there.
    pub fn task_pid(&self, id: &str) -> Option<u32> {
        self.containers.with(id, |c| Ok(c.init.pid)).ok()
    }

    /// Shutdown: the shim exits, refusing while it still has containers unless `now`.
    pub fn shutdown(&self, now: bool) -> Result<()> {
        if !now && !self.containers.is_empty() {
            return Err(ShimError::FailedPrecondition(
                "the shim still has containers; delete them first".into(),
            ));
        }
        self.shutdown.notify_one();
        Ok(())
    }
}

/// peapod's options of a create, with their defaults filled in.
fn create_options(req: &api::CreateTaskRequest, bundle: &Path) -> Result<CreateOptions> {
    let mut options = match req.options.as_ref() {
        Some(any) if any.type_url == protocol::CREATE_OPTIONS_TYPE_URL => {
            serde_json::from_slice::<CreateOptions>(&any.value)
                .map_err(|e| ShimError::InvalidArgument(format!("create options: {e}")))?
        }
        Some(any) if any.type_url == protocol::RESTORE_OPTIONS_TYPE_URL => {
            let options = serde_json::from_slice::<CreateOptions>(&any.value)
                .map_err(|e| ShimError::InvalidArgument(format!("restore options: {e}")))?;
            if options.restore.is_empty() {
                return Err(ShimError::InvalidArgument(
                    "restore options without restore (the images' directory)".into(),
                ));
            }
            options
        }
        Some(any) => {
            return Err(ShimError::InvalidArgument(format!(
                "unknown create options type {}",
                any.type_url
            )))
        }
        None => CreateOptions::default(),
    };
    if options.exit_file.is_empty() {
        options.exit_file = bundle.join("exit").to_string_lossy().into_owned();
    }
    // A restored process runs once `runc restore` returns: Start only reports its pid.
    options.start |= !options.restore.is_empty();
    Ok(options)
}

/// The JSON options of a Checkpoint: a work path is required (CRIU's log must go somewhere
/// the daemon can read it and not into the images it archives).
fn checkpoint_options(any: Option<&Any>) -> Result<protocol::CheckpointOptions> {
    let options = match any {
        Some(any) if any.type_url == protocol::CHECKPOINT_OPTIONS_TYPE_URL => {
            serde_json::from_slice::<protocol::CheckpointOptions>(&any.value)
                .map_err(|e| ShimError::InvalidArgument(format!("checkpoint options: {e}")))?
        }
        Some(any) => {
            return Err(ShimError::InvalidArgument(format!(
                "unknown checkpoint options type {}",
                any.type_url
            )))
        }
        None => protocol::CheckpointOptions::default(),
    };
    if options.work_path.is_empty() {
        return Err(ShimError::InvalidArgument(
            "checkpoint options: work_path is required".into(),
        ));
    }
    Ok(options)
}

/// Files a call writes for the runtime and removes however the call ends.
struct RemoveOnDrop(Vec<PathBuf>);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        for p in &self.0 {
            let _ = std::fs::remove_file(p);
        }
    }
}

#[cfg(test)]
#[path = "task_tests.rs"]
mod tests;
