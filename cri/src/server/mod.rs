//! The CRI gRPC surface on a unix socket: thin adapters that validate, call the core and map
//! errors to `Status`. One file per group of calls; this file only routes.

mod container;
mod image;
mod runtime_info;
mod sandbox;
mod stats;
mod streaming;

use crate::error::Error;
use crate::runtime::Runtime;
use peapod_proto::v1 as cri;
use peapod_proto::v1::image_service_server::{ImageService, ImageServiceServer};
use peapod_proto::v1::runtime_service_server::{RuntimeService, RuntimeServiceServer};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use tonic::{Request, Response, Status};

type RpcResult<T> = Result<Response<T>, Status>;

/// InvalidArgument naming `field` when a required string is empty.
fn required(field: &str, value: &str) -> Result<(), Error> {
    if value.is_empty() {
        return Err(Error::invalid(format!("{field} is required")));
    }
    Ok(())
}

/// Converts a core result into a gRPC response.
fn reply<T>(r: Result<T, Error>) -> RpcResult<T> {
    r.map(Response::new).map_err(Status::from)
}

/// Both CRI services over one runtime.
#[derive(Clone)]
pub struct Cri {
    rt: Arc<Runtime>,
}

impl Cri {
    pub fn new(rt: Arc<Runtime>) -> Cri {
        Cri { rt }
    }
}

/// Serves CRI on `socket` (mode 0660) until `shutdown` resolves.
pub async fn serve(
    rt: Arc<Runtime>,
    socket: &Path,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    use anyhow::Context;
    if let Some(dir) = socket.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
    }
    match std::fs::remove_file(socket) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e).with_context(|| format!("remove stale {}", socket.display())),
    }
    let listener = tokio::net::UnixListener::bind(socket)
        .with_context(|| format!("listen on {}", socket.display()))?;
    std::fs::set_permissions(socket, std::fs::Permissions::from_mode(0o660))
        .with_context(|| format!("chmod {}", socket.display()))?;
    tracing::info!(socket = %socket.display(), "serving CRI");
    // The pod supervisor (`peapod apply`) is a CRI client of this very socket.
    let pod_settings = rt.config.pods.settings(&rt.config.root)?;
    let pod_cri = std::sync::Arc::new(peapod_pod::cri::TonicCri::new(socket));
    let pods = peapod_pod::manager::Manager::start(pod_cri, pod_settings);
    let cri = Cri::new(rt);
    let incoming = tokio_stream::wrappers::UnixListenerStream::new(listener);
    tonic::transport::Server::builder()
        .add_service(RuntimeServiceServer::new(cri.clone()))
        .add_service(ImageServiceServer::new(cri))
        .add_service(peapod_pod::service::PodsService::new(pods).into_server())
        .serve_with_incoming_shutdown(incoming, shutdown)
        .await
        .context("CRI server")?;
    let _ = std::fs::remove_file(socket);
    Ok(())
}

type EventStream =
    Pin<Box<dyn tokio_stream::Stream<Item = Result<cri::ContainerEventResponse, Status>> + Send>>;

#[tonic::async_trait]
impl RuntimeService for Cri {
    async fn version(&self, r: Request<cri::VersionRequest>) -> RpcResult<cri::VersionResponse> {
        reply(runtime_info::version(&self.rt, r.into_inner()))
    }
    async fn status(&self, r: Request<cri::StatusRequest>) -> RpcResult<cri::StatusResponse> {
        reply(runtime_info::status(&self.rt, r.into_inner()))
    }
    async fn runtime_config(
        &self,
        r: Request<cri::RuntimeConfigRequest>,
    ) -> RpcResult<cri::RuntimeConfigResponse> {
        reply(runtime_info::runtime_config(&self.rt, r.into_inner()))
    }
    async fn update_runtime_config(
        &self,
        r: Request<cri::UpdateRuntimeConfigRequest>,
    ) -> RpcResult<cri::UpdateRuntimeConfigResponse> {
        reply(runtime_info::update_runtime_config(
            &self.rt,
            r.into_inner(),
        ))
    }

    async fn run_pod_sandbox(
        &self,
        r: Request<cri::RunPodSandboxRequest>,
    ) -> RpcResult<cri::RunPodSandboxResponse> {
        reply(sandbox::run(&self.rt, r.into_inner()).await)
    }
    async fn stop_pod_sandbox(
        &self,
        r: Request<cri::StopPodSandboxRequest>,
    ) -> RpcResult<cri::StopPodSandboxResponse> {
        reply(sandbox::stop(&self.rt, r.into_inner()).await)
    }
    async fn remove_pod_sandbox(
        &self,
        r: Request<cri::RemovePodSandboxRequest>,
    ) -> RpcResult<cri::RemovePodSandboxResponse> {
        reply(sandbox::remove(&self.rt, r.into_inner()).await)
    }
    async fn pod_sandbox_status(
        &self,
        r: Request<cri::PodSandboxStatusRequest>,
    ) -> RpcResult<cri::PodSandboxStatusResponse> {
        reply(sandbox::status(&self.rt, r.into_inner()).await)
    }
    async fn list_pod_sandbox(
        &self,
        r: Request<cri::ListPodSandboxRequest>,
    ) -> RpcResult<cri::ListPodSandboxResponse> {
        reply(sandbox::list(&self.rt, r.into_inner()))
    }

