//! NRI in the daemon: the lifecycle calls tell [`Nri`] of each pod and container event (one
//! line each in sandbox/ and container/), and [`NriRuntime`] relays them to the NRI plugins
//! through `peapod-nri`'s runtime; CreateContainer gets the plugins' adjustments applied to the
//! OCI spec (`apply`), messages are made from records and specs (`convert`). The lifecycle
//! sees only the trait, so its unit tests use a fake that records the events and can refuse
//! (`crate::testing::fakes::FakeNri`).
//!
//! On by default, as in containerd 2.x and CRI-O, at the socket plugins look for
//! (/var/run/nri/nri.sock); with no plugin connected a hook costs a lock and an empty loop.
//! Disabled, or when another runtime already serves that socket, every hook returns at once:
//! no socket, no task, no allocation.

mod apply;
pub mod convert;

use crate::config::NriConfig;
use crate::error::{Error, Result};
use crate::store::container::{ContainerRecord, ContainerRecords, ContainerState};
use crate::store::sandbox::{SandboxRecord, SandboxRecords, SandboxState};
use async_trait::async_trait;
use oci_spec::runtime::Spec;
use peapod_proto::v1::{ContainerConfig, LinuxContainerResources};
use std::sync::Arc;
use std::time::Duration;

/// What the lifecycle tells NRI plugins and asks of them. A hook returning `Result` is one a
/// plugin may refuse: its error fails the CRI call, which then removes what it made.
#[async_trait]
pub trait Nri: Send + Sync {
    /// Lets plugins that connect later know the pods and containers the daemon already has
    /// (after a restart).
    async fn restore(&self, sandboxes: &SandboxRecords, containers: &ContainerRecords);
    /// Container updates plugins ask for (UpdateContainers, and the updates that come with
    /// their answers) go to `updater`.
    fn serve_updates(&self, updater: Arc<dyn peapod_nri::Updater>);
    /// Closes the socket (daemon shutdown).
    async fn shutdown(&self);
    /// RunPodSandbox, the pod made but not yet listed.
    async fn run_pod_sandbox(&self, rec: &SandboxRecord) -> Result<()>;
    /// StopPodSandbox, its containers stopped, its pause not yet.
    async fn stop_pod_sandbox(&self, id: &str);
    async fn remove_pod_sandbox(&self, id: &str);
    /// CreateContainer, the spec made and not yet written: the plugins' adjustments are
    /// applied to it. A plugin's error, conflicting adjustments or an adjustment peapod
    /// cannot apply fail the call.
    async fn create_container(&self, new: NewContainer<'_>, spec: &mut Spec) -> Result<()>;
    async fn post_create_container(&self, id: &str);
    /// A create that failed after CreateContainer reached the plugins.
    async fn undo_create_container(&self, id: &str);
    /// StartContainer, before the process starts.
    async fn start_container(&self, id: &str) -> Result<()>;
    async fn post_start_container(&self, id: &str, pid: u32, started_at_ns: i64);
    /// UpdateContainerResources: the resources after the plugins' say.
    async fn update_container(
        &self,
        id: &str,
        resources: LinuxContainerResources,
    ) -> Result<LinuxContainerResources>;
    async fn post_update_container(&self, id: &str);
    /// A container that has exited (StopContainer, or its process ended): StopContainer to
    /// the plugins, once.
    async fn container_stopped(&self, rec: &ContainerRecord);
    /// From the exit watcher, which cannot wait: the same as `container_stopped`, in the
    /// background (the runtime's ordering still puts it before the container's removal).
    fn container_exited(&self, id: &str, exit_code: i32, finished_at_ns: i64);
    async fn remove_container(&self, id: &str);
}

/// The container CreateContainer is making, as the plugins are told of it (besides its spec).
#[derive(Clone, Copy)]
pub struct NewContainer<'a> {
    pub pod: &'a SandboxRecord,
    pub id: &'a str,
    pub config: &'a ContainerConfig,
}

/// The daemon's NRI: a running `peapod_nri::Runtime`, or nothing when disabled.
pub struct NriRuntime {
    runtime: Option<Arc<peapod_nri::Runtime>>,
}

fn refused(e: peapod_nri::Error) -> Error {
    Error::failed_precondition(e.to_string())
}

