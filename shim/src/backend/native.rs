//! Containers the shim's helper made (`peapod-shim nsexec`, the `peapod-runtime` crate),
//! from the shim's side: a pod's pause started (`--pause`) or an app container created
//! (`--create`) without the runtime CLI, and every later command on them answered here from
//! the init's pidfd and the container's cgroup (start: a byte on the pipe a created init
//! waits on; state, kill, delete, update, pause, resume, ps).
//!
//! Which containers come here is chosen before anything starts ([`super::Backends::create`]),
//! from the same spec the helper reads and refuses by (`peapod_runtime::pause::unsupported`,
//! `create::unsupported`): a user namespace, hooks, a terminal, the systemd driver on a v1
//! host, a filesystem type it does not mount, go to the runtime as before. A helper that fails anyway (after undoing what it made) leaves the container to
//! the runtime, whose words then tell a spec neither can do.
//!
//! Why: `runc run` of the pause was the longest step of RunPodSandbox, and `runc create`
//! about 35 of CreateContainer's 44 ms here (two Go programs starting, the init's re-exec
//! and Go runtime, runc's state files, for a pause the mounts of a root nothing reads); the
//! helper does the same work in a few milliseconds.

use super::runtime_cli::{CreateCommand, RuntimeCliError, RuntimeStatus};
use super::Helpers;
use peapod_host::sync::LockUnpoisoned;
use peapod_runtime::cgroups::Cgroups;
use peapod_runtime::create::{START_FD, STDERR_FD};
use peapod_runtime::helper::Helper;
use peapod_runtime::pidfd::Pidfd;
use peapod_runtime::spec::{self, Resources};
use peapod_runtime::started;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;

/// How the pause helper is named in errors (as runc's are named "runc").
const PAUSE: &str = "peapod-shim nsexec --pause";
/// How the create helper is named in errors.
const CREATE: &str = "peapod-shim nsexec --create";

/// A pod's pause the helper started (created and started at once).
pub struct Pause {
    pid: u32,
    made: Made,
}

/// An app container the helper created; its init waits for its start.
pub struct Created {
    made: Made,
    /// The start pipe's write end, until the start.
    start: Mutex<Option<OwnedFd>>,
}

/// What the shim holds of a container a helper made: its init and its cgroup.
struct Made {
    /// The helper's name in errors.
    helper: &'static str,
    pidfd: Pidfd,
    cgroups_path: String,
}

impl Made {
    fn new(helper: &'static str, pidfd: Pidfd, cgroups_path: &str) -> Made {
        Made {
            helper,
            pidfd,
            cgroups_path: cgroups_path.to_string(),
        }
    }

    fn kill(&self, signal: u32) -> Result<(), RuntimeCliError> {
        self.pidfd
            .signal(signal)
            .map_err(|e| RuntimeCliError::failed(self.helper, "kill", e.to_string()))
    }

    /// The end of a delete: the init killed if it still runs, then the cgroup removed (which
    /// waits for the killed to leave before each directory goes).
    async fn remove(&self, cgroups: &Cgroups) -> Result<(), RuntimeCliError> {
        let failed = |message: String| RuntimeCliError::failed(self.helper, "delete", message);
        if self.pidfd.running() {
            self.pidfd
                .signal(libc::SIGKILL as u32)
                .map_err(|e| failed(e.to_string()))?;
        }
        let path = &self.cgroups_path;
        super::remove_cgroup(cgroups, path)
            .await
            .map_err(|e| failed(format!("remove the cgroup {path}: {e}")))
    }
}

/// `peapod-shim nsexec --pause` for the pause of `cmd`; its pid and the pause. The helper
/// gets copies of the stdio: the runtime needs them if it fails.
pub async fn start_pause(
    helpers: &Helpers,
    cgroups: &Cgroups,
    cmd: &CreateCommand<'_>,
    cgroups_path: &str,
) -> Result<(u32, Pause), RuntimeCliError> {
    // The helper's stdio is the pause's.
    let [stdin, stdout, _] = cmd.io.try_clone().into_stdio();
    let set_up = |c: &mut Command| {
        c.stdin(stdin).stdout(stdout);
    };
    let driver = cgroups.driver();
    let pause = |bundle, pid_file| Helper::Pause {
        bundle,
        pid_file,
        driver,
    };
    match run(helpers, cgroups, cgroups_path, cmd, pause, set_up).await {
        Ok((pid, pidfd)) => {
            let made = Made::new(PAUSE, pidfd, cgroups_path);
            Ok((pid, Pause { pid, made }))
        }
        Err(Failure::Spawn(e)) => Err(RuntimeCliError::spawn(PAUSE, e)),
        Err(Failure::Exit(code, message)) => Err(RuntimeCliError::Failed {
            runtime: PAUSE.into(),
            command: "run".into(),
            exit_status: code,
            message,
        }),
    }
}

