//! Talking to the per-pod `peapod-shim`: the Task API as the daemon uses it ([`Shim`]),
//! starting and finding a pod's shim ([`Shims`]), and their real implementations over ttrpc
//! ([`ShimClient`], [`ShimManager`]). The lifecycle code sees only the traits, so its unit
//! tests run against fakes (`crate::testing`).

use crate::error::{Code, Error, Result};
use crate::ids;
use async_trait::async_trait;
use containerd_shim_protos::api;
use containerd_shim_protos::protobuf::well_known_types::any::Any;
use containerd_shim_protos::protobuf::{Message, MessageField};
use containerd_shim_protos::shim_async::{Client, TaskClient};
use peapod_shim::protocol::{self, CreateOptions};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use ttrpc::context::{self, Context};

/// Deadline of ordinary shim calls (runtime commands have their own, shorter, in the shim).
const CALL_TIMEOUT: Duration = Duration::from_secs(90);

fn ctx(timeout: Option<Duration>) -> Context {
    context::with_timeout(timeout.map_or(0, |t| t.as_nanos() as i64))
}

fn map_err(what: &str, err: ttrpc::Error) -> Error {
    let (code, message) = match &err {
        ttrpc::Error::RpcStatus(s) => {
            let code = match s.code() {
                ttrpc::Code::NOT_FOUND => Code::NotFound,
                ttrpc::Code::INVALID_ARGUMENT => Code::InvalidArgument,
                ttrpc::Code::ALREADY_EXISTS => Code::AlreadyExists,
                ttrpc::Code::FAILED_PRECONDITION => Code::FailedPrecondition,
                ttrpc::Code::DEADLINE_EXCEEDED => Code::DeadlineExceeded,
                _ => Code::Internal,
            };
            (code, s.message().to_string())
        }
        other => (Code::Internal, other.to_string()),
    };
    // What the shim refused (a missing task, a bad request) reads as the client's error; a
    // failure of the shim itself says so.
    let prefix = if code == Code::Internal { "shim: " } else { "" };
    Error::new(code, format!("{prefix}{what}: {message}")).with_cause(err)
}

/// One pod's shim: the calls of the Task API the daemon makes. `exec_id` is empty for a
/// container's own process.
#[async_trait]
pub trait Shim: Send + Sync {
    /// Creates a container (its pid); with `options.start` it is started too.
    async fn create(
        &self,
        id: &str,
        bundle: &Path,
        terminal: bool,
        options: &CreateOptions,
    ) -> Result<u32>;
    async fn start(&self, id: &str, exec_id: &str) -> Result<u32>;
    async fn kill(&self, id: &str, exec_id: &str, signal: u32, all: bool) -> Result<()>;
    async fn delete(&self, id: &str, exec_id: &str) -> Result<Exit>;
    /// Waits (without deadline) for the process to exit.
    async fn wait(&self, id: &str, exec_id: &str) -> Result<Exit>;
    async fn state(&self, id: &str, exec_id: &str) -> Result<ProcessState>;
    /// Registers an exec'd process (started with `start(id, exec_id)`).
    async fn exec(&self, id: &str, exec_id: &str, process_json: Vec<u8>, io: &ExecIo)
        -> Result<()>;
    async fn update(&self, id: &str, resources_json: Vec<u8>) -> Result<()>;
    async fn resize(&self, id: &str, exec_id: &str, width: u32, height: u32) -> Result<()>;
    /// peapod's extension: reopen a container's log file after rotation.
    async fn reopen_log(&self, id: &str) -> Result<()>;
    /// Shuts the shim down and returns once its process has exited, so that callers (and
    /// tests) never see a shim that is still on its way out.
    async fn shutdown_and_wait(&self) -> Result<()>;
}

/// Where an exec'd process's stdio goes (FIFO paths; empty for none).
#[derive(Debug, Clone, Default)]
pub struct ExecIo {
    pub terminal: bool,
    pub stdin: String,
    pub stdout: String,
    pub stderr: String,
}

/// Starting pods' shims and finding them again (after a daemon restart too).
#[async_trait]
pub trait Shims: Send + Sync {
    /// Starts the pod's shim, which serves once this returns.
    async fn start(&self, sandbox_id: &str, log: &Path) -> Result<Arc<dyn Shim>>;
    /// The pod's shim, connecting to it if this daemon has not yet.
    async fn get(&self, sandbox_id: &str) -> Result<Arc<dyn Shim>>;
    /// Drops the connection to a pod's shim (after it was shut down).
    fn forget(&self, sandbox_id: &str);
    /// The pod shim's socket.
    fn socket_path(&self, sandbox_id: &str) -> PathBuf;
    /// Where a container's attach socket goes.
    fn attach_socket_path(&self, container_id: &str) -> PathBuf;
}

