//! ListContainers (and StreamContainers): from the table's own orders, newest first — every
//! container, or one pod's alone when the filter names a pod. The answer is made of each
//! container's list item as its entry keeps it encoded (`Entry::list_item`): a container
//! unchanged since the last list costs a reference count, not a message built and encoded
//! again.

use super::ContainerService;
use crate::store::container::ContainerRecord;
use crate::store::table::Entry;
use crate::store::to_cri::{container_list_item, container_state, labels_match};
use peapod_proto::v1 as cri;
use prost::bytes::Bytes;
use prost::Message;
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
        self.walk(filter, |c, in_pod| {
            let rec = c.snapshot();
            (in_pod(&rec) && passes(&rec, filter)).then_some(rec)
        })
    }

    /// ListContainers' items, each an encoded `Container`: the containers of [`Self::list`],
    /// in its order.
    pub fn list_items(&self, filter: Option<&cri::ContainerFilter>) -> Vec<Bytes> {
        self.walk(filter, |c, in_pod| {
            c.list_item(
                |rec| in_pod(rec) && passes(rec, filter),
                |rec| container_list_item(rec).encode_to_vec(),
            )
        })
    }

    /// What `each` makes of the entries the filter's id or pod names (every entry when it
    /// names neither), newest first; `each` is also told whether a record is in the pod the
    /// filter names (always, when it names none).
    fn walk<T>(
        &self,
        filter: Option<&cri::ContainerFilter>,
        mut each: impl FnMut(&Entry<ContainerRecord>, &dyn Fn(&ContainerRecord) -> bool) -> Option<T>,
    ) -> Vec<T> {
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
        let in_pod =
            |rec: &ContainerRecord| sandbox.as_ref().is_none_or(|sid| *sid == rec.sandbox_id);
        let table = self.containers.read();
        match (
            filter.map(|f| f.id.as_str()).filter(|id| !id.is_empty()),
            &sandbox,
        ) {
            (Some(id), _) => table
                .resolve(id)
                .ok()
                .and_then(|c| each(&c, &in_pod))
                .into_iter()
                .collect(),
            (None, Some(sid)) => table
                .of_parent(sid)
                .filter_map(|c| each(c, &in_pod))
                .collect(),
            (None, None) => table
                .newest_first()
                .filter_map(|c| each(c, &in_pod))
                .collect(),
        }
    }
}
