//! The calls peapod does not implement yet: CheckpointContainer, ListMetricDescriptors,
//! ListPodSandboxMetrics. They answer Unimplemented, naming what is missing.

use crate::daemon::Daemon;
use crate::error::{Error, Result};
use peapod_proto::v1 as cri;

fn unimplemented<T>(what: &str) -> Result<T> {
    Err(Error::unimplemented(format!(
        "{what} is not implemented yet"
    )))
}

pub fn checkpoint_container(
    _rt: &Daemon,
    _req: cri::CheckpointContainerRequest,
) -> Result<cri::CheckpointContainerResponse> {
    unimplemented("CheckpointContainer: container checkpointing (CRIU)")
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
