//! ContainerStats, ListContainerStats, PodSandboxStats, ListPodSandboxStats,
//! CheckpointContainer, GetContainerEvents, ListMetricDescriptors, ListPodSandboxMetrics.

use super::EventStream;
use crate::daemon::Daemon;
use crate::error::{Error, Result};
use peapod_proto::v1 as cri;
use std::sync::Arc;

fn unimplemented<T>(what: &str) -> Result<T> {
    Err(Error::unimplemented(format!(
        "{what} is not implemented yet"
    )))
}

pub async fn container_stats(
    rt: &Arc<Daemon>,
    req: cri::ContainerStatsRequest,
) -> Result<cri::ContainerStatsResponse> {
    super::required("container_id", &req.container_id)?;
    Ok(cri::ContainerStatsResponse {
        stats: Some(rt.stats.container_stats(&req.container_id).await?),
    })
}

pub async fn list_container_stats(
    rt: &Arc<Daemon>,
    req: cri::ListContainerStatsRequest,
) -> Result<cri::ListContainerStatsResponse> {
    Ok(cri::ListContainerStatsResponse {
        stats: rt.stats.list_container_stats(req.filter.as_ref()).await,
    })
}

pub async fn pod_sandbox_stats(
    rt: &Arc<Daemon>,
    req: cri::PodSandboxStatsRequest,
) -> Result<cri::PodSandboxStatsResponse> {
    super::required("pod_sandbox_id", &req.pod_sandbox_id)?;
    Ok(cri::PodSandboxStatsResponse {
        stats: Some(rt.stats.pod_sandbox_stats(&req.pod_sandbox_id).await?),
    })
}

pub async fn list_pod_sandbox_stats(
    rt: &Arc<Daemon>,
    req: cri::ListPodSandboxStatsRequest,
) -> Result<cri::ListPodSandboxStatsResponse> {
    Ok(cri::ListPodSandboxStatsResponse {
        stats: rt.stats.list_pod_sandbox_stats(req.filter.as_ref()).await,
    })
}

pub fn checkpoint_container(
    _rt: &Daemon,
    _req: cri::CheckpointContainerRequest,
) -> Result<cri::CheckpointContainerResponse> {
    unimplemented("CheckpointContainer: container checkpointing (CRIU)")
}

pub fn container_events(rt: &Daemon, _req: cri::GetEventsRequest) -> Result<EventStream> {
    use tokio_stream::StreamExt;
    let stream = tokio_stream::wrappers::BroadcastStream::new(rt.events.subscribe()).filter_map(
        |e| match e {
            Ok(event) => Some(Ok(event)),
            // A subscriber that fell behind misses the oldest events; the kubelet relists.
            Err(tokio_stream::wrappers::errors::BroadcastStreamRecvError::Lagged(n)) => {
                tracing::warn!(missed = n, "a container event subscriber fell behind");
                None
            }
        },
    );
    Ok(Box::pin(stream))
}

pub fn list_metric_descriptors(
    _rt: &Daemon,
    _req: cri::ListMetricDescriptorsRequest,
) -> Result<cri::ListMetricDescriptorsResponse> {
    unimplemented("ListMetricDescriptors: CRI pod metrics")
}

pub fn list_pod_sandbox_metrics(
    _rt: &Daemon,
    _req: cri::ListPodSandboxMetricsRequest,
) -> Result<cri::ListPodSandboxMetricsResponse> {
    unimplemented("ListPodSandboxMetrics: CRI pod metrics")
}
