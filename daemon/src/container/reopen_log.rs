//! ReopenContainerLog.

use super::{not_running, ContainerService};
use crate::error::Result;
use crate::store::container::ContainerState;
use std::sync::Arc;

impl ContainerService {
    pub async fn reopen_container_log(self: &Arc<Self>, id: &str) -> Result<()> {
        let c = self.containers.read().resolve(id)?;
        let rec = c.get();
        if rec.state != ContainerState::Running {
            return Err(not_running(&rec, "reopen its log"));
        }
        self.shims
            .get(&rec.sandbox_id)
            .await?
            .reopen_log(&rec.id)
            .await
    }
}
