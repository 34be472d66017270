//! ContainerStatus.

use super::ContainerService;
use crate::error::Result;
use crate::store::container::ContainerRecord;
use crate::store::to_cri::container_status;
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

impl ContainerService {
    pub fn status(&self, id: &str) -> Result<ContainerRecord> {
        Ok(self.containers.read().resolve(id)?.get())
    }

    /// Statuses of a sandbox's containers, for PodSandboxStatus.
    pub async fn statuses_of(&self, sandbox_id: &str) -> Vec<cri::ContainerStatus> {
        self.containers
            .of_sandbox(sandbox_id)
            .iter()
            .map(|c| container_status(&c.get()))
            .collect()
    }
}
