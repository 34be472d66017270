//! The plugin side of NRI, for peapod's tests and small plugins: connect to the runtime's
//! socket, register, and answer the runtime's calls with a [`Plugin`].

use crate::api::*;
use crate::runtime::{PLUGIN_SERVICE, RUNTIME_SERVICE};
use crate::wire::{code, CallError, Handler, Peer, Request, RUNTIME_SERVICE_CONN};
use prost::Message;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// What a plugin does on each call; every method has a do-nothing default. An `Err` is sent
/// back as the call's error (the runtime fails the event with it).
#[async_trait::async_trait]
pub trait Plugin: Send + Sync + 'static {
    /// The events to subscribe to (a mask of `runtime::event_bit`s; 0 would be all): by
    /// default every event but ValidateContainerAdjustment, which validators add.
    fn events(&self) -> i32 {
        let validate = crate::runtime::event_bit(Event::ValidateContainerAdjustment);
        crate::runtime::valid_events() & !validate
    }
    /// ValidateContainerAdjustment: `Some(reason)` rejects.
    async fn validate(
        &self,
        _req: ValidateContainerAdjustmentRequest,
    ) -> Result<Option<String>, String> {
        Ok(None)
    }
    async fn synchronize(
        &self,
        _pods: Vec<PodSandbox>,
        _containers: Vec<Container>,
    ) -> Result<Vec<ContainerUpdate>, String> {
        Ok(Vec::new())
    }
    async fn run_pod_sandbox(&self, _pod: PodSandbox) -> Result<(), String> {
        Ok(())
    }
    async fn stop_pod_sandbox(&self, _pod: PodSandbox) -> Result<(), String> {
        Ok(())
    }
    async fn remove_pod_sandbox(&self, _pod: PodSandbox) -> Result<(), String> {
        Ok(())
    }
    async fn create_container(
        &self,
        _pod: PodSandbox,
        _container: Container,
    ) -> Result<ContainerAdjustment, String> {
        Ok(ContainerAdjustment::default())
    }
    /// Every container event without an answer of its own (PostCreateContainer,
    /// StartContainer, PostStartContainer, PostUpdateContainer, StopContainer,
    /// RemoveContainer), by its NRI event.
    async fn container_event(
        &self,
        _event: Event,
        _pod: PodSandbox,
        _container: Container,
    ) -> Result<(), String> {
        Ok(())
    }
    async fn update_container(
        &self,
        _pod: PodSandbox,
        _container: Container,
        _resources: Option<LinuxResources>,
    ) -> Result<Vec<ContainerUpdate>, String> {
        Ok(Vec::new())
    }
}

struct Serve<P: Plugin>(Arc<P>);

fn decode<M: Message + Default>(payload: &[u8]) -> Result<M, (i32, String)> {
    M::decode(payload).map_err(|e| (code::INVALID_ARGUMENT, e.to_string()))
}

fn failed(e: String) -> (i32, String) {
    (code::INTERNAL, e)
}

