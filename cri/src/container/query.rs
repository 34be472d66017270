//! ContainerStatus and ListContainers.

use crate::error::Result;
use crate::runtime::Runtime;
use crate::sandbox::query::labels_match;
use crate::store::container::{ContainerRecord, ContainerState};
use peapod_proto::v1 as cri;
use std::collections::HashMap;

pub fn cri_state(state: ContainerState) -> cri::ContainerState {
    match state {
        ContainerState::Created => cri::ContainerState::ContainerCreated,
        ContainerState::Running => cri::ContainerState::ContainerRunning,
        ContainerState::Exited => cri::ContainerState::ContainerExited,
        ContainerState::Unknown => cri::ContainerState::ContainerUnknown,
    }
}

fn image_spec(rec: &ContainerRecord) -> cri::ImageSpec {
    cri::ImageSpec {
        image: rec.image_name.clone(),
        annotations: rec
            .config
            .image
            .as_ref()
            .map(|i| i.annotations.clone())
            .unwrap_or_default(),
        ..Default::default()
    }
}

pub fn to_status(rec: &ContainerRecord) -> cri::ContainerStatus {
    cri::ContainerStatus {
        id: rec.id.clone(),
        metadata: rec.config.metadata.clone(),
        state: cri_state(rec.state) as i32,
        created_at: rec.created_at_ns,
        started_at: rec.started_at_ns,
        finished_at: rec.finished_at_ns,
        exit_code: rec.exit_code,
        image: Some(image_spec(rec)),
        image_ref: rec.image_ref.clone(),
        reason: rec.reason.clone(),
        message: rec.message.clone(),
        labels: rec.config.labels.clone(),
        annotations: rec.config.annotations.clone(),
        mounts: rec.config.mounts.clone(),
        log_path: rec.log_path.clone(),
        resources: rec.resources.clone().map(|linux| cri::ContainerResources {
            linux: Some(linux),
            ..Default::default()
        }),
        image_id: rec.image_id.clone(),
        user: Some(cri::ContainerUser {
            linux: Some(cri::LinuxContainerUser {
                uid: i64::from(rec.uid),
                gid: i64::from(rec.gid),
                supplemental_groups: rec
                    .supplemental_groups
                    .iter()
                    .map(|g| i64::from(*g))
                    .collect(),
            }),
        }),
    }
}

pub fn to_list_item(rec: &ContainerRecord) -> cri::Container {
    cri::Container {
        id: rec.id.clone(),
        pod_sandbox_id: rec.sandbox_id.clone(),
        metadata: rec.config.metadata.clone(),
        image: Some(image_spec(rec)),
        image_ref: rec.image_ref.clone(),
        state: cri_state(rec.state) as i32,
        created_at: rec.created_at_ns,
        labels: rec.config.labels.clone(),
        annotations: rec.config.annotations.clone(),
        image_id: rec.image_id.clone(),
    }
}

/// The verbose `info` of ContainerStatus: pid, sandbox, and the runtime spec as written.
pub fn verbose_info(rec: &ContainerRecord) -> HashMap<String, String> {
    let spec: serde_json::Value = std::fs::read(rec.bundle.join("config.json"))
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_default();
    let info = serde_json::json!({
        "pid": rec.pid,
        "sandboxID": rec.sandbox_id,
        "bundle": rec.bundle,
        "rootfs": rec.rootfs,
        "stopSignal": rec.stop_signal,
        "runtimeSpec": spec,
        "config": rec.config,
    });
    HashMap::from([("info".to_string(), info.to_string())])
}

impl Runtime {
    pub fn container_record(&self, id: &str) -> Result<ContainerRecord> {
        Ok(self.containers().resolve(id)?.get())
    }

    pub fn list_containers(&self, filter: Option<&cri::ContainerFilter>) -> Vec<ContainerRecord> {
        let table = self.containers();
        let candidates = match filter.map(|f| f.id.as_str()).filter(|id| !id.is_empty()) {
            Some(id) => match table.resolve(id) {
                Ok(c) => vec![c],
                Err(_) => return Vec::new(),
            },
            None => table.all(),
        };
        let sandbox = filter
            .map(|f| f.pod_sandbox_id.as_str())
            .filter(|s| !s.is_empty())
            .map(|s| self.sandboxes().resolve(s).map(|sb| sb.id.clone()));
        let mut out: Vec<ContainerRecord> = candidates
            .into_iter()
            .map(|c| c.get())
            .filter(|rec| {
                let Some(f) = filter else { return true };
                if let Some(state) = &f.state {
                    if cri_state(rec.state) as i32 != state.state {
                        return false;
                    }
                }
                match &sandbox {
                    Some(Ok(sid)) if *sid != rec.sandbox_id => return false,
                    Some(Err(_)) => return false,
                    _ => {}
                }
                labels_match(&rec.config.labels, &f.label_selector)
            })
            .collect();
        out.sort_by_key(|r| std::cmp::Reverse(r.created_at_ns));
        out
    }

    /// Statuses of a sandbox's containers, for PodSandboxStatus.
    pub async fn container_statuses_of(&self, sandbox_id: &str) -> Vec<cri::ContainerStatus> {
        self.containers_of(sandbox_id)
            .iter()
            .map(|c| to_status(&c.get()))
            .collect()
    }
}
