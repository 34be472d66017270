//! The real [`RuntimeCli`]: runs runc (or crun, youki: they share these commands).
//!
//! Every invocation goes through the [`Reaper`] and has a deadline, so a wedged runtime
//! cannot hang the shim. Errors carry the runtime's own message and exit status.

use crate::reaper::Reaper;
use crate::runtime_cli::{
    CreateCommand, ExecCommand, ProcessIo, RuntimeCli, RuntimeCliError, RuntimeStatus,
    COMMAND_TIMEOUT,
};
use async_trait::async_trait;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::os::fd::FromRawFd;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;

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

    /// The command line up to and including the subcommand.
    fn command(&self, subcommand: &str, log: Option<&Path>) -> Command {
        let mut cmd = Command::new(&self.binary);
        cmd.arg("--root").arg(&self.root);
        if let Some(log) = log {
            cmd.arg("--log").arg(log).args(["--log-format", "json"]);
        }
        cmd.arg(subcommand);
        cmd
    }

    fn failed(&self, command: &str, exit_status: i32, message: String) -> RuntimeCliError {
        RuntimeCliError::Failed {
            runtime: self.binary.clone(),
            command: command.to_string(),
            exit_status,
            message,
        }
    }

    /// Runs a command to completion; stdout on success, the runtime's message on failure.
    async fn run(
        &self,
        command: &str,
        mut cmd: Command,
        io: Option<ProcessIo>,
        log: Option<&Path>,
    ) -> Result<String, RuntimeCliError> {
        let spawn_err = |source| RuntimeCliError::Spawn {
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
                return Err(RuntimeCliError::Timeout {
                    runtime: self.binary.clone(),
                    command: command.to_string(),
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
        Err(self.failed(command, code, message))
    }

    async fn simple(&self, subcommand: &str, args: &[&str]) -> Result<String, RuntimeCliError> {
        let mut cmd = self.command(subcommand, None);
        cmd.args(args);
        self.run(subcommand, cmd, None, None).await
    }

    fn read_pid(&self, command: &str, pid_file: &Path) -> Result<u32, RuntimeCliError> {
        std::fs::read_to_string(pid_file)
            .ok()
            .and_then(|s| s.trim().parse::<u32>().ok())
            .ok_or_else(|| RuntimeCliError::NoPidFile {
                runtime: self.binary.clone(),
                command: command.to_string(),
                path: pid_file.to_path_buf(),
            })
    }

    fn bad_output(&self, command: &str, message: impl std::fmt::Display) -> RuntimeCliError {
        RuntimeCliError::BadOutput {
            runtime: self.binary.clone(),
            command: command.to_string(),
            message: message.to_string(),
        }
    }

    /// Whether the runtime lists a container `id` (`list --format json`: an array of states,
    /// or `null` when there are none).
    async fn lists(&self, id: &str) -> Result<bool, RuntimeCliError> {
        let out = self.simple("list", &["--format", "json"]).await?;
        let listed: Option<Vec<serde_json::Value>> =
            serde_json::from_str(out.trim()).map_err(|e| self.bad_output("list", e))?;
        Ok(listed.unwrap_or_default().iter().any(|c| c["id"] == id))
    }
}

#[async_trait]
impl RuntimeCli for Runc {
    async fn create(&self, id: &str, c: CreateCommand<'_>) -> Result<u32, RuntimeCliError> {
        let log = c.bundle.join("runtime.log");
        let _ = std::fs::remove_file(&log);
        let subcommand = if c.start { "run" } else { "create" };
        let mut cmd = self.command(subcommand, Some(&log));
        if c.start {
            cmd.arg("--detach");
        }
        cmd.arg("--bundle").arg(c.bundle);
        cmd.arg("--pid-file").arg(c.pid_file);
        if let Some(sock) = c.console_socket {
            cmd.arg("--console-socket").arg(sock);
        }
        cmd.arg(id);
        self.run(subcommand, cmd, Some(c.io), Some(&log)).await?;
        self.read_pid(subcommand, c.pid_file)
    }

    async fn start(&self, id: &str) -> Result<(), RuntimeCliError> {
        self.simple("start", &[id]).await.map(drop)
    }

    async fn state(&self, id: &str) -> Result<Option<RuntimeStatus>, RuntimeCliError> {
        match self.simple("state", &[id]).await {
            Ok(out) => {
                let v: serde_json::Value =
                    serde_json::from_str(out.trim()).map_err(|e| self.bad_output("state", e))?;
                let status = v["status"]
                    .as_str()
                    .ok_or_else(|| self.bad_output("state", "no status"))?;
                Ok(Some(RuntimeStatus::parse(status)))
            }
            // `state` fails the same way for "no such container" and for real trouble; the
            // list of containers tells the two apart without reading the message.
            Err(err @ RuntimeCliError::Failed { .. }) => match self.lists(id).await {
                Ok(false) => Ok(None),
                Ok(true) | Err(_) => Err(err),
            },
            Err(err) => Err(err),
        }
    }

    async fn kill(&self, id: &str, signal: u32, all: bool) -> Result<(), RuntimeCliError> {
        let signal = signal.to_string();
        let args: &[&str] = if all {
            &["--all", id, &signal]
        } else {
            &[id, &signal]
        };
        self.simple("kill", args).await.map(drop)
    }

    async fn delete(&self, id: &str, force: bool) -> Result<(), RuntimeCliError> {
        let args: &[&str] = if force { &["--force", id] } else { &[id] };
        self.simple("delete", args).await.map(drop)
    }

    async fn exec(&self, id: &str, c: ExecCommand<'_>) -> Result<u32, RuntimeCliError> {
        let log = c.process_json.with_extension("log");
        let _ = std::fs::remove_file(&log);
        let mut cmd = self.command("exec", Some(&log));
        cmd.arg("--detach");
        cmd.arg("--process").arg(c.process_json);
        cmd.arg("--pid-file").arg(c.pid_file);
        if let Some(sock) = c.console_socket {
            cmd.arg("--tty").arg("--console-socket").arg(sock);
        }
        cmd.arg(id);
        let result = self.run("exec", cmd, Some(c.io), Some(&log)).await;
        let _ = std::fs::remove_file(&log);
        result?;
        self.read_pid("exec", c.pid_file)
    }

    async fn update(&self, id: &str, resources_json: &Path) -> Result<(), RuntimeCliError> {
        let mut cmd = self.command("update", None);
        cmd.arg("--resources").arg(resources_json).arg(id);
        self.run("update", cmd, None, None).await.map(drop)
    }

    async fn pause(&self, id: &str) -> Result<(), RuntimeCliError> {
        self.simple("pause", &[id]).await.map(drop)
    }

    async fn resume(&self, id: &str) -> Result<(), RuntimeCliError> {
        self.simple("resume", &[id]).await.map(drop)
    }

    async fn ps(&self, id: &str) -> Result<Vec<u32>, RuntimeCliError> {
        let out = self.simple("ps", &["--format", "json", id]).await?;
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
