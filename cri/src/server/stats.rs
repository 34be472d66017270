//! ContainerStats, ListContainerStats, PodSandboxStats, ListPodSandboxStats,
//! CheckpointContainer, GetContainerEvents, ListMetricDescriptors, ListPodSandboxMetrics.

use super::EventStream;
use crate::error::{Error, Result};
use crate::runtime::Runtime;
use peapod_proto::v1 as cri;
use std::sync::Arc;

fn unimplemented<T>(what: &str) -> Result<T> {
    Err(Error::Unimplemented(format!(
        "{what} is not implemented yet"
    )))
}

pub async fn container_stats(
    _rt: &Arc<Runtime>,
    _req: cri::ContainerStatsRequest,
) -> Result<cri::ContainerStatsResponse> {
    unimplemented("ContainerStats: container resource statistics")
}

pub async fn list_container_stats(
    _rt: &Arc<Runtime>,
    _req: cri::ListContainerStatsRequest,
) -> Result<cri::ListContainerStatsResponse> {
    unimplemented("ListContainerStats: container resource statistics")
}

pub async fn pod_sandbox_stats(
    _rt: &Arc<Runtime>,
    _req: cri::PodSandboxStatsRequest,
) -> Result<cri::PodSandboxStatsResponse> {
    unimplemented("PodSandboxStats: pod resource statistics")
}

pub async fn list_pod_sandbox_stats(
    _rt: &Arc<Runtime>,
    _req: cri::ListPodSandboxStatsRequest,
) -> Result<cri::ListPodSandboxStatsResponse> {
    unimplemented("ListPodSandboxStats: pod resource statistics")
}

pub fn checkpoint_container(
    _rt: &Runtime,
    _req: cri::CheckpointContainerRequest,
) -> Result<cri::CheckpointContainerResponse> {
    unimplemented("CheckpointContainer: container checkpointing (CRIU)")
}

pub fn container_events(_rt: &Runtime, _req: cri::GetEventsRequest) -> Result<EventStream> {
    unimplemented("GetContainerEvents: the evented PLEG event stream")
}

pub fn list_metric_descriptors(
    _rt: &Runtime,
    _req: cri::ListMetricDescriptorsRequest,
) -> Result<cri::ListMetricDescriptorsResponse> {
    unimplemented("ListMetricDescriptors: CRI pod metrics")
}

pub fn list_pod_sandbox_metrics(
    _rt: &Runtime,
    _req: cri::ListPodSandboxMetricsRequest,
) -> Result<cri::ListPodSandboxMetricsResponse> {
    unimplemented("ListPodSandboxMetrics: CRI pod metrics")
}
