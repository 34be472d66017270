//! The daemon's core: configuration, tables of live objects, and the services they use.

use crate::config::Config;
use crate::error::{Error, Result};
use crate::network::Network;
use crate::shim::ShimManager;
use crate::store::sandbox::{Sandbox, SandboxRecord, SandboxTable};
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

pub struct Runtime {
    pub config: Config,
    pub network: Network,
    pub shims: ShimManager,
    /// The built-in pause root filesystem.
    pub pause_rootfs: PathBuf,
    sandboxes: RwLock<SandboxTable>,
}

fn mkdir(path: &Path, mode: u32) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(path).map_err(|e| Error::path("create", path, e))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .map_err(|e| Error::path("chmod", path, e))
}

impl Runtime {
    /// Prepares the directories and loads the persisted records.
    pub fn new(config: Config) -> Result<Arc<Runtime>> {
        mkdir(&config.root, 0o711)?;
        mkdir(&config.state, 0o711)?;
        for dir in ["sandboxes", "containers"] {
            mkdir(&config.root.join(dir), 0o700)?;
        }
        for dir in ["sandboxes", "netns", "s", "runc"] {
            mkdir(&config.state.join(dir), 0o711)?;
        }
        let pause_rootfs = crate::pause::materialize(&config.root.join("pause"))?;
        let network = Network::new(&config.cni, &config.root.join("cni").join("networks"));
        let shims = ShimManager::new(
            ShimManager::find_binary(&config.runtime.shim_path),
            config.runtime.path.clone(),
            config.state.join("runc"),
            config.state.join("s"),
        );
        let rt = Arc::new(Runtime {
            config,
            network,
            shims,
            pause_rootfs,
            sandboxes: RwLock::new(SandboxTable::default()),
        });
        rt.load_sandboxes()?;
        Ok(rt)
    }

    pub fn root(&self) -> &Path {
        &self.config.root
    }

    pub fn sandbox_root_dir(&self, id: &str) -> PathBuf {
        self.config.root.join("sandboxes").join(id)
    }

    pub fn sandbox_state_dir(&self, id: &str) -> PathBuf {
        self.config.state.join("sandboxes").join(id)
    }

    pub fn netns_dir(&self) -> PathBuf {
        self.config.state.join("netns")
    }

    pub fn sandboxes(&self) -> RwLockReadGuard<'_, SandboxTable> {
        self.sandboxes.read().unwrap_or_else(|p| p.into_inner())
    }

    pub fn sandboxes_mut(&self) -> RwLockWriteGuard<'_, SandboxTable> {
        self.sandboxes.write().unwrap_or_else(|p| p.into_inner())
    }

    /// Loads sandbox records so that a restarted daemon lists its pods. A record left in
    /// `Creating` by a crash is kept (listed as not ready) for RemovePodSandbox to clean.
    fn load_sandboxes(&self) -> Result<()> {
        let dir = self.config.root.join("sandboxes");
        let entries = std::fs::read_dir(&dir).map_err(|e| Error::path("read", &dir, e))?;
        let mut table = self.sandboxes_mut();
        for entry in entries.flatten() {
            let id = entry.file_name().to_string_lossy().into_owned();
            let path = SandboxRecord::record_path(&self.config.root, &id);
            match crate::store::read_record::<SandboxRecord>(&path) {
                Ok(Some(record)) => {
                    let name = record.name.clone();
                    let sandbox = Sandbox::new(record);
                    if let Err(e) = table.names.reserve(&name, &id, "pod sandbox") {
                        tracing::warn!(sandbox = %id, error = %e, "duplicate sandbox name in records");
                    }
                    table.insert(sandbox);
                }
                Ok(None) => {}
                Err(e) => {
                    tracing::warn!(sandbox = %id, error = %e, "skipping unreadable sandbox record")
                }
            }
        }
        Ok(())
    }
}
