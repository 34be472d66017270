//! UpdatePodSandboxResources.
//!
//! The kubelet calls it after it has itself resized the pod-level cgroups (in-place pod
//! resize), to tell the runtime the pod's new overhead and total resources; the CRI makes it
//! best effort (a failure does not stop the resize). peapod applies nothing to cgroups here
//! — the kubelet owns the pod cgroup, and each container's own limits come with
//! UpdateContainerResources — it keeps them where the PodSandboxConfig has them
//! (`linux.overhead`, `linux.resources`), so the pod's record, its verbose status and the
//! stats that read the config say what the kubelet last set. NRI plugins are not told:
//! peapod's NRI does not speak UpdatePodSandbox yet.

use super::SandboxService;
use crate::error::{Error, Result};
use peapod_proto::v1::LinuxContainerResources;

impl SandboxService {
    /// Stores `overhead` and `resources` in the pod's config; an absent one leaves what was
    /// there (the kubelet always sends both). NotFound for a pod that does not exist (or that
    /// a concurrent RemovePodSandbox took away).
    pub async fn update_pod_sandbox_resources(
        &self,
        id: &str,
        overhead: Option<LinuxContainerResources>,
        resources: Option<LinuxContainerResources>,
    ) -> Result<()> {
        let sandbox = self.sandboxes.read().resolve(id)?;
        // Shared with CreateContainer, exclusive with Stop/RemovePodSandbox: a pod being
        // removed cannot get its record written again after its directory is gone.
        let _pod = sandbox.members.read().await;
        if !self.sandboxes.read().by_id.contains_key(&sandbox.id) {
            return Err(Error::not_found(format!(
                "pod sandbox {} was removed",
                sandbox.id
            )));
        }
        sandbox.update(|rec| {
            let linux = rec.config.linux.get_or_insert_with(Default::default);
            if overhead.is_some() {
                linux.overhead = overhead;
            }
            if resources.is_some() {
                linux.resources = resources;
            }
        })?;
        tracing::info!(sandbox = %sandbox.id, "pod sandbox resources updated");
        Ok(())
    }
}
