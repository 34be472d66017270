//! The runc commands the shim does itself for the containers runc created (those the shim
//! cannot create itself: [`super::native`]), so that such a container costs one
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

use super::runtime_cli::{RuntimeCli, RuntimeCliError};
use peapod_runtime::cgroups::{self, Cgroups};
use peapod_runtime::pidfd::Pidfd;
use peapod_runtime::spec::Spec;
use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

const NAME: &str = "peapod-shim";

/// How long a start waits for the init to take the byte before calling it stuck (runc's own
/// start has no bound; the daemon's call has its deadline too).
const START_WITHIN: Duration = Duration::from_secs(30);

/// A container runc created for this shim.
pub struct Assisted {
    /// The init's, opened when create returned.
    pidfd: Arc<Pidfd>,
    /// runc's state directory of the container (`<root>/<id>`).
    state_dir: PathBuf,
    /// Its cgroupfs path when the shim may delete it itself (no poststop hooks).
    deletable: Option<String>,
}

impl Assisted {
    /// Container `id` that runc (state under `root`) just created with init `pid`, from
    /// `spec` (its config.json, if it could be read); `None` when its init cannot be held (runc
    /// then does the rest).
    pub fn created(id: &str, pid: u32, root: &Path, spec: Option<&Spec>) -> Option<Assisted> {
        // The init is the shim's child and not yet reaped: the pid names it.
        match Pidfd::open(pid) {
            Ok(pidfd) => Some(Assisted {
                pidfd: Arc::new(pidfd),
                state_dir: root.join(id),
                deletable: spec.and_then(deletable),
            }),
            Err(e) => {
                eprintln!("container {id}: no pidfd of its init {pid} ({e}): runc does the rest");
                None
            }
        }
    }

    /// runc's start: the init released from its FIFO; one started already is the runtime's
    /// to answer, as it would.
    pub async fn start(&self, id: &str, runtime: &dyn RuntimeCli) -> Result<(), RuntimeCliError> {
        let fifo = self.state_dir.join("exec.fifo");
        if !fifo.exists() {
            return runtime.start(id, None).await;
        }
        let init = self.pidfd.clone();
        let outcome = tokio::task::spawn_blocking(move || release(&fifo, &init))
            .await
            .map_err(|e| e.to_string())
            .and_then(|r| r);
        outcome.map_err(|message| failed("start", message))
    }

    /// A signal to the init through its pidfd; with `all` and SIGKILL (a stop's), to every
    /// process of its cgroup too, where the shim may; any other `all` is runc's (it freezes
    /// the cgroup first).
    pub async fn kill(
        &self,
        id: &str,
        signal: u32,
        all: bool,
        runtime: &dyn RuntimeCli,
        cgroups: &Cgroups,
    ) -> Result<(), RuntimeCliError> {
        match &self.deletable {
            _ if !all => self
                .pidfd
                .signal(signal)
                .map_err(|e| failed("kill", e.to_string())),
            Some(path) if signal == libc::SIGKILL as u32 => {
                self.pidfd
                    .signal(signal)
                    .map_err(|e| failed("kill", e.to_string()))?;
                let (cgroups, path) = (cgroups.clone(), path.clone());
                tokio::task::spawn_blocking(move || cgroups.kill_all(&path))
                    .await
                    .map_err(|e| failed("kill", e.to_string()))
            }
            _ => runtime.kill(id, signal, all).await,
        }
    }

    /// runc's delete, by the shim where it may ([`deletable`]), by runc otherwise.
    pub async fn delete(
        &self,
        id: &str,
        force: bool,
        runtime: &dyn RuntimeCli,
        cgroups: &Cgroups,
    ) -> Result<(), RuntimeCliError> {
        let Some(path) = &self.deletable else {
            return runtime.delete(id, force).await;
        };
        if self.pidfd.running() {
            // A created container's init waits on its FIFO: delete kills it, as runc's does.
            if !force && !self.state_dir.join("exec.fifo").exists() {
                return Err(failed(
                    "delete",
                    format!("cannot delete container {id} that is not stopped: running"),
                ));
            }
            self.pidfd
                .signal(libc::SIGKILL as u32)
                .map_err(|e| failed("delete", e.to_string()))?;
        }
        super::remove_cgroup(cgroups, path)
            .await
            .map_err(|e| failed("delete", format!("remove the cgroup {path}: {e}")))?;
        match std::fs::remove_dir_all(&self.state_dir) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(failed(
                "delete",
                format!("remove {}: {e}", self.state_dir.display()),
            )),
            _ => Ok(()),
        }
    }
}

fn failed(command: &str, message: String) -> RuntimeCliError {
    RuntimeCliError::failed(NAME, command, message)
}

/// The cgroupfs path of the spec if the shim may delete the container itself: no poststop
/// hooks, no RDT class, not the systemd driver's `slice:prefix:name`.
fn deletable(spec: &Spec) -> Option<String> {
    if spec.hooks.as_ref().is_some_and(|h| !h.poststop.is_empty()) {
        return None;
    }
    let linux = &spec.linux;
    let path = &linux.cgroups_path;
    (linux.intel_rdt.is_none() && cgroups::is_cgroupfs_path(path)).then(|| path.clone())
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shim_deletes_only_cgroupfs_containers_without_poststop_hooks() {
        let with = |s: &str| deletable(&serde_json::from_str(s).unwrap());
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
        // An init that has exited. It waits for its stdin to close until its pidfd is open: a
        // reaper of a test running beside this one (runc.rs) reaps every child of the process,
        // and a `true` could be gone before its pidfd was (ESRCH). The pidfd outlives the reap.
        let mut child = std::process::Command::new("sh")
            .args(["-c", "read x"])
            .stdin(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let init = Pidfd::open(child.id()).unwrap();
        drop(child.stdin.take());
        // ECHILD when that reaper was first: then it is gone all the same.
        let _ = child.wait();
        let err = release(&fifo, &init).unwrap_err();
        assert!(err.contains("already dead"), "{err}");
        assert!(
            fifo.exists(),
            "a failed start leaves the container as it was"
        );
    }
}
