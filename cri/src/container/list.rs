//! ListContainers.

use super::ContainerService;
use crate::store::container::ContainerRecord;
use crate::store::to_cri::{container_state, labels_match};
use peapod_proto::v1 as cri;

impl ContainerService {
    pub fn list(&self, filter: Option<&cri::ContainerFilter>) -> Vec<ContainerRecord> {
        let table = self.containers.read();
        let candidates = match filter.map(|f| f.id.as_str()).filter(|id| !id.is_empty()) {
            Some(id) => match table.resolve(id) {
                Ok(c) => vec![c],
                Err(_) => return Vec::new(),
            },
            None => table.all(),
        };
        let sandbox = filter
            .map(|f| f.pod_sandbox_id.as_str())
            .filter(|s| !s.is_empty())
            .map(|s| self.sandboxes.read().resolve(s).map(|sb| sb.id.clone()));
        let mut out: Vec<ContainerRecord> = candidates
            .into_iter()
            .map(|c| c.get())
            .filter(|rec| {
                let Some(f) = filter else { return true };
                if let Some(state) = &f.state {
                    if container_state(rec.state) as i32 != state.state {
                        return false;
                    }
                }
                match &sandbox {
                    Some(Ok(sid)) if *sid != rec.sandbox_id => return false,
                    Some(Err(_)) => return false,
                    _ => {}
                }
                labels_match(&rec.config.labels, &f.label_selector)
            })
            .collect();
        out.sort_by_key(|r| std::cmp::Reverse(r.created_at_ns));
        out
    }
}
