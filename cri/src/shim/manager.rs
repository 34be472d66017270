//! Starting pods' shims (`peapod-shim start`) and keeping one connection per pod.

use super::{Shim, ShimClient, Shims};
use crate::error::{Error, Result};
use crate::ids;
use async_trait::async_trait;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Starts shims and keeps one connection per pod.
pub struct ShimManager {
    binary: PathBuf,
    runtime: String,
    runtime_root: PathBuf,
    socket_dir: PathBuf,
    clients: Mutex<HashMap<String, Arc<dyn Shim>>>,
}

impl ShimManager {
    pub fn new(
        binary: PathBuf,
        runtime: String,
        runtime_root: PathBuf,
        socket_dir: PathBuf,
    ) -> ShimManager {
        ShimManager {
            binary,
            runtime,
            runtime_root,
            socket_dir,
            clients: Mutex::new(HashMap::new()),
        }
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
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id.to_string(), client.clone());
        client
    }
}

#[async_trait]
impl Shims for ShimManager {
    /// `peapod-shim start`, which returns once the shim serves.
    async fn start(&self, sandbox_id: &str, log: &Path) -> Result<Arc<dyn Shim>> {
        std::fs::create_dir_all(&self.socket_dir)
            .map_err(|e| Error::path("create", &self.socket_dir, e))?;
        let socket = self.socket_path(sandbox_id);
        let output = tokio::process::Command::new(&self.binary)
            .arg("start")
            .args(["--id", sandbox_id])
            .arg("--socket")
            .arg(&socket)
            .args(["--runtime", &self.runtime])
            .arg("--runtime-root")
            .arg(&self.runtime_root)
            .arg("--log")
            .arg(log)
            .kill_on_drop(true)
            .output()
            .await
            .map_err(|e| Error::io(format_args!("shim: run {}", self.binary.display()), e))?;
        if !output.status.success() {
            return Err(Error::internal(format!(
                "shim: starting the shim failed: {}",
                String::from_utf8_lossy(&output.stderr).trim()
            )));
        }
        let client = ShimClient::connect(&socket).await?;
        Ok(self.cache(sandbox_id, client))
    }

    async fn get(&self, sandbox_id: &str) -> Result<Arc<dyn Shim>> {
        {
            let mut clients = self.clients.lock().unwrap_or_else(|p| p.into_inner());
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
        self.clients
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(sandbox_id);
    }

    /// Short, so that it fits a unix socket address.
    fn socket_path(&self, sandbox_id: &str) -> PathBuf {
        self.socket_dir.join(ids::short(sandbox_id))
    }

    fn attach_socket_path(&self, container_id: &str) -> PathBuf {
        self.socket_dir
            .join(format!("{}.a", ids::short(container_id)))
    }

    async fn reap_orphans(&self, container_ids: &[String]) -> Result<()> {
        let mut failures = Vec::new();
        for id in container_ids {
            if let Err(e) = self.kill_and_delete(id).await {
                failures.push(format!("{id}: {e}"));
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
                "removing containers of a dead shim through {}: {}",
                self.runtime,
                failures.join("; ")
            )))
        }
    }
}

/// How long one OCI runtime command may take when the daemon runs it itself.
const RUNTIME_TIMEOUT: Duration = Duration::from_secs(30);

impl ShimManager {
    /// `<runtime> --root <root> ARGS`, bounded in time.
    async fn runtime(&self, args: &[&str]) -> Result<std::process::Output> {
        let run = tokio::process::Command::new(&self.runtime)
            .arg("--root")
            .arg(&self.runtime_root)
            .args(args)
            .stdin(std::process::Stdio::null())
            .kill_on_drop(true)
            .output();
        match tokio::time::timeout(RUNTIME_TIMEOUT, run).await {
            Ok(out) => out.map_err(|e| Error::io(format_args!("run {}", self.runtime), e)),
            Err(_) => Err(Error::deadline_exceeded(format!(
                "{} {} did not finish within {RUNTIME_TIMEOUT:?}",
                self.runtime,
                args.join(" ")
            ))),
        }
    }

    /// The containers the OCI runtime knows (`list -q`).
    async fn runtime_ids(&self) -> Result<Vec<String>> {
        let out = self.runtime(&["list", "-q"]).await?;
        if !out.status.success() {
            return Err(Error::internal(format!(
                "{} list: {}",
                self.runtime,
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
    async fn kill_and_delete(&self, id: &str) -> Result<()> {
        // Fails for a container that is not running (or not there): delete decides.
        let _ = self.runtime(&["kill", "--all", id, "KILL"]).await?;
        let delete = self.runtime(&["delete", "--force", id]).await?;
        if delete.status.success() || !self.runtime_ids().await?.iter().any(|c| c == id) {
            return Ok(());
        }
        Err(Error::internal(format!(
            "{} delete --force {id}: {}",
            self.runtime,
            String::from_utf8_lossy(&delete.stderr).trim()
        )))
    }
}
