//! The runtime with app containers created natively ([`crate::nsexec::create`]): a `create`
//! whose spec the helper can do never reaches runc, and every later command on that
//! container is answered here from its init's pidfd and its cgroup (start: a byte on the
//! pipe its init waits on; kill, state, ps, pause, resume, update, delete). Execs are the
//! layer above's ([`crate::native_exec`]), whose helper joins any container by its init's
//! pid; what that layer leaves to the runtime cannot be done for a native container and is
//! refused with the reason.
//!
//! A spec the helper cannot do (a user namespace, hooks, a terminal, a cgroup v2 host, a
//! filesystem type it does not mount) is created by the runtime as before: the choice is
//! made before anything starts, from the same file the helper reads. A helper that fails
//! anyway (after its cgroup is removed) leaves the create to the runtime, whose words then
//! tell a spec neither can create.
//!
//! Why: `runc create` was about 35 of CreateContainer's 44 ms here (two Go programs
//! starting, the init's re-exec and Go runtime, runc's state files); the helper does the
//! same work in a few.

use crate::native_pause::started_process;
use crate::native_runc::remove_cgroup;
use crate::nsexec::create::{self, ContainerSpec, Host};
use crate::nsexec::spec;
use crate::pidfd::Pidfd;
use crate::reaper::Reaper;
use crate::runtime_cli::{CreateCommand, ExecCommand, RuntimeCli, RuntimeCliError, RuntimeStatus};
use async_trait::async_trait;
use std::collections::HashMap;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};

const NAME: &str = "peapod-shim nsexec --create";

/// A container this shim created.
struct Created {
    pidfd: Pidfd,
    cgroups_path: String,
    /// The start pipe's write end, until the start.
    start: Mutex<Option<OwnedFd>>,
}

impl Created {
    fn started(&self) -> bool {
        self.start
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_none()
    }
}

/// How app containers are created (the shim's `--create`, the daemon's `runtime.create`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CreateMode {
    /// The helper where it can, the runtime elsewhere.
    Native,
    /// Always `runc create`.
    Runtime,
}

impl CreateMode {
    pub fn parse(s: &str) -> Option<CreateMode> {
        match s {
            "native" => Some(CreateMode::Native),
            "runc" | "runtime" => Some(CreateMode::Runtime),
            _ => None,
        }
    }
}

pub struct NativeCreate {
    runtime: Arc<dyn RuntimeCli>,
    /// Creates may be native: the runtime is runc (whose containers these stand in for).
    enabled: bool,
    helper: PathBuf,
    reaper: Arc<Reaper>,
    host: Host,
    created: Mutex<HashMap<String, Arc<Created>>>,
}

