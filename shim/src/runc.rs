//! The OCI runtime CLI (runc, crun or youki: they share the commands used here).
//!
//! Every invocation goes through the [`Reaper`] and has a deadline, so a wedged runtime
//! cannot hang the shim. Errors carry the runtime's own message.

use crate::reaper::Reaper;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::os::fd::FromRawFd;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

/// Longest any runtime command may take before it is killed.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(60);

#[derive(Debug, thiserror::Error)]
pub enum RuncError {
    #[error("{runtime} {command}: {message}")]
    Failed {
        runtime: String,
        command: String,
        message: String,
    },
    #[error("{runtime} {command} did not finish within {COMMAND_TIMEOUT:?}")]
    Timeout { runtime: String, command: String },
    #[error("cannot run {runtime}: {source}")]
    Spawn {
        runtime: String,
        source: std::io::Error,
    },
}

impl RuncError {
    /// The runtime does not know the container (already deleted, never created).
    pub fn is_not_found(&self) -> bool {
        matches!(self, RuncError::Failed { message, .. }
            if message.contains("does not exist") || message.contains("not found"))
    }

    /// The container or process is not running any more.
    pub fn is_not_running(&self) -> bool {
        matches!(self, RuncError::Failed { message, .. }
            if message.contains("not running") || message.contains("already finished")
                || message.contains("process already"))
    }
}

/// Stdio for the process a runtime command starts.
pub struct ProcessIo {
    pub stdin: Stdio,
    pub stdout: Stdio,
    pub stderr: Stdio,
}

impl ProcessIo {
    pub fn null() -> ProcessIo {
        ProcessIo {
            stdin: Stdio::null(),
            stdout: Stdio::null(),
            stderr: Stdio::null(),
        }
    }
}

pub struct Runc {
    binary: String,
    root: PathBuf,
    reaper: Arc<Reaper>,
}

