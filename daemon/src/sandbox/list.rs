//! ListPodSandbox (and StreamPodSandboxes): from the table's own order, newest first, each
//! pod's record shared, not copied; only what the filter keeps is touched past its state and
//! labels.

use super::SandboxService;
use crate::store::sandbox::SandboxRecord;
use crate::store::to_cri::{labels_match, sandbox_state};
use peapod_proto::v1::PodSandboxFilter;
use std::sync::Arc;

/// Whether `rec` passes the filter's state and label selector (its id is matched apart).
fn passes(rec: &SandboxRecord, filter: Option<&PodSandboxFilter>) -> bool {
    let Some(f) = filter else { return true };
    if let Some(state) = &f.state {
        if sandbox_state(rec.state) as i32 != state.state {
            return false;
        }
    }
    labels_match(&rec.config.labels, &f.label_selector)
}

impl SandboxService {
    /// The pods the filter keeps, newest first. An id (or unique prefix) in the filter names
    /// at most one pod; one that names none, or is ambiguous, keeps nothing.
    pub fn list(&self, filter: Option<&PodSandboxFilter>) -> Vec<Arc<SandboxRecord>> {
        let table = self.sandboxes.read();
        match filter.map(|f| f.id.as_str()).filter(|id| !id.is_empty()) {
            Some(id) => table
                .resolve(id)
                .ok()
                .map(|sb| sb.snapshot())
                .filter(|rec| passes(rec, filter))
                .into_iter()
                .collect(),
            None => table
                .newest_first()
                .map(|sb| sb.snapshot())
                .filter(|rec| passes(rec, filter))
                .collect(),
        }
    }
}