/// An exit as the shim reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Exit {
    pub code: u32,
    pub at_ns: i64,
}

fn exit_of(
    status: u32,
    at: &MessageField<containerd_shim_protos::protobuf::well_known_types::timestamp::Timestamp>,
) -> Exit {
    let at_ns = at
        .as_ref()
        .map(|t| t.seconds * 1_000_000_000 + i64::from(t.nanos))
        .unwrap_or(0);
    Exit {
        code: status,
        at_ns,
    }
}

/// A connection to one shim.
pub struct ShimClient {
    raw: Client,
    task: TaskClient,
    pub socket: PathBuf,
}

/// What `state` reports about a process.
#[derive(Debug, Clone)]
pub struct ProcessState {
    pub pid: u32,
    pub status: containerd_shim_protos::types::task::Status,
    pub exit: Option<Exit>,
}

impl ShimClient {
    pub async fn connect(socket: &Path) -> Result<ShimClient> {
        let raw = Client::connect(&format!("unix://{}", socket.display()))
            .await
            .map_err(|e| {
                Error::caused(
                    Code::Internal,
                    format_args!("shim: connect {}", socket.display()),
                    e,
                )
            })?;
        Ok(ShimClient {
            task: TaskClient::new(raw.clone()),
            raw,
            socket: socket.to_path_buf(),
        })
    }

    /// The shim's pid (Connect).
    async fn shim_pid(&self) -> Result<u32> {
        let req = api::ConnectRequest::new();
        let resp = self
            .task
            .connect(ctx(Some(CALL_TIMEOUT)), &req)
            .await
            .map_err(|e| map_err("connect", e))?;
        Ok(resp.shim_pid)
    }

    async fn shutdown(&self, now: bool) -> Result<()> {
        let mut req = api::ShutdownRequest::new();
        req.now = now;
        match self.task.shutdown(ctx(Some(CALL_TIMEOUT)), &req).await {
            Ok(_) => Ok(()),
            // The shim may close the connection as it exits.
            Err(ttrpc::Error::Socket(_))
            | Err(ttrpc::Error::LocalClosed)
            | Err(ttrpc::Error::RemoteClosed) => Ok(()),
            Err(e) => Err(map_err("shutdown", e)),
        }
    }
}

#[async_trait]
impl Shim for ShimClient {
    async fn create(
        &self,
        id: &str,
        bundle: &Path,
        terminal: bool,
        options: &CreateOptions,
    ) -> Result<u32> {
        let mut req = api::CreateTaskRequest::new();
        req.id = id.to_string();
        req.bundle = bundle.to_string_lossy().into_owned();
        req.terminal = terminal;
        req.stdout = options.log_path.clone();
        let mut any = Any::new();
        any.type_url = protocol::CREATE_OPTIONS_TYPE_URL.into();
        any.value = serde_json::to_vec(options).map_err(|e| Error::internal(e.to_string()))?;
        req.options = MessageField::some(any);
        let resp = self
            .task
            .create(ctx(Some(CALL_TIMEOUT)), &req)
            .await
            .map_err(|e| map_err("create", e))?;
        Ok(resp.pid)
    }

    async fn start(&self, id: &str, exec_id: &str) -> Result<u32> {
        let mut req = api::StartRequest::new();
        req.id = id.into();
        req.exec_id = exec_id.into();
        let resp = self
            .task
            .start(ctx(Some(CALL_TIMEOUT)), &req)
            .await
            .map_err(|e| map_err("start", e))?;
        Ok(resp.pid)
    }

    async fn kill(&self, id: &str, exec_id: &str, signal: u32, all: bool) -> Result<()> {
        let mut req = api::KillRequest::new();
        req.id = id.into();
        req.exec_id = exec_id.into();
        req.signal = signal;
        req.all = all;
        self.task
            .kill(ctx(Some(CALL_TIMEOUT)), &req)
            .await
            .map_err(|e| map_err("kill", e))?;
        Ok(())
    }

