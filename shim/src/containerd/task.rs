//! The Task service as containerd calls it: peapod's [`TaskService`] (through [`TaskApi`]),
//! plus what containerd leaves to its shims: mounting the root filesystem from the request,
//! publishing task events, Stats, and a Shutdown that keeps the shim while its pod has
//! containers.

use super::events::Publisher;
use super::options::{self, RuntimeOptions};
use super::stats::CgroupDirs;
use super::{mounts, oom};
use crate::error::ShimError;
use crate::task::TaskService;
use crate::task_api::TaskApi;
use async_trait::async_trait;
use containerd_shim_protos::api;
use containerd_shim_protos::events::task as ev;
use containerd_shim_protos::protobuf::well_known_types::empty::Empty;
use containerd_shim_protos::protobuf::well_known_types::timestamp::Timestamp;
use containerd_shim_protos::protobuf::MessageField;
use containerd_shim_protos::shim_async::Task;
use containerd_shim_protos::topics;
use containerd_shim_protos::types::task::Status;
use peapod_host::sync::LockUnpoisoned;
use peapod_shim::protocol;
use std::collections::{HashMap, HashSet};
use std::os::fd::OwnedFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use tokio::sync::watch;
use ttrpc::asynchronous::TtrpcContext;

type TtrpcResult<T> = ttrpc::Result<T>;

/// What the containerd face keeps per container beside the Task service's own record.
struct Held {
    bundle: PathBuf,
    /// Whether the shim mounted `<bundle>/rootfs` (and so unmounts it at Delete).
    mounted: bool,
    /// Read ends of the stdout/stderr FIFOs, held so that a write by the container never
    /// meets a FIFO without readers (SIGPIPE) while containerd restarts.
    _fifo_readers: Vec<OwnedFd>,
    /// The stdio paths of the init (empty key) and of each exec, as State reports them:
    /// containerd reattaches its readers to these FIFOs after it restarts.
    stdio: HashMap<String, Stdio>,
    /// Read ends of each exec's stdout/stderr FIFOs, opened at Exec: containerd opens its own
    /// readers asynchronously, so at Start the shim's non-blocking open of the write end could
    /// otherwise find no reader (ENXIO). Dropped when the exec is deleted.
    exec_fifo_readers: HashMap<String, Vec<OwnedFd>>,
}

/// The stdio paths (FIFOs or log URIs) containerd gave a process.
#[derive(Clone, Default)]
struct Stdio {
    stdin: String,
    stdout: String,
    stderr: String,
}

pub struct ContainerdTask {
    api: TaskApi,
    tasks: Arc<TaskService>,
    events: Publisher,
    held: Mutex<HashMap<String, Held>>,
    cgroup_root: PathBuf,
    /// Bumped whenever an exec starts or is deleted: containerd waits for an exec before it
    /// starts it, and the Task service has no exit to wait on until then.
    exec_changed: watch::Sender<u64>,
    /// The runtime options the shim runs every task with: those of the task whose `start`
    /// launched it ([`super::launch`]).
    runtime: RuntimeOptions,
    /// Containers whose init exited and whose TaskExit containerd has not taken yet (it was
    /// down): see [`ContainerdTask::pids`]'s use of it.
    unreported_exits: Arc<Mutex<HashSet<String>>>,
    /// Each started container's cgroups, for Stats until its Delete ([`super::stats`]).
    cgroups: Mutex<HashMap<String, CgroupDirs>>,
}

fn status(code: ttrpc::Code, message: impl Into<String>) -> ttrpc::Error {
    ttrpc::Error::RpcStatus(ttrpc::get_status(code, message.into()))
}

fn timestamp(ns: i64) -> MessageField<Timestamp> {
    let mut ts = Timestamp::new();
    ts.seconds = ns.div_euclid(1_000_000_000);
    ts.nanos = ns.rem_euclid(1_000_000_000) as i32;
    MessageField::some(ts)
}

/// Opens a FIFO's read end without blocking; `None` for no path or no FIFO.
fn hold_fifo(path: &str) -> Option<OwnedFd> {
    if path.is_empty() {
        return None;
    }
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .ok()
        .map(OwnedFd::from)
}

