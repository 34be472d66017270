//! CreateContainer, StartContainer, StopContainer, RemoveContainer, ListContainers,
//! ContainerStatus, UpdateContainerResources, ReopenContainerLog.

use crate::container::{query, CreateContainer};
use crate::error::{Error, Result};
use crate::runtime::Runtime;
use peapod_proto::v1 as cri;
use std::sync::Arc;

pub async fn create(
    rt: &Arc<Runtime>,
    req: cri::CreateContainerRequest,
) -> Result<cri::CreateContainerResponse> {
    super::required("pod_sandbox_id", &req.pod_sandbox_id)?;
    let config = req
        .config
        .ok_or_else(|| Error::invalid("config is required"))?;
    let id = rt
        .create_container(CreateContainer {
            sandbox_id: req.pod_sandbox_id,
            config,
            sandbox_config: req.sandbox_config,
        })
        .await?;
    Ok(cri::CreateContainerResponse { container_id: id })
}

pub async fn start(
    rt: &Arc<Runtime>,
    req: cri::StartContainerRequest,
) -> Result<cri::StartContainerResponse> {
    super::required("container_id", &req.container_id)?;
    rt.start_container(&req.container_id).await?;
    Ok(cri::StartContainerResponse {})
}

pub async fn stop(
    rt: &Arc<Runtime>,
    req: cri::StopContainerRequest,
) -> Result<cri::StopContainerResponse> {
    super::required("container_id", &req.container_id)?;
    rt.stop_container(&req.container_id, req.timeout).await?;
    Ok(cri::StopContainerResponse {})
}

pub async fn remove(
    rt: &Arc<Runtime>,
    req: cri::RemoveContainerRequest,
) -> Result<cri::RemoveContainerResponse> {
    super::required("container_id", &req.container_id)?;
    rt.remove_container(&req.container_id).await?;
    Ok(cri::RemoveContainerResponse {})
}

pub fn list(rt: &Runtime, req: cri::ListContainersRequest) -> Result<cri::ListContainersResponse> {
    let containers = rt
        .list_containers(req.filter.as_ref())
        .iter()
        .map(crate::store::to_cri::container_list_item)
        .collect();
    Ok(cri::ListContainersResponse { containers })
}

pub async fn status(
    rt: &Arc<Runtime>,
    req: cri::ContainerStatusRequest,
) -> Result<cri::ContainerStatusResponse> {
    super::required("container_id", &req.container_id)?;
    let rec = rt.container_record(&req.container_id)?;
    let info = if req.verbose {
        query::verbose_info(&rec)
    } else {
        Default::default()
    };
    Ok(cri::ContainerStatusResponse {
        status: Some(crate::store::to_cri::container_status(&rec)),
        info,
    })
}

pub async fn update_resources(
    rt: &Arc<Runtime>,
    req: cri::UpdateContainerResourcesRequest,
) -> Result<cri::UpdateContainerResourcesResponse> {
    super::required("container_id", &req.container_id)?;
    let linux = req
        .linux
        .ok_or_else(|| Error::invalid("linux resources are required"))?;
    rt.update_container_resources(&req.container_id, linux)
        .await?;
    Ok(cri::UpdateContainerResourcesResponse {})
}

pub async fn reopen_log(
    rt: &Arc<Runtime>,
    req: cri::ReopenContainerLogRequest,
) -> Result<cri::ReopenContainerLogResponse> {
    super::required("container_id", &req.container_id)?;
    rt.reopen_container_log(&req.container_id).await?;
    Ok(cri::ReopenContainerLogResponse {})
}
