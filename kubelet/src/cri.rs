//! The narrow slice of CRI the supervisor uses, as a trait: a real implementation over tonic
//! on a unix socket (the daemon's own, connected lazily so the server can start listening
//! first), and fakes in unit tests. Nothing here knows it is talking to peapod.

use hyper_util::rt::TokioIo;
use peapod_proto::v1 as cri;
use peapod_proto::v1::image_service_client::ImageServiceClient;
use peapod_proto::v1::runtime_service_client::RuntimeServiceClient;
use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;
use tonic::transport::{Channel, Endpoint};
use tonic::Status;

pub type CriResult<T> = Result<T, Status>;

#[async_trait::async_trait]
pub trait CriApi: Send + Sync + 'static {
    async fn run_pod_sandbox(&self, config: cri::PodSandboxConfig) -> CriResult<String>;
    /// The sandbox's IP ("" when it has none, e.g. host network).
    async fn pod_sandbox_ip(&self, id: &str) -> CriResult<String>;
    /// Whether the sandbox exists and is ready (its infra container runs).
    async fn pod_sandbox_ready(&self, id: &str) -> CriResult<bool>;
    async fn stop_pod_sandbox(&self, id: &str) -> CriResult<()>;
    async fn remove_pod_sandbox(&self, id: &str) -> CriResult<()>;
    async fn list_pod_sandboxes(
        &self,
        labels: HashMap<String, String>,
    ) -> CriResult<Vec<cri::PodSandbox>>;
    async fn create_container(
        &self,
        sandbox_id: &str,
        config: cri::ContainerConfig,
        sandbox_config: cri::PodSandboxConfig,
    ) -> CriResult<String>;
    async fn start_container(&self, id: &str) -> CriResult<()>;
    async fn stop_container(&self, id: &str, timeout_seconds: i64) -> CriResult<()>;
    async fn remove_container(&self, id: &str) -> CriResult<()>;
    async fn container_status(&self, id: &str) -> CriResult<cri::ContainerStatus>;
    async fn list_containers(
        &self,
        labels: HashMap<String, String>,
    ) -> CriResult<Vec<cri::Container>>;
    async fn exec_sync(
        &self,
        id: &str,
        cmd: Vec<String>,
        timeout: Duration,
    ) -> CriResult<cri::ExecSyncResponse>;
    /// The image's id when the store has it.
    async fn image_id(&self, image: &str) -> CriResult<Option<String>>;
    /// Pulls and returns the image reference.
    async fn pull_image(
        &self,
        image: &str,
        sandbox_config: cri::PodSandboxConfig,
    ) -> CriResult<String>;
}

/// CRI over tonic on a unix socket.
pub struct TonicCri {
    socket: PathBuf,
    channel: tokio::sync::OnceCell<Channel>,
}

impl TonicCri {
    pub fn new(socket: impl Into<PathBuf>) -> TonicCri {
        TonicCri {
            socket: socket.into(),
            channel: tokio::sync::OnceCell::new(),
        }
    }

    async fn channel(&self) -> CriResult<Channel> {
        let socket = self.socket.clone();
        self.channel
            .get_or_try_init(|| async move {
                // The URI is ignored by the connector; tonic needs one. connect_lazy: the
                // daemon's own server may not be listening yet when the supervisor starts.
                let ep = Endpoint::from_static("http://[::]:50051");
                Ok::<_, Status>(ep.connect_with_connector_lazy(tower::service_fn(move |_| {
                    let socket = socket.clone();
                    async move {
                        let s = tokio::net::UnixStream::connect(socket).await?;
                        Ok::<_, std::io::Error>(TokioIo::new(s))
                    }
                })))
            })
            .await
            .cloned()
    }

    async fn rt(&self) -> CriResult<RuntimeServiceClient<Channel>> {
        Ok(RuntimeServiceClient::new(self.channel().await?).max_decoding_message_size(64 << 20))
    }

    /// PodSandboxStatus, not verbose: the status, if the answer has one.
    async fn sandbox_status(&self, id: &str) -> CriResult<Option<cri::PodSandboxStatus>> {
        let r = self
            .rt()
            .await?
            .pod_sandbox_status(cri::PodSandboxStatusRequest {
                pod_sandbox_id: id.into(),
                verbose: false,
            })
            .await?;
        Ok(r.into_inner().status)
    }

    async fn img(&self) -> CriResult<ImageServiceClient<Channel>> {
        Ok(ImageServiceClient::new(self.channel().await?))
    }
}

#[async_trait::async_trait]
impl CriApi for TonicCri {
    async fn run_pod_sandbox(&self, config: cri::PodSandboxConfig) -> CriResult<String> {
        let r = self
            .rt()
            .await?
            .run_pod_sandbox(cri::RunPodSandboxRequest {
                config: Some(config),
                runtime_handler: String::new(),
            })
            .await?;
        Ok(r.into_inner().pod_sandbox_id)
    }

