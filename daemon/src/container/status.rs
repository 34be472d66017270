//! ContainerStatus.

use super::ContainerService;
use crate::error::Result;
use crate::store::container::ContainerRecord;
use std::collections::HashMap;
use std::sync::Arc;

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
    /// The container's record as it is now (shared, not copied).
    pub fn status(&self, id: &str) -> Result<Arc<ContainerRecord>> {
        Ok(self.containers.resolve(id)?.snapshot())
    }
}
