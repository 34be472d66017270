//! The CRI gRPC surface: thin adapters that check required fields, call the daemon's pods,
//! services or image store, and build the reply. One file per group of calls (the crate docs
//! map each RPC to its files); `rpc` is what every call goes through (span, errors to
//! statuses). This file only routes; binding the socket and serving is `crate::serve`.

mod container;
#[cfg(test)]
mod cri_1_37_tests;
mod events;
mod exec;
mod image;
mod list_stream;
#[cfg(test)]
mod list_tests;
mod rpc;
mod runtime_info;
mod sandbox;
mod stats;
mod unimplemented;

use list_stream::ListStream;
use rpc::{required, rpc, RpcResult};

use crate::daemon::Daemon;
use crate::error::Error;
use peapod_proto::v1 as cri;
use peapod_proto::v1::image_service_server::ImageService;
use peapod_proto::v1::runtime_service_server::RuntimeService;
use std::pin::Pin;
use std::sync::Arc;
use tonic::{Request, Status};

/// Both CRI services (RuntimeService and ImageService) over the daemon.
#[derive(Clone)]
pub struct CriService {
    daemon: Arc<Daemon>,
    metrics: Arc<peapod_metrics::Metrics>,
    /// Set to true when the server shuts down: open GetContainerEvents streams end on it.
    stopping: Arc<tokio::sync::watch::Sender<bool>>,
}

impl CriService {
    pub fn new(daemon: Arc<Daemon>, metrics: Arc<peapod_metrics::Metrics>) -> CriService {
        CriService {
            daemon,
            metrics,
            stopping: Arc::new(tokio::sync::watch::channel(false).0),
        }
    }

    /// Ends every open event stream (and any opened later). Graceful shutdown waits for open
    /// streams to finish, and an event stream never finishes on its own: without this, a
    /// kubelet's GetContainerEvents would keep SIGTERM from ever stopping the daemon.
    pub fn end_streams(&self) {
        self.stopping.send_replace(true);
    }
}

type EventStream =
    Pin<Box<dyn tokio_stream::Stream<Item = Result<cri::ContainerEventResponse, Status>> + Send>>;

#[tonic::async_trait]
impl RuntimeService for CriService {
    async fn version(&self, r: Request<cri::VersionRequest>) -> RpcResult<cri::VersionResponse> {
        rpc("Version", r, |req| {
            std::future::ready(runtime_info::version(&self.daemon, req))
        })
        .await
    }
    async fn status(&self, r: Request<cri::StatusRequest>) -> RpcResult<cri::StatusResponse> {
        // Status reads the CNI configuration directory and looks plugins and the runtime up on
        // disk: blocking file I/O, so it runs on the blocking pool.
        let daemon = self.daemon.clone();
        rpc("Status", r, |req| async move {
            tokio::task::spawn_blocking(move || runtime_info::status(&daemon, req))
                .await
                .map_err(|e| Error::internal(format!("Status task: {e}")))?
        })
        .await
    }
    async fn runtime_config(
        &self,
        r: Request<cri::RuntimeConfigRequest>,
    ) -> RpcResult<cri::RuntimeConfigResponse> {
        rpc("RuntimeConfig", r, |req| {
            std::future::ready(runtime_info::runtime_config(&self.daemon, req))
        })
        .await
    }
    async fn update_runtime_config(
        &self,
        r: Request<cri::UpdateRuntimeConfigRequest>,
    ) -> RpcResult<cri::UpdateRuntimeConfigResponse> {
        rpc("UpdateRuntimeConfig", r, |req| {
            std::future::ready(runtime_info::update_runtime_config(&self.daemon, req))
        })
        .await
    }

