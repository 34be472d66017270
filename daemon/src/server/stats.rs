//! ContainerStats, ListContainerStats, PodSandboxStats, ListPodSandboxStats, ListMetricDescriptors,
//! ListPodSandboxMetrics, and the streamed lists: StreamContainerStats, StreamPodSandboxStats,
//! StreamPodSandboxMetrics.

use super::list_stream::{self, ListStream};
use crate::daemon::Daemon;
use crate::error::Result;
use peapod_proto::v1 as cri;
use std::sync::Arc;

pub async fn container_stats(
    daemon: &Arc<Daemon>,
    req: cri::ContainerStatsRequest,
) -> Result<cri::ContainerStatsResponse> {
    super::required("container_id", &req.container_id)?;
    Ok(cri::ContainerStatsResponse {
        stats: Some(daemon.stats.container_stats(&req.container_id).await?),
    })
}

pub async fn list_container_stats(
    daemon: &Arc<Daemon>,
    req: cri::ListContainerStatsRequest,
) -> Result<cri::ListContainerStatsResponse> {
    Ok(cri::ListContainerStatsResponse {
        stats: daemon.stats.list_container_stats(req.filter.as_ref()).await,
    })
}

pub async fn pod_sandbox_stats(
    daemon: &Arc<Daemon>,
    req: cri::PodSandboxStatsRequest,
) -> Result<cri::PodSandboxStatsResponse> {
    super::required("pod_sandbox_id", &req.pod_sandbox_id)?;
    Ok(cri::PodSandboxStatsResponse {
        stats: Some(daemon.stats.pod_sandbox_stats(&req.pod_sandbox_id).await?),
    })
}

pub async fn list_pod_sandbox_stats(
    daemon: &Arc<Daemon>,
    req: cri::ListPodSandboxStatsRequest,
) -> Result<cri::ListPodSandboxStatsResponse> {
    Ok(cri::ListPodSandboxStatsResponse {
        stats: daemon
            .stats
            .list_pod_sandbox_stats(req.filter.as_ref())
            .await,
    })
}

pub fn list_metric_descriptors(
    daemon: &Daemon,
    _req: cri::ListMetricDescriptorsRequest,
) -> Result<cri::ListMetricDescriptorsResponse> {
    Ok(cri::ListMetricDescriptorsResponse {
        descriptors: crate::stats::cri_metrics::descriptors(daemon.stats.psi()),
    })
}

pub async fn list_pod_sandbox_metrics(
    daemon: &Daemon,
    _req: cri::ListPodSandboxMetricsRequest,
) -> Result<cri::ListPodSandboxMetricsResponse> {
    Ok(cri::ListPodSandboxMetricsResponse {
        pod_metrics: daemon.stats.list_pod_sandbox_metrics().await,
    })
}

/// StreamContainerStats: ListContainerStats' items, streamed (`list_stream`).
pub async fn stream_container_stats(
    daemon: &Arc<Daemon>,
    req: cri::StreamContainerStatsRequest,
) -> Result<ListStream<cri::StreamContainerStatsResponse>> {
    let items = daemon.stats.list_container_stats(req.filter.as_ref()).await;
    Ok(list_stream::stream(
        items,
        daemon.config.stream_batch_items,
        |container_stats| cri::StreamContainerStatsResponse { container_stats },
    ))
}

/// StreamPodSandboxStats: ListPodSandboxStats' items, streamed (`list_stream`).
pub async fn stream_pod_sandbox_stats(
    daemon: &Arc<Daemon>,
    req: cri::StreamPodSandboxStatsRequest,
) -> Result<ListStream<cri::StreamPodSandboxStatsResponse>> {
    let items = daemon
        .stats
        .list_pod_sandbox_stats(req.filter.as_ref())
        .await;
    Ok(list_stream::stream(
        items,
        daemon.config.stream_batch_items,
        |pod_sandbox_stats| cri::StreamPodSandboxStatsResponse { pod_sandbox_stats },
    ))
}

/// StreamPodSandboxMetrics: ListPodSandboxMetrics' items, streamed (`list_stream`).
pub async fn stream_pod_sandbox_metrics(
    daemon: &Daemon,
    _req: cri::StreamPodSandboxMetricsRequest,
) -> Result<ListStream<cri::StreamPodSandboxMetricsResponse>> {
    let items = daemon.stats.list_pod_sandbox_metrics().await;
    Ok(list_stream::stream(
        items,
        daemon.config.stream_batch_items,
        |pod_sandbox_metrics| cri::StreamPodSandboxMetricsResponse {
            pod_sandbox_metrics,
        },
    ))
}
