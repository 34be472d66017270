//! GetContainerEvents: lifecycle events of pods and containers for the kubelet's evented PLEG.
//!
//! As containerd does, a pod sandbox reports events under its own id too (created, started,
//! stopped, deleted), and each event carries the pod's status and its containers' statuses.
//! Events go to whoever subscribed at the time; a subscriber that falls behind by more than
//! [`CAPACITY`] events misses the oldest (the kubelet then relists).

use crate::store::container::ContainerRecords;
use crate::store::sandbox::SandboxRecords;
use crate::store::to_cri;
use peapod_proto::v1 as cri;
use std::sync::Arc;
use tokio::sync::broadcast;

pub const CAPACITY: usize = 1024;

/// The publisher of lifecycle events; it reads the records to attach their statuses.
pub struct Events {
    tx: broadcast::Sender<cri::ContainerEventResponse>,
    sandboxes: Arc<SandboxRecords>,
    containers: Arc<ContainerRecords>,
}

impl Events {
    pub fn new(sandboxes: Arc<SandboxRecords>, containers: Arc<ContainerRecords>) -> Events {
        Events {
            tx: broadcast::channel(CAPACITY).0,
            sandboxes,
            containers,
        }
    }

    pub fn subscribe(&self) -> broadcast::Receiver<cri::ContainerEventResponse> {
        self.tx.subscribe()
    }

    /// Publishes an event about `id` (a container, or the sandbox itself) of pod `sandbox_id`.
    pub fn emit(&self, id: &str, sandbox_id: &str, kind: cri::ContainerEventType) {
        if self.tx.receiver_count() == 0 {
            return;
        }
        let pod_sandbox_status = self
            .sandboxes
            .resolve(sandbox_id)
            .ok()
            .map(|sb| to_cri::sandbox_status(&sb.snapshot()));
        let containers_statuses = self
            .containers
            .of_sandbox(sandbox_id)
            .iter()
            .map(|c| to_cri::container_status(&c.snapshot()))
            .collect();
        let _ = self.tx.send(cri::ContainerEventResponse {
            container_id: id.to_string(),
            container_event_type: kind as i32,
            created_at: peapod_host::timefmt::now_ns(),
            pod_sandbox_status,
            containers_statuses,
        });
    }
}
