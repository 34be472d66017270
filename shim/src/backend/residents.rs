//! The containers' resident exec helpers, from the shim's side (`peapod_runtime::resident`
//! is the helper's): one is started at a container's first native exec and kept, in its
//! [`ResidentSlot`] beside its backend, while the container lives, and each later exec is a
//! request over its socket instead of a fresh helper. A fresh helper spends most of an exec moving itself into the container's cgroups
//! (on a cgroup v1 host the first move waits for an RCU grace period: about 5 of 6 ms); a
//! process the resident forks is born there.
//!
//! What it costs: one small process per container that has had an exec, in the container's
//! cgroups (its memory and one pid count there, as a running `runc exec` process's do) but
//! not in its PID namespace (the container's own `ps` does not show it; the runtime's `ps` is
//! told to leave it out). It goes when the container's init exits, when the container is
//! deleted ([`ResidentSlot::retire`]) and when the shim dies (its socket closes).

use super::runtime_cli::{ProcessIo, RuntimeCliError, COMMAND_TIMEOUT};
use super::Helpers;
use peapod_runtime::helper::Helper;
use peapod_runtime::wire::{self, Reply};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use tokio::sync::oneshot;

/// How the helper is named in errors (as runc's are named "runc").
const NAME: &str = "peapod-shim nsexec --resident";

/// One container's helper.
struct Resident {
    /// The init it joined: a container with another init (restarted under the same id) needs
    /// a new helper.
    init_pid: u32,
    pid: u32,
    sock: UnixStream,
    exit: oneshot::Receiver<i32>,
}

/// A container's resident helper once it has one, locked for the length of an exec so that
/// requests to one helper take turns.
#[derive(Default)]
pub struct ResidentSlot(Arc<tokio::sync::Mutex<Option<Resident>>>);

/// What a request needs besides its stdio.
pub struct ExecRequest<'a> {
    pub bundle: &'a Path,
    pub init_pid: u32,
    /// The runtime-spec Process, as JSON.
    pub process: &'a [u8],
    /// Where the terminal's master goes (a terminal exec): the helper's child makes the pty
    /// in the container, as runc's init does, and sends the master there.
    pub console_socket: Option<&'a Path>,
}

impl ResidentSlot {
    /// Starts an exec through the container's helper (started first if it has none, or again
    /// if the one it had is gone); returns the process's pid.
    pub async fn exec(
        &self,
        helpers: &Helpers,
        req: ExecRequest<'_>,
        io: ProcessIo,
    ) -> Result<u32, RuntimeCliError> {
        let mut stdio = Vec::from(stdio_fds(io).map_err(spawn_error)?);
        if let Some(path) = req.console_socket {
            let console = std::os::unix::net::UnixStream::connect(path).map_err(spawn_error)?;
            stdio.push(OwnedFd::from(console));
        }
        let slot = self.0.clone();
        let starter = Starter {
            helpers: helpers.clone(),
            bundle: req.bundle.to_path_buf(),
            init_pid: req.init_pid,
        };
        let process = req.process.to_vec();
        // In a task of its own: a caller that gives up must not leave a request half-said on
        // the helper's socket for the next exec to read the answer of.
        tokio::spawn(async move {
            let mut resident = slot.lock().await;
            exec_in(&starter, &mut resident, &process, &stdio).await
        })
        .await
        .map_err(|e| spawn_error(std::io::Error::other(e)))?
    }

    /// The helper's pid, if the container has one (the runtime's `ps` lists it); `None` too
    /// while an exec holds the slot.
    pub fn pid(&self) -> Option<u32> {
        let resident = self.0.try_lock().ok()?;
        resident.as_ref().map(|r| r.pid)
    }

    /// Ends the container's helper, waiting for it to be gone (its cgroups can go then).
    pub async fn retire(&self) {
        retire(self.0.lock().await.take()).await;
    }
}

/// What starting a container's helper takes.
struct Starter {
    helpers: Helpers,
    bundle: PathBuf,
    init_pid: u32,
}