impl ContainerdTask {
    pub fn new(
        tasks: Arc<TaskService>,
        events: Publisher,
        runtime: RuntimeOptions,
    ) -> ContainerdTask {
        ContainerdTask {
            api: TaskApi(tasks.clone()),
            tasks,
            events,
            held: Mutex::new(HashMap::new()),
            cgroup_root: PathBuf::from(peapod_host::cgroup::DEFAULT_ROOT),
            exec_changed: watch::channel(0).0,
            runtime,
            unreported_exits: Arc::default(),
            cgroups: Mutex::new(HashMap::new()),
        }
    }

    /// Checks that a create's runtime options are the shim's: one shim runs one pod, and one
    /// pod one runtime handler, so options that differ mean a client mixed handlers in a pod,
    /// or a shim outlived a change of containerd's configuration. Neither can be honoured by
    /// a runtime CLI already running the pod's other containers.
    fn check_runtime_options(&self, req: &api::CreateTaskRequest) -> Result<(), ShimError> {
        let asked = options::decode(req.options.as_ref())
            .map_err(|e| ShimError::InvalidArgument(format!("task {}: {e}", req.id)))?;
        if asked == self.runtime {
            return Ok(());
        }
        Err(ShimError::FailedPrecondition(format!(
            "task {} asks for runtime options ({asked}) that differ from those its pod's shim \
             runs every task with ({}): the containers of a pod share one shim, and so one \
             runtime handler",
            req.id, self.runtime
        )))
    }

    fn held(&self) -> std::sync::MutexGuard<'_, HashMap<String, Held>> {
        self.held.lock_unpoisoned()
    }

    /// Publishes TaskExit once process `exec_id` (empty: the init) of container `id` exits,
    /// after TaskOOM when the memory cgroup killed something and `oom_at_exit` (no live OOM
    /// watch, see [`oom`]).
    fn watch_exit(&self, id: &str, exec_id: &str, oom_at_exit: bool) {
        let tasks = self.tasks.clone();
        let events = self.events.clone();
        let unreported = self.unreported_exits.clone();
        let (id, exec_id) = (id.to_string(), exec_id.to_string());
        tokio::spawn(async move {
            // An error means the process was deleted first: then there is no exit to tell.
            let Ok(exit) = tasks.wait(&id, &exec_id).await else {
                return;
            };
            if exit.oom_killed && oom_at_exit {
                let mut oom = ev::TaskOOM::new();
                oom.container_id = id.clone();
                events.publish(topics::TASK_OOM_EVENT_TOPIC, &oom);
            }
            let init = exec_id.is_empty();
            let mut e = ev::TaskExit::new();
            e.id = if init { id.clone() } else { exec_id };
            e.container_id = id.clone();
            e.pid = exit.pid;
            e.exit_status = exit.exit_code as u32;
            e.exited_at = timestamp(exit.exited_at_ns);
            if !init {
                events.publish(topics::TASK_EXIT_EVENT_TOPIC, &e);
                return;
            }
            let Some(confirmed) = events.publish_confirmed(topics::TASK_EXIT_EVENT_TOPIC, &e)
            else {
                return;
            };
            unreported.lock_unpoisoned().insert(id.clone());
            if confirmed.await.is_ok() {
                unreported.lock_unpoisoned().remove(&id);
            }
        });
    }

    fn bump_execs(&self) {
        self.exec_changed.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// Returns once exec `exec_id` of `id` is no longer waiting for its Start (started, or
    /// gone: then the Task service's Wait says so).
    async fn until_exec_started(&self, id: &str, exec_id: &str) {
        let mut changed = self.exec_changed.subscribe();
        loop {
            match self.tasks.state(id, exec_id) {
                Ok(s) if s.status == Status::CREATED => {}
                _ => return,
            }
            if changed.changed().await.is_err() {
                return;
            }
        }
    }

    /// Undoes the containerd face's part of a create.
    fn release(&self, id: &str) {
        let Some(held) = self.held().remove(id) else {
            return;
        };
        if held.mounted {
            if let Err(err) = mounts::unmount_rootfs(&held.bundle) {
                eprintln!("containerd-shim-peapod-v2: {err}");
            }
        }
    }
}