fn memfd(name: &str) -> std::io::Result<File> {
    let cname = std::ffi::CString::new(name).map_err(std::io::Error::other)?;
    // SAFETY: memfd_create with a valid C string; the fd is owned by the File from here on.
    let fd = unsafe { libc::memfd_create(cname.as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: fd is a fresh descriptor nobody else owns.
    Ok(unsafe { File::from_raw_fd(fd) })
}

fn read_all(mut file: File) -> String {
    let mut s = String::new();
    if file.seek(SeekFrom::Start(0)).is_ok() {
        let _ = file.read_to_string(&mut s);
    }
    s
}

/// The last error message in a runtime's JSON log (`{"level":"error","msg":...}` lines).
fn last_logged_error(log: &str) -> Option<String> {
    log.lines()
        .rev()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|v| v["level"] == "error" || v["level"] == "fatal")
        .and_then(|v| v["msg"].as_str().map(str::to_string))
}

impl Runc {
    pub fn new(binary: String, root: PathBuf, reaper: Arc<Reaper>) -> Runc {
        Runc {
            binary,
            root,
            reaper,
        }
    }

    fn base(&self, log: Option<&Path>) -> Command {
        let mut cmd = Command::new(&self.binary);
        cmd.arg("--root").arg(&self.root);
        if let Some(log) = log {
            cmd.arg("--log").arg(log).args(["--log-format", "json"]);
        }
        cmd
    }

    /// Runs a command to completion; stdout on success, the runtime's message on failure.
    async fn run(
        &self,
        mut cmd: Command,
        io: Option<ProcessIo>,
        log: Option<&Path>,
    ) -> Result<String, RuncError> {
        // The subcommand is the first argument after the global flags (see `base`).
        let skip = if log.is_some() { 6 } else { 2 };
        let command = cmd
            .get_args()
            .nth(skip)
            .map(|a| a.to_string_lossy().into_owned())
            .unwrap_or_default();
        let spawn_err = |source| RuncError::Spawn {
            runtime: self.binary.clone(),
            source,
        };
        let (out, err) = (
            memfd("runc-out").map_err(spawn_err)?,
            memfd("runc-err").map_err(spawn_err)?,
        );
        match io {
            Some(io) => {
                cmd.stdin(io.stdin).stdout(io.stdout).stderr(io.stderr);
            }
            None => {
                let o = out.try_clone().map_err(spawn_err)?;
                let e = err.try_clone().map_err(spawn_err)?;
                cmd.stdin(Stdio::null()).stdout(o).stderr(e);
            }
        }
        let (pid, exit) = self.reaper.spawn(&mut cmd).map_err(spawn_err)?;
        // Close the parent's copies of the child's stdio now (pipes must see EOF later).
        drop(cmd);
        let code = match tokio::time::timeout(COMMAND_TIMEOUT, exit).await {
            Ok(code) => code.unwrap_or(255),
            Err(_) => {
                // SAFETY: kill has no memory-safety preconditions.
                unsafe { libc::kill(pid as i32, libc::SIGKILL) };
                return Err(RuncError::Timeout {
                    runtime: self.binary.clone(),
                    command,
                });
            }
        };
        let stdout = read_all(out);
        if code == 0 {
            return Ok(stdout);
        }
        let stderr = read_all(err);
        let logged = log
            .and_then(|p| std::fs::read_to_string(p).ok())
            .and_then(|l| last_logged_error(&l));
        let message = logged
            .or_else(|| last_logged_error(&stderr))
            .unwrap_or_else(|| {
                let s = stderr.trim();
                if s.is_empty() {
                    format!("exit status {code}")
                } else {
                    s.to_string()
                }
            });
        Err(RuncError::Failed {
            runtime: self.binary.clone(),
            command,
            message,
        })
    }

    /// `create`: sets the container up, its init process waiting for `start`. With `start`,
    /// `run --detach` instead: created and started in one runtime invocation.
    pub async fn create(
        &self,
        id: &str,
        bundle: &Path,
        pid_file: &Path,
        console_socket: Option<&Path>,
        io: ProcessIo,
        start: bool,
    ) -> Result<(), RuncError> {
        let log = bundle.join("runtime.log");
        let _ = std::fs::remove_file(&log);
        let mut cmd = self.base(Some(&log));
        if start {
            cmd.arg("run").arg("--detach");
        } else {
            cmd.arg("create");
        }
        cmd.arg("--bundle").arg(bundle);
        cmd.arg("--pid-file").arg(pid_file);
        if let Some(sock) = console_socket {
            cmd.arg("--console-socket").arg(sock);
        }
        cmd.arg(id);
        self.run(cmd, Some(io), Some(&log)).await.map(|_| ())
    }

    pub async fn start(&self, id: &str) -> Result<(), RuncError> {
        let mut cmd = self.base(None);
        cmd.args(["start", id]);
        self.run(cmd, None, None).await.map(|_| ())
    }

    pub async fn kill(&self, id: &str, signal: u32, all: bool) -> Result<(), RuncError> {
        let mut cmd = self.base(None);
        cmd.arg("kill");
        if all {
            cmd.arg("--all");
        }
        cmd.arg(id).arg(signal.to_string());
        self.run(cmd, None, None).await.map(|_| ())
    }

    pub async fn delete(&self, id: &str, force: bool) -> Result<(), RuncError> {
        let mut cmd = self.base(None);
        cmd.arg("delete");
        if force {
            cmd.arg("--force");
        }
        cmd.arg(id);
        self.run(cmd, None, None).await.map(|_| ())
    }

    /// `exec --detach`: the process is reparented to the shim, which reaps it.
    pub async fn exec(
        &self,
        id: &str,
        process_json: &Path,
        pid_file: &Path,
        console_socket: Option<&Path>,
        io: ProcessIo,
    ) -> Result<(), RuncError> {
        let log = process_json.with_extension("log");
        let _ = std::fs::remove_file(&log);
        let mut cmd = self.base(Some(&log));
        cmd.arg("exec").arg("--detach");
        cmd.arg("--process").arg(process_json);
        cmd.arg("--pid-file").arg(pid_file);
        if let Some(sock) = console_socket {
            cmd.arg("--tty").arg("--console-socket").arg(sock);
        }
        cmd.arg(id);
        let result = self.run(cmd, Some(io), Some(&log)).await.map(|_| ());
        let _ = std::fs::remove_file(&log);
        result
    }

    pub async fn update(&self, id: &str, resources_json: &Path) -> Result<(), RuncError> {
        let mut cmd = self.base(None);
        cmd.arg("update")
            .arg("--resources")
            .arg(resources_json)
            .arg(id);
        self.run(cmd, None, None).await.map(|_| ())
    }

    pub async fn pause(&self, id: &str) -> Result<(), RuncError> {
        let mut cmd = self.base(None);
        cmd.args(["pause", id]);
        self.run(cmd, None, None).await.map(|_| ())
    }

    pub async fn resume(&self, id: &str) -> Result<(), RuncError> {
        let mut cmd = self.base(None);
        cmd.args(["resume", id]);
        self.run(cmd, None, None).await.map(|_| ())
    }

    /// `ps --format json`: the host pids of the container's processes.
    pub async fn ps(&self, id: &str) -> Result<Vec<u32>, RuncError> {
        let mut cmd = self.base(None);
        cmd.args(["ps", "--format", "json", id]);
        let out = self.run(cmd, None, None).await?;
        Ok(serde_json::from_str::<Option<Vec<u32>>>(out.trim())
            .ok()
            .flatten()
            .unwrap_or_default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_last_error_in_a_json_log() {
        let log = r#"{"level":"info","msg":"starting","time":"x"}
{"level":"error","msg":"container_linux.go: starting container process caused: exec: \"nope\": executable file not found in $PATH","time":"x"}
not json
"#;
        assert!(last_logged_error(log)
            .unwrap()
            .contains("executable file not found"));
        assert_eq!(
            last_logged_error("{\"level\":\"info\",\"msg\":\"x\"}"),
            None
        );
    }
}
