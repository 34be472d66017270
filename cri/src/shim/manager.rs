//! Starting pods' shims (`peapod-shim start`) and keeping one connection per pod.

use super::{Shim, ShimClient, Shims};
use crate::error::{Error, Result};
use crate::ids;
use async_trait::async_trait;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

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
        if let Some(c) = self
            .clients
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(sandbox_id)
        {
            return Ok(c.clone());
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
}