/// `peapod-shim nsexec --create` for the container of `cmd`; its init's pid and the
/// container, or why not (the runtime then creates it). The helper gets copies of the
/// stdio: the runtime needs them if it fails.
pub async fn create(
    helpers: &Helpers,
    cgroups: &Cgroups,
    cmd: &CreateCommand<'_>,
    cgroups_path: &str,
) -> Result<(u32, Created), String> {
    let (start_r, start_w) = pipe().map_err(|e| format!("pipe: {e}"))?;
    let io = cmd.io.try_clone();
    let stderr = match io.stderr {
        Some(fd) => fd,
        None => std::fs::File::open("/dev/null")
            .map(OwnedFd::from)
            .map_err(|e| format!("open /dev/null: {e}"))?,
    };
    let to_stdio = |fd: Option<OwnedFd>| fd.map(Stdio::from).unwrap_or_else(Stdio::null);
    let set_up = move |c: &mut Command| {
        let (start_fd, stderr_fd) = (start_r.as_raw_fd(), stderr.as_raw_fd());
        c.stdin(to_stdio(io.stdin)).stdout(to_stdio(io.stdout));
        // The container's stderr is fd 4 (the helper's own is the log).
        // SAFETY: only async-signal-safe calls (fcntl, dup2, close) between fork and exec.
        unsafe {
            c.pre_exec(move || {
                // Above the targets first, so that neither move overwrites the other.
                let a = libc::fcntl(start_fd, libc::F_DUPFD, 10);
                let b = libc::fcntl(stderr_fd, libc::F_DUPFD, 10);
                if a < 0 || b < 0 || libc::dup2(a, START_FD) < 0 || libc::dup2(b, STDERR_FD) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                libc::close(a);
                libc::close(b);
                Ok(())
            });
        }
        // Open until the helper is spawned with its copies.
        (start_r, stderr)
    };
    let driver = cgroups.driver();
    let create = |bundle, pid_file| Helper::Create {
        bundle,
        pid_file,
        driver,
    };
    match run(helpers, cgroups, cgroups_path, cmd, create, set_up).await {
        Ok((pid, pidfd)) => Ok((
            pid,
            Created {
                made: Made::new(CREATE, pidfd, cgroups_path),
                start: Mutex::new(Some(start_w)),
            },
        )),
        Err(Failure::Spawn(e)) => Err(format!(
            "run {}: {e}",
            helpers.program.host_path().display()
        )),
        // The init that got as far as waiting for its start ends with the pipe.
        Err(Failure::Exit(code, message)) => Err(format!("exit status {code}: {message}")),
    }
}

/// Why a helper started nothing.
enum Failure {
    Spawn(std::io::Error),
    Exit(i32, String),
}

/// Runs the helper `which` makes of the bundle and pid file of `cmd` (its stdio and descriptors as `set_up` gives
/// them; what it returns is kept until the helper is spawned; the helper's own words go to
/// `<bundle>/runtime.log`) and waits for it: what it started, held by a pidfd, or why not,
/// once what joined the cgroup `cgroups_path` (a process that started and failed later) has
/// gone with it.
async fn run<T>(
    helpers: &Helpers,
    cgroups: &Cgroups,
    cgroups_path: &str,
    cmd: &CreateCommand<'_>,
    which: impl FnOnce(PathBuf, PathBuf) -> Helper,
    set_up: impl FnOnce(&mut Command) -> T,
) -> Result<(u32, Pidfd), Failure> {
    let log = cmd.bundle.join("runtime.log");
    let _ = std::fs::remove_file(cmd.pid_file);
    let log_file = std::fs::File::create(&log).map_err(|e| {
        let at = format!("create {}: {e}", log.display());
        Failure::Spawn(std::io::Error::new(e.kind(), at))
    })?;
    let helper = which(cmd.bundle.to_path_buf(), cmd.pid_file.to_path_buf());
    let mut command = helper.command(&helpers.program);
    command.stderr(log_file);
    let held = set_up(&mut command);
    let spawned = helpers.reaper.spawn(&mut command);
    drop(command);
    drop(held);
    let (_, exit) = spawned.map_err(Failure::Spawn)?;
    let code = exit.await.unwrap_or(255);
    match started::read(code, cmd.pid_file, &log) {
        Ok(started) => Ok(started),
        Err(message) => {
            let _ = super::remove_cgroup(cgroups, cgroups_path).await;
            Err(Failure::Exit(code, message))
        }
    }
}

impl Pause {
    pub fn state(&self) -> RuntimeStatus {
        if self.made.pidfd.running() {
            RuntimeStatus::Running
        } else {
            RuntimeStatus::Stopped
        }
    }

    /// `all` is the same here: nothing but the pause is in its cgroup.
    pub fn kill(&self, signal: u32) -> Result<(), RuntimeCliError> {
        self.made.kill(signal)
    }

    pub async fn delete(
        &self,
        id: &str,
        force: bool,
        cgroups: &Cgroups,
    ) -> Result<(), RuntimeCliError> {
        if !force && self.made.pidfd.running() {
            return Err(RuntimeCliError::failed(
                PAUSE,
                "delete",
                format!("pause {id} (pid {}) is running", self.pid),
            ));
        }
        self.made.remove(cgroups).await
    }

