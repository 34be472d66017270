//! The runc commands the shim does itself for the containers runc created (those the shim
//! cannot create itself: [`crate::native_create`]), so that such a container costs one
//! runtime call, its `runc create` (which meets and reports every error a
//! create can): each of the others is a Go program starting and reading its state, about
//! 8 ms here, for work of a fraction of a millisecond.
//!
//! - **start**: runc's init waits, after create, on a FIFO in the container's state directory
//!   (`<root>/<id>/exec.fifo`): it blocks opening it for writing until a reader comes, writes
//!   one byte, and execs the process. `runc start` is that reader, then removes the FIFO (runc
//!   tells "created" from "running" by whether it is there). That is all it does: runc (1.1,
//!   libcontainer's `start`) runs a spec's poststart hooks at create, not at start.
//! - **kill** of the init: a signal through the init's pidfd, opened when create returned
//!   (the init is the shim's child, not yet reaped), so no reused pid is hit; `--all` with
//!   SIGKILL, the stop's: every process of its cgroup too (other signals to all: runc, which
//!   freezes the cgroup first).
//! - **delete**: what `runc delete` does to a stopped container (or a created one, whose
//!   waiting init it kills; a running one only with force): the cgroup removed in every
//!   hierarchy (what still runs in it killed first), then runc's state directory. Only for a
//!   cgroupfs path and a spec without poststop hooks (runc runs those at delete).
//!
//! Only with runc (another runtime's state directory is its own). Everything else, and every
//! container these conditions leave out, goes to the runtime.

use crate::pidfd::Pidfd;
use crate::runtime_cli::{CreateCommand, ExecCommand, RuntimeCli, RuntimeCliError, RuntimeStatus};
use async_trait::async_trait;
use std::collections::HashMap;
use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const NAME: &str = "peapod-shim";

/// How long a start waits for the init to take the byte before calling it stuck (runc's own
/// start has no bound; the daemon's call has its deadline too).
const START_WITHIN: Duration = Duration::from_secs(30);

/// A container runc created for this shim.
struct Created {
    /// The init's, opened when create returned.
    pidfd: Pidfd,
    /// Its cgroupfs path when the shim may delete it itself (no poststop hooks).
    deletable: Option<String>,
}

pub struct NativeRunc {
    runtime: Arc<dyn RuntimeCli>,
    /// runc's state root: `Some` only when the runtime is runc.
    runc_root: Option<PathBuf>,
    created: Mutex<HashMap<String, Arc<Created>>>,
}

impl NativeRunc {
    /// `runtime_binary`: the OCI runtime's command; the shim does runc's work only for runc.
    pub fn new(runtime: Arc<dyn RuntimeCli>, runtime_binary: &str, root: PathBuf) -> NativeRunc {
        let is_runc = Path::new(runtime_binary)
            .file_name()
            .is_some_and(|n| n == "runc");
        NativeRunc {
            runtime,
            runc_root: is_runc.then_some(root),
            created: Mutex::new(HashMap::new()),
        }
    }

    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Created>>> {
        self.created.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn get(&self, id: &str) -> Option<Arc<Created>> {
        self.map().get(id).cloned()
    }

    async fn delete_natively(
        &self,
        id: &str,
        root: &Path,
        c: &Created,
        cgroups_path: &str,
        force: bool,
    ) -> Result<(), RuntimeCliError> {
        let state_dir = root.join(id);
        if c.pidfd.running() {
            // A created container's init waits on its FIFO: delete kills it, as runc's does.
            if !force && !state_dir.join("exec.fifo").exists() {
                return Err(failed(
                    "delete",
                    format!("cannot delete container {id} that is not stopped: running"),
                ));
            }
            c.pidfd
                .signal(libc::SIGKILL as u32)
                .map_err(|e| failed("delete", e.to_string()))?;
        }
        remove_cgroup(cgroups_path)
            .await
            .map_err(|e| failed("delete", format!("remove the cgroup {cgroups_path}: {e}")))?;
        match std::fs::remove_dir_all(&state_dir) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(failed(
                "delete",
                format!("remove {}: {e}", state_dir.display()),
            )),
            _ => Ok(()),
        }
    }
}

fn failed(command: &str, message: String) -> RuntimeCliError {
    RuntimeCliError::failed(NAME, command, message)
}

/// Removes cgroup `path` from every hierarchy (what still runs in it killed and waited for),
/// off the shim's single-threaded runtime: the wait for the killed to leave sleeps.
pub(crate) async fn remove_cgroup(path: &str) -> std::io::Result<()> {
    let path = path.to_string();
    tokio::task::spawn_blocking(move || {
        peapod_host::cgroup::remove(Path::new(peapod_host::cgroup::DEFAULT_ROOT), &path)
    })
    .await
    .map_err(std::io::Error::other)?
}

/// The cgroupfs path of the bundle's spec if the shim may delete the container itself: no
/// poststop hooks, not the systemd driver's `slice:prefix:name`.
fn deletable(bundle: &Path) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Spec {
        hooks: Option<Hooks>,
        linux: Option<Linux>,
    }
    #[derive(serde::Deserialize)]
    struct Hooks {
        #[serde(default)]
        poststop: Vec<serde_json::Value>,
    }
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Linux {
        #[serde(default)]
        cgroups_path: String,
        intel_rdt: Option<serde_json::Value>,
    }
    let bytes = std::fs::read(bundle.join("config.json")).ok()?;
    let spec: Spec = serde_json::from_slice(&bytes).ok()?;
    if spec.hooks.is_some_and(|h| !h.poststop.is_empty()) {
        return None;
    }
    let linux = spec.linux?;
    let path = linux.cgroups_path;
    (linux.intel_rdt.is_none() && !path.is_empty() && !path.contains(':')).then_some(path)
}

