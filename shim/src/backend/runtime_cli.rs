//! The OCI runtime CLI as the shim uses it (runc, crun, youki share these commands), behind a
//! narrow trait so the Task service can be tested with a fake that fails any call.
//!
//! The real implementation is [`super::runc::Runc`]. Failures are told apart by exit status and
//! by asking the runtime what it knows ([`RuntimeCli::state`]), never by the wording of its
//! messages, which differs between runtimes and versions.

use async_trait::async_trait;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::process::Stdio;

/// Longest any runtime command may take before it is killed.
pub const COMMAND_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

#[derive(Debug, thiserror::Error)]
pub enum RuntimeCliError {
    /// The command ran and exited non-zero; `message` is the runtime's own last error.
    #[error("{runtime} {command}: {message}")]
    Failed {
        runtime: String,
        command: String,
        exit_status: i32,
        message: String,
    },
    #[error("{runtime} {command} did not finish within {limit:?}")]
    Timeout {
        runtime: String,
        command: String,
        limit: std::time::Duration,
    },
    #[error("cannot run {runtime}: {source}")]
    Spawn {
        runtime: String,
        #[source]
        source: std::io::Error,
    },
    /// The command succeeded but left no readable pid file.
    #[error("{runtime} {command} wrote no pid file at {path}")]
    NoPidFile {
        runtime: String,
        command: String,
        path: PathBuf,
    },
    /// The command's output is not what the runtime-spec CLI documents.
    #[error("{runtime} {command}: unreadable output: {message}")]
    BadOutput {
        runtime: String,
        command: String,
        message: String,
    },
}

impl RuntimeCliError {
    /// `runtime` ran `command` and it failed with `message` (exit status 1: the shim's own
    /// doing of a runtime command, or its helper's answer).
    pub fn failed(runtime: &str, command: &str, message: impl Into<String>) -> RuntimeCliError {
        RuntimeCliError::Failed {
            runtime: runtime.into(),
            command: command.into(),
            exit_status: 1,
            message: message.into(),
        }
    }

    /// `runtime` could not be run at all.
    pub fn spawn(runtime: &str, source: std::io::Error) -> RuntimeCliError {
        RuntimeCliError::Spawn {
            runtime: runtime.into(),
            source,
        }
    }
}

/// Stdio for the process a runtime command starts: descriptors (not `Stdio`, so that they can
/// also be handed to a container's resident exec helper over a socket); `None` is /dev/null.
#[derive(Default)]
pub struct ProcessIo {
    pub stdin: Option<OwnedFd>,
    pub stdout: Option<OwnedFd>,
    pub stderr: Option<OwnedFd>,
}

impl ProcessIo {
    pub fn null() -> ProcessIo {
        ProcessIo::default()
    }

    /// Copies of the three descriptors (a helper's, when the runtime may need the originals
    /// after it fails); one that cannot be copied is /dev/null for the helper.
    pub fn try_clone(&self) -> ProcessIo {
        let dup = |f: &Option<OwnedFd>| f.as_ref().and_then(|f| f.try_clone().ok());
        ProcessIo {
            stdin: dup(&self.stdin),
            stdout: dup(&self.stdout),
            stderr: dup(&self.stderr),
        }
    }

    /// The three as `Stdio` for a command.
    pub fn into_stdio(self) -> [Stdio; 3] {
        let to = |fd: Option<OwnedFd>| fd.map(Stdio::from).unwrap_or_else(Stdio::null);
        [to(self.stdin), to(self.stdout), to(self.stderr)]
    }
}

/// A container's status as the runtime reports it (`runc state`'s `status`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RuntimeStatus {
    Creating,
    Created,
    Running,
    Pausing,
    Paused,
    Stopped,
    Other(String),
}