    async fn run_pod_sandbox(
        &self,
        r: Request<cri::RunPodSandboxRequest>,
    ) -> RpcResult<cri::RunPodSandboxResponse> {
        rpc("RunPodSandbox", r, |req| {
            sandbox::run_pod_sandbox(&self.daemon, req)
        })
        .await
    }
    async fn stop_pod_sandbox(
        &self,
        r: Request<cri::StopPodSandboxRequest>,
    ) -> RpcResult<cri::StopPodSandboxResponse> {
        rpc("StopPodSandbox", r, |req| {
            sandbox::stop_pod_sandbox(&self.daemon, req)
        })
        .await
    }
    async fn remove_pod_sandbox(
        &self,
        r: Request<cri::RemovePodSandboxRequest>,
    ) -> RpcResult<cri::RemovePodSandboxResponse> {
        rpc("RemovePodSandbox", r, |req| {
            sandbox::remove_pod_sandbox(&self.daemon, req)
        })
        .await
    }
    async fn pod_sandbox_status(
        &self,
        r: Request<cri::PodSandboxStatusRequest>,
    ) -> RpcResult<cri::PodSandboxStatusResponse> {
        rpc("PodSandboxStatus", r, |req| {
            sandbox::pod_sandbox_status(&self.daemon, req)
        })
        .await
    }
    async fn list_pod_sandbox(
        &self,
        r: Request<cri::ListPodSandboxRequest>,
    ) -> RpcResult<cri::ListPodSandboxResponse> {
        rpc("ListPodSandbox", r, |req| {
            std::future::ready(sandbox::list_pod_sandbox(&self.daemon, req))
        })
        .await
    }
    type StreamPodSandboxesStream = ListStream<cri::StreamPodSandboxesResponse>;
    async fn stream_pod_sandboxes(
        &self,
        r: Request<cri::StreamPodSandboxesRequest>,
    ) -> RpcResult<Self::StreamPodSandboxesStream> {
        rpc("StreamPodSandboxes", r, |req| {
            std::future::ready(sandbox::stream_pod_sandboxes(&self.daemon, req))
        })
        .await
    }
    async fn update_pod_sandbox_resources(
        &self,
        r: Request<cri::UpdatePodSandboxResourcesRequest>,
    ) -> RpcResult<cri::UpdatePodSandboxResourcesResponse> {
        rpc("UpdatePodSandboxResources", r, |req| {
            sandbox::update_pod_sandbox_resources(&self.daemon, req)
        })
        .await
    }

    async fn create_container(
        &self,
        r: Request<cri::CreateContainerRequest>,
    ) -> RpcResult<cri::CreateContainerResponse> {
        rpc("CreateContainer", r, |req| {
            container::create_container(&self.daemon, req)
        })
        .await
    }
    async fn start_container(
        &self,
        r: Request<cri::StartContainerRequest>,
    ) -> RpcResult<cri::StartContainerResponse> {
        rpc("StartContainer", r, |req| {
            container::start_container(&self.daemon, req)
        })
        .await
    }
    async fn stop_container(
        &self,
        r: Request<cri::StopContainerRequest>,
    ) -> RpcResult<cri::StopContainerResponse> {
        rpc("StopContainer", r, |req| {
            container::stop_container(&self.daemon, req)
        })
        .await
    }
    async fn remove_container(
        &self,
        r: Request<cri::RemoveContainerRequest>,
    ) -> RpcResult<cri::RemoveContainerResponse> {
        rpc("RemoveContainer", r, |req| {
            container::remove_container(&self.daemon, req)
        })
        .await
    }
    async fn list_containers(
        &self,
        r: Request<cri::ListContainersRequest>,
    ) -> RpcResult<cri::ListContainersResponse> {
        rpc("ListContainers", r, |req| {
            std::future::ready(container::list_containers(&self.daemon, req))
        })
        .await
    }
    type StreamContainersStream = ListStream<cri::StreamContainersResponse>;
    async fn stream_containers(
        &self,
        r: Request<cri::StreamContainersRequest>,
    ) -> RpcResult<Self::StreamContainersStream> {
        rpc("StreamContainers", r, |req| {
            std::future::ready(container::stream_containers(&self.daemon, req))
        })
        .await
    }
    async fn container_status(
        &self,
        r: Request<cri::ContainerStatusRequest>,
    ) -> RpcResult<cri::ContainerStatusResponse> {
        rpc("ContainerStatus", r, |req| {
            container::container_status(&self.daemon, req)
        })
        .await
    }
    async fn update_container_resources(
        &self,
        r: Request<cri::UpdateContainerResourcesRequest>,
    ) -> RpcResult<cri::UpdateContainerResourcesResponse> {
        rpc("UpdateContainerResources", r, |req| {
            container::update_container_resources(&self.daemon, req)
        })
        .await
    }
    async fn reopen_container_log(
        &self,
        r: Request<cri::ReopenContainerLogRequest>,
    ) -> RpcResult<cri::ReopenContainerLogResponse> {
        rpc("ReopenContainerLog", r, |req| {
            container::reopen_container_log(&self.daemon, req)
        })
        .await
    }

