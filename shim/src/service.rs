//! The shim's ttrpc services: containerd's Task API for every container of the pod, and
//! peapod's small extension (log reopening).

use crate::oom_kill_counter::OomCounter;
use crate::reaper::Reaper;
use crate::runc::{Runc, RuncError};
use crate::stdio::{self, IoHandle};
use crate::Args;
use async_trait::async_trait;
use containerd_shim_protos::api;
use containerd_shim_protos::protobuf::well_known_types::empty::Empty;
use containerd_shim_protos::protobuf::well_known_types::timestamp::Timestamp;
use containerd_shim_protos::protobuf::{Message, MessageField};
use containerd_shim_protos::shim_async::{create_task, Task};
use containerd_shim_protos::types::task::{ProcessInfo, Status};
use peapod_shim::protocol::{self, CreateOptions, ExitRecord};
use peapod_shim::timefmt;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::sync::{oneshot, watch, Notify};
use ttrpc::asynchronous::{MethodHandler, Server, Service, TtrpcContext};
use ttrpc::{Code, Request, Response};

/// How long an exit waits for the process's output to be copied before it is reported anyway
/// (a daemonized grandchild may hold the pipe open forever).
const OUTPUT_DRAIN: Duration = Duration::from_secs(2);

type TtrpcResult<T> = ttrpc::Result<T>;

fn status(code: Code, msg: impl std::fmt::Display) -> ttrpc::Error {
    ttrpc::Error::RpcStatus(ttrpc::get_status(code, msg.to_string()))
}

fn runc_status(err: RuncError) -> ttrpc::Error {
    let code = if err.is_not_found() {
        Code::NOT_FOUND
    } else {
        Code::UNKNOWN
    };
    status(code, err)
}

fn timestamp(ns: i64) -> MessageField<Timestamp> {
    let mut ts = Timestamp::new();
    ts.seconds = ns.div_euclid(1_000_000_000);
    ts.nanos = ns.rem_euclid(1_000_000_000) as i32;
    MessageField::some(ts)
}

/// One exec'd process.
struct ExecProcess {
    request: api::ExecProcessRequest,
    pid: u32,
    exit: watch::Receiver<Option<(i32, i64)>>,
    io: Option<Arc<IoHandle>>,
}

/// One container of the pod.
struct Container {
    bundle: PathBuf,
    pid: u32,
    started: bool,
    paused: bool,
    terminal: bool,
    options: CreateOptions,
    exit: watch::Receiver<Option<ExitRecord>>,
    io: Arc<IoHandle>,
    stop_attach: watch::Sender<bool>,
    execs: HashMap<String, ExecProcess>,
}

impl Container {
    fn exited(&self) -> Option<ExitRecord> {
        *self.exit.borrow()
    }