    async fn delete(&self, id: &str, exec_id: &str) -> Result<Exit> {
        let mut req = api::DeleteRequest::new();
        req.id = id.into();
        req.exec_id = exec_id.into();
        let resp = self
            .task
            .delete(ctx(Some(CALL_TIMEOUT)), &req)
            .await
            .map_err(|e| map_err("delete", e))?;
        Ok(exit_of(resp.exit_status, &resp.exited_at))
    }

    /// Waits (without deadline) for the process to exit.
    async fn wait(&self, id: &str, exec_id: &str) -> Result<Exit> {
        let mut req = api::WaitRequest::new();
        req.id = id.into();
        req.exec_id = exec_id.into();
        let resp = self
            .task
            .wait(ctx(None), &req)
            .await
            .map_err(|e| map_err("wait", e))?;
        Ok(exit_of(resp.exit_status, &resp.exited_at))
    }

    async fn state(&self, id: &str, exec_id: &str) -> Result<ProcessState> {
        let mut req = api::StateRequest::new();
        req.id = id.into();
        req.exec_id = exec_id.into();
        let resp = self
            .task
            .state(ctx(Some(CALL_TIMEOUT)), &req)
            .await
            .map_err(|e| map_err("state", e))?;
        let status = resp.status.enum_value_or_default();
        let exit = (status == containerd_shim_protos::types::task::Status::STOPPED)
            .then(|| exit_of(resp.exit_status, &resp.exited_at));
        Ok(ProcessState {
            pid: resp.pid,
            status,
            exit,
        })
    }

    async fn exec(
        &self,
        id: &str,
        exec_id: &str,
        process_json: Vec<u8>,
        io: &ExecIo,
    ) -> Result<()> {
        let mut req = api::ExecProcessRequest::new();
        req.id = id.into();
        req.exec_id = exec_id.into();
        req.terminal = io.terminal;
        req.stdin = io.stdin.clone();
        req.stdout = io.stdout.clone();
        req.stderr = io.stderr.clone();
        let mut any = Any::new();
        any.type_url = protocol::PROCESS_TYPE_URL.into();
        any.value = process_json;
        req.spec = MessageField::some(any);
        self.task
            .exec(ctx(Some(CALL_TIMEOUT)), &req)
            .await
            .map_err(|e| map_err("exec", e))?;
        Ok(())
    }

    async fn update(&self, id: &str, resources_json: Vec<u8>) -> Result<()> {
        let mut req = api::UpdateTaskRequest::new();
        req.id = id.into();
        let mut any = Any::new();
        any.type_url = protocol::RESOURCES_TYPE_URL.into();
        any.value = resources_json;
        req.resources = MessageField::some(any);
        self.task
            .update(ctx(Some(CALL_TIMEOUT)), &req)
            .await
            .map_err(|e| map_err("update", e))?;
        Ok(())
    }

    async fn resize(&self, id: &str, exec_id: &str, width: u32, height: u32) -> Result<()> {
        let mut req = api::ResizePtyRequest::new();
        req.id = id.into();
        req.exec_id = exec_id.into();
        req.width = width;
        req.height = height;
        self.task
            .resize_pty(ctx(Some(CALL_TIMEOUT)), &req)
            .await
            .map_err(|e| map_err("resize", e))?;
        Ok(())
    }

    /// peapod's extension: reopen a container's log file after rotation.
    async fn reopen_log(&self, id: &str) -> Result<()> {
        let mut body = api::StateRequest::new();
        body.id = id.into();
        let mut req = ttrpc::Request::new();
        req.service = protocol::EXTENSION_SERVICE.into();
        req.method = protocol::METHOD_REOPEN_LOG.into();
        req.timeout_nano = CALL_TIMEOUT.as_nanos() as i64;
        req.payload = body
            .write_to_bytes()
            .map_err(|e| Error::internal(e.to_string()))?;
        let resp = self
            .raw
            .request(req)
            .await
            .map_err(|e| map_err("reopen log", e))?;
        if let Some(status) = resp.status.as_ref() {
            if status.code() != ttrpc::Code::OK {
                return Err(map_err(
                    "reopen log",
                    ttrpc::Error::RpcStatus(status.clone()),
                ));
            }
        }
        Ok(())
    }

