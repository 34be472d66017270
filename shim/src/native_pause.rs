//! The runtime with a pod's pause started natively ([`crate::nsexec::pause`]): a create the
//! daemon marks `native` (the pause, created and started at once) is done by the shim's own
//! helper when the spec allows it, and every command on that container is answered here
//! from its pidfd and cgroup; everything else goes to the runtime underneath. A spec the
//! helper cannot do (a user namespace, a systemd cgroup, a seccomp profile, an enforced
//! label) is run by the runtime as before: the choice is made before anything starts. A
//! helper that fails anyway (after undoing what it made) leaves the pause to the runtime too.
//!
//! Why: `runc run` of the pause is the longest step of RunPodSandbox (two Go programs
//! starting, runc's state, mounts of a root nothing reads); the helper does what the pause's
//! spec asks in a few milliseconds.

use crate::native_runc::remove_cgroup;
use crate::nsexec::pause::{self, PauseSpec};
use crate::nsexec::spec::{self, Lsm};
use crate::pidfd::Pidfd;
use crate::reaper::Reaper;
use crate::runtime_cli::{
    CreateCommand, ExecCommand, ProcessIo, RuntimeCli, RuntimeCliError, RuntimeStatus,
};
use async_trait::async_trait;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};

const NAME: &str = "peapod-shim nsexec --pause";

/// A pause this shim started.
struct Started {
    pid: u32,
    pidfd: Pidfd,
    cgroups_path: String,
}

/// Runtimes whose pause is a plain process in namespaces, as the helper makes it. Another
/// runc-compatible CLI (gVisor's runsc, a VM runtime) makes its sandbox its own way.
const PLAIN_RUNTIMES: [&str; 3] = ["runc", "crun", "youki"];

pub struct NativePause {
    runtime: Arc<dyn RuntimeCli>,
    /// The runtime is one of [`PLAIN_RUNTIMES`].
    plain_runtime: bool,
    helper: PathBuf,
    reaper: Arc<Reaper>,
    lsm: Lsm,
    started: Mutex<HashMap<String, Arc<Started>>>,
}

impl NativePause {
    /// `helper`: this program (`peapod-shim`), run as `peapod-shim nsexec --pause`.
    /// `runtime_binary`: the OCI runtime's command (the helper stands in for plain ones).
    pub fn new(
        runtime: Arc<dyn RuntimeCli>,
        runtime_binary: &str,
        helper: PathBuf,
        reaper: Arc<Reaper>,
    ) -> NativePause {
        let plain_runtime = Path::new(runtime_binary)
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| PLAIN_RUNTIMES.contains(&n));
        NativePause {
            runtime,
            plain_runtime,
            helper,
            reaper,
            lsm: Lsm::of_host(),
            started: Mutex::new(HashMap::new()),
        }
    }

    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Started>>> {
        self.started.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn native(&self, id: &str) -> Option<Arc<Started>> {
        self.map().get(id).cloned()
    }

    /// The pause's spec if the helper can start it; why not otherwise.
    fn spec_for_native(&self, c: &CreateCommand<'_>) -> Result<PauseSpec, String> {
        if !c.native || !c.start {
            return Err("not asked for".into());
        }
        if c.console_socket.is_some() {
            return Err("a terminal".into());
        }
        if !self.plain_runtime {
            return Err("a runtime that makes its own sandboxes".into());
        }
        let spec: PauseSpec = spec::read(&c.bundle.join("config.json"))?;
        match pause::unsupported(&spec, &self.lsm) {
            Some(why) => Err(why.to_string()),
            None => Ok(spec),
        }
    }

    async fn start_native(
        &self,
        id: &str,
        c: CreateCommand<'_>,
        spec: &PauseSpec,
    ) -> Result<u32, RuntimeCliError> {
        let log = c.bundle.join("runtime.log");
        let _ = std::fs::remove_file(c.pid_file);
        let log_file = std::fs::File::create(&log).map_err(spawn_error)?;
        let mut cmd = Command::new(&self.helper);
        cmd.args(["nsexec", "--pause", "--bundle"])
            .arg(c.bundle)
            .arg("--pid-file")
            .arg(c.pid_file);
        // The helper's stdio is the pause's; its own words go to the log.
        let [stdin, stdout, _] = c.io.into_stdio();
        cmd.stdin(stdin).stdout(stdout).stderr(log_file);
        let (_, exit) = self.reaper.spawn(&mut cmd).map_err(spawn_error)?;
        let code = exit.await.unwrap_or(255);
        let started = started_process(code, c.pid_file, &log);
        let (pid, pidfd) = match started {
            Ok(started) => started,
            Err(message) => {
                // Whatever joined the cgroup (a pause that started and failed later) goes
                // with it.
                let _ = remove_cgroup(&spec.linux.cgroups_path).await;
                return Err(RuntimeCliError::Failed {
                    runtime: NAME.into(),
                    command: "run".into(),
                    exit_status: code,
                    message,
                });
            }
        };
        self.map().insert(
            id.to_string(),
            Arc::new(Started {
                pid,
                pidfd,
                cgroups_path: spec.linux.cgroups_path.clone(),
            }),
        );
        Ok(pid)
    }
}

