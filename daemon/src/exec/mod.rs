//! Running processes in containers: [`ExecService`] serves ExecSync, and Exec, Attach and
//! PortForward (one file per RPC: the URL the RPC returns, and the session the streaming
//! server then runs through `streaming_backend`); `relay` carries a forwarded connection's
//! bytes and decides which of its ends is an error.
//!
//! An exec'd process gets FIFOs the daemon makes and opens first (the shim opens the other
//! ends and hands them to `runc exec`), so the daemon sees the output without the shim
//! copying it. If the daemon's side goes away mid-session (a client disconnected, a timeout),
//! the [`ExecGuard`] kills the process so that nothing is left behind.

mod attach;
// Named after its RPC, as the other files here are.
#[allow(clippy::module_inception)]
mod exec;
mod exec_sync;
mod port_forward;
mod relay;
pub mod streaming_backend;

use crate::container::ContainerService;
use crate::error::{Error, Result};
use crate::sandbox::SandboxService;
use crate::shim::{Shim, Shims};
use crate::store::container::{ContainerRecord, ContainerState};
use peapod_host::sync::LockUnpoisoned;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::AsyncReadExt;

/// Most ExecSync output kept per stream (containerd and CRI-O cap at 16 MiB too); the rest is
/// read and dropped so that the process is never blocked on a full pipe.
pub const MAX_EXEC_SYNC_OUTPUT: usize = 16 << 20;

/// How long output may keep flowing after the process exited (a background child may hold
/// the pipe; its later output is not the command's).
const OUTPUT_GRACE: Duration = Duration::from_secs(2);

/// What ExecSync returns.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExecOutput {
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    pub exit_code: i32,
}

/// FIFOs of one exec, removed on drop.
pub(crate) struct Fifos {
    pub dir: PathBuf,
    pub stdin: Option<PathBuf>,
    pub stdout: Option<PathBuf>,
    pub stderr: Option<PathBuf>,
}

impl Fifos {
    pub fn create(
        dir: &Path,
        exec_id: &str,
        stdin: bool,
        stdout: bool,
        stderr: bool,
    ) -> Result<Fifos> {
        std::fs::create_dir_all(dir).map_err(|e| Error::path("create", dir, e))?;
        let make = |want: bool, suffix: &str| -> Result<Option<PathBuf>> {
            if !want {
                return Ok(None);
            }
            let path = dir.join(format!("{exec_id}.{suffix}"));
            nix::unistd::mkfifo(&path, nix::sys::stat::Mode::from_bits_truncate(0o600))
                .map_err(|e| Error::path("mkfifo", &path, e.into()))?;
            Ok(Some(path))
        };
        let mut fifos = Fifos {
            dir: dir.to_path_buf(),
            stdin: None,
            stdout: None,
            stderr: None,
        };
        fifos.stdin = make(stdin, "in")?;
        fifos.stdout = make(stdout, "out")?;
        fifos.stderr = make(stderr, "err")?;
        Ok(fifos)
    }

    pub fn path_str(p: &Option<PathBuf>) -> String {
        p.as_ref()
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_default()
    }
}

