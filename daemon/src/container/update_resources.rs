//! UpdateContainerResources.

use super::{host_facts, not_running, ContainerService};
use crate::error::{Error, Result};
use crate::store::container::ContainerState;
use peapod_proto::v1::LinuxContainerResources;
use std::sync::Arc;

impl ContainerService {
    pub async fn update_container_resources(
        self: &Arc<Self>,
        id: &str,
        resources: LinuxContainerResources,
    ) -> Result<()> {
        self.update_resources_as(id, resources, true).await
    }

    /// With `tell_nri` false for the updates NRI plugins asked for themselves: they are not
    /// relayed back to the plugins (whose answer may be what this very update waits for).
    pub(crate) async fn update_resources_as(
        self: &Arc<Self>,
        id: &str,
        resources: LinuxContainerResources,
        tell_nri: bool,
    ) -> Result<()> {
        let c = self.containers.read().resolve(id)?;
        let _op = c.op.lock().await;
        let rec = c.get();
        if !matches!(rec.state, ContainerState::Created | ContainerState::Running) {
            return Err(not_running(&rec, "update its resources"));
        }
        let resources = match tell_nri {
            true => self.nri.update_container(&rec.id, resources).await?,
            false => resources,
        };
        let linux =
            peapod_spec::linux_resources(&resources, &host_facts(self.runtime_rro, self.apparmor))
                .map_err(Error::from)?;
        let json = serde_json::to_vec(&linux).map_err(|e| Error::internal(e.to_string()))?;
        self.shims
            .get(&rec.sandbox_id)
            .await?
            .update(&rec.id, json)
            .await?;
        c.update(|r| r.resources = Some(resources))?;
        if tell_nri {
            self.nri.post_update_container(&rec.id).await;
        }
        Ok(())
    }
}