/// What a helper that exited with `code` started: its process's pid (from `pid_file`) and a
/// pidfd of it, or why not (the helper's log).
pub(crate) fn started_process(
    code: i32,
    pid_file: &Path,
    log: &Path,
) -> Result<(u32, Pidfd), String> {
    match code {
        0 => std::fs::read_to_string(pid_file)
            .ok()
            .and_then(|s| s.trim().parse::<u32>().ok())
            .ok_or_else(|| format!("no pid in {}", pid_file.display()))
            // The process is this shim's child (cloned with CLONE_PARENT) and not reaped
            // before its exit is subscribed to, so the pid names it here.
            .and_then(|pid| {
                Pidfd::open(pid)
                    .map(|fd| (pid, fd))
                    .map_err(|e| format!("pidfd_open({pid}): {e}"))
            }),
        _ => Err(std::fs::read_to_string(log)
            .unwrap_or_default()
            .trim()
            .to_string()),
    }
}

fn spawn_error(source: std::io::Error) -> RuntimeCliError {
    RuntimeCliError::spawn(NAME, source)
}

fn not_supported(command: &str) -> RuntimeCliError {
    RuntimeCliError::failed(NAME, command, "not supported for a pause started natively")
}

#[async_trait]
impl RuntimeCli for NativePause {
    async fn create(&self, id: &str, cmd: CreateCommand<'_>) -> Result<u32, RuntimeCliError> {
        let spec = match self.spec_for_native(&cmd) {
            Ok(spec) => spec,
            Err(why) => {
                if cmd.native {
                    eprintln!("pause {id} through the runtime: {why}");
                }
                return self.runtime.create(id, cmd).await;
            }
        };
        // The helper gets copies of the stdio: the runtime needs them if it fails.
        let io = ProcessIo {
            stdin: cmd.io.stdin.as_ref().and_then(|f| f.try_clone().ok()),
            stdout: cmd.io.stdout.as_ref().and_then(|f| f.try_clone().ok()),
            stderr: cmd.io.stderr.as_ref().and_then(|f| f.try_clone().ok()),
        };
        let native = CreateCommand {
            bundle: cmd.bundle,
            pid_file: cmd.pid_file,
            console_socket: None,
            io,
            start: true,
            native: true,
        };
        match self.start_native(id, native, &spec).await {
            Ok(pid) => Ok(pid),
            Err(err) => {
                // What the helper met, the runtime may not (a host it did not foresee); a
                // spec neither can start fails with the runtime's words.
                eprintln!("pause {id} through the runtime: {err}");
                self.runtime.create(id, cmd).await
            }
        }
    }
    async fn start(&self, id: &str) -> Result<(), RuntimeCliError> {
        match self.native(id) {
            // Started by create already.
            Some(_) => Ok(()),
            None => self.runtime.start(id).await,
        }
    }
    async fn state(&self, id: &str) -> Result<Option<RuntimeStatus>, RuntimeCliError> {
        match self.native(id) {
            Some(p) if p.pidfd.running() => Ok(Some(RuntimeStatus::Running)),
            Some(_) => Ok(Some(RuntimeStatus::Stopped)),
            None => self.runtime.state(id).await,
        }
    }
    async fn kill(&self, id: &str, signal: u32, all: bool) -> Result<(), RuntimeCliError> {
        // `all` is the same here: nothing but the pause is in its cgroup.
        match self.native(id) {
            Some(p) => p
                .pidfd
                .signal(signal)
                .map_err(|e| RuntimeCliError::failed(NAME, "kill", e.to_string())),
            None => self.runtime.kill(id, signal, all).await,
        }
    }
    async fn delete(&self, id: &str, force: bool) -> Result<(), RuntimeCliError> {
        let Some(p) = self.native(id) else {
            return self.runtime.delete(id, force).await;
        };
        if p.pidfd.running() {
            if !force {
                return Err(RuntimeCliError::failed(
                    NAME,
                    "delete",
                    format!("pause {id} (pid {}) is running", p.pid),
                ));
            }
            p.pidfd.signal(libc::SIGKILL as u32).map_err(spawn_error)?;
        }
        // Waits for the killed to leave before each directory goes.
        remove_cgroup(&p.cgroups_path).await.map_err(|e| {
            RuntimeCliError::failed(
                NAME,
                "delete",
                format!("remove the cgroup {}: {e}", p.cgroups_path),
            )
        })?;
        self.map().remove(id);
        Ok(())
    }
    async fn exec(&self, id: &str, cmd: ExecCommand<'_>) -> Result<u32, RuntimeCliError> {
        match self.native(id) {
            Some(_) => Err(not_supported("exec")),
            None => self.runtime.exec(id, cmd).await,
        }
    }
    async fn update(&self, id: &str, resources_json: &Path) -> Result<(), RuntimeCliError> {
        match self.native(id) {
            Some(_) => Err(not_supported("update")),
            None => self.runtime.update(id, resources_json).await,
        }
    }
    async fn pause(&self, id: &str) -> Result<(), RuntimeCliError> {
        match self.native(id) {
            Some(_) => Err(not_supported("pause")),
            None => self.runtime.pause(id).await,
        }
    }
    async fn resume(&self, id: &str) -> Result<(), RuntimeCliError> {
        match self.native(id) {
            Some(_) => Err(not_supported("resume")),
            None => self.runtime.resume(id).await,
        }
    }
    async fn ps(&self, id: &str) -> Result<Vec<u32>, RuntimeCliError> {
        match self.native(id) {
            Some(p) if p.pidfd.running() => Ok(vec![p.pid]),
            Some(_) => Ok(Vec::new()),
            None => self.runtime.ps(id).await,
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::fakes::{FakeProcesses, FakeRuntime};

    const PAUSE: &str = r#"{"root":{"path":"rootfs"},"process":{"args":["/pause"],
        "capabilities":{},"user":{"uid":65535,"gid":65535}},
        "linux":{"cgroupsPath":"/peapod-unit-never-made/p1","namespaces":[{"type":"ipc"}]}}"#;

