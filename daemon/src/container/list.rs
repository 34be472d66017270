//! ListContainers (and StreamContainers): from the table's own orders, newest first — every
//! container, or one pod's alone when the filter names a pod — each record shared, not
//! copied.

use super::ContainerService;
use crate::store::container::ContainerRecord;
use crate::store::to_cri::{container_state, labels_match};
use peapod_proto::v1 as cri;
use std::sync::Arc;

/// Whether `rec` passes the filter's state and label selector (its id and pod are matched
/// apart).
fn passes(rec: &ContainerRecord, filter: Option<&cri::ContainerFilter>) -> bool {
    let Some(f) = filter else { return true };
    if let Some(state) = &f.state {
        if container_state(rec.state) as i32 != state.state {
            return false;
        }
    }
    labels_match(&rec.config.labels, &f.label_selector)
}

impl ContainerService {
    /// The containers the filter keeps, newest first. An id (or unique prefix) names at most
    /// one container and a pod id (or unique prefix) one pod's; one that names none, or is
    /// ambiguous, keeps nothing.
    pub fn list(&self, filter: Option<&cri::ContainerFilter>) -> Vec<Arc<ContainerRecord>> {
        // The sandbox table before the container table (the lock order of `store`).
        let sandbox = match filter
            .map(|f| f.pod_sandbox_id.as_str())
            .filter(|s| !s.is_empty())
        {
            Some(s) => match self.sandboxes.read().resolve(s) {
                Ok(sb) => Some(sb.id.clone()),
                Err(_) => return Vec::new(),
            },
            None => None,
        };
        let table = self.containers.read();
        let keep = |rec: &Arc<ContainerRecord>| {
            sandbox.as_ref().is_none_or(|sid| *sid == rec.sandbox_id) && passes(rec, filter)
        };
        match (
            filter.map(|f| f.id.as_str()).filter(|id| !id.is_empty()),
            &sandbox,
        ) {
            (Some(id), _) => table
                .resolve(id)
                .ok()
                .map(|c| c.snapshot())
                .filter(keep)
                .into_iter()
                .collect(),
            (None, Some(sid)) => table
                .of_parent(sid)
                .map(|c| c.snapshot())
                .filter(keep)
                .collect(),
            (None, None) => table
                .newest_first()
                .map(|c| c.snapshot())
                .filter(keep)
                .collect(),
        }
    }
}