#[async_trait]
impl Task for ContainerdTask {
    async fn create(
        &self,
        ctx: &TtrpcContext,
        mut req: api::CreateTaskRequest,
    ) -> TtrpcResult<api::CreateTaskResponse> {
        if req.id.is_empty() || req.bundle.is_empty() {
            return Err(ShimError::InvalidArgument("id and bundle are required".into()).into());
        }
        if !req.checkpoint.is_empty() {
            return Err(status(
                ttrpc::Code::UNIMPLEMENTED,
                "restoring from a checkpoint is not supported by peapod's shim",
            ));
        }
        if self.held().contains_key(&req.id) || self.tasks.task_pid(&req.id).is_some() {
            return Err(ShimError::AlreadyExists(format!("container {}", req.id)).into());
        }
        // peapod's own create options pass through to the Task service; containerd's runtime
        // options are the shim's (they must be its own), and with them gone the Task service
        // takes its stdio from the request's FIFOs.
        if req
            .options
            .as_ref()
            .is_none_or(|o| o.type_url != protocol::CREATE_OPTIONS_TYPE_URL)
        {
            self.check_runtime_options(&req)?;
            req.options = MessageField::none();
        }
        let bundle = PathBuf::from(&req.bundle);
        // For `delete` after this shim is gone: containerd 2.x runs no `start` for a container
        // joining its pod's shim, so this is the only place its bundle learns them.
        self.runtime
            .save(&bundle)
            .map_err(|e| status(ttrpc::Code::INTERNAL, e))?;
        let mounted = !req.rootfs.is_empty();
        if mounted {
            mounts::mount_rootfs(&bundle, &req.rootfs)
                .map_err(|e| status(ttrpc::Code::INTERNAL, e))?;
        }
        let readers = [req.stdout.as_str(), req.stderr.as_str()]
            .into_iter()
            .filter_map(hold_fifo)
            .collect();
        self.held().insert(
            req.id.clone(),
            Held {
                bundle: bundle.clone(),
                mounted,
                _fifo_readers: readers,
                stdio: HashMap::from([(
                    String::new(),
                    Stdio {
                        stdin: req.stdin.clone(),
                        stdout: req.stdout.clone(),
                        stderr: req.stderr.clone(),
                    },
                )]),
                exec_fifo_readers: HashMap::new(),
            },
        );
        let event = {
            let mut e = ev::TaskCreate::new();
            e.container_id = req.id.clone();
            e.bundle = req.bundle.clone();
            e.rootfs = req.rootfs.clone();
            let mut io = ev::TaskIO::new();
            io.stdin = req.stdin.clone();
            io.stdout = req.stdout.clone();
            io.stderr = req.stderr.clone();
            io.terminal = req.terminal;
            e.io = MessageField::some(io);
            e
        };
        let id = req.id.clone();
        match self.api.create(ctx, req).await {
            Ok(resp) => {
                let mut event = event;
                event.pid = resp.pid;
                self.events.publish(topics::TASK_CREATE_EVENT_TOPIC, &event);
                let live_oom = oom::watch(&id, resp.pid, &self.cgroup_root, self.events.clone());
                self.watch_exit(&id, "", !live_oom);
                Ok(resp)
            }
            Err(err) => {
                self.release(&id);
                Err(err)
            }
        }
    }

    async fn start(
        &self,
        ctx: &TtrpcContext,
        req: api::StartRequest,
    ) -> TtrpcResult<api::StartResponse> {
        let started = self.api.start(ctx, req.clone()).await;
        if !req.exec_id.is_empty() {
            self.bump_execs();
        }
        let resp = started?;
        if req.exec_id.is_empty() {
            // Now, while the init runs: its /proc entry goes with it.
            if let Ok(dirs) = CgroupDirs::of_pid(resp.pid, &self.cgroup_root) {
                self.cgroups.lock_unpoisoned().insert(req.id.clone(), dirs);
            }
            let mut e = ev::TaskStart::new();
            e.container_id = req.id;
            e.pid = resp.pid;
            self.events.publish(topics::TASK_START_EVENT_TOPIC, &e);
        } else {
            let mut e = ev::TaskExecStarted::new();
            e.container_id = req.id.clone();
            e.exec_id = req.exec_id.clone();
            e.pid = resp.pid;
            self.events
                .publish(topics::TASK_EXEC_STARTED_EVENT_TOPIC, &e);
            self.watch_exit(&req.id, &req.exec_id, false);
        }
        Ok(resp)
    }