    fn script(dir: &Path, body: &str) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let path = dir.join("helper");
        std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path
    }

    fn command<'a>(bundle: &'a Path, pid_file: &'a Path, native: bool) -> CreateCommand<'a> {
        CreateCommand {
            bundle,
            pid_file,
            console_socket: None,
            io: ProcessIo::null(),
            start: true,
            native,
        }
    }

    /// The choice between the helper and the runtime, and the runtime after a failed helper.
    /// (Called by the shim's one test that owns a reaper.)
    pub(crate) async fn the_runtime_gets_what_the_helper_cannot_do(reaper: &Arc<Reaper>) {
        let dir = tempfile::tempdir().unwrap();
        let bundle = dir.path().join("bundle");
        std::fs::create_dir(&bundle).unwrap();
        let pid_file = bundle.join("init.pid");
        let runtime = Arc::new(FakeRuntime::new(Arc::new(FakeProcesses::default())));
        let ran = script(
            dir.path(),
            "echo ran > \"$(dirname \"$0\")/ran\"; echo cannot >&2; exit 1",
        );
        let pause = NativePause::new(
            runtime.clone(),
            "/usr/sbin/runc",
            ran.clone(),
            reaper.clone(),
        );
        let runsc = NativePause::new(runtime.clone(), "runsc", ran, reaper.clone());

        // Not asked for: the runtime, and no helper.
        std::fs::write(bundle.join("config.json"), PAUSE).unwrap();
        pause
            .create("a", command(&bundle, &pid_file, false))
            .await
            .unwrap();
        assert!(!dir.path().join("ran").exists());
        // A user namespace: the runtime, decided before any helper runs.
        let userns = PAUSE.replace(r#""linux":{"#, r#""linux":{"uidMappings":[],"#);
        std::fs::write(bundle.join("config.json"), userns).unwrap();
        pause
            .create("b", command(&bundle, &pid_file, true))
            .await
            .unwrap();
        assert!(!dir.path().join("ran").exists());
        // A runtime that makes its own sandboxes (gVisor): the runtime, no helper.
        std::fs::write(bundle.join("config.json"), PAUSE).unwrap();
        runsc
            .create("r", command(&bundle, &pid_file, true))
            .await
            .unwrap();
        assert!(!dir.path().join("ran").exists());
        // Supported, but the helper fails: its undo, then the runtime.
        std::fs::write(bundle.join("config.json"), PAUSE).unwrap();
        pause
            .create("c", command(&bundle, &pid_file, true))
            .await
            .unwrap();
        assert!(dir.path().join("ran").exists(), "the helper ran");
        assert_eq!(
            std::fs::read_to_string(bundle.join("runtime.log"))
                .unwrap()
                .trim(),
            "cannot"
        );
        assert_eq!(runtime.calls(), vec!["run a", "run b", "run r", "run c"]);
        // None of them is native: every command goes to the runtime.
        pause.kill("c", 9, false).await.unwrap();
        assert_eq!(runtime.calls().last().map(String::as_str), Some("kill c 9"));
    }
}
