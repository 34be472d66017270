//! StartContainer without a second runtime call: what `runc start` does for a container
//! `runc create` made, done by the shim. runc's init waits, after create, on a FIFO in the
//! container's state directory (`<root>/<id>/exec.fifo`): it blocks opening it for writing
//! until a reader comes, writes one byte, and execs the process. `runc start` is that reader,
//! then removes the FIFO (runc tells "created" from "running" by whether it is there). The
//! shim does the same, a fraction of a millisecond instead of a Go program starting and
//! reading its state. So a container costs one runtime call, its create, which still meets
//! and reports every error a create can.
//!
//! That is all `runc start` does: runc (1.1, libcontainer's `start`) runs a spec's poststart
//! hooks at create, right after the init is started, not at start. Only with runc (another
//! runtime's state directory is its own); any other start goes to the runtime, as does every
//! other command.

use crate::runtime_cli::{CreateCommand, ExecCommand, RuntimeCli, RuntimeCliError, RuntimeStatus};
use async_trait::async_trait;
use std::collections::HashMap;
use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const NAME: &str = "peapod-shim start";

/// How long a start waits for the init to take the byte before calling it stuck (runc's own
/// start has no bound; the daemon's call has its deadline too).
const START_WITHIN: Duration = Duration::from_secs(30);

pub struct NativeStart {
    runtime: Arc<dyn RuntimeCli>,
    /// runc's state root: `Some` only when the runtime is runc.
    runc_root: Option<PathBuf>,
    /// Containers created here and startable natively: their init's pid.
    created: Mutex<HashMap<String, u32>>,
}

impl NativeStart {
    /// `runtime_binary`: the OCI runtime's command; native starts only when it is runc.
    pub fn new(runtime: Arc<dyn RuntimeCli>, runtime_binary: &str, root: PathBuf) -> NativeStart {
        let is_runc = Path::new(runtime_binary)
            .file_name()
            .is_some_and(|n| n == "runc");
        NativeStart {
            runtime,
            runc_root: is_runc.then_some(root),
            created: Mutex::new(HashMap::new()),
        }
    }

    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<String, u32>> {
        self.created.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Whether process `pid` still runs (not gone, not a zombie).
fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the command's closing parenthesis.
        Ok(stat) => !stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
        Err(_) => false,
    }
}

/// runc's start of a created container: read the init's byte from its FIFO, then remove the
/// FIFO. Blocking (run off the async runtime).
fn release(fifo: &Path, pid: u32) -> Result<(), String> {
    // Non-blocking open: the init, blocked opening its end for writing, is released by it.
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(fifo)
        .map_err(|e| format!("open {}: {e}", fifo.display()))?;
    let deadline = Instant::now() + START_WITHIN;
    let mut byte = [0u8; 1];
    loop {
        let mut fd = libc::pollfd {
            fd: std::os::fd::AsRawFd::as_raw_fd(&file),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: poll of one live descriptor.
        let n = unsafe { libc::poll(&mut fd, 1, 100) };
        if n > 0 {
            match file.read(&mut byte) {
                Ok(1) => break,
                // The init closed its end without writing: it died.
                Ok(_) => return Err("container process is already dead".into()),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(format!("read {}: {e}", fifo.display())),
            }
        } else if !alive(pid) {
            return Err("container process is already dead".into());
        } else if Instant::now() > deadline {
            return Err(format!(
                "the init did not take its start within {START_WITHIN:?}"
            ));
        }
    }
    std::fs::remove_file(fifo).map_err(|e| format!("remove {}: {e}", fifo.display()))
}

#[async_trait]
impl RuntimeCli for NativeStart {
    async fn create(&self, id: &str, cmd: CreateCommand<'_>) -> Result<u32, RuntimeCliError> {
        let startable = self.runc_root.is_some() && !cmd.start;
        let pid = self.runtime.create(id, cmd).await?;
        if startable {
            self.map().insert(id.to_string(), pid);
        }
        Ok(pid)
    }
    async fn start(&self, id: &str) -> Result<(), RuntimeCliError> {
        let pid = self.map().get(id).copied();
        let (Some(pid), Some(root)) = (pid, &self.runc_root) else {
            return self.runtime.start(id).await;
        };
        let fifo = root.join(id).join("exec.fifo");
        if !fifo.exists() {
            // Started already, or not runc's: the runtime answers as it would.
            return self.runtime.start(id).await;
        }
        let outcome = tokio::task::spawn_blocking(move || release(&fifo, pid))
            .await
            .map_err(|e| e.to_string())
            .and_then(|r| r);
        match outcome {
            Ok(()) => {
                self.map().remove(id);
                Ok(())
            }
            Err(message) => Err(RuntimeCliError::Failed {
                runtime: NAME.into(),
                command: "start".into(),
                exit_status: 1,
                message,
            }),
        }
    }
    async fn state(&self, id: &str) -> Result<Option<RuntimeStatus>, RuntimeCliError> {
        self.runtime.state(id).await
    }
    async fn kill(&self, id: &str, signal: u32, all: bool) -> Result<(), RuntimeCliError> {
        self.runtime.kill(id, signal, all).await
    }
    async fn delete(&self, id: &str, force: bool) -> Result<(), RuntimeCliError> {
        self.map().remove(id);
        self.runtime.delete(id, force).await
    }
    async fn exec(&self, id: &str, cmd: ExecCommand<'_>) -> Result<u32, RuntimeCliError> {
        self.runtime.exec(id, cmd).await
    }
    async fn update(&self, id: &str, resources_json: &Path) -> Result<(), RuntimeCliError> {
        self.runtime.update(id, resources_json).await
    }
    async fn pause(&self, id: &str) -> Result<(), RuntimeCliError> {
        self.runtime.pause(id).await
    }
    async fn resume(&self, id: &str) -> Result<(), RuntimeCliError> {
        self.runtime.resume(id).await
    }
    async fn ps(&self, id: &str) -> Result<Vec<u32>, RuntimeCliError> {
        self.runtime.ps(id).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stand-in init: a thread that opens the FIFO for writing (blocking until a reader
    /// comes), writes its byte, and is done; `release` takes it and removes the FIFO.
    #[test]
    fn release_reads_the_inits_byte_and_removes_the_fifo() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("exec.fifo");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a valid C string.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o622) }, 0);
        let writer_path = fifo.clone();
        let init = std::thread::spawn(move || {
            use std::io::Write;
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .open(writer_path)
                .unwrap();
            f.write_all(b"0").unwrap();
        });
        release(&fifo, std::process::id()).unwrap();
        init.join().unwrap();
        assert!(!fifo.exists());
    }

    #[test]
    fn a_dead_init_fails_the_start() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("exec.fifo");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a valid C string.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o622) }, 0);
        // A pid that runs nothing (beyond pid_max).
        let err = release(&fifo, 4_194_304 + 1).unwrap_err();
        assert!(err.contains("already dead"), "{err}");
        assert!(
            fifo.exists(),
            "a failed start leaves the container as it was"
        );
    }
}
