//! CreateContainer, StartContainer, StopContainer, RemoveContainer, ListContainers,
//! ContainerStatus, UpdateContainerResources, ReopenContainerLog, StreamContainers,
//! CheckpointContainer.

use super::list_stream::{self, ListStream};
use crate::container::{CheckpointContainer, CreateContainer};
use crate::daemon::Daemon;
use crate::error::{Error, Result};
use peapod_proto::v1 as cri;
use std::sync::Arc;

pub async fn create_container(
    daemon: &Arc<Daemon>,
    req: cri::CreateContainerRequest,
) -> Result<cri::CreateContainerResponse> {
    super::required("pod_sandbox_id", &req.pod_sandbox_id)?;
    let config = req
        .config
        .ok_or_else(|| Error::invalid("config is required"))?;
    let id = daemon
        .containers
        .create_container(CreateContainer {
            sandbox_id: req.pod_sandbox_id,
            config,
            sandbox_config: req.sandbox_config,
        })
        .await?;
    Ok(cri::CreateContainerResponse { container_id: id })
}

pub async fn checkpoint_container(
    daemon: &Arc<Daemon>,
    req: cri::CheckpointContainerRequest,
) -> Result<cri::CheckpointContainerResponse> {
    super::required("container_id", &req.container_id)?;
    daemon
        .containers
        .checkpoint_container(CheckpointContainer {
            container_id: req.container_id,
            location: req.location,
            timeout: req.timeout,
        })
        .await?;
    Ok(cri::CheckpointContainerResponse {})
}

pub async fn start_container(
    daemon: &Arc<Daemon>,
    req: cri::StartContainerRequest,
) -> Result<cri::StartContainerResponse> {
    super::required("container_id", &req.container_id)?;
    daemon.containers.start_container(&req.container_id).await?;
    Ok(cri::StartContainerResponse {})
}

pub async fn stop_container(
    daemon: &Arc<Daemon>,
    req: cri::StopContainerRequest,
) -> Result<cri::StopContainerResponse> {
    super::required("container_id", &req.container_id)?;
    daemon
        .containers
        .stop_container(&req.container_id, req.timeout)
        .await?;
    Ok(cri::StopContainerResponse {})
}

pub async fn remove_container(
    daemon: &Arc<Daemon>,
    req: cri::RemoveContainerRequest,
) -> Result<cri::RemoveContainerResponse> {
    super::required("container_id", &req.container_id)?;
    daemon
        .containers
        .remove_container(&req.container_id)
        .await?;
    Ok(cri::RemoveContainerResponse {})
}

pub fn list_containers(
    daemon: &Daemon,
    req: cri::ListContainersRequest,
) -> Result<cri::ListContainersResponse> {
    Ok(cri::ListContainersResponse {
        containers: Vec::new(),
        encoded: daemon.containers.list_items(req.filter.as_ref()),
    })
}

/// StreamContainers: ListContainers' items, streamed (`list_stream`).
pub fn stream_containers(
    daemon: &Daemon,
    req: cri::StreamContainersRequest,
) -> Result<ListStream<cri::StreamContainersResponse>> {
    Ok(list_stream::stream_encoded(
        daemon.containers.list_items(req.filter.as_ref()),
        daemon.config.stream_batch_items,
        |encoded| cri::StreamContainersResponse {
            containers: Vec::new(),
            encoded,
        },
    ))
}

pub async fn container_status(
    daemon: &Arc<Daemon>,
    req: cri::ContainerStatusRequest,
) -> Result<cri::ContainerStatusResponse> {
    super::required("container_id", &req.container_id)?;
    let rec = daemon.containers.status(&req.container_id)?;
    let info = if req.verbose {
        crate::container::verbose_info(&rec)
    } else {
        Default::default()
    };
    Ok(cri::ContainerStatusResponse {
        status: Some(crate::store::to_cri::container_status(&rec)),
        info,
    })
}

pub async fn update_container_resources(
    daemon: &Arc<Daemon>,
    req: cri::UpdateContainerResourcesRequest,
) -> Result<cri::UpdateContainerResourcesResponse> {
    super::required("container_id", &req.container_id)?;
    let linux = req
        .linux
        .ok_or_else(|| Error::invalid("linux resources are required"))?;
    daemon
        .containers
        .update_container_resources(&req.container_id, linux)
        .await?;
    Ok(cri::UpdateContainerResourcesResponse {})
}

pub async fn reopen_container_log(
    daemon: &Arc<Daemon>,
    req: cri::ReopenContainerLogRequest,
) -> Result<cri::ReopenContainerLogResponse> {
    super::required("container_id", &req.container_id)?;
    daemon
        .containers
        .reopen_container_log(&req.container_id)
        .await?;
    Ok(cri::ReopenContainerLogResponse {})
}
