//! CreateContainer, StartContainer, StopContainer, RemoveContainer, ListContainers,
//! ContainerStatus, UpdateContainerResources, ReopenContainerLog.

use crate::error::{Error, Result};
use crate::runtime::Runtime;
use peapod_proto::v1 as cri;
use std::sync::Arc;

fn unimplemented<T>(rpc: &str) -> Result<T> {
    Err(Error::Unimplemented(format!(
        "{rpc}: application containers are not implemented yet (peapod runs pod sandboxes only)"
    )))
}

pub async fn create(
    _rt: &Arc<Runtime>,
    _req: cri::CreateContainerRequest,
) -> Result<cri::CreateContainerResponse> {
    unimplemented("CreateContainer")
}

pub async fn start(
    _rt: &Arc<Runtime>,
    _req: cri::StartContainerRequest,
) -> Result<cri::StartContainerResponse> {
    unimplemented("StartContainer")
}

pub async fn stop(
    _rt: &Arc<Runtime>,
    _req: cri::StopContainerRequest,
) -> Result<cri::StopContainerResponse> {
    unimplemented("StopContainer")
}

pub async fn remove(
    _rt: &Arc<Runtime>,
    _req: cri::RemoveContainerRequest,
) -> Result<cri::RemoveContainerResponse> {
    unimplemented("RemoveContainer")
}

pub fn list(
    _rt: &Runtime,
    _req: cri::ListContainersRequest,
) -> Result<cri::ListContainersResponse> {
    // No containers exist yet: an empty list is the truth, and the kubelet lists constantly.
    Ok(cri::ListContainersResponse { containers: vec![] })
}

pub async fn status(
    _rt: &Arc<Runtime>,
    req: cri::ContainerStatusRequest,
) -> Result<cri::ContainerStatusResponse> {
    Err(Error::not_found(format!(
        "container {:?} not found",
        req.container_id
    )))
}

pub async fn update_resources(
    _rt: &Arc<Runtime>,
    _req: cri::UpdateContainerResourcesRequest,
) -> Result<cri::UpdateContainerResourcesResponse> {
    unimplemented("UpdateContainerResources")
}

pub async fn reopen_log(
    _rt: &Arc<Runtime>,
    _req: cri::ReopenContainerLogRequest,
) -> Result<cri::ReopenContainerLogResponse> {
    unimplemented("ReopenContainerLog")
}
