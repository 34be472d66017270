//! The backends: how each container of the pod is run. One is chosen per container, once, at
//! its create ([`Backends::create`]), from its spec and the shim's command line; it is kept
//! with the container (`Container::backend`) and every later call on the container is
//! matched on it here, in one place per call.
//!
//! | [`Kind`] | chosen when | what runs it |
//! | --- | --- | --- |
//! | `Runc` | no other applies (another runtime than runc, `run` in one go, an init the shim could not hold) | the OCI runtime CLI, every command ([`runc`]) |
//! | `RuncAssisted` | runc creates it (the runtime is runc) | runc's create; the shim's own start, kill and, where it may, delete ([`runc_assisted`]) |
//! | `NativePause` | the daemon asks (`native`) for a pause the helper can start, with a runtime whose sandboxes are plain processes (runc, crun, youki) | the helper, `peapod-shim nsexec --pause`; then the pause's pidfd and cgroup ([`native`]) |
//! | `Native` | an app container the helper can create, with runc, `--create native` and `--exec native` | the helper, `peapod-shim nsexec --create`; then its init's pidfd and its cgroup ([`native`]) |
//!
//! What the helpers can do is decided by `peapod-runtime` from the same spec the helpers read
//! (`pause::unsupported`, `create::unsupported`); a helper that fails anyway leaves the
//! container to the runtime. Execs, with `--exec native`, are started by the container's
//! resident helper where the exec allows ([`exec`], [`residents`]), whatever the kind but a
//! native pause's (which takes no exec); the others go to the runtime, and for a `Native`
//! container, which the runtime does not know, are refused with the reason.
//!
//! The runtime CLI is behind a narrow trait ([`runtime_cli::RuntimeCli`]), so that the Task
//! service runs over a fake in unit tests ([`Backends::runtime_only`]).

pub mod exec;
pub mod native;
pub mod residents;
pub mod runc;
pub mod runc_assisted;
pub mod runtime_cli;

use crate::reaper::Reaper;
use native::{Created, Pause};
use peapod_host::sync::LockUnpoisoned;
use peapod_runtime::cgroups::{Cgroups, Driver};
use peapod_runtime::program::Program;
use peapod_runtime::spec::{self, Spec};
use peapod_runtime::{create, pause, Host};
use residents::{ExecRequest, ResidentSlot};
use runc_assisted::Assisted;
use runtime_cli::{
    CheckpointCommand, CreateCommand, ExecCommand, ProcessIo, RuntimeCli, RuntimeCliError,
    RuntimeStatus,
};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio::sync::oneshot;

/// How execs are started (the shim's `--exec`, the daemon's `runtime.exec`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExecMode {
    /// The helper where it can, the runtime elsewhere.
    Native,
    /// Always `runc exec`.
    Runtime,
}

/// How app containers are created (the shim's `--create`, the daemon's `runtime.create`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CreateMode {
    /// The helper where it can (with native execs only), the runtime elsewhere.
    Native,
    /// Always `runc create`.
    Runtime,
}

impl ExecMode {
    pub fn parse(s: &str) -> Option<ExecMode> {
        match s {
            "native" => Some(ExecMode::Native),
            "runc" | "runtime" => Some(ExecMode::Runtime),
            _ => None,
        }
    }
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

/// One container's backend: how it is run, and what the native exec path keeps for it.
pub struct Backend {
    pub kind: Kind,
    /// Why every exec in it goes to the runtime, read from its spec at its create
    /// ([`exec::container_refuses`]); `None`: an exec may be native.
    exec_refused: Option<String>,
    /// Its resident exec helper, from its first native exec until its delete.
    resident: ResidentSlot,
    /// Its stdio, kept from its create for its start: a runtime with a sandbox of its own
    /// (runsc) gives a container that joins the sandbox the stdio of `start`. Only such a
    /// container has it (until its start).
    start_io: std::sync::Mutex<Option<ProcessIo>>,
    /// Where its init's exit comes from once it starts, when not from its pid: such a
    /// container's pid is its sandbox's, and the runtime's `wait` tells its exit
    /// ([`Backend::exit_from_runtime`]).
    exit_from_wait: std::sync::Mutex<Option<oneshot::Sender<i32>>>,
}

/// How a container is run (the module's table).
pub enum Kind {
    Runc,
    RuncAssisted(Assisted),
    NativePause(Pause),
    Native(Created),
}

impl Backend {
    fn new(kind: Kind, exec_refused: Option<String>) -> Backend {
        Backend {
            kind,
            exec_refused,
            resident: ResidentSlot::default(),
            start_io: std::sync::Mutex::new(None),
            exit_from_wait: std::sync::Mutex::new(None),
        }
    }