impl Starter {
    async fn start(&self) -> Result<Resident, RuntimeCliError> {
        let (bundle, init_pid) = (&self.bundle, self.init_pid);
        let (ours, theirs) = UnixStream::pair().map_err(spawn_error)?;
        ours.set_read_timeout(Some(COMMAND_TIMEOUT))
            .and_then(|_| ours.set_write_timeout(Some(COMMAND_TIMEOUT)))
            .map_err(spawn_error)?;
        let mut cmd = Helper::Resident {
            bundle: bundle.clone(),
            init_pid: init_pid as i32,
        }
        .command(&self.helpers.program);
        cmd.stdin(Stdio::from(OwnedFd::from(theirs)))
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let (pid, exit) = self.helpers.reaper.spawn(&mut cmd).map_err(spawn_error)?;
        drop(cmd);
        let mut resident = Resident {
            init_pid,
            pid,
            sock: ours,
            exit,
        };
        let ready = blocking(&mut resident, |sock| {
            let (bytes, _) = wire::recv(sock)?.ok_or(std::io::ErrorKind::UnexpectedEof)?;
            serde_json::from_slice::<Reply>(&bytes).map_err(std::io::Error::other)
        })
        .await;
        let why = match ready {
            Ok(Reply::Ready) => return Ok(resident),
            Ok(Reply::Failed { message }) => failed("exec", message),
            Ok(other) => failed("exec", format!("said {other:?} before ready")),
            Err(e) => e,
        };
        retire(Some(resident)).await;
        Err(why)
    }
}

/// An exec through the helper in `resident`, started (again) when there is none or the one
/// there has left; a helper that turns out gone mid-request is replaced once.
async fn exec_in(
    starter: &Starter,
    resident: &mut Option<Resident>,
    process: &[u8],
    stdio: &[OwnedFd],
) -> Result<u32, RuntimeCliError> {
    for attempt in 0..2 {
        let stale = resident.as_mut().is_some_and(|r| {
            r.init_pid != starter.init_pid
                || !matches!(r.exit.try_recv(), Err(oneshot::error::TryRecvError::Empty))
        });
        if stale {
            retire(resident.take()).await;
        }
        let r = match resident.as_mut() {
            Some(r) => r,
            None => resident.insert(starter.start().await?),
        };
        match request(r, process, stdio).await {
            Ok(Reply::Started { pid }) => return Ok(pid as u32),
            Ok(Reply::Failed { message }) => return Err(failed("exec", message)),
            Ok(Reply::Ready) => {
                return Err(failed("exec", "answered ready to an exec".into()));
            }
            Err(RuntimeCliError::Spawn { source, .. }) if attempt == 0 => {
                eprintln!("resident exec helper gone ({source}); starting another");
                retire(resident.take()).await;
            }
            Err(e) => {
                retire(resident.take()).await;
                return Err(e);
            }
        }
    }
    Err(failed("exec", "no helper could be started".into()))
}

/// One exec request and its reply.
async fn request(
    r: &mut Resident,
    process: &[u8],
    stdio: &[OwnedFd],
) -> Result<Reply, RuntimeCliError> {
    let fds: Vec<_> = stdio.iter().map(|f| f.as_raw_fd()).collect();
    let process = process.to_vec();
    blocking(r, move |sock| {
        wire::send(sock, &process, &fds)?;
        let (bytes, _) = wire::recv(sock)?.ok_or(std::io::ErrorKind::UnexpectedEof)?;
        serde_json::from_slice::<Reply>(&bytes).map_err(std::io::Error::other)
    })
    .await
}