    async fn exec_sync(
        &self,
        r: Request<cri::ExecSyncRequest>,
    ) -> RpcResult<cri::ExecSyncResponse> {
        rpc("ExecSync", r, |req| exec::exec_sync(&self.daemon, req)).await
    }
    async fn exec(&self, r: Request<cri::ExecRequest>) -> RpcResult<cri::ExecResponse> {
        rpc("Exec", r, |req| exec::exec(&self.daemon, req)).await
    }
    async fn attach(&self, r: Request<cri::AttachRequest>) -> RpcResult<cri::AttachResponse> {
        rpc("Attach", r, |req| exec::attach(&self.daemon, req)).await
    }
    async fn port_forward(
        &self,
        r: Request<cri::PortForwardRequest>,
    ) -> RpcResult<cri::PortForwardResponse> {
        rpc("PortForward", r, |req| {
            exec::port_forward(&self.daemon, req)
        })
        .await
    }

    async fn container_stats(
        &self,
        r: Request<cri::ContainerStatsRequest>,
    ) -> RpcResult<cri::ContainerStatsResponse> {
        rpc("ContainerStats", r, |req| {
            stats::container_stats(&self.daemon, req)
        })
        .await
    }
    async fn list_container_stats(
        &self,
        r: Request<cri::ListContainerStatsRequest>,
    ) -> RpcResult<cri::ListContainerStatsResponse> {
        rpc("ListContainerStats", r, |req| {
            stats::list_container_stats(&self.daemon, req)
        })
        .await
    }
    type StreamContainerStatsStream = ListStream<cri::StreamContainerStatsResponse>;
    async fn stream_container_stats(
        &self,
        r: Request<cri::StreamContainerStatsRequest>,
    ) -> RpcResult<Self::StreamContainerStatsStream> {
        rpc("StreamContainerStats", r, |req| {
            stats::stream_container_stats(&self.daemon, req)
        })
        .await
    }
    async fn pod_sandbox_stats(
        &self,
        r: Request<cri::PodSandboxStatsRequest>,
    ) -> RpcResult<cri::PodSandboxStatsResponse> {
        rpc("PodSandboxStats", r, |req| {
            stats::pod_sandbox_stats(&self.daemon, req)
        })
        .await
    }
    async fn list_pod_sandbox_stats(
        &self,
        r: Request<cri::ListPodSandboxStatsRequest>,
    ) -> RpcResult<cri::ListPodSandboxStatsResponse> {
        rpc("ListPodSandboxStats", r, |req| {
            stats::list_pod_sandbox_stats(&self.daemon, req)
        })
        .await
    }
    type StreamPodSandboxStatsStream = ListStream<cri::StreamPodSandboxStatsResponse>;
    async fn stream_pod_sandbox_stats(
        &self,
        r: Request<cri::StreamPodSandboxStatsRequest>,
    ) -> RpcResult<Self::StreamPodSandboxStatsStream> {
        rpc("StreamPodSandboxStats", r, |req| {
            stats::stream_pod_sandbox_stats(&self.daemon, req)
        })
        .await
    }
    async fn checkpoint_container(
        &self,
        r: Request<cri::CheckpointContainerRequest>,
    ) -> RpcResult<cri::CheckpointContainerResponse> {
        rpc("CheckpointContainer", r, |req| {
            container::checkpoint_container(&self.daemon, req)
        })
        .await
    }
    async fn checkpoint_pod(
        &self,
        r: Request<cri::CheckpointPodRequest>,
    ) -> RpcResult<cri::CheckpointPodResponse> {
        rpc("CheckpointPod", r, |req| {
            std::future::ready(unimplemented::checkpoint_pod(&self.daemon, req))
        })
        .await
    }
    async fn restore_pod(
        &self,
        r: Request<cri::RestorePodRequest>,
    ) -> RpcResult<cri::RestorePodResponse> {
        rpc("RestorePod", r, |req| {
            std::future::ready(unimplemented::restore_pod(&self.daemon, req))
        })
        .await
    }

