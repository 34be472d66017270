//! ListPodSandbox.

use super::SandboxService;
use crate::store::sandbox::SandboxRecord;
use crate::store::to_cri::{labels_match, sandbox_state};
use peapod_proto::v1::PodSandboxFilter;

impl SandboxService {
    pub fn list(&self, filter: Option<&PodSandboxFilter>) -> Vec<SandboxRecord> {
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
