//! How a sandbox stops being ready without StopPodSandbox, as the pod's watch
//! (`crate::pod_lifecycle::watch`) and recovery find it: its pause exits, or its shim dies (what the
//! shim held is then killed and deleted through the OCI runtime, and the pause's cgroup).

use super::SandboxService;
use crate::store::sandbox::{Sandbox, SandboxState};
use peapod_proto::v1::ContainerEventType;

impl SandboxService {
    /// A READY sandbox becomes NOTREADY (persisted; event watchers hear of it); any other
    /// state is left alone. True if it changed.
    pub(crate) fn ready_to_not_ready(&self, sandbox: &Sandbox) -> bool {
        match sandbox.update_if(
            |r| r.state == SandboxState::Ready,
            |r| r.state = SandboxState::NotReady,
        ) {
            Ok(true) => {
                self.events.emit(
                    &sandbox.id,
                    &sandbox.id,
                    ContainerEventType::ContainerStoppedEvent,
                );
                true
            }
            Ok(false) => false,
            Err(e) => {
                tracing::warn!(sandbox = %sandbox.id, error = %e, "persisting NotReady");
                false
            }
        }
    }

    /// The pause exited: the pod is not ready any more.
    pub(crate) fn pause_exited(&self, sandbox: &Sandbox) {
        if self.ready_to_not_ready(sandbox) {
            tracing::info!(sandbox = %sandbox.id, "pause exited; pod sandbox not ready");
        }
    }

    /// The pod's shim died: the connection is dropped, and `containers` (the pod's) and the
    /// pause are killed and deleted through the OCI runtime, and their cgroups removed
    /// (what kills a pause or container the shim made itself). False if that failed.
    pub(crate) async fn reap_dead_shim(&self, sandbox: &Sandbox, containers: Vec<String>) -> bool {
        let id = &sandbox.id;
        self.shims.forget(id);
        let mut ids = containers;
        ids.push(id.clone());
        let reaped = match self.shims.reap_orphans(&ids).await {
            Ok(()) => true,
            Err(e) => {
                tracing::error!(sandbox = %id, error = %e, "killing the containers of a dead shim");
                false
            }
        };
        // A pause or container the shim made itself is unknown to the OCI runtime: its
        // cgroup (which holds nothing else) is how it is found, killed and removed.
        let (cgroups_path, parent) = {
            let rec = sandbox.get();
            (rec.cgroups_path.clone(), rec.cgroup_parent.clone())
        };
        let mut paths: Vec<String> = ids[..ids.len() - 1]
            .iter()
            .map(|c| crate::cgroups::cgroups_path(self.settings.cgroup_driver, &parent, c))
            .collect();
        paths.push(cgroups_path);
        let mut removed = true;
        for path in &paths {
            if let Err(e) = self.host.remove_cgroup(path) {
                tracing::error!(sandbox = %id, cgroup = %path, error = %e, "removing a cgroup of a dead shim");
                removed = false;
            }
        }
        reaped && removed
    }
}