impl RuntimeStatus {
    pub fn parse(s: &str) -> RuntimeStatus {
        match s {
            "creating" => RuntimeStatus::Creating,
            "created" => RuntimeStatus::Created,
            "running" => RuntimeStatus::Running,
            "pausing" => RuntimeStatus::Pausing,
            "paused" => RuntimeStatus::Paused,
            "stopped" => RuntimeStatus::Stopped,
            other => RuntimeStatus::Other(other.to_string()),
        }
    }
}

/// What `create` and `exec` need besides the container id.
pub struct CreateCommand<'a> {
    pub bundle: &'a Path,
    /// Where the runtime writes the init's pid.
    pub pid_file: &'a Path,
    pub console_socket: Option<&'a Path>,
    pub io: ProcessIo,
    /// `run --detach` (created and started in one invocation) instead of `create`.
    pub start: bool,
    /// Started by the shim itself where it can (a pod's pause: [`super::native`]).
    pub native: bool,
    /// Restored from these CRIU images (`restore --detach`) instead of created: it runs
    /// once this returns, as with `start`.
    pub restore: Option<&'a Path>,
}

/// What `checkpoint` needs besides the container id.
pub struct CheckpointCommand<'a> {
    /// Where CRIU's images go (made if missing).
    pub image_path: &'a Path,
    /// Where CRIU's log and work files go.
    pub work_path: &'a Path,
    /// The longest the dump may take.
    pub timeout: std::time::Duration,
}

pub struct ExecCommand<'a> {
    /// The container's bundle (its `config.json`).
    pub bundle: &'a Path,
    /// The container's init process (host pid): an exec joins its namespaces and cgroups.
    pub init_pid: u32,
    /// The runtime-spec Process, as JSON in a file.
    pub process_json: &'a Path,
    pub pid_file: &'a Path,
    pub console_socket: Option<&'a Path>,
    pub io: ProcessIo,
}

/// The commands of the OCI runtime CLI the shim uses.
#[async_trait]
pub trait RuntimeCli: Send + Sync {
    /// Creates (or with `start`, runs) the container; returns its init's host pid.
    async fn create(&self, id: &str, cmd: CreateCommand<'_>) -> Result<u32, RuntimeCliError>;
    /// Starts a created container. `io`: its stdio, for a runtime that takes it at start
    /// rather than at create (runsc, for a container that joins its pod's sandbox); `None`
    /// otherwise.
    async fn start(&self, id: &str, io: Option<ProcessIo>) -> Result<(), RuntimeCliError>;
    /// The container's status; `Ok(None)` when the runtime does not know the container.
    async fn state(&self, id: &str) -> Result<Option<RuntimeStatus>, RuntimeCliError>;
    async fn kill(&self, id: &str, signal: u32, all: bool) -> Result<(), RuntimeCliError>;
    async fn delete(&self, id: &str, force: bool) -> Result<(), RuntimeCliError>;
    /// Starts a process in the container, detached (reparented to the shim); returns its pid.
    async fn exec(&self, id: &str, cmd: ExecCommand<'_>) -> Result<u32, RuntimeCliError>;
    /// Applies the runtime-spec LinuxResources in `resources_json`.
    async fn update(&self, id: &str, resources_json: &Path) -> Result<(), RuntimeCliError>;
    async fn pause(&self, id: &str) -> Result<(), RuntimeCliError>;
    async fn resume(&self, id: &str) -> Result<(), RuntimeCliError>;
    /// The host pids of the container's processes.
    async fn ps(&self, id: &str) -> Result<Vec<u32>, RuntimeCliError>;
    /// Waits for the started container's exit (`wait`, runsc's command: its containers that
    /// join a sandbox have no process of their own on the host, their pid file names the
    /// sandbox's); its exit status, 128 + the signal for a killed one.
    async fn wait(&self, id: &str) -> Result<i32, RuntimeCliError>;
    /// CRIU's dump of the container's processes, which go on running (`checkpoint
    /// --leave-running`): a failed dump leaves them running too.
    async fn checkpoint(&self, id: &str, cmd: CheckpointCommand<'_>)
        -> Result<(), RuntimeCliError>;
}