#[async_trait::async_trait]
impl<P: Plugin> Handler for Serve<P> {
    async fn handle(&self, call: &Request) -> Result<Vec<u8>, (i32, String)> {
        let (service, method, payload) = (&*call.service, &*call.method, &*call.payload);
        if service != PLUGIN_SERVICE {
            return Err((code::UNIMPLEMENTED, format!("{service} is not served")));
        }
        let p = &self.0;
        let container_event = |e| -> Result<(Event, ContainerEventRequest), (i32, String)> {
            Ok((e, decode(payload)?))
        };
        let (event, req) = match method {
            "Configure" => {
                let _: ConfigureRequest = decode(payload)?;
                return Ok(ConfigureResponse { events: p.events() }.encode_to_vec());
            }
            "Synchronize" => {
                let req: SynchronizeRequest = decode(payload)?;
                let update = p
                    .synchronize(req.pods, req.containers)
                    .await
                    .map_err(failed)?;
                return Ok(SynchronizeResponse {
                    update,
                    more: false,
                }
                .encode_to_vec());
            }
            "Shutdown" => return Ok(Empty {}.encode_to_vec()),
            "ValidateContainerAdjustment" => {
                let req: ValidateContainerAdjustmentRequest = decode(payload)?;
                let reason = p.validate(req).await.map_err(failed)?;
                let resp = ValidateContainerAdjustmentResponse {
                    reject: reason.is_some(),
                    reason: reason.unwrap_or_default(),
                };
                return Ok(resp.encode_to_vec());
            }
            "RunPodSandbox" | "StopPodSandbox" | "RemovePodSandbox" => {
                let req: RunPodSandboxRequest = decode(payload)?;
                let pod = req.pod.unwrap_or_default();
                match method {
                    "RunPodSandbox" => p.run_pod_sandbox(pod).await,
                    "StopPodSandbox" => p.stop_pod_sandbox(pod).await,
                    _ => p.remove_pod_sandbox(pod).await,
                }
                .map_err(failed)?;
                return Ok(Empty {}.encode_to_vec());
            }
            "CreateContainer" => {
                let req: CreateContainerRequest = decode(payload)?;
                let adjust = p
                    .create_container(
                        req.pod.unwrap_or_default(),
                        req.container.unwrap_or_default(),
                    )
                    .await
                    .map_err(failed)?;
                let resp = CreateContainerResponse {
                    adjust: Some(adjust),
                    ..Default::default()
                };
                return Ok(resp.encode_to_vec());
            }
            "UpdateContainer" => {
                let req: UpdateContainerRequest = decode(payload)?;
                let update = p
                    .update_container(
                        req.pod.unwrap_or_default(),
                        req.container.unwrap_or_default(),
                        req.linux_resources,
                    )
                    .await
                    .map_err(failed)?;
                let resp = UpdateContainerResponse {
                    update,
                    evict: Vec::new(),
                };
                return Ok(resp.encode_to_vec());
            }
            "PostCreateContainer" => container_event(Event::PostCreateContainer)?,
            "StartContainer" => container_event(Event::StartContainer)?,
            "PostStartContainer" => container_event(Event::PostStartContainer)?,
            "PostUpdateContainer" => container_event(Event::PostUpdateContainer)?,
            "StopContainer" => container_event(Event::StopContainer)?,
            "RemoveContainer" => container_event(Event::RemoveContainer)?,
            _ => return Err((code::UNIMPLEMENTED, format!("{method} is not implemented"))),
        };
        p.container_event(
            event,
            req.pod.unwrap_or_default(),
            req.container.unwrap_or_default(),
        )
        .await
        .map_err(failed)?;
        Ok(Empty {}.encode_to_vec())
    }
}

/// A connected plugin: dropping it (or [`Connected::close`]) disconnects.
pub struct Connected {
    pub peer: Arc<Peer>,
}

impl Connected {
    pub async fn close(&self) {
        self.peer.close().await;
    }

    /// Asks the runtime to update containers; returns the updates that failed.
    pub async fn update_containers(
        &self,
        update: Vec<ContainerUpdate>,
    ) -> Result<Vec<ContainerUpdate>, CallError> {
        let req = UpdateContainersRequest {
            update,
            evict: Vec::new(),
        };
        let resp: UpdateContainersResponse = self
            .peer
            .call(
                RUNTIME_SERVICE,
                "UpdateContainers",
                &req,
                Duration::from_secs(10),
            )
            .await?;
        Ok(resp.failed)
    }
}

/// Connects to the runtime's NRI socket and registers as `<idx>-<name>`. The runtime then
/// configures and synchronises the plugin over the same connection.
pub async fn connect<P: Plugin>(
    socket: &Path,
    name: &str,
    idx: &str,
    plugin: Arc<P>,
) -> Result<Connected, CallError> {
    let stream = tokio::net::UnixStream::connect(socket)
        .await
        .map_err(|_| CallError::Closed)?;
    let peer = Peer::start(stream, RUNTIME_SERVICE_CONN, Arc::new(Serve(plugin)));
    let req = RegisterPluginRequest {
        plugin_name: name.into(),
        plugin_idx: idx.into(),
        nri_version: crate::runtime::NRI_VERSION.into(),
    };
    let _: Empty = peer
        .call(
            RUNTIME_SERVICE,
            "RegisterPlugin",
            &req,
            Duration::from_secs(10),
        )
        .await?;
    Ok(Connected { peer })
}