    /// The runtime CLI's, for everything: also what a call on an id the shim does not hold
    /// goes to (the runtime's answer classifies it).
    pub fn runc() -> Backend {
        Backend::new(Kind::Runc, None)
    }

    /// The exit of its init when the runtime tells it rather than its pid (a container that
    /// joined a runtime's own sandbox): what the runtime's `wait` returns once it is started,
    /// or the channel closes unsent when it is deleted unstarted. `None`: the pid's exit is
    /// its own.
    pub fn exit_from_runtime(&self) -> Option<oneshot::Receiver<i32>> {
        if self.start_io.lock_unpoisoned().is_none() {
            return None;
        }
        let (tx, rx) = oneshot::channel();
        *self.exit_from_wait.lock_unpoisoned() = Some(tx);
        Some(rx)
    }
}

/// The shim's own program run as a helper (`peapod-shim nsexec ...`), through a view no
/// container can write ([`Program::sealed`]), and the reaper that takes the helpers' exits.
#[derive(Clone)]
pub struct Helpers {
    pub program: Arc<Program>,
    pub reaper: Arc<Reaper>,
}

/// What decides the backends: the shim's command line.
pub struct Config<'a> {
    /// The OCI runtime's command (`runc`, a path, `crun`, `runsc`, ...).
    pub runtime: &'a str,
    /// Its state root (`--root`).
    pub runtime_root: &'a Path,
    /// It makes its own sandbox per pod (`--sandboxed`): gVisor's runsc.
    pub sandboxed: bool,
    pub exec: ExecMode,
    pub create: CreateMode,
    /// How a spec's `cgroupsPath` is read (`--cgroup-driver`).
    pub cgroup_driver: Driver,
}

/// Runtimes whose pause is a plain process in namespaces, as the helper makes it (unless told
/// they are sandboxed). Another runc-compatible CLI (a wrapper, a VM runtime) makes its pause
/// its own way; a sandboxed one (gVisor's runsc) gets no native path at all.
const PLAIN_RUNTIMES: [&str; 3] = ["runc", "crun", "youki"];

/// Every container's backend: the choice at create, and each call matched on the kind.
pub struct Backends {
    runtime: Arc<dyn RuntimeCli>,
    /// Read once, at the shim's start.
    host: Host,
    /// What the shim may do itself; `None`: nothing (containerd's face, unit tests).
    native: Option<NativePaths>,
}

/// The native paths the shim's command line and runtime allow.
struct NativePaths {
    helpers: Helpers,
    /// Pauses the daemon asks for natively: the runtime is one of [`PLAIN_RUNTIMES`].
    pause: bool,
    /// The runtime makes its own sandbox per pod: a container that joins it gets its stdio
    /// at start and its exit from the runtime's `wait`.
    sandboxed: bool,
    /// App containers: the runtime is runc, `--create native` and `--exec native`.
    create: bool,
    /// Execs: `--exec native` and not sandboxed.
    exec: bool,
    /// runc's state root when the runtime is runc: the containers runc creates are assisted
    /// ([`runc_assisted`]); another runtime's state directory is its own.
    runc_root: Option<PathBuf>,
}

