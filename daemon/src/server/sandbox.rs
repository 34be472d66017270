//! RunPodSandbox, StopPodSandbox, RemovePodSandbox, PodSandboxStatus, ListPodSandbox,
//! StreamPodSandboxes, UpdatePodSandboxResources.

use super::list_stream::{self, ListStream};
use crate::daemon::Daemon;
use crate::error::{Error, Result};
use peapod_proto::v1 as cri;
use std::sync::Arc;

pub async fn run_pod_sandbox(
    daemon: &Arc<Daemon>,
    req: cri::RunPodSandboxRequest,
) -> Result<cri::RunPodSandboxResponse> {
    let config = req
        .config
        .ok_or_else(|| Error::invalid("config is required"))?;
    if let Some(m) = &config.metadata {
        tracing::Span::current().record("pod", format!("{}/{}", m.namespace, m.name));
    }
    let id = daemon
        .pods
        .run_pod_sandbox(config, req.runtime_handler)
        .await?;
    Ok(cri::RunPodSandboxResponse { pod_sandbox_id: id })
}

pub async fn stop_pod_sandbox(
    daemon: &Arc<Daemon>,
    req: cri::StopPodSandboxRequest,
) -> Result<cri::StopPodSandboxResponse> {
    super::required("pod_sandbox_id", &req.pod_sandbox_id)?;
    daemon.pods.stop_pod_sandbox(&req.pod_sandbox_id).await?;
    Ok(cri::StopPodSandboxResponse {})
}

pub async fn remove_pod_sandbox(
    daemon: &Arc<Daemon>,
    req: cri::RemovePodSandboxRequest,
) -> Result<cri::RemovePodSandboxResponse> {
    super::required("pod_sandbox_id", &req.pod_sandbox_id)?;
    daemon.pods.remove_pod_sandbox(&req.pod_sandbox_id).await?;
    Ok(cri::RemovePodSandboxResponse {})
}

pub async fn pod_sandbox_status(
    daemon: &Arc<Daemon>,
    req: cri::PodSandboxStatusRequest,
) -> Result<cri::PodSandboxStatusResponse> {
    super::required("pod_sandbox_id", &req.pod_sandbox_id)?;
    let rec = daemon.sandboxes.status(&req.pod_sandbox_id)?;
    let info = if req.verbose {
        crate::sandbox::verbose_info(&rec)
    } else {
        Default::default()
    };
    // No `containers_statuses` and no `timestamp`, as containerd answers: a kubelet (1.37.2)
    // with the EventedPLEG gate takes a non-zero timestamp to mean that the pod's container
    // statuses come with the sandbox's, and then leaves its ActiveContainerStatuses empty, so
    // it finds no init container on the current sandbox and runs it again, forever (seen
    // under a real kubelet: the WAR pod stuck in PodInitializing). With a zero timestamp it
    // asks ContainerStatus for each container, as it does without the gate; its evented PLEG
    // still relists a pod on our CONTAINER_STOPPED events.
    Ok(cri::PodSandboxStatusResponse {
        status: Some(crate::store::to_cri::sandbox_status(&rec)),
        info,
        containers_statuses: Vec::new(),
        timestamp: 0,
    })
}

pub fn list_pod_sandbox(
    daemon: &Daemon,
    req: cri::ListPodSandboxRequest,
) -> Result<cri::ListPodSandboxResponse> {
    Ok(cri::ListPodSandboxResponse {
        items: Vec::new(),
        encoded: daemon.sandboxes.list_items(req.filter.as_ref()),
    })
}

/// StreamPodSandboxes: ListPodSandbox's items, streamed (`list_stream`).
pub fn stream_pod_sandboxes(
    daemon: &Daemon,
    req: cri::StreamPodSandboxesRequest,
) -> Result<ListStream<cri::StreamPodSandboxesResponse>> {
    Ok(list_stream::stream_encoded(
        daemon.sandboxes.list_items(req.filter.as_ref()),
        daemon.config.stream_batch_items,
        |encoded| cri::StreamPodSandboxesResponse {
            pod_sandboxes: Vec::new(),
            encoded,
        },
    ))
}

pub async fn update_pod_sandbox_resources(
    daemon: &Arc<Daemon>,
    req: cri::UpdatePodSandboxResourcesRequest,
) -> Result<cri::UpdatePodSandboxResourcesResponse> {
    super::required("pod_sandbox_id", &req.pod_sandbox_id)?;
    daemon
        .sandboxes
        .update_pod_sandbox_resources(&req.pod_sandbox_id, req.overhead, req.resources)
        .await?;
    Ok(cri::UpdatePodSandboxResourcesResponse {})
}
