//! ListPodSandbox (and StreamPodSandboxes): from the table's own order, newest first; only
//! what the filter keeps is touched past its state and labels. The answer is made of each
//! pod's list item as its entry keeps it encoded (`Entry::list_item`): a pod unchanged since
//! the last list costs a reference count, not a message built and encoded again.

use super::SandboxService;
use crate::store::sandbox::SandboxRecord;
use crate::store::table::Entry;
use crate::store::to_cri::{labels_match, sandbox_list_item, sandbox_state};
use peapod_proto::v1::PodSandboxFilter;
use prost::bytes::Bytes;
use prost::Message;
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
        self.walk(filter, |sb| {
            let rec = sb.snapshot();
            passes(&rec, filter).then_some(rec)
        })
    }

    /// ListPodSandbox's items, each an encoded `PodSandbox`: the pods of [`Self::list`], in
    /// its order.
    pub fn list_items(&self, filter: Option<&PodSandboxFilter>) -> Vec<Bytes> {
        self.walk(filter, |sb| {
            sb.list_item(
                |rec| passes(rec, filter),
                |rec| sandbox_list_item(rec).encode_to_vec(),
            )
        })
    }

    /// What `each` makes of the entries the filter's id names (every entry when it names
    /// none), newest first.
    fn walk<T>(
        &self,
        filter: Option<&PodSandboxFilter>,
        mut each: impl FnMut(&Entry<SandboxRecord>) -> Option<T>,
    ) -> Vec<T> {
        let table = self.sandboxes.read();
        match filter.map(|f| f.id.as_str()).filter(|id| !id.is_empty()) {
            Some(id) => table
                .resolve(id)
                .ok()
                .and_then(|sb| each(&sb))
                .into_iter()
                .collect(),
            None => table.newest_first().filter_map(|sb| each(sb)).collect(),
        }
    }
}
