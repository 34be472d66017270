//! ContainerStatus and ListContainers.

use crate::error::Result;
use crate::runtime::Runtime;
use crate::store::container::ContainerRecord;
use crate::store::to_cri::{container_state, container_status, labels_match};
use peapod_proto::v1 as cri;
use std::collections::HashMap;

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
        Ok(self.containers.read().resolve(id)?.get())
    }

    pub fn list_containers(&self, filter: Option<&cri::ContainerFilter>) -> Vec<ContainerRecord> {
        let table = self.containers.read();
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
            .map(|s| self.sandboxes.read().resolve(s).map(|sb| sb.id.clone()));
        let mut out: Vec<ContainerRecord> = candidates
            .into_iter()
            .map(|c| c.get())
            .filter(|rec| {
                let Some(f) = filter else { return true };
                if let Some(state) = &f.state {
                    if container_state(rec.state) as i32 != state.state {
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
        self.containers
            .of_sandbox(sandbox_id)
            .iter()
            .map(|c| container_status(&c.get()))
            .collect()
    }
}