    type GetContainerEventsStream = EventStream;
    async fn get_container_events(
        &self,
        r: Request<cri::GetEventsRequest>,
    ) -> RpcResult<Self::GetContainerEventsStream> {
        rpc("GetContainerEvents", r, |req| {
            std::future::ready(events::container_events(
                &self.daemon,
                req,
                self.stopping.subscribe(),
            ))
        })
        .await
    }
    async fn list_metric_descriptors(
        &self,
        r: Request<cri::ListMetricDescriptorsRequest>,
    ) -> RpcResult<cri::ListMetricDescriptorsResponse> {
        rpc("ListMetricDescriptors", r, |req| {
            std::future::ready(stats::list_metric_descriptors(&self.daemon, req))
        })
        .await
    }
    async fn list_pod_sandbox_metrics(
        &self,
        r: Request<cri::ListPodSandboxMetricsRequest>,
    ) -> RpcResult<cri::ListPodSandboxMetricsResponse> {
        rpc("ListPodSandboxMetrics", r, |req| {
            stats::list_pod_sandbox_metrics(&self.daemon, req)
        })
        .await
    }
    type StreamPodSandboxMetricsStream = ListStream<cri::StreamPodSandboxMetricsResponse>;
    async fn stream_pod_sandbox_metrics(
        &self,
        r: Request<cri::StreamPodSandboxMetricsRequest>,
    ) -> RpcResult<Self::StreamPodSandboxMetricsStream> {
        rpc("StreamPodSandboxMetrics", r, |req| {
            stats::stream_pod_sandbox_metrics(&self.daemon, req)
        })
        .await
    }
}

#[tonic::async_trait]
impl ImageService for CriService {
    async fn list_images(
        &self,
        r: Request<cri::ListImagesRequest>,
    ) -> RpcResult<cri::ListImagesResponse> {
        rpc("ListImages", r, |req| image::list(&self.daemon, req)).await
    }
    type StreamImagesStream = ListStream<cri::StreamImagesResponse>;
    async fn stream_images(
        &self,
        r: Request<cri::StreamImagesRequest>,
    ) -> RpcResult<Self::StreamImagesStream> {
        rpc("StreamImages", r, |req| image::stream(&self.daemon, req)).await
    }
    async fn image_status(
        &self,
        r: Request<cri::ImageStatusRequest>,
    ) -> RpcResult<cri::ImageStatusResponse> {
        rpc("ImageStatus", r, |req| image::status(&self.daemon, req)).await
    }
    async fn pull_image(
        &self,
        r: Request<cri::PullImageRequest>,
    ) -> RpcResult<cri::PullImageResponse> {
        rpc("PullImage", r, |req| {
            image::pull(&self.daemon, &self.metrics, req)
        })
        .await
    }
    async fn remove_image(
        &self,
        r: Request<cri::RemoveImageRequest>,
    ) -> RpcResult<cri::RemoveImageResponse> {
        rpc("RemoveImage", r, |req| image::remove(&self.daemon, req)).await
    }
    async fn image_fs_info(
        &self,
        r: Request<cri::ImageFsInfoRequest>,
    ) -> RpcResult<cri::ImageFsInfoResponse> {
        rpc("ImageFsInfo", r, |req| image::fs_info(&self.daemon, req)).await
    }
}