impl Backends {
    /// The backends of `peapod-shim serve`: the runtime CLI and the native paths `config`
    /// allows, run as `helpers`.
    pub fn new(runtime: Arc<dyn RuntimeCli>, config: &Config<'_>, helpers: Helpers) -> Backends {
        let name = Path::new(config.runtime)
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        let is_runc = name == "runc";
        // A runtime with a sandbox of its own (gVisor's runsc) runs its containers' processes
        // inside it: a process the helper started in the namespaces of the sandbox's host
        // process would run outside the sandbox, so nothing of such a pod is native.
        // Execs join the init's namespaces and cgroups, as any runc-compatible runtime left
        // them (a wrapper of runc under another name included).
        let plain = PLAIN_RUNTIMES.contains(&name) && !config.sandboxed;
        let exec = !config.sandboxed && config.exec == ExecMode::Native;
        Backends {
            runtime,
            host: Host::detect(config.cgroup_driver),
            native: Some(NativePaths {
                helpers,
                pause: plain,
                sandboxed: config.sandboxed,
                create: is_runc && exec && config.create == CreateMode::Native,
                exec,
                runc_root: is_runc.then(|| config.runtime_root.to_path_buf()),
            }),
        }
    }

    /// Every container through the runtime CLI, for every command.
    pub fn runtime_only(runtime: Arc<dyn RuntimeCli>) -> Backends {
        Backends {
            runtime,
            host: Host::detect(Driver::Cgroupfs),
            native: None,
        }
    }

    /// Creates container `id` (or, with `cmd.start`, runs it) with the backend its spec and
    /// the configuration choose; its init's host pid and its backend.
    pub async fn create(
        &self,
        id: &str,
        cmd: CreateCommand<'_>,
    ) -> Result<(u32, Backend), RuntimeCliError> {
        let Some(paths) = self.native.as_ref().filter(|_| cmd.restore.is_none()) else {
            // A restore is the runtime's alone (`runc restore`), and so is every later call
            // on what it restored: runc holds its state.
            let pid = self.runtime.create(id, cmd).await?;
            return Ok((pid, Backend::runc()));
        };
        let mut spec = BundleSpec::new(cmd.bundle);
        let cgroups = &self.host.cgroups;
        if cmd.native {
            match self.pause_natively(paths, &cmd, &mut spec) {
                Ok(path) => match native::start_pause(&paths.helpers, cgroups, &cmd, &path).await {
                    Ok((pid, p)) => return Ok((pid, Backend::new(Kind::NativePause(p), None))),
                    // What the helper met, the runtime may not (a host it did not foresee);
                    // a spec neither can start fails with the runtime's words.
                    Err(err) => eprintln!("pause {id} through the runtime: {err}"),
                },
                Err(why) => eprintln!("pause {id} through the runtime: {why}"),
            }
        } else if paths.create && !cmd.start {
            let created = match self.create_natively(&cmd, &mut spec) {
                Ok(path) => native::create(&paths.helpers, cgroups, &cmd, &path).await,
                Err(why) => Err(why),
            };
            match created {
                Ok((pid, c)) => {
                    let refused = paths.exec_refused(&mut spec);
                    return Ok((pid, Backend::new(Kind::Native(c), refused)));
                }
                Err(why) => eprintln!("container {id} through the runtime: {why}"),
            }
        }
        let assisted = paths.runc_root.as_deref().filter(|_| !cmd.start);
        let refused = paths.exec_refused(&mut spec);
        // A container joining the sandbox of a runtime that has its own (not its pause, which
        // `run` starts at once and whose pid is the sandbox's own).
        let start_io = (paths.sandboxed && !cmd.start).then(|| cmd.io.try_clone());
        let pid = self.runtime.create(id, cmd).await?;
        let kind = assisted
            .and_then(|root| Assisted::created(id, pid, root, spec.get().ok()))
            .map_or(Kind::Runc, Kind::RuncAssisted);
        let backend = Backend::new(kind, refused);
        *backend.start_io.lock_unpoisoned() = start_io;
        Ok((pid, backend))
    }