/// `runc kill --all SIGKILL`: every process in the container's cgroup killed. runc freezes the
/// cgroup first so that none forks unseen; here the cgroup is read again until a reading
/// finds no process not killed already (a process forked before its parent died is found by
/// the next reading; a killed one leaves the list as it exits).
fn kill_all(cgroups_path: &str) {
    let root = Path::new(peapod_host::cgroup::DEFAULT_ROOT);
    let mut killed = std::collections::HashSet::new();
    for _ in 0..100 {
        let fresh: Vec<i32> = peapod_host::cgroup::members(root, cgroups_path)
            .into_iter()
            .filter(|p| !killed.contains(p))
            .collect();
        if fresh.is_empty() {
            return;
        }
        for pid in fresh {
            killed.insert(pid);
            // Not a reused pid: the pidfd holds the process that had it when opened; if that
            // one still runs after its cgroups are read, they were its own.
            let Ok(fd) = Pidfd::open(pid as u32) else {
                continue;
            };
            let cgroups =
                std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap_or_default();
            if fd.running() && cgroups.lines().any(|l| l.ends_with(cgroups_path)) {
                let _ = fd.signal(libc::SIGKILL as u32);
            }
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// runc's start of a created container: read the byte of the init (`init`) from its FIFO,
/// then remove the FIFO. Blocking (run off the async runtime).
fn release(fifo: &Path, init: &Pidfd) -> Result<(), String> {
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
        } else if !init.running() {
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
impl RuntimeCli for NativeRunc {
    async fn create(&self, id: &str, cmd: CreateCommand<'_>) -> Result<u32, RuntimeCliError> {
        let ours = self.runc_root.is_some() && !cmd.start;
        let delete_by = if ours { deletable(cmd.bundle) } else { None };
        let pid = self.runtime.create(id, cmd).await?;
        if ours {
            // The init is the shim's child and not yet reaped: the pid names it.
            match Pidfd::open(pid) {
                Ok(pidfd) => {
                    let c = Created {
                        pidfd,
                        deletable: delete_by,
                    };
                    self.map().insert(id.to_string(), Arc::new(c));
                }
                Err(e) => eprintln!(
                    "container {id}: no pidfd of its init {pid} ({e}): runc does the rest"
                ),
            }
        }
        Ok(pid)
    }
    async fn start(&self, id: &str) -> Result<(), RuntimeCliError> {
        let (Some(c), Some(root)) = (self.get(id), &self.runc_root) else {
            return self.runtime.start(id).await;
        };
        let fifo = root.join(id).join("exec.fifo");
        if !fifo.exists() {
            // Started already: the runtime answers as it would.
            return self.runtime.start(id).await;
        }
        let outcome = tokio::task::spawn_blocking(move || release(&fifo, &c.pidfd))
            .await
            .map_err(|e| e.to_string())
            .and_then(|r| r);
        outcome.map_err(|message| failed("start", message))
    }
    async fn state(&self, id: &str) -> Result<Option<RuntimeStatus>, RuntimeCliError> {
        self.runtime.state(id).await
    }
    async fn kill(&self, id: &str, signal: u32, all: bool) -> Result<(), RuntimeCliError> {
        match self.get(id) {
            Some(c) if !all => c
                .pidfd
                .signal(signal)
                .map_err(|e| failed("kill", e.to_string())),
            Some(c) if signal == libc::SIGKILL as u32 && c.deletable.is_some() => {
                let path = c.deletable.clone().unwrap_or_default();
                c.pidfd
                    .signal(signal)
                    .map_err(|e| failed("kill", e.to_string()))?;
                tokio::task::spawn_blocking(move || kill_all(&path))
                    .await
                    .map_err(|e| failed("kill", e.to_string()))
            }
            _ => self.runtime.kill(id, signal, all).await,
        }
    }
    async fn delete(&self, id: &str, force: bool) -> Result<(), RuntimeCliError> {
        let native = self.get(id).zip(self.runc_root.clone());
        match native {
            Some((c, root)) if c.deletable.is_some() => {
                let path = c.deletable.clone().unwrap_or_default();
                self.delete_natively(id, &root, &c, &path, force).await?;
            }
            _ => self.runtime.delete(id, force).await?,
        }
        self.map().remove(id);
        Ok(())
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

    #[test]
    fn the_shim_deletes_only_cgroupfs_containers_without_poststop_hooks() {
        let dir = tempfile::tempdir().unwrap();
        let with = |s: &str| {
            std::fs::write(dir.path().join("config.json"), s).unwrap();
            deletable(dir.path())
        };
        assert_eq!(
            with(r#"{"linux":{"cgroupsPath":"/kubepods/pod1/c1"},"hooks":{"prestart":[{}]}}"#),
            Some("/kubepods/pod1/c1".into())
        );
        assert_eq!(
            with(r#"{"linux":{"cgroupsPath":"/p/c1"},"hooks":{"poststop":[{}]}}"#),
            None
        );
        assert_eq!(
            with(r#"{"linux":{"cgroupsPath":"kubepods.slice:cri:c1"}}"#),
            None
        );
        assert_eq!(
            with(r#"{"linux":{"cgroupsPath":"/p/c","intelRdt":{}}}"#),
            None
        );
        assert_eq!(with(r#"{"linux":{}}"#), None);
        assert_eq!(with("not json"), None);
    }

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
        let me = Pidfd::open(std::process::id()).unwrap();
        release(&fifo, &me).unwrap();
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
        // An init that has exited.
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let init = Pidfd::open(child.id()).unwrap();
        child.wait().unwrap();
        let err = release(&fifo, &init).unwrap_err();
        assert!(err.contains("already dead"), "{err}");
        assert!(
            fifo.exists(),
            "a failed start leaves the container as it was"
        );
    }
}