    pub fn ps(&self) -> Vec<u32> {
        if self.made.pidfd.running() {
            vec![self.pid]
        } else {
            Vec::new()
        }
    }

    /// What a pause started natively does not do: exec, update, pause, resume.
    pub fn not_supported(command: &str) -> RuntimeCliError {
        RuntimeCliError::failed(PAUSE, command, "not supported for a pause started natively")
    }
}

impl Created {
    fn started(&self) -> bool {
        self.start.lock_unpoisoned().is_none()
    }

    /// The start: one byte on the pipe the init waits on.
    pub fn start(&self, id: &str) -> Result<(), RuntimeCliError> {
        let Some(w) = self.start.lock_unpoisoned().take() else {
            return Err(failed(
                "start",
                format!("container {id} is not in the created state"),
            ));
        };
        // SAFETY: a one-byte write to a pipe this shim owns.
        let n = unsafe { libc::write(w.as_raw_fd(), [0u8].as_ptr().cast(), 1) };
        if n != 1 {
            return Err(failed(
                "start",
                format!(
                    "container {id}'s init is gone: {}",
                    std::io::Error::last_os_error()
                ),
            ));
        }
        Ok(())
    }

    pub fn state(&self) -> RuntimeStatus {
        if !self.made.pidfd.running() {
            RuntimeStatus::Stopped
        } else if !self.started() {
            RuntimeStatus::Created
        } else {
            RuntimeStatus::Running
        }
    }

    /// A signal to the init; with `all`, to every process of its cgroup.
    pub async fn kill(
        &self,
        signal: u32,
        all: bool,
        cgroups: &Cgroups,
    ) -> Result<(), RuntimeCliError> {
        self.made.kill(signal)?;
        if all {
            let (cgroups, path) = (cgroups.clone(), self.made.cgroups_path.clone());
            tokio::task::spawn_blocking(move || cgroups.signal_all(&path, signal))
                .await
                .map_err(|e| failed("kill", e.to_string()))?;
        }
        Ok(())
    }

    pub async fn delete(
        &self,
        id: &str,
        force: bool,
        cgroups: &Cgroups,
    ) -> Result<(), RuntimeCliError> {
        if self.made.pidfd.running() {
            // A created container's init waits for its start: delete kills it, as runc's does.
            if !force && self.started() {
                return Err(failed(
                    "delete",
                    format!("cannot delete container {id} that is not stopped: running"),
                ));
            }
            self.start.lock_unpoisoned().take();
        }
        self.made.remove(cgroups).await
    }

    /// An exec the native path left to the runtime: a container made without it has none.
    pub fn exec_needs_runtime(id: &str) -> RuntimeCliError {
        failed(
            "exec",
            format!("container {id} was created natively, and this exec needs runc (an enforced SELinux label or a seccomp listener)"),
        )
    }

    /// `runc update`: the resources in `resources_json` written to the container's cgroup
    /// (with the systemd driver, its scope's properties first), off the shim's
    /// single-threaded runtime: systemd is asked over D-Bus.
    pub async fn update(
        &self,
        resources_json: &Path,
        cgroups: &Cgroups,
    ) -> Result<(), RuntimeCliError> {
        let resources: Resources = spec::read(resources_json).map_err(|e| failed("update", e))?;
        if let Some(why) = cgroups.unsupported_update(&resources) {
            return Err(failed("update", format!("cannot update {why}")));
        }
        let (cgroups, path) = (cgroups.clone(), self.made.cgroups_path.clone());
        tokio::task::spawn_blocking(move || cgroups.update(&path, &resources))
            .await
            .map_err(|e| failed("update", e.to_string()))?
            .map_err(|e| failed("update", e))
    }

    /// `runc pause` (`frozen`) or `runc resume`.
    pub async fn freeze(&self, frozen: bool, cgroups: &Cgroups) -> Result<(), RuntimeCliError> {
        let command = if frozen { "pause" } else { "resume" };
        let (cgroups, path) = (cgroups.clone(), self.made.cgroups_path.clone());
        tokio::task::spawn_blocking(move || cgroups.freeze(&path, frozen))
            .await
            .map_err(|e| failed(command, e.to_string()))?
            .map_err(|e| failed(command, e))
    }

    pub fn ps(&self, cgroups: &Cgroups) -> Vec<u32> {
        cgroups
            .members(&self.made.cgroups_path)
            .into_iter()
            .map(|p| p as u32)
            .collect()
    }
}

fn failed(command: &str, message: impl Into<String>) -> RuntimeCliError {
    RuntimeCliError::failed(CREATE, command, message)
}

fn pipe() -> std::io::Result<(OwnedFd, OwnedFd)> {
    use std::os::fd::FromRawFd;
    let mut fds = [0; 2];
    // SAFETY: pipe2 fills two descriptors, owned from here on.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: fresh descriptors.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}