    async fn state(
        &self,
        ctx: &TtrpcContext,
        req: api::StateRequest,
    ) -> TtrpcResult<api::StateResponse> {
        let (id, exec_id) = (req.id.clone(), req.exec_id.clone());
        let mut resp = self.api.state(ctx, req).await?;
        if let Some(stdio) = self
            .held()
            .get(&id)
            .and_then(|h| h.stdio.get(&exec_id).cloned())
        {
            resp.stdin = stdio.stdin;
            resp.stdout = stdio.stdout;
            resp.stderr = stdio.stderr;
        }
        Ok(resp)
    }

    async fn delete(
        &self,
        ctx: &TtrpcContext,
        req: api::DeleteRequest,
    ) -> TtrpcResult<api::DeleteResponse> {
        let deleted = self.api.delete(ctx, req.clone()).await;
        self.bump_execs();
        let resp = deleted?;
        if req.exec_id.is_empty() {
            // The exit is in this answer: containerd has it now.
            self.unreported_exits.lock_unpoisoned().remove(&req.id);
            self.cgroups.lock_unpoisoned().remove(&req.id);
            self.release(&req.id);
            let mut e = ev::TaskDelete::new();
            e.container_id = req.id;
            e.pid = resp.pid;
            e.exit_status = resp.exit_status;
            e.exited_at = resp.exited_at.clone();
            self.events.publish(topics::TASK_DELETE_EVENT_TOPIC, &e);
        } else if let Some(held) = self.held().get_mut(&req.id) {
            held.stdio.remove(&req.exec_id);
            held.exec_fifo_readers.remove(&req.exec_id);
        }
        Ok(resp)
    }

    /// The container's processes; but for a container whose init exited while containerd could
    /// not be told (it was down), FailedPrecondition until containerd has taken the TaskExit or
    /// deleted the task. containerd 2.x, reloading its shims after a restart, cleans up as
    /// leaked every task of a non-sandbox bundle whose Pids is empty (deleting it, so its CRI
    /// then reports exit 255, "Unknown", for a container that exited with its own status
    /// during the outage, as happens with containerd's runc shim); any error but NotFound
    /// keeps the task, and the CRI reads the exit from State and Delete as containerd 1.x does.
    async fn pids(
        &self,
        ctx: &TtrpcContext,
        req: api::PidsRequest,
    ) -> TtrpcResult<api::PidsResponse> {
        let exited = self
            .tasks
            .state(&req.id, "")
            .is_ok_and(|s| s.status == Status::STOPPED);
        if exited && self.unreported_exits.lock_unpoisoned().contains(&req.id) {
            return Err(ShimError::FailedPrecondition(format!(
                "container {} has exited and containerd has not taken its exit yet: it has no \
                 processes, and its exit is read with State or Delete",
                req.id
            ))
            .into());
        }
        self.api.pids(ctx, req).await
    }

    async fn pause(&self, ctx: &TtrpcContext, req: api::PauseRequest) -> TtrpcResult<Empty> {
        let resp = self.api.pause(ctx, req.clone()).await?;
        let mut e = ev::TaskPaused::new();
        e.container_id = req.id;
        self.events.publish(topics::TASK_PAUSED_EVENT_TOPIC, &e);
        Ok(resp)
    }

    async fn resume(&self, ctx: &TtrpcContext, req: api::ResumeRequest) -> TtrpcResult<Empty> {
        let resp = self.api.resume(ctx, req.clone()).await?;
        let mut e = ev::TaskResumed::new();
        e.container_id = req.id;
        self.events.publish(topics::TASK_RESUMED_EVENT_TOPIC, &e);
        Ok(resp)
    }

