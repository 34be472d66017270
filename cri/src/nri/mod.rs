//! NRI in the daemon: the lifecycle calls tell [`Nri`] of each pod and container event (one
//! line each in sandbox/ and container/), and it relays them to the NRI plugins through
//! `peapod-nri`'s runtime; CreateContainer gets the plugins' adjustments applied to the OCI
//! spec (`apply`), messages are made from records and specs (`convert`).
//!
//! Disabled (the default), every hook returns at once: no socket, no task, no allocation.

mod apply;
mod convert;

use crate::config::NriConfig;
use crate::container::ContainerService;
use crate::error::{Error, Result};
use crate::store::container::{ContainerRecord, ContainerRecords, ContainerState};
use crate::store::sandbox::{SandboxRecord, SandboxRecords, SandboxState};
use peapod_proto::v1::{ContainerConfig, LinuxContainerResources};
use std::sync::Arc;
use std::time::Duration;

/// The daemon's NRI: a running `peapod_nri::Runtime`, or nothing when disabled.
pub struct Nri {
    runtime: Option<Arc<peapod_nri::Runtime>>,
}

fn refused(e: peapod_nri::Error) -> Error {
    Error::failed_precondition(e.to_string())
}

impl Nri {
    pub fn disabled() -> Arc<Nri> {
        Arc::new(Nri { runtime: None })
    }

    /// Opens the socket when enabled.
    pub fn start(config: &NriConfig) -> Result<Arc<Nri>> {
        if !config.enabled {
            return Ok(Nri::disabled());
        }
        let settings = peapod_nri::Settings {
            socket_path: config.socket_path.clone(),
            runtime_name: "peapod".into(),
            runtime_version: env!("CARGO_PKG_VERSION").into(),
            registration_timeout: Duration::from_millis(config.plugin_registration_timeout_ms),
            request_timeout: Duration::from_millis(config.plugin_request_timeout_ms),
        };
        let runtime = peapod_nri::Runtime::start(settings)
            .map_err(|e| Error::internal(format!("start NRI: {e}")))?;
        Ok(Arc::new(Nri {
            runtime: Some(runtime),
        }))
    }

    /// Lets plugins that connect later know the pods and containers the daemon already has
    /// (after a restart).
    pub async fn restore(&self, sandboxes: &SandboxRecords, containers: &ContainerRecords) {
        let Some(rt) = &self.runtime else { return };
        let pods = sandboxes
            .read()
            .all()
            .into_iter()
            .map(|s| s.get())
            .filter(|r| r.state != SandboxState::Creating)
            .map(|r| (convert::pod(&r), r.state != SandboxState::Ready))
            .collect();
        let known = containers
            .read()
            .all()
            .into_iter()
            .map(|c| convert::known_container(&c.get()))
            .collect();
        rt.restore(pods, known).await;
    }

    /// Container updates NRI plugins ask for (UpdateContainers, and the updates that come
    /// with their answers) go to `containers`.
    pub fn serve_updates(&self, containers: &Arc<ContainerService>) {
        if let Some(rt) = &self.runtime {
            rt.set_updater(Arc::new(Updates {
                containers: Arc::downgrade(containers),
            }));
        }
    }

    /// Closes the socket (daemon shutdown).
    pub async fn shutdown(&self) {
        if let Some(rt) = &self.runtime {
            rt.shutdown().await;
        }
    }

    /// RunPodSandbox, the pod made but not yet listed: a plugin's error fails the call.
    pub async fn run_pod_sandbox(&self, rec: &SandboxRecord) -> Result<()> {
        let Some(rt) = &self.runtime else {
            return Ok(());
        };
        rt.run_pod_sandbox(convert::pod(rec)).await.map_err(refused)
    }

    /// StopPodSandbox, its containers stopped, its pause not yet.
    pub async fn stop_pod_sandbox(&self, id: &str) {
        if let Some(rt) = &self.runtime {
            rt.stop_pod_sandbox(id).await;
        }
    }

    pub async fn remove_pod_sandbox(&self, id: &str) {
        if let Some(rt) = &self.runtime {
            rt.remove_pod_sandbox(id).await;
        }
    }

