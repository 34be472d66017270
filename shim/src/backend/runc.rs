//! The real [`RuntimeCli`]: runs runc (or crun, youki: they share these commands).
//!
//! Every invocation goes through the [`Reaper`] and has a deadline, so a wedged runtime
//! cannot hang the shim. Errors carry the runtime's own message and exit status.

use super::runtime_cli::{
    CheckpointCommand, CreateCommand, ExecCommand, ProcessIo, RuntimeCli, RuntimeCliError,
    RuntimeStatus, COMMAND_TIMEOUT,
};
use crate::reaper::Reaper;
use async_trait::async_trait;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::os::fd::FromRawFd;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;

/// `wait` lasts as long as the container: no deadline of its own (a century).
const WAIT_LIMIT: std::time::Duration = std::time::Duration::from_secs(100 * 365 * 24 * 3600);

pub struct Runc {
    /// The runtime as configured ("runc"), for messages.
    binary: String,
    /// Where it is, looked up on PATH once: every container's create, and each fallback exec,
    /// would otherwise search PATH again (a failed execve per directory before it).
    program: PathBuf,
    root: PathBuf,
    reaper: Arc<Reaper>,
    /// `--systemd-cgroup` on every command ([`Runc::with_systemd_cgroup`]).
    systemd_cgroup: bool,
    /// The handler's own flags, on every command after peapod's ([`Runc::with_args`]).
    args: Vec<String>,
}