    /// The pause's cgroup path if the helper can start it; why not otherwise.
    fn pause_natively(
        &self,
        paths: &NativePaths,
        cmd: &CreateCommand<'_>,
        spec: &mut BundleSpec<'_>,
    ) -> Result<String, String> {
        if !cmd.start {
            return Err("not asked for".into());
        }
        if cmd.console_socket.is_some() {
            return Err("a terminal".into());
        }
        if !paths.pause {
            return Err("a runtime that makes its own sandboxes".into());
        }
        let spec = spec.get()?;
        match pause::unsupported(spec, &self.host) {
            Some(why) => Err(why.to_string()),
            None => Ok(spec.linux.cgroups_path.clone()),
        }
    }

    /// The container's cgroup path if the helper can create it; why not otherwise.
    fn create_natively(
        &self,
        cmd: &CreateCommand<'_>,
        spec: &mut BundleSpec<'_>,
    ) -> Result<String, String> {
        if cmd.console_socket.is_some() {
            return Err("a terminal".into());
        }
        let spec = spec.get()?;
        match create::unsupported(spec, &self.host) {
            Some(why) => Err(why),
            None => Ok(spec.linux.cgroups_path.clone()),
        }
    }

    pub async fn start(&self, id: &str, b: &Backend) -> Result<(), RuntimeCliError> {
        match &b.kind {
            Kind::Runc => {
                let io = b.start_io.lock_unpoisoned().take();
                self.runtime.start(id, io).await?;
                if let Some(tx) = b.exit_from_wait.lock_unpoisoned().take() {
                    let (runtime, id) = (self.runtime.clone(), id.to_string());
                    tokio::spawn(async move {
                        let code = runtime.wait(&id).await.unwrap_or_else(|e| {
                            eprintln!("container {id}: the runtime's wait: {e}");
                            255
                        });
                        let _ = tx.send(code);
                    });
                }
                Ok(())
            }
            Kind::RuncAssisted(a) => a.start(id, &*self.runtime).await,
            // Started by its create already.
            Kind::NativePause(_) => Ok(()),
            Kind::Native(c) => c.start(id),
        }
    }

    /// The container's status; `Ok(None)` when the runtime does not know it.
    pub async fn state(
        &self,
        id: &str,
        b: &Backend,
    ) -> Result<Option<RuntimeStatus>, RuntimeCliError> {
        match &b.kind {
            Kind::Runc | Kind::RuncAssisted(_) => self.runtime.state(id).await,
            Kind::NativePause(p) => Ok(Some(p.state())),
            Kind::Native(c) => Ok(Some(c.state())),
        }
    }

    pub async fn kill(
        &self,
        id: &str,
        b: &Backend,
        signal: u32,
        all: bool,
    ) -> Result<(), RuntimeCliError> {
        let cgroups = &self.host.cgroups;
        match &b.kind {
            Kind::Runc => self.runtime.kill(id, signal, all).await,
            Kind::RuncAssisted(a) => a.kill(id, signal, all, &*self.runtime, cgroups).await,
            Kind::NativePause(p) => p.kill(signal),
            Kind::Native(c) => c.kill(signal, all, cgroups).await,
        }
    }

    pub async fn delete(&self, id: &str, b: &Backend, force: bool) -> Result<(), RuntimeCliError> {
        // The resident helper first: a cgroup with a process in it cannot be removed.
        b.resident.retire().await;
        // Never started, so never waited for: its exit is this delete's kill.
        drop(b.exit_from_wait.lock_unpoisoned().take());
        let cgroups = &self.host.cgroups;
        match &b.kind {
            Kind::Runc => self.runtime.delete(id, force).await,
            Kind::RuncAssisted(a) => a.delete(id, force, &*self.runtime, cgroups).await,
            Kind::NativePause(p) => p.delete(id, force, cgroups).await,
            Kind::Native(c) => c.delete(id, force, cgroups).await,
        }
    }

