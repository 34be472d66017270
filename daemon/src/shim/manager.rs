//! Starting pods' shims (`peapod-shim serve`, detached) and keeping one connection per pod.

use super::{Shim, ShimClient, Shims};
use crate::error::{Error, Result};
use crate::ids;
use crate::runtime_handlers::{RuntimeCommand, RuntimeHandler, RuntimeHandlers};
use async_trait::async_trait;
use peapod_host::sync::LockUnpoisoned;
use peapod_shim::launch::{Readiness, ReadyPipe};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Starts shims and keeps one connection per pod.
pub struct ShimManager {
    binary: PathBuf,
    /// Every runtime there is, the default's first: what a dead shim left is in one of them.
    runtimes: Vec<RuntimeCommand>,
    socket_dir: PathBuf,
    /// The shims' `--exec` (`runtime.exec`).
    exec: &'static str,
    /// The shims' `--create` (`runtime.create`).
    create: &'static str,
    /// The shims' `--cgroup-driver` (`cgroup.driver`): with systemd, runc makes scopes.
    cgroup_driver: &'static str,
    clients: Mutex<HashMap<String, Arc<dyn Shim>>>,
}

impl ShimManager {
    pub fn new(binary: PathBuf, handlers: &RuntimeHandlers, socket_dir: PathBuf) -> ShimManager {
        ShimManager {
            binary,
            runtimes: handlers.runtimes(),
            socket_dir,
            exec: "native",
            create: "native",
            cgroup_driver: "cgroupfs",
            clients: Mutex::new(HashMap::new()),
        }
    }

    /// Shims started from now on start execs this way (`native` or `runc`).
    pub fn with_exec(mut self, exec: &'static str) -> ShimManager {
        self.exec = exec;
        self
    }

    /// Shims started from now on create app containers this way (`native` or `runc`).
    pub fn with_create(mut self, create: &'static str) -> ShimManager {
        self.create = create;
        self
    }

    /// Shims started from now on place containers with this cgroup driver (`cgroupfs` or
    /// `systemd`).
    pub fn with_cgroup_driver(mut self, driver: &'static str) -> ShimManager {
        self.cgroup_driver = driver;
        self
    }

    /// The shim binary: the configured path, else `peapod-shim` beside this executable, else PATH.
    pub fn find_binary(configured: &str) -> PathBuf {
        if !configured.is_empty() {
            return PathBuf::from(configured);
        }
        std::env::current_exe()
            .ok()
            .and_then(|exe| exe.parent().map(|d| d.join("peapod-shim")))
            .filter(|p| p.is_file())
            .unwrap_or_else(|| PathBuf::from("peapod-shim"))
    }

    fn cache(&self, id: &str, client: ShimClient) -> Arc<dyn Shim> {
        let client: Arc<dyn Shim> = Arc::new(client);
        self.clients
            .lock_unpoisoned()
            .insert(id.to_string(), client.clone());
        client
    }
}