    /// CreateContainer, the spec made and not yet written: the plugins' adjustments are
    /// applied to it. A plugin's error, conflicting adjustments or an adjustment peapod
    /// cannot apply fail the call.
    pub async fn create_container(
        &self,
        pod: &SandboxRecord,
        id: &str,
        config: &ContainerConfig,
        spec: &mut oci_spec::runtime::Spec,
    ) -> Result<()> {
        let Some(rt) = &self.runtime else {
            return Ok(());
        };
        let to_json =
            |e: serde_json::Error| Error::internal(format!("container spec as JSON: {e}"));
        let mut json = serde_json::to_value(&*spec).map_err(to_json)?;
        let now = peapod_shim::timefmt::now_ns();
        let container = convert::new_container(id, &pod.id, config, &json, now);
        let adjust = rt.create_container(container).await.map_err(refused)?;
        if adjust == Default::default() {
            return Ok(());
        }
        apply::apply(&mut json, &adjust);
        match serde_json::from_value(json) {
            Ok(adjusted) => {
                *spec = adjusted;
                Ok(())
            }
            Err(e) => {
                rt.undo_create_container(id).await;
                Err(Error::failed_precondition(format!(
                    "NRI adjustments make an invalid OCI spec: {e}"
                )))
            }
        }
    }

    pub async fn post_create_container(&self, id: &str) {
        if let Some(rt) = &self.runtime {
            rt.post_create_container(id).await;
        }
    }

    /// A create that failed after CreateContainer reached the plugins.
    pub async fn undo_create_container(&self, id: &str) {
        if let Some(rt) = &self.runtime {
            rt.undo_create_container(id).await;
        }
    }

    /// StartContainer, before the process starts: a plugin's error fails the call.
    pub async fn start_container(&self, id: &str) -> Result<()> {
        let Some(rt) = &self.runtime else {
            return Ok(());
        };
        rt.start_container(id).await.map_err(refused)
    }

    pub async fn post_start_container(&self, id: &str, pid: u32, started_at_ns: i64) {
        if let Some(rt) = &self.runtime {
            rt.post_start_container(id, pid, started_at_ns).await;
        }
    }

    /// UpdateContainerResources: the resources after the plugins' say.
    pub async fn update_container(
        &self,
        id: &str,
        resources: LinuxContainerResources,
    ) -> Result<LinuxContainerResources> {
        let Some(rt) = &self.runtime else {
            return Ok(resources);
        };
        let nri = convert::resources_from_cri(&resources);
        let out = rt.update_container(id, nri).await.map_err(refused)?;
        Ok(convert::resources_to_cri(&out, &resources))
    }

    pub async fn post_update_container(&self, id: &str) {
        if let Some(rt) = &self.runtime {
            rt.post_update_container(id).await;
        }
    }

    /// A container that has exited (StopContainer, or its process ended): StopContainer to
    /// the plugins, once.
    pub async fn container_stopped(&self, rec: &ContainerRecord) {
        let Some(rt) = &self.runtime else { return };
        if rec.state == ContainerState::Exited {
            rt.stop_container(&rec.id, rec.exit_code, rec.finished_at_ns)
                .await;
        }
    }

    /// From the exit watcher, which cannot wait: the same as `container_stopped`, in the
    /// background (the runtime's ordering still puts it before the container's removal).
    pub fn container_exited(&self, id: &str, exit_code: i32, finished_at_ns: i64) {
        let Some(rt) = &self.runtime else { return };
        let rt = rt.clone();
        let id = id.to_string();
        tokio::spawn(async move { rt.stop_container(&id, exit_code, finished_at_ns).await });
    }

    pub async fn remove_container(&self, id: &str) {
        if let Some(rt) = &self.runtime {
            rt.remove_container(id).await;
        }
    }
}

/// Applies NRI plugins' container updates as UpdateContainerResources would (without relaying
/// them back to the plugins).
struct Updates {
    /// Weak: the container service holds this NRI, which holds this updater.
    containers: std::sync::Weak<ContainerService>,
}

#[async_trait::async_trait]
impl peapod_nri::Updater for Updates {
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
            let resources = convert::resources_to_cri(wanted, &current);
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