    /// Starts a process in the container, detached (the shim's child); returns its pid.
    pub async fn exec(
        &self,
        id: &str,
        b: &Backend,
        cmd: ExecCommand<'_>,
    ) -> Result<u32, RuntimeCliError> {
        let helpers = match &b.kind {
            Kind::NativePause(_) => return Err(Pause::not_supported("exec")),
            _ => self.native.as_ref().filter(|n| n.exec).map(|n| &n.helpers),
        };
        if let Some(helpers) = helpers {
            let process = std::fs::read(cmd.process_json).unwrap_or_default();
            let refused = b.exec_refused.as_deref();
            match exec::leave_to_runtime(&cmd, &process, refused, &self.host.lsm) {
                None => {
                    let req = ExecRequest {
                        bundle: cmd.bundle,
                        init_pid: cmd.init_pid,
                        process: &process,
                        console_socket: cmd.console_socket,
                    };
                    return b.resident.exec(helpers, req, cmd.io).await;
                }
                Some(why) => eprintln!("exec in {id} through the runtime: {why}"),
            }
        }
        match &b.kind {
            Kind::Native(_) => Err(Created::exec_needs_runtime(id)),
            _ => self.runtime.exec(id, cmd).await,
        }
    }

    /// Applies the runtime-spec LinuxResources in `resources_json`.
    pub async fn update(
        &self,
        id: &str,
        b: &Backend,
        resources_json: &Path,
    ) -> Result<(), RuntimeCliError> {
        match &b.kind {
            Kind::Runc | Kind::RuncAssisted(_) => self.runtime.update(id, resources_json).await,
            Kind::NativePause(_) => Err(Pause::not_supported("update")),
            Kind::Native(c) => c.update(resources_json, &self.host.cgroups).await,
        }
    }

    /// Freezes (`frozen`: `runc pause`) or thaws (`runc resume`) the container.
    pub async fn freeze(&self, id: &str, b: &Backend, frozen: bool) -> Result<(), RuntimeCliError> {
        match &b.kind {
            Kind::Runc | Kind::RuncAssisted(_) if frozen => self.runtime.pause(id).await,
            Kind::Runc | Kind::RuncAssisted(_) => self.runtime.resume(id).await,
            Kind::NativePause(_) => Err(Pause::not_supported(if frozen {
                "pause"
            } else {
                "resume"
            })),
            Kind::Native(c) => c.freeze(frozen, &self.host.cgroups).await,
        }
    }

    /// CRIU's dump of the container, which goes on running; only what runc created (or
    /// restored) has the state `runc checkpoint` works from.
    pub async fn checkpoint(
        &self,
        id: &str,
        b: &Backend,
        cmd: CheckpointCommand<'_>,
    ) -> Result<(), Uncheckpointable> {
        match &b.kind {
            Kind::Runc | Kind::RuncAssisted(_) => self
                .runtime
                .checkpoint(id, cmd)
                .await
                .map_err(Uncheckpointable::Runtime),
            Kind::NativePause(_) => Err(Uncheckpointable::Kind(format!(
                "container {id} is a pod's pause, which is not checkpointed"
            ))),
            Kind::Native(_) => Err(Uncheckpointable::Kind(format!(
                "container {id} was created by peapod-shim itself (runtime.create = \"native\"), \
                 and runc can checkpoint only the containers it created: set runtime.create = \"runc\" \
                 in peapod's configuration for checkpointable containers"
            ))),
        }
    }

    /// The host pids of the container's processes.
    pub async fn ps(&self, id: &str, b: &Backend) -> Result<Vec<u32>, RuntimeCliError> {
        let mut pids = match &b.kind {
            Kind::Runc | Kind::RuncAssisted(_) => self.runtime.ps(id).await?,
            Kind::NativePause(p) => p.ps(),
            Kind::Native(c) => c.ps(&self.host.cgroups),
        };
        // The resident helper is in the container's cgroups but none of its processes.
        if let Some(helper) = b.resident.pid() {
            pids.retain(|p| *p != helper);
        }
        Ok(pids)
    }
}

/// Why a checkpoint failed: a container no backend can dump, or the runtime's failure.
#[derive(Debug)]
pub enum Uncheckpointable {
    Kind(String),
    Runtime(RuntimeCliError),
}

impl NativePaths {
    /// What the container's spec refuses for every exec, when execs may be native.
    fn exec_refused(&self, spec: &mut BundleSpec<'_>) -> Option<String> {
        self.exec
            .then(|| exec::container_refuses(spec.get()))
            .flatten()
    }
}

