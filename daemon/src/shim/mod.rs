//! Talking to the per-pod `peapod-shim`: the Task API as the daemon uses it ([`Shim`]),
//! starting and finding a pod's shim ([`Shims`]), and their real implementations over ttrpc
//! (`client`: [`ShimClient`], `manager`: [`ShimManager`]). The lifecycle code sees only the
//! traits, so its unit tests run against fakes (`crate::testing`).

mod client;
mod manager;

pub use client::ShimClient;
pub use manager::ShimManager;

use crate::error::{Optional, Result};
use async_trait::async_trait;
use peapod_shim::protocol::CreateOptions;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// One pod's shim: the calls of the Task API the daemon makes. `exec_id` is empty for a
/// container's own process.
#[async_trait]
pub trait Shim: Send + Sync {
    /// Creates a container (its pid); with `task.options.start` it is started too.
    async fn create(&self, task: &NewTask<'_>) -> Result<u32>;
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
    /// CRIU's dump of a running container into `images` (its log and work files in `work`),
    /// within `timeout`; the container goes on running, whether the dump succeeds or not.
    async fn checkpoint(&self, id: &str, dump: &Dump<'_>) -> Result<()>;
    /// peapod's extension: reopen a container's log file after rotation.
    async fn reopen_log(&self, id: &str) -> Result<()>;
    /// Shuts the shim down and returns once its process has exited, so that callers (and
    /// tests) never see a shim that is still on its way out.
    async fn shutdown_and_wait(&self) -> Result<()>;
    /// Resolves once the shim's process has exited (at once if it already has, or if this
    /// client never learnt its pid).
    async fn gone(&self);
    /// Whether the shim's process still runs.
    fn alive(&self) -> bool;
}

/// A container for the shim to create: the Task API's CreateTask, with peapod's options.
#[derive(Debug, Clone)]
pub struct NewTask<'a> {
    pub id: &'a str,
    /// The OCI bundle (its config.json).
    pub bundle: &'a Path,
    /// The process gets a terminal.
    pub terminal: bool,
    pub options: CreateOptions,
}

/// Where a checkpoint's dump goes, and how long it may take.
#[derive(Debug, Clone)]
pub struct Dump<'a> {
    pub images: &'a Path,
    pub work: &'a Path,
    pub timeout: Duration,
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
    /// Starts the pod's shim over the handler's OCI runtime; it serves once this returns.
    async fn start(
        &self,
        sandbox_id: &str,
        handler: &crate::runtime_handlers::RuntimeHandler,
        log: &Path,
    ) -> Result<Arc<dyn Shim>>;
    /// The pod's shim, connecting to it if this daemon has not yet.
    async fn get(&self, sandbox_id: &str) -> Result<Arc<dyn Shim>>;
    /// Drops the connection to a pod's shim (after it was shut down).
    fn forget(&self, sandbox_id: &str);
    /// The pod shim's socket.
    fn socket_path(&self, sandbox_id: &str) -> PathBuf;
    /// Where a container's attach socket goes.
    fn attach_socket_path(&self, container_id: &str) -> PathBuf;
    /// For a pod whose shim died: kills (SIGKILL, every process) and deletes these containers
    /// through the OCI runtime itself, since nothing else would ever stop them. Containers the
    /// runtime does not know are fine; the error names each one that could not be removed.
    async fn reap_orphans(&self, container_ids: &[String]) -> Result<()>;
    /// Once the runtime of a sandboxed `handler` holds no container, what it keeps in its
    /// root beside them goes: runsc pins a network namespace there for its sandboxes' gofers
    /// (a bind mount, reused while it has sandboxes), which would outlive every pod. Nothing
    /// for other handlers, whose runtimes keep only their containers' state.
    async fn release_idle_runtime(
        &self,
        handler: &crate::runtime_handlers::RuntimeHandler,
    ) -> Result<()>;
}

/// An exit as the shim reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Exit {
    pub code: u32,
    pub at_ns: i64,
}

/// What `state` reports about a process.
#[derive(Debug, Clone)]
pub struct ProcessState {
    pub pid: u32,
    pub status: containerd_shim_protos::types::task::Status,
    pub exit: Option<Exit>,
}

/// How long a rollback waits for a create that was sent before the crash to land in the shim.
pub const CREATE_LANDING: Duration = Duration::from_secs(3);

/// Waits until the shim knows task `id` (a create sent before the daemon died finished), at
/// most [`CREATE_LANDING`]; false if it never did (the create never reached the shim, or it
/// failed there).
pub async fn until_task_lands(shim: &dyn Shim, id: &str) -> bool {
    let landed = async {
        loop {
            if let Ok(Some(_)) = shim.state(id, "").await.optional() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    tokio::time::timeout(CREATE_LANDING, landed).await.is_ok()
}