/// Runs blocking socket work off the async threads (the socket has the runtime's deadline as
/// its timeouts); a timeout is the command's, any other error the helper's being gone.
async fn blocking<T: Send + 'static>(
    r: &mut Resident,
    work: impl FnOnce(&mut UnixStream) -> std::io::Result<T> + Send + 'static,
) -> Result<T, RuntimeCliError> {
    let mut sock = r.sock.try_clone().map_err(spawn_error)?;
    let outcome = tokio::task::spawn_blocking(move || work(&mut sock))
        .await
        .map_err(|e| spawn_error(std::io::Error::other(e)))?;
    outcome.map_err(|e| match e.kind() {
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => RuntimeCliError::Timeout {
            runtime: NAME.into(),
            command: "exec".into(),
            limit: COMMAND_TIMEOUT,
        },
        _ => spawn_error(e),
    })
}

/// Kills a helper and waits until it has been reaped.
async fn retire(resident: Option<Resident>) {
    let Some(r) = resident else { return };
    drop(r.sock);
    let mut exit = r.exit;
    if matches!(exit.try_recv(), Err(oneshot::error::TryRecvError::Empty)) {
        // Not reaped yet, so the pid is still the helper's.
        // SAFETY: kill with integer arguments.
        unsafe { libc::kill(r.pid as i32, libc::SIGKILL) };
        let _ = tokio::time::timeout(COMMAND_TIMEOUT, exit).await;
    }
}

/// The three descriptors a request carries: /dev/null (the host's, as a runtime passes it)
/// where the exec has no stream.
fn stdio_fds(io: ProcessIo) -> std::io::Result<[OwnedFd; 3]> {
    let or_null = |fd: Option<OwnedFd>| -> std::io::Result<OwnedFd> {
        match fd {
            Some(fd) => Ok(fd),
            None => Ok(std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open("/dev/null")?
                .into()),
        }
    };
    Ok([or_null(io.stdin)?, or_null(io.stdout)?, or_null(io.stderr)?])
}

fn spawn_error(source: std::io::Error) -> RuntimeCliError {
    RuntimeCliError::spawn(NAME, source)
}

fn failed(command: &str, message: String) -> RuntimeCliError {
    RuntimeCliError::failed(NAME, command, message)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A stand-in helper: a script that answers on its stdin (the socket) as `reply` says.
    fn scripted_helper(dir: &Path, reply: &str) -> PathBuf {
        let path = dir.join("helper");
        let script = format!(
            "#!/usr/bin/python3\nimport os, struct\nopen({pid:?}, 'w').write(str(os.getpid()))\nm = {reply:?}.encode()\nos.write(0, struct.pack('<I', len(m)) + m)\n",
            pid = dir.join("pid").display().to_string(),
        );
        std::fs::write(&path, script).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path
    }

    /// A helper that cannot join its container: the exec fails with its words, and the helper
    /// is reaped and forgotten, not kept for the next exec. (Called by the shim's one test
    /// that owns a reaper: two reapers in one process would take each other's exits.)
    pub(crate) async fn a_helper_that_cannot_start_is_reaped_and_its_words_returned(
        reaper: &Arc<crate::reaper::Reaper>,
    ) {
        let dir = tempfile::tempdir().unwrap();
        let program = scripted_helper(dir.path(), r#"{"failed":{"message":"init 42 is gone"}}"#);
        let helpers = Helpers {
            program: Arc::new(peapod_runtime::program::Program::plain(program)),
            reaper: reaper.clone(),
        };
        let slot = ResidentSlot::default();
        let req = ExecRequest {
            bundle: dir.path(),
            init_pid: 42,
            process: b"{}",
            console_socket: None,
        };
        let err = slot
            .exec(&helpers, req, ProcessIo::null())
            .await
            .unwrap_err();
        assert!(err.to_string().ends_with("exec: init 42 is gone"), "{err}");
        assert_eq!(slot.pid(), None, "a failed helper is not kept");
        assert!(slot.0.lock().await.is_none());
        // Reaped by the time the exec answered: no zombie left behind.
        let pid = std::fs::read_to_string(dir.path().join("pid")).unwrap();
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        assert!(!status.contains("State:\tZ"), "helper {pid} left a zombie");
    }
}
