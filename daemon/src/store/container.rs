//! Container records.

use super::table::{usual_record_fields, Entry, Record, Records, Table};
use peapod_proto::v1::{ContainerConfig, LinuxContainerResources};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::sync::Arc;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum ContainerState {
    /// CreateContainer is under way (or crashed half-way: recovery removes it). Never listed.
    Creating,
    Created,
    Running,
    Exited,
    /// Its shim and exit record are gone: what became of it is not known.
    #[default]
    Unknown,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ContainerRecord {
    pub id: String,
    pub sandbox_id: String,
    /// The reserved name: `<container>_<pod>_<namespace>_<pod uid>_<attempt>`.
    pub name: String,
    pub config: ContainerConfig,
    /// The image as the user named it (the config's user_specified_image, else its image),
    /// and as resolved.
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
    /// The signal StopContainer sends first (the config's stop_signal, else the image's
    /// StopSignal, else SIGTERM).
    pub stop_signal: i32,
    /// That signal as the CRI `Signal` ContainerStatus reports (0 in records from before it:
    /// ContainerStatus then names `stop_signal`).
    #[serde(default)]
    pub stop_signal_cri: i32,
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

/// The name a container config's metadata gives (what CRI clients call the container, not the
/// reserved name); `""` when it has none.
pub fn config_name(config: &ContainerConfig) -> &str {
    config.metadata.as_ref().map_or("", |m| m.name.as_str())
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

    usual_record_fields!();

    fn path(root: &Path, id: &str) -> PathBuf {
        root.join("containers").join(id).join("container.json")
    }

    fn parent_id(&self) -> Option<&str> {
        Some(&self.sandbox_id)
    }
}

pub type Container = Entry<ContainerRecord>;
pub type ContainerTable = Table<ContainerRecord>;
pub type ContainerRecords = Records<ContainerRecord>;

impl Records<ContainerRecord> {
    /// The containers of one pod (by its full id), newest first.
    pub fn of_sandbox(&self, sandbox_id: &str) -> Vec<Arc<Container>> {
        self.of_parent(sandbox_id)
    }
}