    /// Shuts the shim down and returns once its process has exited, so that callers (and
    /// tests) never see a shim that is still on its way out.
    async fn shutdown_and_wait(&self) -> Result<()> {
        let pidfd = match self.shim_pid().await {
            Ok(pid) => pidfd_open(pid).ok(),
            Err(_) => None,
        };
        self.shutdown(true).await?;
        if let Some(fd) = pidfd {
            if tokio::time::timeout(SHIM_EXIT_TIMEOUT, wait_readable(fd))
                .await
                .is_err()
            {
                return Err(Error::internal(format!(
                    "shim: the shim at {} did not exit within {SHIM_EXIT_TIMEOUT:?} of Shutdown",
                    self.socket.display()
                )));
            }
        }
        Ok(())
    }
}

/// How long a shim may take to exit after Shutdown.
const SHIM_EXIT_TIMEOUT: Duration = Duration::from_secs(10);

/// A pidfd for `pid`: readable once the process has exited.
fn pidfd_open(pid: u32) -> std::io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: fd is a fresh descriptor owned by nobody else.
    Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd as i32) })
}

async fn wait_readable(fd: std::os::fd::OwnedFd) {
    // SAFETY: the OwnedFd moves into the AsyncFd and stays open for its whole life.
    let Ok(afd) = (unsafe {
        tokio::io::unix::AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE)
    }) else {
        return;
    };
    let _ = afd.readable().await;
}

/// Starts shims and keeps one connection per pod.
pub struct ShimManager {
    binary: PathBuf,
    runtime: String,
    runtime_root: PathBuf,
    socket_dir: PathBuf,
    clients: Mutex<HashMap<String, Arc<dyn Shim>>>,
}

impl ShimManager {
    pub fn new(
        binary: PathBuf,
        runtime: String,
        runtime_root: PathBuf,
        socket_dir: PathBuf,
    ) -> ShimManager {
        ShimManager {
            binary,
            runtime,
            runtime_root,
            socket_dir,
            clients: Mutex::new(HashMap::new()),
        }
    }

    /// The shim binary: the configured path, else `peapod-shim` beside this executable, else PATH.
    pub fn find_binary(configured: &str) -> PathBuf {
        if !configured.is_empty() {
            return PathBuf::from(configured);
        }
        std::env::current_exe()
            .ok()
            .and_then(|exe| exe.parent().map(|d| d.join("peapod-shim")))
            .filter(|p| p.is_file())
            .unwrap_or_else(|| PathBuf::from("peapod-shim"))
    }

    fn cache(&self, id: &str, client: ShimClient) -> Arc<dyn Shim> {
        let client: Arc<dyn Shim> = Arc::new(client);
        self.clients
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id.to_string(), client.clone());
        client
    }
}

#[async_trait]
impl Shims for ShimManager {
    /// `peapod-shim start`, which returns once the shim serves.
    async fn start(&self, sandbox_id: &str, log: &Path) -> Result<Arc<dyn Shim>> {
        std::fs::create_dir_all(&self.socket_dir)
            .map_err(|e| Error::path("create", &self.socket_dir, e))?;
        let socket = self.socket_path(sandbox_id);
        let output = tokio::process::Command::new(&self.binary)
            .arg("start")
            .args(["--id", sandbox_id])
            .arg("--socket")
            .arg(&socket)
            .args(["--runtime", &self.runtime])
            .arg("--runtime-root")
            .arg(&self.runtime_root)
            .arg("--log")
            .arg(log)
            .kill_on_drop(true)
            .output()
            .await
            .map_err(|e| Error::io(format_args!("shim: run {}", self.binary.display()), e))?;
        if !output.status.success() {
            return Err(Error::internal(format!(
                "shim: starting the shim failed: {}",
                String::from_utf8_lossy(&output.stderr).trim()
            )));
        }
        let client = ShimClient::connect(&socket).await?;
        Ok(self.cache(sandbox_id, client))
    }

    async fn get(&self, sandbox_id: &str) -> Result<Arc<dyn Shim>> {
        if let Some(c) = self
            .clients
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(sandbox_id)
        {
            return Ok(c.clone());
        }
        let client = ShimClient::connect(&self.socket_path(sandbox_id)).await?;
        Ok(self.cache(sandbox_id, client))
    }

    fn forget(&self, sandbox_id: &str) {
        self.clients
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(sandbox_id);
    }

    /// Short, so that it fits a unix socket address.
    fn socket_path(&self, sandbox_id: &str) -> PathBuf {
        self.socket_dir.join(ids::short(sandbox_id))
    }

    fn attach_socket_path(&self, container_id: &str) -> PathBuf {
        self.socket_dir
            .join(format!("{}.a", ids::short(container_id)))
    }
}
