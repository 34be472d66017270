//! PodSandboxStatus.

use super::SandboxService;
use crate::error::Result;
use crate::store::sandbox::SandboxRecord;
use std::collections::HashMap;
use std::sync::Arc;

/// The verbose `info` of PodSandboxStatus: what a human debugging the pod wants.
pub fn verbose_info(rec: &SandboxRecord) -> HashMap<String, String> {
    let info = serde_json::json!({
        "pid": rec.pause_pid,
        "netnsPath": rec.netns,
        "cgroupsPath": rec.cgroups_path,
        "cgroupParent": rec.cgroup_parent,
        "shimSocket": rec.shim_socket,
        "runtimeHandler": rec.runtime_handler,
        "sandboxDir": rec.dir,
        "cni": rec.cni.as_ref().map(|c| serde_json::json!({
            "network": c.network["name"],
            "result": c.result,
        })),
        "config": rec.config,
    });
    HashMap::from([("info".to_string(), info.to_string())])
}

impl SandboxService {
    /// The pod's record as it is now (shared, not copied).
    pub fn status(&self, id: &str) -> Result<Arc<SandboxRecord>> {
        Ok(self.sandboxes.resolve(id)?.snapshot())
    }
}