    async fn create_container(
        &self,
        r: Request<cri::CreateContainerRequest>,
    ) -> RpcResult<cri::CreateContainerResponse> {
        reply(container::create(&self.rt, r.into_inner()).await)
    }
    async fn start_container(
        &self,
        r: Request<cri::StartContainerRequest>,
    ) -> RpcResult<cri::StartContainerResponse> {
        reply(container::start(&self.rt, r.into_inner()).await)
    }
    async fn stop_container(
        &self,
        r: Request<cri::StopContainerRequest>,
    ) -> RpcResult<cri::StopContainerResponse> {
        reply(container::stop(&self.rt, r.into_inner()).await)
    }
    async fn remove_container(
        &self,
        r: Request<cri::RemoveContainerRequest>,
    ) -> RpcResult<cri::RemoveContainerResponse> {
        reply(container::remove(&self.rt, r.into_inner()).await)
    }
    async fn list_containers(
        &self,
        r: Request<cri::ListContainersRequest>,
    ) -> RpcResult<cri::ListContainersResponse> {
        reply(container::list(&self.rt, r.into_inner()))
    }
    async fn container_status(
        &self,
        r: Request<cri::ContainerStatusRequest>,
    ) -> RpcResult<cri::ContainerStatusResponse> {
        reply(container::status(&self.rt, r.into_inner()).await)
    }
    async fn update_container_resources(
        &self,
        r: Request<cri::UpdateContainerResourcesRequest>,
    ) -> RpcResult<cri::UpdateContainerResourcesResponse> {
        reply(container::update_resources(&self.rt, r.into_inner()).await)
    }
    async fn reopen_container_log(
        &self,
        r: Request<cri::ReopenContainerLogRequest>,
    ) -> RpcResult<cri::ReopenContainerLogResponse> {
        reply(container::reopen_log(&self.rt, r.into_inner()).await)
    }

    async fn exec_sync(
        &self,
        r: Request<cri::ExecSyncRequest>,
    ) -> RpcResult<cri::ExecSyncResponse> {
        reply(streaming::exec_sync(&self.rt, r.into_inner()).await)
    }
    async fn exec(&self, r: Request<cri::ExecRequest>) -> RpcResult<cri::ExecResponse> {
        reply(streaming::exec(&self.rt, r.into_inner()).await)
    }
    async fn attach(&self, r: Request<cri::AttachRequest>) -> RpcResult<cri::AttachResponse> {
        reply(streaming::attach(&self.rt, r.into_inner()).await)
    }
    async fn port_forward(
        &self,
        r: Request<cri::PortForwardRequest>,
    ) -> RpcResult<cri::PortForwardResponse> {
        reply(streaming::port_forward(&self.rt, r.into_inner()).await)
    }

    async fn container_stats(
        &self,
        r: Request<cri::ContainerStatsRequest>,
    ) -> RpcResult<cri::ContainerStatsResponse> {
        reply(stats::container_stats(&self.rt, r.into_inner()).await)
    }
    async fn list_container_stats(
        &self,
        r: Request<cri::ListContainerStatsRequest>,
    ) -> RpcResult<cri::ListContainerStatsResponse> {
        reply(stats::list_container_stats(&self.rt, r.into_inner()).await)
    }
    async fn pod_sandbox_stats(
        &self,
        r: Request<cri::PodSandboxStatsRequest>,
    ) -> RpcResult<cri::PodSandboxStatsResponse> {
        reply(stats::pod_sandbox_stats(&self.rt, r.into_inner()).await)
    }
    async fn list_pod_sandbox_stats(
        &self,
        r: Request<cri::ListPodSandboxStatsRequest>,
    ) -> RpcResult<cri::ListPodSandboxStatsResponse> {
        reply(stats::list_pod_sandbox_stats(&self.rt, r.into_inner()).await)
    }
    async fn checkpoint_container(
        &self,
        r: Request<cri::CheckpointContainerRequest>,
    ) -> RpcResult<cri::CheckpointContainerResponse> {
        reply(stats::checkpoint_container(&self.rt, r.into_inner()))
    }

    type GetContainerEventsStream = EventStream;
    async fn get_container_events(
        &self,
        r: Request<cri::GetEventsRequest>,
    ) -> RpcResult<Self::GetContainerEventsStream> {
        reply(stats::container_events(&self.rt, r.into_inner()))
    }
    async fn list_metric_descriptors(
        &self,
        r: Request<cri::ListMetricDescriptorsRequest>,
    ) -> RpcResult<cri::ListMetricDescriptorsResponse> {
        reply(stats::list_metric_descriptors(&self.rt, r.into_inner()))
    }
    async fn list_pod_sandbox_metrics(
        &self,
        r: Request<cri::ListPodSandboxMetricsRequest>,
    ) -> RpcResult<cri::ListPodSandboxMetricsResponse> {
        reply(stats::list_pod_sandbox_metrics(&self.rt, r.into_inner()))
    }
}

#[tonic::async_trait]
impl ImageService for Cri {
    async fn list_images(
        &self,
        r: Request<cri::ListImagesRequest>,
    ) -> RpcResult<cri::ListImagesResponse> {
        reply(image::list(&self.rt, r.into_inner()).await)
    }
    async fn image_status(
        &self,
        r: Request<cri::ImageStatusRequest>,
    ) -> RpcResult<cri::ImageStatusResponse> {
        reply(image::status(&self.rt, r.into_inner()).await)
    }
    async fn pull_image(
        &self,
        r: Request<cri::PullImageRequest>,
    ) -> RpcResult<cri::PullImageResponse> {
        reply(image::pull(&self.rt, r.into_inner()).await)
    }
    async fn remove_image(
        &self,
        r: Request<cri::RemoveImageRequest>,
    ) -> RpcResult<cri::RemoveImageResponse> {
        reply(image::remove(&self.rt, r.into_inner()).await)
    }
    async fn image_fs_info(
        &self,
        r: Request<cri::ImageFsInfoRequest>,
    ) -> RpcResult<cri::ImageFsInfoResponse> {
        reply(image::fs_info(&self.rt, r.into_inner()).await)
    }
}