#[async_trait]
impl Shims for ShimManager {
    /// `peapod-shim serve` with the handler's runtime, in a session of its own, once it
    /// serves. The shim is this process's child only until it is reaped: it outlives the
    /// daemon, and while both live tokio reaps it when it ends (the child handle is dropped,
    /// not killed).
    #[tracing::instrument(level = "debug", name = "shim.launch", skip_all, fields(runtime = %handler.path))]
    async fn start(
        &self,
        sandbox_id: &str,
        handler: &RuntimeHandler,
        log: &Path,
    ) -> Result<Arc<dyn Shim>> {
        std::fs::create_dir_all(&self.socket_dir)
            .map_err(|e| Error::path("create", &self.socket_dir, e))?;
        let socket = self.socket_path(sandbox_id);
        // The shim's own messages (it has no other stderr once detached).
        let log_file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .map_err(|e| Error::path("open", log, e))?;
        let mut cmd = std::process::Command::new(&self.binary);
        cmd.arg("serve")
            .args(["--id", sandbox_id])
            .arg("--socket")
            .arg(&socket)
            .args(["--runtime", &handler.path])
            .arg("--runtime-root")
            .arg(&handler.root)
            .arg("--log")
            .arg(log)
            .args(["--exec", self.exec])
            .args(["--create", self.create])
            .args(["--cgroup-driver", self.cgroup_driver])
            .args(
                handler
                    .args
                    .iter()
                    .flat_map(|a| ["--runtime-arg", a.as_str()]),
            )
            .args([
                "--sandboxed",
                if handler.sandboxed { "true" } else { "false" },
            ])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(log_file);
        let ready =
            ReadyPipe::detach(&mut cmd).map_err(|e| Error::io("shim: a pipe for its start", e))?;
        let mut child = tokio::process::Command::from(cmd)
            .spawn()
            .map_err(|e| Error::io(format_args!("shim: run {}", self.binary.display()), e))?;
        let waited = tokio::task::spawn_blocking(move || ready.wait(SHIM_SERVES_WITHIN))
            .await
            .map_err(|e| Error::internal(format!("shim: waiting for its start: {e}")))?
            .map_err(|e| Error::io("shim: waiting for its start", e))?;
        match waited {
            Readiness::Serving => {}
            Readiness::Ended => {
                let status = match tokio::time::timeout(SHIM_SERVES_WITHIN, child.wait()).await {
                    Ok(Ok(status)) => status.to_string(),
                    Ok(Err(e)) => e.to_string(),
                    Err(_) => "still running".to_string(),
                };
                return Err(Error::internal(format!(
                    "shim: the shim exited before serving ({status}): {}",
                    last_words(log)
                )));
            }
            Readiness::TimedOut => {
                let _ = child.start_kill();
                return Err(Error::deadline_exceeded(format!(
                    "shim: the shim did not serve within {SHIM_SERVES_WITHIN:?}: {}",
                    last_words(log)
                )));
            }
        }
        let client = ShimClient::connect(&socket).await?;
        Ok(self.cache(sandbox_id, client))
    }

    async fn get(&self, sandbox_id: &str) -> Result<Arc<dyn Shim>> {
        {
            let mut clients = self.clients.lock_unpoisoned();
            match clients.get(sandbox_id) {
                Some(c) if c.alive() => return Ok(c.clone()),
                // A dead shim's connection is dropped; connecting again says why it is gone.
                Some(_) => {
                    clients.remove(sandbox_id);
                }
                None => {}
            }
        }
        let client = ShimClient::connect(&self.socket_path(sandbox_id)).await?;
        Ok(self.cache(sandbox_id, client))
    }

    fn forget(&self, sandbox_id: &str) {
        self.clients.lock_unpoisoned().remove(sandbox_id);
    }

    /// Short, so that it fits a unix socket address.
    fn socket_path(&self, sandbox_id: &str) -> PathBuf {
        self.socket_dir.join(ids::short(sandbox_id))
    }

    fn attach_socket_path(&self, container_id: &str) -> PathBuf {
        self.socket_dir
            .join(format!("{}.a", ids::short(container_id)))
    }

    async fn release_idle_runtime(&self, handler: &RuntimeHandler) -> Result<()> {
        if !handler.sandboxed {
            return Ok(());
        }
        let Some(runtime) = self.runtimes.iter().find(|r| r.root == handler.root) else {
            return Ok(());
        };
        if !runtime.root.exists() || !self.runtime_ids(runtime).await?.is_empty() {
            return Ok(());
        }
        let root = runtime.root.clone();
        crate::blocking::off_runtime(move || {
            for m in peapod_host::mount::mounts_under(&root) {
                peapod_host::mount::detach(&m).map_err(|e| Error::path("unmount", &m, e))?;
            }
            Ok(())
        })
    }