/// The bundle's `config.json`, read once at the first need of it (a create whose container
/// no native path could take reads nothing).
struct BundleSpec<'a> {
    bundle: &'a Path,
    read: Option<Result<Spec, String>>,
}

impl<'a> BundleSpec<'a> {
    fn new(bundle: &'a Path) -> BundleSpec<'a> {
        BundleSpec { bundle, read: None }
    }

    fn get(&mut self) -> Result<&Spec, String> {
        let bundle = self.bundle;
        self.read
            .get_or_insert_with(|| spec::of_bundle(bundle))
            .as_ref()
            .map_err(Clone::clone)
    }
}

/// Removes cgroup `path` from every hierarchy (what still runs in it killed and waited for),
/// off the shim's single-threaded runtime: the wait for the killed to leave sleeps.
async fn remove_cgroup(cgroups: &Cgroups, path: &str) -> std::io::Result<()> {
    let (cgroups, path) = (cgroups.clone(), path.to_string());
    tokio::task::spawn_blocking(move || cgroups.remove(&path))
        .await
        .map_err(std::io::Error::other)?
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::fakes::{FakeProcesses, FakeRuntime};
    use runtime_cli::ProcessIo;

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
            restore: None,
        }
    }

    /// The choice between the helper and the runtime for a pause, and the runtime after a
    /// failed helper. (Called by the shim's one test that owns a reaper.)
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
        let helpers = Helpers {
            program: Arc::new(Program::plain(ran)),
            reaper: reaper.clone(),
        };
        let config = |runtime| Config {
            runtime,
            runtime_root: dir.path(),
            sandboxed: runtime == "runsc",
            exec: ExecMode::Native,
            create: CreateMode::Native,
            cgroup_driver: Driver::Cgroupfs,
        };
        let runc = Backends::new(runtime.clone(), &config("/usr/sbin/runc"), helpers.clone());
        let runsc = Backends::new(runtime.clone(), &config("runsc"), helpers);

        // Not asked for: the runtime, and no helper.
        std::fs::write(bundle.join("config.json"), PAUSE).unwrap();
        let (_, a) = runc
            .create("a", command(&bundle, &pid_file, false))
            .await
            .unwrap();
        assert!(matches!(a.kind, Kind::Runc));
        assert!(!dir.path().join("ran").exists());
        // A user namespace: the runtime, decided before any helper runs.
        let userns = PAUSE.replace(r#""linux":{"#, r#""linux":{"uidMappings":[],"#);
        std::fs::write(bundle.join("config.json"), userns).unwrap();
        runc.create("b", command(&bundle, &pid_file, true))
            .await
            .unwrap();
        assert!(!dir.path().join("ran").exists());
        // A runtime that makes its own sandboxes (gVisor): the runtime, no helper.
        std::fs::write(bundle.join("config.json"), PAUSE).unwrap();
        let (_, r) = runsc
            .create("r", command(&bundle, &pid_file, true))
            .await
            .unwrap();
        assert!(!dir.path().join("ran").exists());
        // ... and its execs too, native ones asked for: inside its sandbox, not beside it.
        let process = dir.path().join("exec.json");
        std::fs::write(&process, r#"{"args":["true"],"cwd":"/"}"#).unwrap();
        let exec = ExecCommand {
            bundle: &bundle,
            init_pid: 1,
            process_json: &process,
            pid_file: &dir.path().join("exec.pid"),
            console_socket: None,
            io: ProcessIo::null(),
        };
        runsc.exec("r", &r, exec).await.unwrap();
        assert!(!dir.path().join("ran").exists());
        // Supported, but the helper fails: its undo, then the runtime.
        std::fs::write(bundle.join("config.json"), PAUSE).unwrap();
        let (_, c) = runc
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
        assert_eq!(
            runtime.calls(),
            vec!["run a", "run b", "run r", "exec r", "run c"]
        );
        // None of them is native: every command goes to the runtime.
        assert!(matches!(c.kind, Kind::Runc));
        runc.kill("c", &c, 9, false).await.unwrap();
        assert_eq!(runtime.calls().last().map(String::as_str), Some("kill c 9"));
    }
}
