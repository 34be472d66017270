//! Container updates NRI plugins ask for (UpdateContainers, and the updates that come with
//! their answers), applied by the container service: `crate::nri` relays them here through
//! `peapod_nri::Updater`, so NRI never names the service it serves.

use super::ContainerService;
use std::sync::Arc;

/// Applies NRI plugins' container updates as UpdateContainerResources would (without relaying
/// them back to the plugins).
pub struct NriUpdates {
    /// Weak: the container service holds this NRI, which holds this updater.
    containers: std::sync::Weak<ContainerService>,
}

impl NriUpdates {
    pub fn new(containers: &Arc<ContainerService>) -> NriUpdates {
        NriUpdates {
            containers: Arc::downgrade(containers),
        }
    }
}

#[async_trait::async_trait]
impl peapod_nri::Updater for NriUpdates {
    async fn update(
        &self,
        updates: Vec<peapod_nri::api::ContainerUpdate>,
    ) -> Vec<peapod_nri::api::ContainerUpdate> {
        let Some(containers) = self.containers.upgrade() else {
            return updates;
        };
        let mut failed = Vec::new();
        for u in updates {
            let Some(wanted) = u.linux.as_ref().and_then(|l| l.resources.as_ref()) else {
                continue;
            };
            let current = containers
                .records()
                .read()
                .resolve(&u.container_id)
                .ok()
                .and_then(|c| c.get().resources)
                .unwrap_or_default();
            let resources = crate::nri::convert::resources_to_cri(wanted, &current);
            let result = containers
                .update_resources_as(&u.container_id, resources, false)
                .await;
            if let Err(e) = result {
                tracing::warn!(container = %u.container_id, error = %e, "NRI container update failed");
                if !u.ignore_failure {
                    failed.push(u);
                }
            }
        }
        failed
    }
}