    async fn pod_sandbox_ip(&self, id: &str) -> CriResult<String> {
        let status = self.sandbox_status(id).await?;
        Ok(status
            .and_then(|s| s.network)
            .map(|n| n.ip)
            .unwrap_or_default())
    }

    async fn pod_sandbox_ready(&self, id: &str) -> CriResult<bool> {
        let ready = cri::PodSandboxState::SandboxReady as i32;
        match self.sandbox_status(id).await {
            Ok(status) => Ok(status.is_some_and(|s| s.state == ready)),
            Err(s) if s.code() == tonic::Code::NotFound => Ok(false),
            Err(s) => Err(s),
        }
    }

    async fn stop_pod_sandbox(&self, id: &str) -> CriResult<()> {
        self.rt()
            .await?
            .stop_pod_sandbox(cri::StopPodSandboxRequest {
                pod_sandbox_id: id.into(),
            })
            .await?;
        Ok(())
    }

    async fn remove_pod_sandbox(&self, id: &str) -> CriResult<()> {
        self.rt()
            .await?
            .remove_pod_sandbox(cri::RemovePodSandboxRequest {
                pod_sandbox_id: id.into(),
            })
            .await?;
        Ok(())
    }

    async fn list_pod_sandboxes(
        &self,
        labels: HashMap<String, String>,
    ) -> CriResult<Vec<cri::PodSandbox>> {
        let r = self
            .rt()
            .await?
            .list_pod_sandbox(cri::ListPodSandboxRequest {
                filter: Some(cri::PodSandboxFilter {
                    label_selector: labels,
                    ..Default::default()
                }),
            })
            .await?;
        Ok(r.into_inner().items)
    }

    async fn create_container(
        &self,
        sandbox_id: &str,
        config: cri::ContainerConfig,
        sandbox_config: cri::PodSandboxConfig,
    ) -> CriResult<String> {
        let r = self
            .rt()
            .await?
            .create_container(cri::CreateContainerRequest {
                pod_sandbox_id: sandbox_id.into(),
                config: Some(config),
                sandbox_config: Some(sandbox_config),
            })
            .await?;
        Ok(r.into_inner().container_id)
    }

    async fn start_container(&self, id: &str) -> CriResult<()> {
        self.rt()
            .await?
            .start_container(cri::StartContainerRequest {
                container_id: id.into(),
            })
            .await?;
        Ok(())
    }

    async fn stop_container(&self, id: &str, timeout_seconds: i64) -> CriResult<()> {
        self.rt()
            .await?
            .stop_container(cri::StopContainerRequest {
                container_id: id.into(),
                timeout: timeout_seconds,
            })
            .await?;
        Ok(())
    }

    async fn remove_container(&self, id: &str) -> CriResult<()> {
        self.rt()
            .await?
            .remove_container(cri::RemoveContainerRequest {
                container_id: id.into(),
            })
            .await?;
        Ok(())
    }

    async fn container_status(&self, id: &str) -> CriResult<cri::ContainerStatus> {
        let r = self
            .rt()
            .await?
            .container_status(cri::ContainerStatusRequest {
                container_id: id.into(),
                verbose: false,
            })
            .await?;
        r.into_inner()
            .status
            .ok_or_else(|| Status::internal("ContainerStatus without a status"))
    }

    async fn list_containers(
        &self,
        labels: HashMap<String, String>,
    ) -> CriResult<Vec<cri::Container>> {
        let r = self
            .rt()
            .await?
            .list_containers(cri::ListContainersRequest {
                filter: Some(cri::ContainerFilter {
                    label_selector: labels,
                    ..Default::default()
                }),
            })
            .await?;
        Ok(r.into_inner().containers)
    }

    async fn exec_sync(
        &self,
        id: &str,
        cmd: Vec<String>,
        timeout: Duration,
    ) -> CriResult<cri::ExecSyncResponse> {
        let r = self
            .rt()
            .await?
            .exec_sync(cri::ExecSyncRequest {
                container_id: id.into(),
                cmd,
                timeout: timeout.as_secs().max(1) as i64,
            })
            .await?;
        Ok(r.into_inner())
    }

    async fn image_id(&self, image: &str) -> CriResult<Option<String>> {
        let r = self
            .img()
            .await?
            .image_status(cri::ImageStatusRequest {
                image: Some(cri::ImageSpec {
                    image: image.into(),
                    ..Default::default()
                }),
                verbose: false,
            })
            .await?;
        Ok(r.into_inner().image.map(|i| i.id))
    }

    async fn pull_image(
        &self,
        image: &str,
        sandbox_config: cri::PodSandboxConfig,
    ) -> CriResult<String> {
        let r = self
            .img()
            .await?
            .pull_image(cri::PullImageRequest {
                image: Some(cri::ImageSpec {
                    image: image.into(),
                    ..Default::default()
                }),
                auth: None,
                sandbox_config: Some(sandbox_config),
            })
            .await?;
        Ok(r.into_inner().image_ref)
    }
}