impl Drop for Fifos {
    fn drop(&mut self) {
        for p in [&self.stdin, &self.stdout, &self.stderr]
            .into_iter()
            .flatten()
        {
            let _ = std::fs::remove_file(p);
        }
        // Only removed when no other exec uses it.
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// Kills and forgets an exec'd process unless disarmed: the owner may be dropped at any
/// await (client gone, deadline), and the process must not outlive it.
pub(crate) struct ExecGuard {
    shim: Arc<dyn Shim>,
    container_id: String,
    exec_id: String,
    armed: bool,
}

impl ExecGuard {
    pub fn new(shim: Arc<dyn Shim>, container_id: &str, exec_id: &str) -> ExecGuard {
        ExecGuard {
            shim,
            container_id: container_id.to_string(),
            exec_id: exec_id.to_string(),
            armed: true,
        }
    }

    /// Kills the process (and what it started), waits for it, and removes it: used when the
    /// caller gives up on it and must not return while it still runs.
    pub async fn kill_and_finish(self) {
        let _ = self
            .shim
            .kill(
                &self.container_id,
                &self.exec_id,
                libc::SIGKILL as u32,
                false,
            )
            .await;
        let _ = tokio::time::timeout(
            Duration::from_secs(10),
            self.shim.wait(&self.container_id, &self.exec_id),
        )
        .await;
        self.finish().await;
    }

    /// Removes the exec from the shim (after its exit was collected).
    pub async fn finish(mut self) {
        self.armed = false;
        if let Err(e) = self.shim.delete(&self.container_id, &self.exec_id).await {
            tracing::debug!(exec = %self.exec_id, error = %e, "deleting a finished exec");
        }
    }
}

impl Drop for ExecGuard {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let (shim, cid, eid) = (
            self.shim.clone(),
            self.container_id.clone(),
            self.exec_id.clone(),
        );
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            handle.spawn(async move {
                let _ = shim.kill(&cid, &eid, libc::SIGKILL as u32, false).await;
                let _ = tokio::time::timeout(Duration::from_secs(10), shim.wait(&cid, &eid)).await;
                let _ = shim.delete(&cid, &eid).await;
            });
        }
    }
}

/// Reads a FIFO into a shared buffer, keeping at most `cap` bytes and draining the rest.
/// Returns how many bytes were dropped.
pub(crate) async fn read_capped(
    mut rx: tokio::net::unix::pipe::Receiver,
    buf: Arc<Mutex<Vec<u8>>>,
    cap: usize,
) -> usize {
    let mut chunk = vec![0u8; 64 * 1024];
    let mut dropped = 0usize;
    loop {
        let n = match rx.read(&mut chunk).await {
            Ok(0) | Err(_) => return dropped,
            Ok(n) => n,
        };
        let mut b = buf.lock_unpoisoned();
        let room = cap.saturating_sub(b.len());
        b.extend_from_slice(&chunk[..n.min(room)]);
        dropped += n.saturating_sub(room);
    }
}

/// A request the streaming server refuses, as the RPC's error.
fn streaming_err(e: peapod_streaming::Error) -> Error {
    match e {
        peapod_streaming::Error::InvalidRequest(v) => {
            Error::invalid(format!("{}: {}", v.field, v.message))
        }
        other => Error::unavailable(other.to_string()),
    }
}

pub(crate) fn new_exec_id() -> String {
    crate::ids::generate()[..16].to_string()
}

/// What every exec starts from: the running container, its process for the command, its
/// pod's shim and a fresh exec id.
pub(crate) struct Prepared {
    pub rec: Arc<ContainerRecord>,
    pub process: Vec<u8>,
    pub shim: Arc<dyn Shim>,
    pub exec_id: String,
}

/// Exec, attach and port-forward, over the containers and pods they reach into.
pub struct ExecService {
    containers: Arc<ContainerService>,
    sandboxes: Arc<SandboxService>,
    shims: Arc<dyn Shims>,
}

impl ExecService {
    pub fn new(
        containers: Arc<ContainerService>,
        sandboxes: Arc<SandboxService>,
        shims: Arc<dyn Shims>,
    ) -> ExecService {
        ExecService {
            containers,
            sandboxes,
            shims,
        }
    }

    /// The running container an exec targets.
    async fn prepare(&self, id: &str, cmd: &[String], tty: bool) -> Result<Prepared> {
        if cmd.is_empty() {
            return Err(Error::invalid("cmd is required"));
        }
        let rec = self.running_container(id)?;
        let process = self.containers.exec_process_json(&rec, cmd, tty)?;
        let shim = self.shims.get(&rec.sandbox_id).await?;
        Ok(Prepared {
            rec,
            process,
            shim,
            exec_id: new_exec_id(),
        })
    }

    pub fn running_container(&self, id: &str) -> Result<Arc<ContainerRecord>> {
        let rec = self.containers.records().resolve(id)?.snapshot();
        if rec.state != ContainerState::Running {
            return Err(Error::failed_precondition(format!(
                "container {} is {:?}, not running",
                rec.id, rec.state
            )));
        }
        Ok(rec)
    }
}
