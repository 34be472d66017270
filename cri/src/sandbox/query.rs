//! PodSandboxStatus and ListPodSandbox.

use crate::error::Result;
use crate::runtime::Runtime;
use crate::store::sandbox::{SandboxRecord, SandboxState};
use peapod_proto::v1::{
    LinuxPodSandboxStatus, Namespace, NamespaceOption, PodIp, PodSandbox, PodSandboxFilter,
    PodSandboxNetworkStatus, PodSandboxState, PodSandboxStatus,
};
use std::collections::HashMap;

fn cri_state(state: SandboxState) -> PodSandboxState {
    match state {
        SandboxState::Ready => PodSandboxState::SandboxReady,
        SandboxState::Creating | SandboxState::NotReady => PodSandboxState::SandboxNotready,
    }
}

/// Whether `labels` has every pair of `selector`.
pub fn labels_match(labels: &HashMap<String, String>, selector: &HashMap<String, String>) -> bool {
    selector.iter().all(|(k, v)| labels.get(k) == Some(v))
}

pub fn to_status(rec: &SandboxRecord) -> PodSandboxStatus {
    let options: NamespaceOption = rec
        .config
        .linux
        .as_ref()
        .and_then(|l| l.security_context.as_ref())
        .and_then(|s| s.namespace_options.clone())
        .unwrap_or_default();
    let network = (!rec.ips.is_empty()).then(|| PodSandboxNetworkStatus {
        ip: rec.ips[0].clone(),
        additional_ips: rec.ips[1..]
            .iter()
            .map(|ip| PodIp { ip: ip.clone() })
            .collect(),
    });
    PodSandboxStatus {
        id: rec.id.clone(),
        metadata: rec.config.metadata.clone(),
        state: cri_state(rec.state) as i32,
        created_at: rec.created_at_ns,
        network,
        linux: Some(LinuxPodSandboxStatus {
            namespaces: Some(Namespace {
                options: Some(options),
            }),
        }),
        labels: rec.config.labels.clone(),
        annotations: rec.config.annotations.clone(),
        runtime_handler: rec.runtime_handler.clone(),
    }
}

pub fn to_list_item(rec: &SandboxRecord) -> PodSandbox {
    PodSandbox {
        id: rec.id.clone(),
        metadata: rec.config.metadata.clone(),
        state: cri_state(rec.state) as i32,
        created_at: rec.created_at_ns,
        labels: rec.config.labels.clone(),
        annotations: rec.config.annotations.clone(),
        runtime_handler: rec.runtime_handler.clone(),
    }
}

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
        Ok(self.sandboxes().resolve(id)?.get())
    }

    pub fn list_pod_sandboxes(&self, filter: Option<&PodSandboxFilter>) -> Vec<SandboxRecord> {
        let table = self.sandboxes();
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
                    if cri_state(rec.state) as i32 != state.state {
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
