//! Sandbox records.

use super::names::NameIndex;
use crate::error::{Error, Result};
use crate::ids::{IdIndex, Lookup};
use peapod_proto::v1::PodSandboxConfig;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum SandboxState {
    /// RunPodSandbox is under way (or crashed half-way: recovery tears it down).
    Creating,
    Ready,
    NotReady,
}

/// What CNI ADD was called with and returned, kept for DEL (which needs the same network
/// configuration and, from CNI 0.4.0 on, the ADD result as prevResult).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CniAttachment {
    pub network: serde_json::Value,
    pub result: serde_json::Value,
    pub ifname: String,
    /// CNI_ARGS and capability arguments used at ADD.
    pub args: Vec<(String, String)>,
    pub runtime_config: serde_json::Value,
    /// DEL has succeeded; not to be repeated.
    #[serde(default)]
    pub deleted: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SandboxRecord {
    pub id: String,
    /// The reserved name: `<name>_<namespace>_<uid>_<attempt>`, as the kubelet builds it.
    pub name: String,
    pub config: PodSandboxConfig,
    pub runtime_handler: String,
    pub created_at_ns: i64,
    pub state: SandboxState,
    /// The pinned network namespace (None for host-network pods, or once unpinned).
    pub netns: Option<PathBuf>,
    pub ips: Vec<String>,
    pub cni: Option<CniAttachment>,
    pub cgroup_parent: String,
    pub cgroups_path: String,
    pub shim_socket: PathBuf,
    pub pause_pid: u32,
    /// The pod's /dev/shm tmpfs on the host (None when the pod uses the host IPC namespace).
    pub shm: Option<PathBuf>,
    /// The sandbox's runtime directory (bundle, hostname, hosts, resolv.conf).
    pub dir: PathBuf,
}

impl SandboxRecord {
    pub fn record_path(root: &Path, id: &str) -> PathBuf {
        root.join("sandboxes").join(id).join("sandbox.json")
    }

    /// The reservation key of a sandbox config.
    pub fn name_of(config: &PodSandboxConfig) -> String {
        let m = config.metadata.clone().unwrap_or_default();
        format!("{}_{}_{}_{}", m.name, m.namespace, m.uid, m.attempt)
    }
}

/// A sandbox while the daemon runs.
pub struct Sandbox {
    pub id: String,
    record: RwLock<SandboxRecord>,
    /// Serializes lifecycle operations (stop, remove) on this sandbox.
    pub op: tokio::sync::Mutex<()>,
}

impl Sandbox {
    pub fn new(record: SandboxRecord) -> Arc<Sandbox> {
        Arc::new(Sandbox {
            id: record.id.clone(),
            record: RwLock::new(record),
            op: tokio::sync::Mutex::new(()),
        })
    }

    pub fn get(&self) -> SandboxRecord {
        self.record
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Applies `f` to the record and persists it.
    pub fn update(&self, root: &Path, f: impl FnOnce(&mut SandboxRecord)) -> Result<SandboxRecord> {
        let mut guard = self.record.write().unwrap_or_else(|p| p.into_inner());
        let mut next = guard.clone();
        f(&mut next);
        super::write_record(&SandboxRecord::record_path(root, &next.id), &next)?;
        *guard = next.clone();
        Ok(next)
    }

    /// Changes the in-memory record without persisting (for facts that are re-derived on
    /// recovery anyway).
    pub fn update_volatile(&self, f: impl FnOnce(&mut SandboxRecord)) {
        let mut guard = self.record.write().unwrap_or_else(|p| p.into_inner());
        f(&mut guard);
    }
}

#[derive(Default)]
pub struct SandboxTable {
    pub by_id: HashMap<String, Arc<Sandbox>>,
    pub ids: IdIndex,
    pub names: NameIndex,
}

impl SandboxTable {
    pub fn insert(&mut self, sandbox: Arc<Sandbox>) {
        self.ids.insert(&sandbox.id);
        self.by_id.insert(sandbox.id.clone(), sandbox);
    }

    pub fn remove(&mut self, id: &str) -> Option<Arc<Sandbox>> {
        self.ids.remove(id);
        let sb = self.by_id.remove(id)?;
        self.names.release(&sb.get().name, id);
        Some(sb)
    }

    /// Resolves an id or unique prefix.
    pub fn resolve(&self, id: &str) -> Result<Arc<Sandbox>> {
        match self.ids.lookup(id) {
            Lookup::Found(full) => self
                .by_id
                .get(&full)
                .cloned()
                .ok_or_else(|| Error::not_found(format!("pod sandbox {id} not found"))),
            Lookup::NotFound => Err(Error::not_found(format!("pod sandbox {id:?} not found"))),
            Lookup::Ambiguous => Err(Error::invalid(format!(
                "pod_sandbox_id {id:?} is an ambiguous prefix"
            ))),
        }
    }

    pub fn all(&self) -> Vec<Arc<Sandbox>> {
        self.by_id.values().cloned().collect()
    }
}