    async fn reap_orphans(&self, container_ids: &[String]) -> Result<()> {
        let mut failures = Vec::new();
        for id in container_ids {
            // The default runtime as always (its delete of a container it does not have
            // changes nothing); every other runtime only where it lists the container.
            for (n, runtime) in self.runtimes.iter().enumerate() {
                let result = if n == 0 {
                    self.kill_and_delete(runtime, id).await
                } else if !runtime.root.exists() {
                    Ok(()) // a runtime no pod has used yet has no containers
                } else {
                    match self.runtime_ids(runtime).await {
                        Ok(ids) if ids.iter().any(|c| c == id) => {
                            self.kill_and_delete(runtime, id).await
                        }
                        Ok(_) => Ok(()),
                        Err(e) => Err(e),
                    }
                };
                if let Err(e) = result {
                    failures.push(format!("{id}: {e}"));
                }
            }
            // What the dead shim would have removed: its socket (the pod's id) and attach
            // sockets (a container's).
            for socket in [self.socket_path(id), self.attach_socket_path(id)] {
                if let Err(e) = peapod_host::fs::remove_file_if_exists(&socket) {
                    failures.push(format!("{}: {e}", socket.display()));
                }
            }
        }
        if failures.is_empty() {
            Ok(())
        } else {
            Err(Error::internal(format!(
                "removing containers of a dead shim through the OCI runtime: {}",
                failures.join("; ")
            )))
        }
    }
}

/// The end of a shim's log, for the error of a shim that did not come to serve: the pod's
/// directory, and the log with it, is removed when RunPodSandbox fails.
fn last_words(log: &Path) -> String {
    const TAIL: usize = 1024;
    let text = std::fs::read(log).unwrap_or_default();
    let tail = &text[text.len().saturating_sub(TAIL)..];
    let words = String::from_utf8_lossy(tail).trim().replace('\n', "; ");
    if words.is_empty() {
        "it wrote nothing".to_string()
    } else {
        words
    }
}

/// How long a new shim may take to serve its socket.
const SHIM_SERVES_WITHIN: Duration = Duration::from_secs(10);

/// How long one OCI runtime command may take when the daemon runs it itself.
const RUNTIME_TIMEOUT: Duration = Duration::from_secs(30);

impl ShimManager {
    /// `<runtime> --root <root> [its flags] ARGS`, bounded in time.
    async fn runtime(
        &self,
        runtime: &RuntimeCommand,
        args: &[&str],
    ) -> Result<std::process::Output> {
        let name = &runtime.path;
        let run = tokio::process::Command::new(name)
            .arg("--root")
            .arg(&runtime.root)
            .args(&runtime.args)
            .args(args)
            .stdin(std::process::Stdio::null())
            .kill_on_drop(true)
            .output();
        match tokio::time::timeout(RUNTIME_TIMEOUT, run).await {
            Ok(out) => out.map_err(|e| Error::io(format_args!("run {name}"), e)),
            Err(_) => Err(Error::deadline_exceeded(format!(
                "{name} {} did not finish within {RUNTIME_TIMEOUT:?}",
                args.join(" ")
            ))),
        }
    }

    /// The containers the OCI runtime knows (`list --quiet`: runc, crun and runsc all take the
    /// long name; runsc has no `-q`).
    async fn runtime_ids(&self, runtime: &RuntimeCommand) -> Result<Vec<String>> {
        let out = self.runtime(runtime, &["list", "--quiet"]).await?;
        if !out.status.success() {
            return Err(Error::internal(format!(
                "{} list: {}",
                runtime.path,
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        Ok(String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::to_string)
            .collect())
    }

    /// SIGKILL to every process of the container, then `delete --force`. Whether it worked
    /// is judged by the runtime's own list afterwards, never by the text of an error.
    async fn kill_and_delete(&self, runtime: &RuntimeCommand, id: &str) -> Result<()> {
        // Fails for a container that is not running (or not there): delete decides.
        let _ = self
            .runtime(runtime, &["kill", "--all", id, "KILL"])
            .await?;
        let delete = self.runtime(runtime, &["delete", "--force", id]).await?;
        if delete.status.success() || !self.runtime_ids(runtime).await?.iter().any(|c| c == id) {
            return Ok(());
        }
        Err(Error::internal(format!(
            "{} delete --force {id}: {}",
            runtime.path,
            String::from_utf8_lossy(&delete.stderr).trim()
        )))
    }
}
