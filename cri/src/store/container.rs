//! Container records.

use super::table::{Entry, Record, Records, Table};
use peapod_proto::v1::{ContainerConfig, LinuxContainerResources};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::sync::Arc;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ContainerState {
    /// CreateContainer is under way (or crashed half-way: recovery removes it). Never listed.
    Creating,
    Created,
    Running,
    Exited,
    /// Its shim and exit record are gone: what became of it is not known.
    Unknown,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ContainerRecord {
    pub id: String,
    pub sandbox_id: String,
    /// The reserved name: `<container>_<pod>_<namespace>_<pod uid>_<attempt>`.
    pub name: String,
    pub config: ContainerConfig,
    /// The image as the config named it, and as resolved.
    pub image_name: String,
    pub image_id: String,
    pub image_ref: String,
    pub state: ContainerState,
    pub created_at_ns: i64,
    pub started_at_ns: i64,
    pub finished_at_ns: i64,
    pub exit_code: i32,
    pub reason: String,
    pub message: String,
    pub pid: u32,
    /// The host path of the CRI log (log_directory + log_path), empty if none.
    pub log_path: String,
    pub bundle: PathBuf,
    pub rootfs: PathBuf,
    pub exit_file: PathBuf,
    /// The signal StopContainer sends first (the image's StopSignal, default SIGTERM).
    pub stop_signal: i32,
    /// The resources as last applied (create or UpdateContainerResources).
    pub resources: Option<LinuxContainerResources>,
    pub uid: u32,
    pub gid: u32,
    pub supplemental_groups: Vec<u32>,
    /// Image volumes mounted for this container (records from before them have none).
    #[serde(default)]
    pub image_volumes: Vec<ImageVolume>,
    /// The digest of the request that made it (`names::digest`), so that an identical retry
    /// gets this object (0 in records from before it).
    #[serde(default)]
    pub request_digest: u64,
    /// the runtime create was sent to the shim (intent: recovery waits for it to land before
    /// deleting it).
    #[serde(default)]
    pub runtime_create_sent: bool,
}

/// A read-only image rootfs mounted for an image-volume mount.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct ImageVolume {
    /// Its id in the image store (`<container id>-iv<n>`).
    pub rootfs_id: String,
    pub target: PathBuf,
}

impl Record for ContainerRecord {
    const KIND: &'static str = "container";
    const ID_FIELD: &'static str = "container_id";

    fn id(&self) -> &str {
        &self.id
    }

    fn name(&self) -> &str {
        &self.name
    }

    fn digest(&self) -> u64 {
        self.request_digest
    }

    fn path(root: &Path, id: &str) -> PathBuf {
        root.join("containers").join(id).join("container.json")
    }
}

pub type Container = Entry<ContainerRecord>;
pub type ContainerTable = Table<ContainerRecord>;
pub type ContainerRecords = Records<ContainerRecord>;

impl Records<ContainerRecord> {
    /// The containers of one pod.
    pub fn of_sandbox(&self, sandbox_id: &str) -> Vec<Arc<Container>> {
        self.all()
            .into_iter()
            .filter(|c| c.get().sandbox_id == sandbox_id)
            .collect()
    }
}