    fn status(&self) -> Status {
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

pub struct Shim {
    args: Arc<Args>,
    runc: Runc,
    reaper: Arc<Reaper>,
    containers: Mutex<HashMap<String, Container>>,
    shutdown: Arc<Notify>,
    counter: AtomicU64,
}

impl Shim {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, Container>> {
        self.containers.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A short path for a console socket (unix socket paths are limited to 108 bytes).
    fn console_path(&self) -> PathBuf {
        let n = self.counter.fetch_add(1, Ordering::Relaxed);
        let dir = self.args.socket.parent().unwrap_or(Path::new("/tmp"));
        dir.join(format!("c{}-{n}", std::process::id()))
    }

    fn not_found(id: &str) -> ttrpc::Error {
        status(Code::NOT_FOUND, format!("container {id} not found"))
    }

    async fn create_container(&self, req: api::CreateTaskRequest) -> TtrpcResult<u32> {
        if req.id.is_empty() || req.bundle.is_empty() {
            return Err(status(Code::INVALID_ARGUMENT, "id and bundle are required"));
        }
        if self.lock().contains_key(&req.id) {
            return Err(status(
                Code::ALREADY_EXISTS,
                format!("container {} already exists", req.id),
            ));
        }
        let bundle = PathBuf::from(&req.bundle);
        let mut options = match req.options.as_ref() {
            Some(any) if any.type_url == protocol::CREATE_OPTIONS_TYPE_URL => {
                serde_json::from_slice::<CreateOptions>(&any.value)
                    .map_err(|e| status(Code::INVALID_ARGUMENT, format!("create options: {e}")))?
            }
            Some(any) => {
                return Err(status(
                    Code::INVALID_ARGUMENT,
                    format!("unknown create options type {}", any.type_url),
                ))
            }
            None => CreateOptions::default(),
        };
        if options.exit_file.is_empty() {
            options.exit_file = bundle.join("exit").to_string_lossy().into_owned();
        }
        if options.log_path.is_empty() && !req.stdout.is_empty() {
            options.log_path = req.stdout.clone();
        }
        let console = req.terminal.then(|| self.console_path());
        let prepared = stdio::prepare_init(
            &options.log_path,
            options.stdin,
            options.stdin_once,
            console.as_deref(),
        )
        .map_err(|e| status(Code::INTERNAL, format!("container stdio: {e}")))?;
        let pid_file = bundle.join("init.pid");
        let mut prepared = prepared;
        let process_io =
            std::mem::replace(&mut prepared.process_io, crate::runc::ProcessIo::null());
        let console_path = prepared.console.as_ref().map(|c| c.path().to_path_buf());
        if let Err(err) = self
            .runc
            .create(
                &req.id,
                &bundle,
                &pid_file,
                console_path.as_deref(),
                process_io,
                options.start,
            )
            .await
        {
            let _ = self.runc.delete(&req.id, true).await;
            return Err(status(Code::UNKNOWN, err));
        }
        let pid = match std::fs::read_to_string(&pid_file)
            .ok()
            .and_then(|s| s.trim().parse::<u32>().ok())
        {
            Some(pid) => pid,
            None => {
                let _ = self.runc.delete(&req.id, true).await;
                return Err(status(Code::INTERNAL, "the runtime wrote no pid file"));
            }
        };
        let exit_code = self.reaper.subscribe(pid);
        let oom = OomCounter::for_pid(pid, Path::new("/sys/fs/cgroup"));
        let io = match prepared.start().await {
            Ok(io) => io,
            Err(err) => {
                let _ = self.runc.delete(&req.id, true).await;
                return Err(status(Code::INTERNAL, format!("container stdio: {err}")));
            }
        };
        let (stop_attach, stop_rx) = watch::channel(false);
        if !options.attach_socket.is_empty() {
            if let Err(err) =
                stdio::serve_attach(Path::new(&options.attach_socket), io.clone(), stop_rx)
            {
                let _ = self.runc.delete(&req.id, true).await;
                return Err(status(Code::INTERNAL, format!("attach socket: {err}")));
            }
        }
        let (exit_tx, exit_rx) = watch::channel(None);
        // The exit is recorded durably before it is reported.
        let exit_file = PathBuf::from(&options.exit_file);
        let io_for_exit = io.clone();
        tokio::spawn(async move {
            let code = exit_code.await.unwrap_or(255);
            let exited_at_ns = timefmt::now_ns();
            let _ = tokio::time::timeout(OUTPUT_DRAIN, io_for_exit.wait_output_done()).await;
            io_for_exit.close_output();
            let record = ExitRecord {
                pid,
                exit_code: code,
                exited_at_ns,
                oom_killed: oom.as_ref().is_some_and(|o| o.fired()),
            };
            if let Err(err) = record.write(&exit_file) {
                eprintln!(
                    "peapod-shim: recording the exit in {}: {err}",
                    exit_file.display()
                );
            }
            let _ = exit_tx.send(Some(record));
        });
        self.lock().insert(
            req.id.clone(),
            Container {
                bundle,
                pid,
                started: options.start,
                paused: false,
                terminal: req.terminal,
                options,
                exit: exit_rx,
                io,
                stop_attach,
                execs: HashMap::new(),
            },
        );
        Ok(pid)
    }

    async fn start_exec(&self, id: &str, exec_id: &str) -> TtrpcResult<u32> {
        let (request, bundle) = {
            let containers = self.lock();
            let c = containers.get(id).ok_or_else(|| Self::not_found(id))?;
            let e = c.execs.get(exec_id).ok_or_else(|| {
                status(Code::NOT_FOUND, format!("exec {exec_id} not found in {id}"))
            })?;
            if e.pid != 0 {
                return Err(status(
                    Code::FAILED_PRECONDITION,
                    format!("exec {exec_id} already started"),
                ));
            }
            if c.exited().is_some() {
                return Err(status(
                    Code::FAILED_PRECONDITION,
                    format!("container {id} is not running"),
                ));
            }
            (e.request.clone(), c.bundle.clone())
        };
        let spec = request
            .spec
            .as_ref()
            .map(|a| a.value.clone())
            .unwrap_or_default();
        let process_json = bundle.join(format!("exec-{exec_id}.json"));
        let pid_file = bundle.join(format!("exec-{exec_id}.pid"));
        std::fs::write(&process_json, &spec)
            .map_err(|e| status(Code::INTERNAL, format!("write exec process spec: {e}")))?;
        let console = request.terminal.then(|| self.console_path());
        let cleanup = |p: &Path, q: &Path| {
            let _ = std::fs::remove_file(p);
            let _ = std::fs::remove_file(q);
        };
        let mut prepared = match stdio::prepare_exec(
            &request.stdin,
            &request.stdout,
            &request.stderr,
            console.as_deref(),
        ) {
            Ok(p) => p,
            Err(e) => {
                cleanup(&process_json, &pid_file);
                return Err(status(Code::INTERNAL, format!("exec stdio: {e}")));
            }
        };
        let process_io =
            std::mem::replace(&mut prepared.process_io, crate::runc::ProcessIo::null());
        let console_path = prepared.console.as_ref().map(|c| c.path().to_path_buf());
        let result = self
            .runc
            .exec(
                id,
                &process_json,
                &pid_file,
                console_path.as_deref(),
                process_io,
            )
            .await;
        let pid = std::fs::read_to_string(&pid_file)
            .ok()
            .and_then(|s| s.trim().parse::<u32>().ok());
        cleanup(&process_json, &pid_file);
        if let Err(err) = result {
            return Err(status(Code::UNKNOWN, err));
        }
        let pid =
            pid.ok_or_else(|| status(Code::INTERNAL, "the runtime wrote no exec pid file"))?;
        let exit_code = self.reaper.subscribe(pid);
        let io = prepared.start().await.ok();
        let (exit_tx, exit_rx) = watch::channel(None);
        let io_for_exit = io.clone();
        tokio::spawn(async move {
            let code = exit_code.await.unwrap_or(255);
            let at = timefmt::now_ns();
            if let Some(io) = io_for_exit {
                let _ = tokio::time::timeout(OUTPUT_DRAIN, io.wait_output_done()).await;
            }
            let _ = exit_tx.send(Some((code, at)));
        });
        let mut containers = self.lock();
        if let Some(e) = containers
            .get_mut(id)
            .and_then(|c| c.execs.get_mut(exec_id))
        {
            e.pid = pid;
            e.exit = exit_rx;
            e.io = io;
        }
        Ok(pid)
    }

    fn exec_exit(
        &self,
        id: &str,
        exec_id: &str,
    ) -> TtrpcResult<watch::Receiver<Option<(i32, i64)>>> {
        let containers = self.lock();
        let c = containers.get(id).ok_or_else(|| Self::not_found(id))?;
        let e = c
            .execs
            .get(exec_id)
            .ok_or_else(|| status(Code::NOT_FOUND, format!("exec {exec_id} not found in {id}")))?;
        Ok(e.exit.clone())
    }

    fn io_of(&self, id: &str, exec_id: &str) -> TtrpcResult<Arc<IoHandle>> {
        let containers = self.lock();
        let c = containers.get(id).ok_or_else(|| Self::not_found(id))?;
        if exec_id.is_empty() {
            return Ok(c.io.clone());
        }
        c.execs
            .get(exec_id)
            .and_then(|e| e.io.clone())
            .ok_or_else(|| {
                status(
                    Code::NOT_FOUND,
                    format!("exec {exec_id} has no stdio in {id}"),
                )
            })
    }
}

/// Kills a process and, for SIGKILL, everything it started (an exec'd shell's children would
/// otherwise outlive a timed-out exec).
fn kill_tree(pid: u32, signal: i32) {
    if signal == libc::SIGKILL {
        for child in children_of(pid) {
            kill_tree(child, signal);
        }
    }
    // SAFETY: kill has no memory-safety preconditions.
    unsafe { libc::kill(pid as i32, signal) };
}

fn children_of(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return out;
    };
    for task in tasks.flatten() {
        if let Ok(text) = std::fs::read_to_string(task.path().join("children")) {
            out.extend(
                text.split_whitespace()
                    .filter_map(|p| p.parse::<u32>().ok()),
            );
        }
    }
    out
}

#[async_trait]
impl Task for Shim {
    async fn create(
        &self,
        _ctx: &TtrpcContext,
        req: api::CreateTaskRequest,
    ) -> TtrpcResult<api::CreateTaskResponse> {
        let pid = self.create_container(req).await?;
        let mut resp = api::CreateTaskResponse::new();
        resp.pid = pid;
        Ok(resp)
    }

    async fn start(
        &self,
        _ctx: &TtrpcContext,
        req: api::StartRequest,
    ) -> TtrpcResult<api::StartResponse> {
        let mut resp = api::StartResponse::new();
        if !req.exec_id.is_empty() {
            resp.pid = self.start_exec(&req.id, &req.exec_id).await?;
            return Ok(resp);
        }
        let pid = {
            let containers = self.lock();
            let c = containers
                .get(&req.id)
                .ok_or_else(|| Self::not_found(&req.id))?;
            if c.options.start {
                // Created with `run`: already started; Start only reports the pid.
                resp.pid = c.pid;
                return Ok(resp);
            }
            if c.started || c.exited().is_some() {
                return Err(status(
                    Code::FAILED_PRECONDITION,
                    format!("container {} was already started", req.id),
                ));
            }
            c.pid
        };
        self.runc.start(&req.id).await.map_err(runc_status)?;
        if let Some(c) = self.lock().get_mut(&req.id) {
            c.started = true;
        }
        resp.pid = pid;
        Ok(resp)
    }

    async fn state(
        &self,
        _ctx: &TtrpcContext,
        req: api::StateRequest,
    ) -> TtrpcResult<api::StateResponse> {
        let containers = self.lock();
        let c = containers
            .get(&req.id)
            .ok_or_else(|| Self::not_found(&req.id))?;
        let mut resp = api::StateResponse::new();
        resp.id = req.id.clone();
        resp.bundle = c.bundle.to_string_lossy().into_owned();
        if req.exec_id.is_empty() {
            resp.pid = c.pid;
            resp.status = c.status().into();
            resp.terminal = c.terminal;
            resp.stdout = c.options.log_path.clone();
            if let Some(exit) = c.exited() {
                resp.exit_status = exit.exit_code as u32;
                resp.exited_at = timestamp(exit.exited_at_ns);
            }
        } else {
            let e = c.execs.get(&req.exec_id).ok_or_else(|| {
                status(
                    Code::NOT_FOUND,
                    format!("exec {} not found in {}", req.exec_id, req.id),
                )
            })?;
            resp.exec_id = req.exec_id.clone();
            resp.pid = e.pid;
            resp.terminal = e.request.terminal;
            let exit = *e.exit.borrow();
            resp.status = match (e.pid, exit) {
                (_, Some((code, at))) => {
                    resp.exit_status = code as u32;
                    resp.exited_at = timestamp(at);
                    Status::STOPPED
                }
                (0, None) => Status::CREATED,
                _ => Status::RUNNING,
            }
            .into();
        }
        Ok(resp)
    }

    async fn delete(
        &self,
        _ctx: &TtrpcContext,
        req: api::DeleteRequest,
    ) -> TtrpcResult<api::DeleteResponse> {
        let mut resp = api::DeleteResponse::new();
        if !req.exec_id.is_empty() {
            let mut containers = self.lock();
            let c = containers
                .get_mut(&req.id)
                .ok_or_else(|| Self::not_found(&req.id))?;
            let e = c.execs.remove(&req.exec_id).ok_or_else(|| {
                status(
                    Code::NOT_FOUND,
                    format!("exec {} not found in {}", req.exec_id, req.id),
                )
            })?;
            let exit = *e.exit.borrow();
            if e.pid != 0 && exit.is_none() {
                kill_tree(e.pid, libc::SIGKILL);
            }
            resp.pid = e.pid;
            if let Some((code, at)) = exit {
                resp.exit_status = code as u32;
                resp.exited_at = timestamp(at);
            }
            return Ok(resp);
        }
        let mut exit = {
            let containers = self.lock();
            let c = containers
                .get(&req.id)
                .ok_or_else(|| Self::not_found(&req.id))?;
            if c.started && c.exited().is_none() {
                return Err(status(
                    Code::FAILED_PRECONDITION,
                    format!("container {} is running; kill it first", req.id),
                ));
            }
            c.exit.clone()
        };
        if let Err(err) = self.runc.delete(&req.id, true).await {
            if !err.is_not_found() {
                return Err(status(Code::UNKNOWN, err));
            }
        }
        // A created-but-never-started init is killed by the delete; wait for its record.
        let record = tokio::time::timeout(Duration::from_secs(10), exit.wait_for(|e| e.is_some()))
            .await
            .ok()
            .and_then(|r| r.ok().and_then(|e| *e));
        if let Some(c) = self.lock().remove(&req.id) {
            let _ = c.stop_attach.send(true);
            c.io.close_output();
            resp.pid = c.pid;
        }
        if let Some(record) = record {
            resp.exit_status = record.exit_code as u32;
            resp.exited_at = timestamp(record.exited_at_ns);
        }
        Ok(resp)
    }

    async fn pids(
        &self,
        _ctx: &TtrpcContext,
        req: api::PidsRequest,
    ) -> TtrpcResult<api::PidsResponse> {
        let pids = self.runc.ps(&req.id).await.map_err(runc_status)?;
        let mut resp = api::PidsResponse::new();
        resp.processes = pids
            .into_iter()
            .map(|pid| {
                let mut p = ProcessInfo::new();
                p.pid = pid;
                p
            })
            .collect();
        Ok(resp)
    }

    async fn pause(&self, _ctx: &TtrpcContext, req: api::PauseRequest) -> TtrpcResult<Empty> {
        self.runc.pause(&req.id).await.map_err(runc_status)?;
        if let Some(c) = self.lock().get_mut(&req.id) {
            c.paused = true;
        }
        Ok(Empty::new())
    }

    async fn resume(&self, _ctx: &TtrpcContext, req: api::ResumeRequest) -> TtrpcResult<Empty> {
        self.runc.resume(&req.id).await.map_err(runc_status)?;
        if let Some(c) = self.lock().get_mut(&req.id) {
            c.paused = false;
        }
        Ok(Empty::new())
    }

    async fn kill(&self, _ctx: &TtrpcContext, req: api::KillRequest) -> TtrpcResult<Empty> {
        if !req.exec_id.is_empty() {
            let pid = {
                let containers = self.lock();
                let c = containers
                    .get(&req.id)
                    .ok_or_else(|| Self::not_found(&req.id))?;
                let e = c.execs.get(&req.exec_id).ok_or_else(|| {
                    status(
                        Code::NOT_FOUND,
                        format!("exec {} not found in {}", req.exec_id, req.id),
                    )
                })?;
                if e.exit.borrow().is_some() || e.pid == 0 {
                    return Ok(Empty::new());
                }
                e.pid
            };
            kill_tree(pid, req.signal as i32);
            return Ok(Empty::new());
        }
        {
            let containers = self.lock();
            let c = containers
                .get(&req.id)
                .ok_or_else(|| Self::not_found(&req.id))?;
            if c.exited().is_some() {
                return Ok(Empty::new());
            }
        }
        match self.runc.kill(&req.id, req.signal, req.all).await {
            Ok(()) => Ok(Empty::new()),
            Err(err) if err.is_not_running() => Ok(Empty::new()),
            Err(err) => Err(runc_status(err)),
        }
    }

    async fn exec(&self, _ctx: &TtrpcContext, req: api::ExecProcessRequest) -> TtrpcResult<Empty> {
        if req.exec_id.is_empty() {
            return Err(status(Code::INVALID_ARGUMENT, "exec_id is required"));
        }
        match req.spec.as_ref() {
            Some(any) if any.type_url == protocol::PROCESS_TYPE_URL => {}
            _ => {
                return Err(status(
                    Code::INVALID_ARGUMENT,
                    format!("spec must be a {}", protocol::PROCESS_TYPE_URL),
                ))
            }
        }
        let mut containers = self.lock();
        let c = containers
            .get_mut(&req.id)
            .ok_or_else(|| Self::not_found(&req.id))?;
        if c.exited().is_some() || !c.started {
            return Err(status(
                Code::FAILED_PRECONDITION,
                format!("container {} is not running", req.id),
            ));
        }
        if c.execs.contains_key(&req.exec_id) {
            return Err(status(
                Code::ALREADY_EXISTS,
                format!("exec {} already exists in {}", req.exec_id, req.id),
            ));
        }
        let (_, exit) = watch::channel(None);
        c.execs.insert(
            req.exec_id.clone(),
            ExecProcess {
                request: req,
                pid: 0,
                exit,
                io: None,
            },
        );
        Ok(Empty::new())
    }

    async fn resize_pty(
        &self,
        _ctx: &TtrpcContext,
        req: api::ResizePtyRequest,
    ) -> TtrpcResult<Empty> {
        let io = self.io_of(&req.id, &req.exec_id)?;
        let clamp = |v: u32| v.min(u16::MAX as u32) as u16;
        io.resize(clamp(req.width), clamp(req.height))
            .map_err(|e| status(Code::FAILED_PRECONDITION, e))?;
        Ok(Empty::new())
    }

    async fn close_io(&self, _ctx: &TtrpcContext, req: api::CloseIORequest) -> TtrpcResult<Empty> {
        if req.stdin {
            self.io_of(&req.id, &req.exec_id)?.close_stdin().await;
        }
        Ok(Empty::new())
    }

    async fn update(&self, _ctx: &TtrpcContext, req: api::UpdateTaskRequest) -> TtrpcResult<Empty> {
        let bundle = {
            let containers = self.lock();
            containers
                .get(&req.id)
                .ok_or_else(|| Self::not_found(&req.id))?
                .bundle
                .clone()
        };
        let Some(any) = req.resources.as_ref() else {
            return Err(status(Code::INVALID_ARGUMENT, "resources are required"));
        };
        if any.type_url != protocol::RESOURCES_TYPE_URL {
            return Err(status(
                Code::INVALID_ARGUMENT,
                format!("resources must be a {}", protocol::RESOURCES_TYPE_URL),
            ));
        }
        let file = bundle.join("update-resources.json");
        std::fs::write(&file, &any.value)
            .map_err(|e| status(Code::INTERNAL, format!("write resources: {e}")))?;
        let result = self.runc.update(&req.id, &file).await;
        let _ = std::fs::remove_file(&file);
        result.map_err(runc_status)?;
        Ok(Empty::new())
    }

    async fn wait(
        &self,
        _ctx: &TtrpcContext,
        req: api::WaitRequest,
    ) -> TtrpcResult<api::WaitResponse> {
        let mut resp = api::WaitResponse::new();
        if !req.exec_id.is_empty() {
            let mut exit = self.exec_exit(&req.id, &req.exec_id)?;
            let (code, at) = match exit.wait_for(|e| e.is_some()).await {
                Ok(e) => e.unwrap_or((255, 0)),
                Err(_) => return Err(status(Code::NOT_FOUND, "exec was removed")),
            };
            resp.exit_status = code as u32;
            resp.exited_at = timestamp(at);
            return Ok(resp);
        }
        let mut exit = {
            let containers = self.lock();
            containers
                .get(&req.id)
                .ok_or_else(|| Self::not_found(&req.id))?
                .exit
                .clone()
        };
        let record = match exit.wait_for(|e| e.is_some()).await {
            Ok(e) => *e,
            Err(_) => None,
        };
        let record = record.ok_or_else(|| status(Code::NOT_FOUND, "container was removed"))?;
        resp.exit_status = record.exit_code as u32;
        resp.exited_at = timestamp(record.exited_at_ns);
        Ok(resp)
    }

    async fn connect(
        &self,
        _ctx: &TtrpcContext,
        req: api::ConnectRequest,
    ) -> TtrpcResult<api::ConnectResponse> {
        let mut resp = api::ConnectResponse::new();
        resp.shim_pid = std::process::id();
        resp.version = env!("CARGO_PKG_VERSION").to_string();
        if let Some(c) = self.lock().get(&req.id) {
            resp.task_pid = c.pid;
        }
        Ok(resp)
    }

    async fn shutdown(&self, _ctx: &TtrpcContext, req: api::ShutdownRequest) -> TtrpcResult<Empty> {
        if !req.now && !self.lock().is_empty() {
            return Err(status(
                Code::FAILED_PRECONDITION,
                "the shim still has containers; delete them first",
            ));
        }
        self.shutdown.notify_one();
        Ok(Empty::new())
    }
}

/// `peapod.shim.v1.Shim/ReopenLog`.
struct ReopenLog {
    shim: Arc<Shim>,
}

#[async_trait]
impl MethodHandler for ReopenLog {
    async fn handler(&self, _ctx: TtrpcContext, req: Request) -> TtrpcResult<Response> {
        let request = api::StateRequest::parse_from_bytes(&req.payload)
            .map_err(|e| status(Code::INVALID_ARGUMENT, format!("decode request: {e}")))?;
        let io = self.shim.io_of(&request.id, "")?;
        let Some(log) = io.log.as_ref() else {
            return Err(status(
                Code::FAILED_PRECONDITION,
                format!("container {} has no log file", request.id),
            ));
        };
        {
            let mut log = log.lock().unwrap_or_else(|p| p.into_inner());
            log.reopen()
                .map_err(|e| status(Code::INTERNAL, format!("reopen log: {e}")))?;
        }
        let mut resp = Response::new();
        resp.payload = Empty::new()
            .write_to_bytes()
            .map_err(|e| status(Code::INTERNAL, e))?;
        Ok(resp)
    }
}

/// Serves until Shutdown.
pub async fn run(args: Arc<Args>) -> Result<(), String> {
    let reaper = Reaper::start().map_err(|e| format!("cannot watch SIGCHLD: {e}"))?;
    std::fs::create_dir_all(&args.runtime_root)
        .map_err(|e| format!("create {}: {e}", args.runtime_root.display()))?;
    let shutdown = Arc::new(Notify::new());
    let shim = Arc::new(Shim {
        runc: Runc::new(
            args.runtime.clone(),
            args.runtime_root.clone(),
            reaper.clone(),
        ),
        args: args.clone(),
        reaper,
        containers: Mutex::new(HashMap::new()),
        shutdown: shutdown.clone(),
        counter: AtomicU64::new(0),
    });
    let mut services = create_task(shim.clone());
    let mut methods: HashMap<String, Box<dyn MethodHandler + Send + Sync>> = HashMap::new();
    methods.insert(
        protocol::METHOD_REOPEN_LOG.to_string(),
        Box::new(ReopenLog { shim: shim.clone() }),
    );
    services.insert(
        protocol::EXTENSION_SERVICE.to_string(),
        Service {
            methods,
            streams: HashMap::new(),
        },
    );
    let _ = std::fs::remove_file(&args.socket);
    let address = format!("unix://{}", args.socket.display());
    let mut server = Server::new()
        .bind(&address)
        .map_err(|e| format!("bind {address}: {e}"))?
        .register_service(services);
    server.start().await.map_err(|e| format!("serve: {e}"))?;
    // Exit when asked to, or when SIGTERM arrives (containers keep running in that case: their
    // exits are then recorded by nobody, which is why the daemon only ever sends Shutdown).
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|e| format!("watch SIGTERM: {e}"))?;
    let (done_tx, done_rx) = oneshot::channel::<()>();
    tokio::spawn(async move {
        tokio::select! {
            _ = shutdown.notified() => {}
            _ = term.recv() => {}
        }
        let _ = done_tx.send(());
    });
    let _ = done_rx.await;
    // Let the Shutdown reply reach the client before the socket goes away.
    tokio::time::sleep(Duration::from_millis(20)).await;
    let _ = server.shutdown().await;
    let _ = std::fs::remove_file(&args.socket);
    Ok(())
}