impl NativeCreate {
    /// `helper`: this program (`peapod-shim`), run as `peapod-shim nsexec --create`.
    pub fn new(
        runtime: Arc<dyn RuntimeCli>,
        runtime_binary: &str,
        mode: CreateMode,
        helper: PathBuf,
        reaper: Arc<Reaper>,
    ) -> NativeCreate {
        let is_runc = Path::new(runtime_binary)
            .file_name()
            .is_some_and(|n| n == "runc");
        NativeCreate {
            runtime,
            enabled: is_runc && mode == CreateMode::Native,
            helper,
            reaper,
            host: Host::detect(),
            created: Mutex::new(HashMap::new()),
        }
    }

    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Created>>> {
        self.created.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn native(&self, id: &str) -> Option<Arc<Created>> {
        self.map().get(id).cloned()
    }

    /// The container's spec if the helper can create it; why not otherwise.
    fn spec_for_native(&self, c: &CreateCommand<'_>) -> Result<ContainerSpec, String> {
        if !self.enabled || c.start || c.native {
            return Err("not asked for".into());
        }
        if c.console_socket.is_some() {
            return Err("a terminal".into());
        }
        let spec: ContainerSpec = spec::read(&c.bundle.join("config.json"))?;
        match create::unsupported(&spec, &self.host) {
            Some(why) => Err(why),
            None => Ok(spec),
        }
    }

    async fn create_native(
        &self,
        id: &str,
        c: &CreateCommand<'_>,
        spec: &ContainerSpec,
    ) -> Result<u32, String> {
        let log = c.bundle.join("runtime.log");
        let _ = std::fs::remove_file(c.pid_file);
        let log_file =
            std::fs::File::create(&log).map_err(|e| format!("create {}: {e}", log.display()))?;
        let (start_r, start_w) = pipe().map_err(|e| format!("pipe: {e}"))?;
        let dup = |f: &Option<OwnedFd>| f.as_ref().and_then(|f| f.try_clone().ok());
        let stderr = match dup(&c.io.stderr) {
            Some(fd) => fd,
            None => std::fs::File::open("/dev/null")
                .map(OwnedFd::from)
                .map_err(|e| format!("open /dev/null: {e}"))?,
        };
        let to_stdio = |fd: Option<OwnedFd>| fd.map(Stdio::from).unwrap_or_else(Stdio::null);
        let mut cmd = Command::new(&self.helper);
        cmd.args(["nsexec", "--create", "--bundle"])
            .arg(c.bundle)
            .arg("--pid-file")
            .arg(c.pid_file)
            .stdin(to_stdio(dup(&c.io.stdin)))
            .stdout(to_stdio(dup(&c.io.stdout)))
            // The helper's own words go to the log; the container's stderr is fd 4.
            .stderr(log_file);
        let (start_fd, stderr_fd) = (start_r.as_raw_fd(), stderr.as_raw_fd());
        // SAFETY: only async-signal-safe calls (fcntl, dup2) between fork and exec.
        unsafe {
            cmd.pre_exec(move || {
                // Above the targets first, so that neither move overwrites the other.
                let a = libc::fcntl(start_fd, libc::F_DUPFD, 10);
                let b = libc::fcntl(stderr_fd, libc::F_DUPFD, 10);
                if a < 0
                    || b < 0
                    || libc::dup2(a, create::START_FD) < 0
                    || libc::dup2(b, create::STDERR_FD) < 0
                {
                    return Err(std::io::Error::last_os_error());
                }
                libc::close(a);
                libc::close(b);
                Ok(())
            });
        }
        let spawned = self.reaper.spawn(&mut cmd);
        drop(cmd);
        drop(start_r);
        drop(stderr);
        let (_, exit) = spawned.map_err(|e| format!("run {}: {e}", self.helper.display()))?;
        let code = exit.await.unwrap_or(255);
        let started = started_process(code, c.pid_file, &log);
        match started {
            Ok((pid, pidfd)) => {
                self.map().insert(
                    id.to_string(),
                    Arc::new(Created {
                        pidfd,
                        cgroups_path: spec.linux.cgroups_path.clone(),
                        start: Mutex::new(Some(start_w)),
                    }),
                );
                Ok(pid)
            }
            Err(message) => {
                // The init that got as far as its cgroup goes with it (dropping the pipe
                // ends one that waits for its start).
                drop(start_w);
                let _ = remove_cgroup(&spec.linux.cgroups_path).await;
                Err(format!("exit status {code}: {message}"))
            }
        }
    }
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

fn failed(command: &str, message: impl Into<String>) -> RuntimeCliError {
    RuntimeCliError::failed(NAME, command, message)
}

#[async_trait]
impl RuntimeCli for NativeCreate {
    async fn create(&self, id: &str, cmd: CreateCommand<'_>) -> Result<u32, RuntimeCliError> {
        let spec = match self.spec_for_native(&cmd) {
            Ok(spec) => spec,
            Err(why) => {
                if self.enabled && !cmd.start && !cmd.native {
                    eprintln!("container {id} through the runtime: {why}");
                }
                return self.runtime.create(id, cmd).await;
            }
        };
        match self.create_native(id, &cmd, &spec).await {
            Ok(pid) => Ok(pid),
            Err(why) => {
                // What the helper met, runc may not (a host it did not foresee); a spec
                // neither can create fails with runc's words.
                eprintln!("container {id} through the runtime: {why}");
                self.runtime.create(id, cmd).await
            }
        }
    }
    async fn start(&self, id: &str) -> Result<(), RuntimeCliError> {
        let Some(c) = self.native(id) else {
            return self.runtime.start(id).await;
        };
        let w = c.start.lock().unwrap_or_else(|p| p.into_inner()).take();
        let Some(w) = w else {
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
    async fn state(&self, id: &str) -> Result<Option<RuntimeStatus>, RuntimeCliError> {
        match self.native(id) {
            Some(c) if !c.pidfd.running() => Ok(Some(RuntimeStatus::Stopped)),
            Some(c) if !c.started() => Ok(Some(RuntimeStatus::Created)),
            Some(_) => Ok(Some(RuntimeStatus::Running)),
            None => self.runtime.state(id).await,
        }
    }
    async fn kill(&self, id: &str, signal: u32, all: bool) -> Result<(), RuntimeCliError> {
        let Some(c) = self.native(id) else {
            return self.runtime.kill(id, signal, all).await;
        };
        c.pidfd
            .signal(signal)
            .map_err(|e| failed("kill", e.to_string()))?;
        if all {
            let path = c.cgroups_path.clone();
            tokio::task::spawn_blocking(move || signal_all(&path, signal))
                .await
                .map_err(|e| failed("kill", e.to_string()))?;
        }
        Ok(())
    }
    async fn delete(&self, id: &str, force: bool) -> Result<(), RuntimeCliError> {
        let Some(c) = self.native(id) else {
            return self.runtime.delete(id, force).await;
        };
        if c.pidfd.running() {
            // A created container's init waits for its start: delete kills it, as runc's does.
            if !force && c.started() {
                return Err(failed(
                    "delete",
                    format!("cannot delete container {id} that is not stopped: running"),
                ));
            }
            c.start.lock().unwrap_or_else(|p| p.into_inner()).take();
            c.pidfd
                .signal(libc::SIGKILL as u32)
                .map_err(|e| failed("delete", e.to_string()))?;
        }
        // Waits for the killed to leave before each directory goes.
        remove_cgroup(&c.cgroups_path).await.map_err(|e| {
            failed(
                "delete",
                format!("remove the cgroup {}: {e}", c.cgroups_path),
            )
        })?;
        self.map().remove(id);
        Ok(())
    }
    async fn exec(&self, id: &str, cmd: ExecCommand<'_>) -> Result<u32, RuntimeCliError> {
        match self.native(id) {
            Some(_) => Err(failed(
                "exec",
                format!("container {id} was created natively, and this exec needs runc (a terminal, an enforced label or a seccomp listener)"),
            )),
            None => self.runtime.exec(id, cmd).await,
        }
    }
    async fn update(&self, id: &str, resources_json: &Path) -> Result<(), RuntimeCliError> {
        let Some(c) = self.native(id) else {
            return self.runtime.update(id, resources_json).await;
        };
        let resources: serde_json::Value =
            spec::read(resources_json).map_err(|e| failed("update", e))?;
        if let Some(why) = peapod_host::cgroup_limits::unsupported(&resources) {
            return Err(failed("update", format!("cannot update {why}")));
        }
        let root = Path::new(peapod_host::cgroup::DEFAULT_ROOT);
        peapod_host::cgroup_limits::apply_v1(root, &c.cgroups_path, &resources, false)
            .map_err(|e| failed("update", e))
    }
    async fn pause(&self, id: &str) -> Result<(), RuntimeCliError> {
        match self.native(id) {
            Some(c) => freeze(&c.cgroups_path, true).await,
            None => self.runtime.pause(id).await,
        }
    }
    async fn resume(&self, id: &str) -> Result<(), RuntimeCliError> {
        match self.native(id) {
            Some(c) => freeze(&c.cgroups_path, false).await,
            None => self.runtime.resume(id).await,
        }
    }
    async fn ps(&self, id: &str) -> Result<Vec<u32>, RuntimeCliError> {
        match self.native(id) {
            Some(c) => {
                let root = Path::new(peapod_host::cgroup::DEFAULT_ROOT);
                Ok(peapod_host::cgroup::members(root, &c.cgroups_path)
                    .into_iter()
                    .map(|p| p as u32)
                    .collect())
            }
            None => self.runtime.ps(id).await,
        }
    }
}

async fn freeze(path: &str, frozen: bool) -> Result<(), RuntimeCliError> {
    let path = path.to_string();
    let command = if frozen { "pause" } else { "resume" };
    tokio::task::spawn_blocking(move || {
        let root = Path::new(peapod_host::cgroup::DEFAULT_ROOT);
        peapod_host::cgroup_limits::freeze_v1(root, &path, frozen)
    })
    .await
    .map_err(|e| failed(command, e.to_string()))?
    .map_err(|e| failed(command, e))
}

/// `signal` to every process of the container's cgroup (`kill --all`); each through a pidfd
/// opened after its cgroup is read, so that no reused pid is hit.
fn signal_all(cgroups_path: &str, signal: u32) {
    let root = Path::new(peapod_host::cgroup::DEFAULT_ROOT);
    for pid in peapod_host::cgroup::members(root, cgroups_path) {
        let Ok(fd) = Pidfd::open(pid as u32) else {
            continue;
        };
        let cgroups = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap_or_default();
        if fd.running() && cgroups.lines().any(|l| l.ends_with(cgroups_path)) {
            let _ = fd.signal(signal);
        }
    }
}
