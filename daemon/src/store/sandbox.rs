//! Sandbox records.

use super::table::{usual_record_fields, Entry, Record, Records, Table};
use peapod_proto::v1::PodSandboxConfig;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

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
    /// The pause rootfs is a mount from the image store (not the shared built-in one).
    #[serde(default)]
    pub rootfs_mounted: bool,
    /// The digest of the request that made it (`names::digest`), so that an identical retry
    /// gets this object (0 in records from before it).
    #[serde(default)]
    pub request_digest: u64,
    /// the pause's create was sent to the shim (intent: recovery waits for it to land before
    /// deleting it).
    #[serde(default)]
    pub pause_create_sent: bool,
}

impl SandboxRecord {
    /// The reservation key of a sandbox config.
    pub fn name_of(config: &PodSandboxConfig) -> String {
        let m = config.metadata.clone().unwrap_or_default();
        format!("{}_{}_{}_{}", m.name, m.namespace, m.uid, m.attempt)
    }
}

impl Record for SandboxRecord {
    const KIND: &'static str = "pod sandbox";
    const ID_FIELD: &'static str = "pod_sandbox_id";

    usual_record_fields!();

    fn path(root: &Path, id: &str) -> PathBuf {
        root.join("sandboxes").join(id).join("sandbox.json")
    }
}

pub type Sandbox = Entry<SandboxRecord>;
pub type SandboxTable = Table<SandboxRecord>;
pub type SandboxRecords = Records<SandboxRecord>;