/// `binary` as exec would find it: a name without a slash is looked up in PATH's
/// directories (the first executable file); anything else, or a name found nowhere (the
/// exec then fails as it would have), is kept as given.
fn on_path(binary: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    if binary.contains('/') {
        return PathBuf::from(binary);
    }
    std::env::var_os("PATH")
        .and_then(|dirs| {
            std::env::split_paths(&dirs)
                .map(|dir| dir.join(binary))
                .find(|p| {
                    std::fs::metadata(p)
                        .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
                })
        })
        .unwrap_or_else(|| PathBuf::from(binary))
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
            program: on_path(&binary),
            binary,
            root,
            reaper,
            systemd_cgroup: false,
            args: Vec::new(),
        }
    }

    /// Every command with these flags too (a runtime handler's `args`: runsc's
    /// `--platform=systrap`), after `--root`, `--systemd-cgroup` and `--log`.
    pub fn with_args(mut self, args: Vec<String>) -> Runc {
        self.args = args;
        self
    }

    /// Every command with `--systemd-cgroup` (the systemd cgroup driver: cgroupsPath is
    /// `slice:prefix:name`, a scope that runc asks systemd for).
    pub fn with_systemd_cgroup(mut self, on: bool) -> Runc {
        self.systemd_cgroup = on;
        self
    }

    /// The command line up to and including the subcommand.
    fn command(&self, subcommand: &str, log: Option<&Path>) -> Command {
        let mut cmd = Command::new(&self.program);
        cmd.arg("--root").arg(&self.root);
        if self.systemd_cgroup {
            cmd.arg("--systemd-cgroup");
        }
        if let Some(log) = log {
            cmd.arg("--log").arg(log).args(["--log-format", "json"]);
        }
        cmd.args(&self.args);
        cmd.arg(subcommand);
        cmd
    }

    fn failed_as(
        &self,
        program: &str,
        command: &str,
        exit_status: i32,
        message: String,
    ) -> RuntimeCliError {
        RuntimeCliError::Failed {
            runtime: program.to_string(),
            command: command.to_string(),
            exit_status,
            message,
        }
    }

    /// Runs a command to completion; stdout on success, the runtime's message on failure.
    async fn run(
        &self,
        command: &str,
        cmd: Command,
        io: Option<ProcessIo>,
        log: Option<&Path>,
    ) -> Result<String, RuntimeCliError> {
        self.run_as(&self.binary, command, cmd, io, log, COMMAND_TIMEOUT)
            .await
    }

    /// [`Runc::run`] of another program with the runtime's conventions (a JSON `--log`, the
    /// reaper, the deadline), its errors named after `program`.
    async fn run_as(
        &self,
        program: &str,
        command: &str,
        mut cmd: Command,
        io: Option<ProcessIo>,
        log: Option<&Path>,
        limit: std::time::Duration,
    ) -> Result<String, RuntimeCliError> {
        let spawn_err = |source| RuntimeCliError::Spawn {
            runtime: program.to_string(),
            source,
        };
        let (out, err) = (
            memfd("runc-out").map_err(spawn_err)?,
            memfd("runc-err").map_err(spawn_err)?,
        );
        match io {
            Some(io) => {
                let [stdin, stdout, stderr] = io.into_stdio();
                cmd.stdin(stdin).stdout(stdout).stderr(stderr);
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
        let code = match tokio::time::timeout(limit, exit).await {
            Ok(code) => code.unwrap_or(255),
            Err(_) => {
                // SAFETY: kill has no memory-safety preconditions.
                unsafe { libc::kill(pid as i32, libc::SIGKILL) };
                return Err(RuntimeCliError::Timeout {
                    runtime: program.to_string(),
                    command: command.to_string(),
                    limit,
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
        Err(self.failed_as(program, command, code, message))
    }

    async fn simple(&self, subcommand: &str, args: &[&str]) -> Result<String, RuntimeCliError> {
        let mut cmd = self.command(subcommand, None);
        cmd.args(args);
        self.run(subcommand, cmd, None, None).await
    }

    fn read_pid(&self, command: &str, pid_file: &Path) -> Result<u32, RuntimeCliError> {
        self.read_pid_as(&self.binary, command, pid_file)
    }

    fn read_pid_as(
        &self,
        program: &str,
        command: &str,
        pid_file: &Path,
    ) -> Result<u32, RuntimeCliError> {
        std::fs::read_to_string(pid_file)
            .ok()
            .and_then(|s| s.trim().parse::<u32>().ok())
            .ok_or_else(|| RuntimeCliError::NoPidFile {
                runtime: program.to_string(),
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
        let subcommand = match (c.restore, c.start) {
            (Some(_), _) => "restore",
            (None, true) => "run",
            (None, false) => "create",
        };
        let mut cmd = self.command(subcommand, Some(&log));
        if let Some(images) = c.restore {
            // CRIU's log and work files beside the images' copy, in the bundle.
            cmd.arg("--detach").arg("--image-path").arg(images);
            cmd.arg("--work-path").arg(c.bundle);
        } else if c.start {
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

    async fn start(&self, id: &str, io: Option<ProcessIo>) -> Result<(), RuntimeCliError> {
        let mut cmd = self.command("start", None);
        cmd.arg(id);
        self.run("start", cmd, io, None).await.map(drop)
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

    async fn wait(&self, id: &str) -> Result<i32, RuntimeCliError> {
        let mut cmd = self.command("wait", None);
        cmd.arg(id);
        // As long as the container runs.
        let out = self
            .run_as(&self.binary, "wait", cmd, None, None, WAIT_LIMIT)
            .await?;
        let v: serde_json::Value =
            serde_json::from_str(out.trim()).map_err(|e| self.bad_output("wait", e))?;
        v["exitStatus"]
            .as_i64()
            .map(|s| s as i32)
            .ok_or_else(|| self.bad_output("wait", "no exitStatus"))
    }

    async fn checkpoint(&self, id: &str, c: CheckpointCommand<'_>) -> Result<(), RuntimeCliError> {
        let log = c.work_path.join("runtime.log");
        let _ = std::fs::remove_file(&log);
        let mut cmd = self.command("checkpoint", Some(&log));
        // The kubelet's /checkpoint is forensic: the container goes on as if nothing happened.
        cmd.arg("--leave-running");
        cmd.arg("--image-path").arg(c.image_path);
        cmd.arg("--work-path").arg(c.work_path);
        cmd.arg(id);
        self.run_as(&self.binary, "checkpoint", cmd, None, Some(&log), c.timeout)
            .await
            .map(drop)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bare_runtime_name_is_looked_up_on_path_once() {
        // `sh` is on every PATH; what PATH finds is an absolute path to an executable.
        let sh = on_path("sh");
        assert!(sh.is_absolute(), "{sh:?}");
        assert!(sh.ends_with("sh"));
        assert_eq!(on_path("/usr/sbin/runc"), PathBuf::from("/usr/sbin/runc"));
        assert_eq!(on_path("./runc"), PathBuf::from("./runc"));
        assert_eq!(
            on_path("no-such-runtime-anywhere"),
            PathBuf::from("no-such-runtime-anywhere")
        );
    }

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

    /// One test, one reaper: two reapers in one process would reap each other's children.
    #[tokio::test]
    async fn the_real_cli_against_a_scripted_runtime() {
        let reaper = Reaper::start().unwrap();
        state_tells_unknown_from_failed_by_the_list_of_containers(&reaper).await;
        create_passes_its_flags_and_reads_the_pid_file(&reaper).await;
        failures_carry_the_logged_message_and_the_exit_status(&reaper).await;
        crate::backend::residents::tests::a_helper_that_cannot_start_is_reaped_and_its_words_returned(
            &reaper,
        )
        .await;
        crate::backend::tests::the_runtime_gets_what_the_helper_cannot_do(&reaper).await;
    }

    /// A stand-in for runc: a shell script that answers from files in its directory, so the
    /// real `Runc` (argument building, pid files, error and state classification) runs
    /// without root. `state-ID` holds `runc state` output, `list` the `runc list` output,
    /// `fail-CMD` makes CMD log an error and exit 3.
    const SCRIPT: &str = r#"#!/bin/sh
dir=$(dirname "$0")
echo "$@" >> "$dir/calls"
log=
while [ $# -gt 0 ]; do
  case "$1" in
    --root|--log-format) shift 2 ;;
    --log) log=$2; shift 2 ;;
    --*=*) shift ;;
    *) break ;;
  esac
done
cmd=$1; shift
if [ -f "$dir/fail-$cmd" ]; then
  line='{"level":"error","msg":"'"$cmd"' went wrong","time":"x"}'
  if [ -n "$log" ]; then echo "$line" >> "$log"; else echo "$line" >&2; fi
  exit 3
fi
case "$cmd" in
  state)
    id=$1
    [ -f "$dir/state-$id" ] || { echo "no such container" >&2; exit 1; }
    cat "$dir/state-$id" ;;
  list) cat "$dir/list" ;;
  create|run|exec|restore)
    while [ $# -gt 0 ]; do
      case "$1" in
        --pid-file) [ -f "$dir/no-pid" ] || echo 4242 > "$2"; shift 2 ;;
        *) shift ;;
      esac
    done ;;
  ps) echo '[7,8]' ;;
esac
exit 0
"#;

    fn fake_runc(dir: &Path, reaper: &Arc<Reaper>) -> Runc {
        use std::os::unix::fs::PermissionsExt;
        let bin = dir.join("runc");
        std::fs::write(&bin, SCRIPT).unwrap();
        std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::write(dir.join("list"), "null\n").unwrap();
        Runc::new(
            bin.to_string_lossy().into_owned(),
            dir.join("root"),
            reaper.clone(),
        )
    }

    fn calls(dir: &Path) -> Vec<String> {
        std::fs::read_to_string(dir.join("calls"))
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    }

    async fn state_tells_unknown_from_failed_by_the_list_of_containers(reaper: &Arc<Reaper>) {
        let dir = tempfile::tempdir().unwrap();
        let runc = fake_runc(dir.path(), reaper);
        std::fs::write(
            dir.path().join("state-c1"),
            r#"{"id":"c1","status":"paused"}"#,
        )
        .unwrap();
        assert_eq!(runc.state("c1").await.unwrap(), Some(RuntimeStatus::Paused));
        // `state` fails and `list` does not have it: the runtime does not know it.
        assert_eq!(runc.state("c2").await.unwrap(), None);
        // `state` fails but `list` has it: a real failure, kept as the error.
        std::fs::write(
            dir.path().join("list"),
            r#"[{"id":"c2","status":"running"}]"#,
        )
        .unwrap();
        let err = runc.state("c2").await.unwrap_err();
        assert!(
            matches!(err, RuntimeCliError::Failed { exit_status: 1, .. }),
            "{err}"
        );
        // A list we cannot read is not taken for "unknown".
        std::fs::write(dir.path().join("list"), "garbage").unwrap();
        assert!(runc.state("c3").await.is_err());
    }

    async fn create_passes_its_flags_and_reads_the_pid_file(reaper: &Arc<Reaper>) {
        let dir = tempfile::tempdir().unwrap();
        let runc = fake_runc(dir.path(), reaper);
        let bundle = dir.path().join("bundle");
        std::fs::create_dir(&bundle).unwrap();
        let pid_file = bundle.join("init.pid");
        let create = |start| CreateCommand {
            bundle: &bundle,
            pid_file: &pid_file,
            console_socket: None,
            io: ProcessIo::null(),
            start,
            native: false,
            restore: None,
        };
        assert_eq!(runc.create("c1", create(true)).await.unwrap(), 4242);
        let root = dir.path().join("root");
        let log = bundle.join("runtime.log");
        assert_eq!(
            calls(dir.path()),
            vec![format!(
                "--root {} --log {} --log-format json run --detach --bundle {} --pid-file {} c1",
                root.display(),
                log.display(),
                bundle.display(),
                pid_file.display()
            )]
        );
        // A restore: `restore --detach` from the images, CRIU's files in the bundle.
        let images = dir.path().join("images");
        let restore = CreateCommand {
            restore: Some(&images),
            ..create(false)
        };
        assert_eq!(runc.create("c2", restore).await.unwrap(), 4242);
        assert_eq!(
            calls(dir.path())[1],
            format!(
                "--root {} --log {} --log-format json restore --detach --image-path {} --work-path {} --bundle {} --pid-file {} c2",
                root.display(),
                log.display(),
                images.display(),
                bundle.display(),
                bundle.display(),
                pid_file.display()
            )
        );
        // A checkpoint leaves the container running, its log in the work path.
        let work = dir.path().join("work");
        std::fs::create_dir(&work).unwrap();
        let dump = CheckpointCommand {
            image_path: &images,
            work_path: &work,
            timeout: COMMAND_TIMEOUT,
        };
        runc.checkpoint("c2", dump).await.unwrap();
        assert_eq!(
            calls(dir.path())[2],
            format!(
                "--root {} --log {} --log-format json checkpoint --leave-running --image-path {} --work-path {} c2",
                root.display(),
                work.join("runtime.log").display(),
                images.display(),
                work.display(),
            )
        );
        std::fs::remove_file(&pid_file).unwrap();
        std::fs::write(dir.path().join("no-pid"), "").unwrap();
        let err = runc.create("c1", create(false)).await.unwrap_err();
        assert!(matches!(err, RuntimeCliError::NoPidFile { .. }), "{err}");
    }

    async fn failures_carry_the_logged_message_and_the_exit_status(reaper: &Arc<Reaper>) {
        let dir = tempfile::tempdir().unwrap();
        let runc = fake_runc(dir.path(), reaper);
        std::fs::write(dir.path().join("fail-kill"), "").unwrap();
        match runc.kill("c1", 9, true).await.unwrap_err() {
            RuntimeCliError::Failed {
                command,
                exit_status,
                message,
                ..
            } => {
                assert_eq!((command.as_str(), exit_status), ("kill", 3));
                assert_eq!(message, "kill went wrong");
            }
            other => panic!("{other:?}"),
        }
        assert!(calls(dir.path())[0].ends_with("kill --all c1 9"));
        // A handler's flags: after peapod's, before the command.
        let flagged = fake_runc(dir.path(), reaper).with_args(vec!["--platform=systrap".into()]);
        std::fs::remove_file(dir.path().join("fail-kill")).unwrap();
        flagged.kill("c1", 9, false).await.unwrap();
        assert_eq!(
            calls(dir.path())[1],
            format!(
                "--root {} --platform=systrap kill c1 9",
                dir.path().join("root").display()
            )
        );
        // Through the --log file for commands that have one.
        std::fs::write(dir.path().join("fail-exec"), "").unwrap();
        let spec = dir.path().join("exec-e1.json");
        std::fs::write(&spec, "{}").unwrap();
        let err = runc
            .exec(
                "c1",
                ExecCommand {
                    bundle: dir.path(),
                    init_pid: 1,
                    process_json: &spec,
                    pid_file: &dir.path().join("exec-e1.pid"),
                    console_socket: None,
                    io: ProcessIo::null(),
                },
            )
            .await
            .unwrap_err();
        assert!(err.to_string().ends_with("exec: exec went wrong"), "{err}");
        // The exec's log is removed however it ends.
        assert!(!dir.path().join("exec-e1.log").exists());
        assert_eq!(runc.ps("c1").await.unwrap(), vec![7, 8]);
    }
}
