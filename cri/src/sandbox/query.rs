//! PodSandboxStatus and ListPodSandbox.

use crate::error::Result;
use crate::runtime::Runtime;
use crate::store::sandbox::SandboxRecord;
use crate::store::to_cri::{labels_match, sandbox_state};
use peapod_proto::v1::PodSandboxFilter;
use std::collections::HashMap;

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

impl Runtime {
    pub fn pod_sandbox_status(&self, id: &str) -> Result<SandboxRecord> {
        Ok(self.sandboxes.read().resolve(id)?.get())
    }

    pub fn list_pod_sandboxes(&self, filter: Option<&PodSandboxFilter>) -> Vec<SandboxRecord> {
        let table = self.sandboxes.read();
        let candidates = match filter.map(|f| f.id.as_str()).filter(|id| !id.is_empty()) {
            Some(id) => match table.resolve(id) {
                Ok(sb) => vec![sb],
                Err(_) => return Vec::new(),
            },
            None => table.all(),
        };
        let mut out: Vec<SandboxRecord> = candidates
            .into_iter()
            .map(|s| s.get())
            .filter(|rec| {
                let Some(f) = filter else { return true };
                if let Some(state) = &f.state {
                    if sandbox_state(rec.state) as i32 != state.state {
                        return false;
                    }
                }
                labels_match(&rec.config.labels, &f.label_selector)
            })
            .collect();
        out.sort_by_key(|r| std::cmp::Reverse(r.created_at_ns));
        out
    }
}
