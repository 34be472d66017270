//! RunPodSandbox, StopPodSandbox, RemovePodSandbox, PodSandboxStatus, ListPodSandbox.

use crate::daemon::Daemon;
use crate::error::{Error, Result};
use peapod_proto::v1 as cri;
use std::sync::Arc;

pub async fn run(
    rt: &Arc<Daemon>,
    req: cri::RunPodSandboxRequest,
) -> Result<cri::RunPodSandboxResponse> {
    let config = req
        .config
        .ok_or_else(|| Error::invalid("config is required"))?;
    if let Some(m) = &config.metadata {
        tracing::Span::current().record("pod", format!("{}/{}", m.namespace, m.name));
    }
    let id = rt.sandboxes.run(config, req.runtime_handler).await?;
    Ok(cri::RunPodSandboxResponse { pod_sandbox_id: id })
}

pub async fn stop(
    rt: &Arc<Daemon>,
    req: cri::StopPodSandboxRequest,
) -> Result<cri::StopPodSandboxResponse> {
    super::required("pod_sandbox_id", &req.pod_sandbox_id)?;
    rt.sandboxes.stop(&req.pod_sandbox_id).await?;
    Ok(cri::StopPodSandboxResponse {})
}

pub async fn remove(
    rt: &Arc<Daemon>,
    req: cri::RemovePodSandboxRequest,
) -> Result<cri::RemovePodSandboxResponse> {
    super::required("pod_sandbox_id", &req.pod_sandbox_id)?;
    rt.sandboxes.remove(&req.pod_sandbox_id).await?;
    Ok(cri::RemovePodSandboxResponse {})
}

pub async fn status(
    rt: &Arc<Daemon>,
    req: cri::PodSandboxStatusRequest,
) -> Result<cri::PodSandboxStatusResponse> {
    super::required("pod_sandbox_id", &req.pod_sandbox_id)?;
    let rec = rt.sandboxes.status(&req.pod_sandbox_id)?;
    let info = if req.verbose {
        crate::sandbox::verbose_info(&rec)
    } else {
        Default::default()
    };
    let containers_statuses = rt.containers.statuses_of(&rec.id).await;
    Ok(cri::PodSandboxStatusResponse {
        status: Some(crate::store::to_cri::sandbox_status(&rec)),
        info,
        containers_statuses,
        timestamp: peapod_shim::timefmt::now_ns(),
    })
}

pub fn list(rt: &Daemon, req: cri::ListPodSandboxRequest) -> Result<cri::ListPodSandboxResponse> {
    let items = rt
        .sandboxes
        .list(req.filter.as_ref())
        .iter()
        .map(crate::store::to_cri::sandbox_list_item)
        .collect();
    Ok(cri::ListPodSandboxResponse { items })
}
