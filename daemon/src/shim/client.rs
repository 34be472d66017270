//! The ttrpc client of one shim: the Task API calls and peapod's extension.

use super::{Dump, ExecIo, Exit, NewTask, ProcessState, Shim};
use crate::error::{Code, Error, Result};
use async_trait::async_trait;
use containerd_shim_protos::api;
use containerd_shim_protos::protobuf::well_known_types::any::Any;
use containerd_shim_protos::protobuf::{Message, MessageField};
use containerd_shim_protos::shim_async::{Client, TaskClient};
use peapod_shim::protocol;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;
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
        // The client's own deadline (ttrpc says so only in words): the shim never answered.
        ttrpc::Error::Others(m) if m.contains("deadline elapsed") => (
            Code::DeadlineExceeded,
            format!("the pod's shim (peapod-shim) did not answer within {CALL_TIMEOUT:?} (stopped or hung?)"),
        ),
        other => (Code::Internal, other.to_string()),
    };
    // What the shim refused (a missing task, a bad request) reads as the client's error; a
    // failure of the shim itself says so.
    let prefix = if code == Code::Internal { "shim: " } else { "" };
    Error::new(code, format!("{prefix}{what}: {message}")).with_cause(err)
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
    /// A pidfd of the shim's process (from Connect), readable once it has exited: how a
    /// dead shim is noticed at once, without polling. None if the shim's pid could not be
    /// learnt (then the shim counts as gone).
    pidfd: Option<Arc<OwnedFd>>,
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
        let mut client = ShimClient {
            task: TaskClient::new(raw.clone()),
            raw,
            socket: socket.to_path_buf(),
            pidfd: None,
        };
        let pid = client.shim_pid().await?;
        client.pidfd = Some(Arc::new(pidfd_open(pid).map_err(|e| {
            Error::io(format_args!("shim: pidfd_open of the shim (pid {pid})"), e)
        })?));
        Ok(client)
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
    // Each call a span (debug: exported with `[tracing]`, in the log at RUST_LOG=debug).
    #[tracing::instrument(level = "debug", name = "shim.create", skip_all, fields(id = task.id, native = task.options.native, start = task.options.start))]
    async fn create(&self, task: &NewTask<'_>) -> Result<u32> {
        let options = &task.options;
        let mut req = api::CreateTaskRequest::new();
        req.id = task.id.to_string();
        req.bundle = task.bundle.to_string_lossy().into_owned();
        req.terminal = task.terminal;
        req.stdout = options.log_path.clone();
        let mut any = Any::new();
        any.type_url = if options.restore.is_empty() {
            protocol::CREATE_OPTIONS_TYPE_URL.into()
        } else {
            protocol::RESTORE_OPTIONS_TYPE_URL.into()
        };
        any.value = serde_json::to_vec(options).map_err(|e| Error::internal(e.to_string()))?;
        req.options = MessageField::some(any);
        let resp = self
            .task
            .create(ctx(Some(CALL_TIMEOUT)), &req)
            .await
            .map_err(|e| map_err("create", e))?;
        Ok(resp.pid)
    }

    #[tracing::instrument(level = "debug", name = "shim.start", skip_all, fields(id = id, exec_id = exec_id))]
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

    #[tracing::instrument(level = "debug", name = "shim.kill", skip_all, fields(id = id, exec_id = exec_id, signal = signal, all = all))]
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

    #[tracing::instrument(level = "debug", name = "shim.delete", skip_all, fields(id = id, exec_id = exec_id))]
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

    #[tracing::instrument(level = "debug", name = "shim.exec", skip_all, fields(id = id, exec_id = exec_id))]
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

    #[tracing::instrument(level = "debug", name = "shim.update", skip_all, fields(id = id))]
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

    async fn checkpoint(&self, id: &str, dump: &Dump<'_>) -> Result<()> {
        let mut req = api::CheckpointTaskRequest::new();
        req.id = id.into();
        req.path = dump.images.to_string_lossy().into_owned();
        let options = protocol::CheckpointOptions {
            work_path: dump.work.to_string_lossy().into_owned(),
            timeout_ms: dump.timeout.as_millis() as u64,
        };
        let mut any = Any::new();
        any.type_url = protocol::CHECKPOINT_OPTIONS_TYPE_URL.into();
        any.value = serde_json::to_vec(&options)
            .map_err(|e| Error::new(Code::Internal, format!("checkpoint options: {e}")))?;
        req.options = MessageField::some(any);
        // The shim kills a dump at its timeout; this call waits a little longer for its answer.
        let deadline = dump.timeout + Duration::from_secs(15);
        self.task
            .checkpoint(ctx(Some(deadline.max(CALL_TIMEOUT))), &req)
            .await
            .map_err(|e| map_err("checkpoint", e))?;
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
    #[tracing::instrument(level = "debug", name = "shim.shutdown", skip_all)]
    async fn shutdown_and_wait(&self) -> Result<()> {
        self.shutdown(true).await?;
        if self.pidfd.is_some()
            && tokio::time::timeout(SHIM_EXIT_TIMEOUT, self.gone())
                .await
                .is_err()
        {
            return Err(Error::internal(format!(
                "shim: the shim at {} did not exit within {SHIM_EXIT_TIMEOUT:?} of Shutdown",
                self.socket.display()
            )));
        }
        Ok(())
    }

    async fn gone(&self) {
        let Some(fd) = self.pidfd.as_ref().and_then(|fd| fd.try_clone().ok()) else {
            return;
        };
        wait_readable(fd).await
    }

    fn alive(&self) -> bool {
        let Some(fd) = &self.pidfd else {
            return false;
        };
        let mut pfd = libc::pollfd {
            fd: fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd, zero timeout: poll only reports whether it is readable.
        let n = unsafe { libc::poll(&mut pfd, 1, 0) };
        n == 0
    }
}

/// How long a shim may take to exit after Shutdown.
const SHIM_EXIT_TIMEOUT: Duration = Duration::from_secs(10);

/// A pidfd for `pid`: readable once the process has exited.
fn pidfd_open(pid: u32) -> std::io::Result<OwnedFd> {
    use std::os::fd::FromRawFd;
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: fd is a fresh descriptor owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

async fn wait_readable(fd: OwnedFd) {
    // SAFETY: the OwnedFd moves into the AsyncFd and stays open for its whole life.
    let Ok(afd) = (unsafe {
        tokio::io::unix::AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE)
    }) else {
        return;
    };
    let _ = afd.readable().await;
}