    async fn checkpoint(
        &self,
        _ctx: &TtrpcContext,
        _req: api::CheckpointTaskRequest,
    ) -> TtrpcResult<Empty> {
        Err(status(
            ttrpc::Code::UNIMPLEMENTED,
            "checkpoint is not supported by peapod's shim",
        ))
    }

    async fn kill(&self, ctx: &TtrpcContext, req: api::KillRequest) -> TtrpcResult<Empty> {
        self.api.kill(ctx, req).await
    }

    async fn exec(&self, ctx: &TtrpcContext, req: api::ExecProcessRequest) -> TtrpcResult<Empty> {
        let (id, exec_id) = (req.id.clone(), req.exec_id.clone());
        let stdio = Stdio {
            stdin: req.stdin.clone(),
            stdout: req.stdout.clone(),
            stderr: req.stderr.clone(),
        };
        let readers: Vec<OwnedFd> = [stdio.stdout.as_str(), stdio.stderr.as_str()]
            .into_iter()
            .filter_map(hold_fifo)
            .collect();
        let resp = self.api.exec(ctx, req).await?;
        if let Some(held) = self.held().get_mut(&id) {
            held.stdio.insert(exec_id.clone(), stdio);
            held.exec_fifo_readers.insert(exec_id.clone(), readers);
        }
        let mut e = ev::TaskExecAdded::new();
        e.container_id = id;
        e.exec_id = exec_id;
        self.events.publish(topics::TASK_EXEC_ADDED_EVENT_TOPIC, &e);
        Ok(resp)
    }

    async fn resize_pty(
        &self,
        ctx: &TtrpcContext,
        req: api::ResizePtyRequest,
    ) -> TtrpcResult<Empty> {
        self.api.resize_pty(ctx, req).await
    }

    async fn close_io(&self, ctx: &TtrpcContext, req: api::CloseIORequest) -> TtrpcResult<Empty> {
        self.api.close_io(ctx, req).await
    }

    async fn update(&self, ctx: &TtrpcContext, req: api::UpdateTaskRequest) -> TtrpcResult<Empty> {
        self.api.update(ctx, req).await
    }

    async fn wait(
        &self,
        ctx: &TtrpcContext,
        req: api::WaitRequest,
    ) -> TtrpcResult<api::WaitResponse> {
        if !req.exec_id.is_empty() {
            self.until_exec_started(&req.id, &req.exec_id).await;
        }
        self.api.wait(ctx, req).await
    }

    async fn stats(
        &self,
        _ctx: &TtrpcContext,
        req: api::StatsRequest,
    ) -> TtrpcResult<api::StatsResponse> {
        let kept = self.cgroups.lock_unpoisoned().get(&req.id).cloned();
        let dirs = match kept {
            Some(dirs) => Ok(dirs),
            // Started before its cgroups could be read (it exited at once), or not started.
            None => {
                let pid = self
                    .tasks
                    .task_pid(&req.id)
                    .ok_or(ShimError::ContainerNotFound { id: req.id.clone() })?;
                CgroupDirs::of_pid(pid, &self.cgroup_root)
            }
        };
        // NotFound (no process, no cgroup left) is what containerd skips quietly: it asks every
        // task, also one that exited and awaits its Delete.
        let any = dirs.and_then(|d| d.metrics_any()).map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                ShimError::ContainerNotFound { id: req.id.clone() }
            } else {
                ShimError::io(format!("cgroup stats of container {}", req.id), e)
            }
        })?;
        let mut resp = api::StatsResponse::new();
        resp.stats = MessageField::some(any);
        Ok(resp)
    }

    async fn connect(
        &self,
        ctx: &TtrpcContext,
        req: api::ConnectRequest,
    ) -> TtrpcResult<api::ConnectResponse> {
        self.api.connect(ctx, req).await
    }

    async fn shutdown(&self, _ctx: &TtrpcContext, req: api::ShutdownRequest) -> TtrpcResult<Empty> {
        // containerd asks after deleting each task; the pod's shim stays while it has others.
        match self.tasks.shutdown(req.now) {
            Ok(()) | Err(ShimError::FailedPrecondition(_)) => Ok(Empty::new()),
            Err(err) => Err(err.into()),
        }
    }
}

#[cfg(test)]
#[path = "task_tests.rs"]
mod tests;
