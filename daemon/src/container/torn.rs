//! Containers whose record file could not be read at start (the store set the file aside):
//! a placeholder record takes its place when the container's bundle still says which pod it
//! is in (the runtime spec's `io.kubernetes.cri.sandbox-id` annotation). It is recorded
//! `Created`, so that recovery asks the pod's shim what became of it — running, exited with
//! its code, or gone — and RemoveContainer releases its task, root filesystem and
//! directories. Without a bundle nothing of it can run: the set-aside file and its log line
//! are all that is left, and the orphan sweep removes its directories.

use super::ContainerService;
use crate::store::container::{ContainerRecord, ContainerState};
use peapod_proto::v1::{ContainerConfig, ContainerMetadata, ImageSpec};
use peapod_spec::annotations;

impl ContainerService {
    /// Puts a placeholder in place of every container record the store could not read.
    pub(super) fn replace_torn_records(&self) -> usize {
        let mut replaced = 0;
        for id in self.containers.take_torn() {
            let Some(record) = self.placeholder(&id) else {
                tracing::error!(container = %id, "a container whose record was torn has no bundle naming its pod; its directories go with the orphans");
                continue;
            };
            let entry = self.containers.entry(record);
            if let Err(e) = entry.update(|_| {}) {
                tracing::error!(container = %id, error = %e, "persisting the placeholder of a torn record");
            }
            let mut table = self.containers.write();
            let name = entry.get().name;
            if let Err(e) = table.names.reserve(&name, &id, 0, "container") {
                tracing::warn!(container = %id, error = %e, "reserving a placeholder's name");
            }
            table.insert(entry);
            tracing::warn!(container = %id, "a container whose record was torn is recovered from its bundle, for RemoveContainer");
            replaced += 1;
        }
        replaced
    }

    fn placeholder(&self, id: &str) -> Option<ContainerRecord> {
        let bundle = self.paths.container_state_dir(id);
        let spec: serde_json::Value =
            serde_json::from_slice(&std::fs::read(bundle.join("config.json")).ok()?).ok()?;
        let note = |key: &str| spec["annotations"][key].as_str().map(str::to_string);
        let sandbox_id = note(annotations::SANDBOX_ID)?;
        if !self.sandboxes.read().by_id.contains_key(&sandbox_id) {
            return None;
        }
        let short: String = id.chars().take(12).collect();
        let name =
            note(annotations::CONTAINER_NAME).unwrap_or_else(|| format!("torn-record-{short}"));
        let image = note(annotations::IMAGE_NAME).unwrap_or_default();
        let root_dir = self.paths.container_root_dir(id);
        Some(ContainerRecord {
            id: id.to_string(),
            sandbox_id,
            // Not the name it had: a kubelet makes it again under that one.
            name: format!("torn_{id}"),
            config: ContainerConfig {
                metadata: Some(ContainerMetadata { name, attempt: 0 }),
                image: Some(ImageSpec {
                    image: image.clone(),
                    ..Default::default()
                }),
                ..Default::default()
            },
            image_name: image.clone(),
            image_id: String::new(),
            image_ref: image,
            state: ContainerState::Created,
            rootfs: bundle.join("rootfs"),
            bundle,
            exit_file: root_dir.join("exit"),
            stop_signal: libc::SIGTERM,
            runtime_create_sent: true,
            // Times, exit, pid, log, resources, ids and digest: not known.
            ..ContainerRecord::default()
        })
    }
}