impl NriRuntime {
    /// Tells the plugins of an event they cannot refuse; nothing when NRI is disabled.
    async fn tell<'a, F, Fut>(&'a self, event: F)
    where
        F: FnOnce(&'a peapod_nri::Runtime) -> Fut,
        Fut: std::future::Future<Output = ()>,
    {
        if let Some(rt) = &self.runtime {
            event(rt).await;
        }
    }

    pub fn disabled() -> Arc<NriRuntime> {
        Arc::new(NriRuntime { runtime: None })
    }

    /// Opens the socket when enabled.
    pub fn start(config: &NriConfig) -> Result<Arc<NriRuntime>> {
        if !config.enabled {
            return Ok(NriRuntime::disabled());
        }
        let settings = peapod_nri::Settings {
            socket_path: config.socket_path.clone(),
            runtime_name: "peapod".into(),
            runtime_version: env!("CARGO_PKG_VERSION").into(),
            registration_timeout: Duration::from_millis(config.plugin_registration_timeout_ms),
            request_timeout: Duration::from_millis(config.plugin_request_timeout_ms),
        };
        let runtime = match peapod_nri::Runtime::start(settings) {
            Ok(rt) => rt,
            // Another runtime serves NRI there (containerd 2.x has it on by default, at the
            // same path): its plugins are its own, so peapod neither steals the socket nor
            // refuses to start over it; it runs without NRI and says so.
            Err(e) if e.is_in_use() => {
                tracing::warn!(error = %e, "NRI disabled: another runtime serves its socket \
                    (set [nri] socket_path to a path of peapod's own)");
                return Ok(NriRuntime::disabled());
            }
            Err(e) => return Err(Error::internal(format!("start NRI: {e}"))),
        };
        Ok(Arc::new(NriRuntime {
            runtime: Some(runtime),
        }))
    }
}

#[async_trait]
impl Nri for NriRuntime {
    async fn restore(&self, sandboxes: &SandboxRecords, containers: &ContainerRecords) {
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

    fn serve_updates(&self, updater: Arc<dyn peapod_nri::Updater>) {
        if let Some(rt) = &self.runtime {
            rt.set_updater(updater);
        }
    }

    async fn shutdown(&self) {
        self.tell(|rt| rt.shutdown()).await
    }

    async fn run_pod_sandbox(&self, rec: &SandboxRecord) -> Result<()> {
        let Some(rt) = &self.runtime else {
            return Ok(());
        };
        rt.run_pod_sandbox(convert::pod(rec)).await.map_err(refused)
    }

    async fn stop_pod_sandbox(&self, id: &str) {
        self.tell(|rt| rt.stop_pod_sandbox(id)).await
    }

    async fn remove_pod_sandbox(&self, id: &str) {
        self.tell(|rt| rt.remove_pod_sandbox(id)).await
    }

    async fn create_container(&self, new: NewContainer<'_>, spec: &mut Spec) -> Result<()> {
        let Some(rt) = &self.runtime else {
            return Ok(());
        };
        let to_json =
            |e: serde_json::Error| Error::internal(format!("container spec as JSON: {e}"));
        let mut json = serde_json::to_value(&*spec).map_err(to_json)?;
        let now = peapod_host::timefmt::now_ns();
        let NewContainer { pod, id, config } = new;
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

    async fn post_create_container(&self, id: &str) {
        self.tell(|rt| rt.post_create_container(id)).await
    }

    async fn undo_create_container(&self, id: &str) {
        self.tell(|rt| rt.undo_create_container(id)).await
    }

    async fn start_container(&self, id: &str) -> Result<()> {
        let Some(rt) = &self.runtime else {
            return Ok(());
        };
        rt.start_container(id).await.map_err(refused)
    }

    async fn post_start_container(&self, id: &str, pid: u32, started_at_ns: i64) {
        self.tell(|rt| rt.post_start_container(id, pid, started_at_ns))
            .await
    }

    async fn update_container(
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

    async fn post_update_container(&self, id: &str) {
        self.tell(|rt| rt.post_update_container(id)).await
    }

    async fn container_stopped(&self, rec: &ContainerRecord) {
        let Some(rt) = &self.runtime else { return };
        if rec.state == ContainerState::Exited {
            rt.stop_container(&rec.id, rec.exit_code, rec.finished_at_ns)
                .await;
        }
    }

    fn container_exited(&self, id: &str, exit_code: i32, finished_at_ns: i64) {
        let Some(rt) = &self.runtime else { return };
        let rt = rt.clone();
        let id = id.to_string();
        tokio::spawn(async move { rt.stop_container(&id, exit_code, finished_at_ns).await });
    }

    async fn remove_container(&self, id: &str) {
        self.tell(|rt| rt.remove_container(id)).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(dir: &std::path::Path) -> NriConfig {
        NriConfig {
            socket_path: dir.join("nri.sock"),
            ..NriConfig::default()
        }
    }

    #[tokio::test]
    async fn a_socket_another_runtime_serves_leaves_nri_off_and_the_daemon_up() {
        let dir = tempfile::tempdir().unwrap();
        let first = NriRuntime::start(&config(dir.path())).expect("NRI on");
        assert!(first.runtime.is_some());
        let second = NriRuntime::start(&config(dir.path())).expect("not an error");
        assert!(second.runtime.is_none(), "the socket is not taken over");
        first.shutdown().await;
    }

    #[tokio::test]
    async fn a_socket_that_cannot_be_made_fails_the_start() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("file"), "").unwrap();
        let err = NriRuntime::start(&NriConfig {
            socket_path: dir.path().join("file/nri.sock"),
            ..NriConfig::default()
        })
        .err()
        .expect("a parent that is a file");
        assert!(err.to_string().contains("start NRI"), "{err}");
    }
}
