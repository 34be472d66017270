//! ExecSync, Exec, Attach, PortForward.

use crate::daemon::Daemon;
use crate::error::Result;
use peapod_proto::v1 as cri;
use std::sync::Arc;

pub async fn exec_sync(
    daemon: &Arc<Daemon>,
    req: cri::ExecSyncRequest,
) -> Result<cri::ExecSyncResponse> {
    super::required("container_id", &req.container_id)?;
    let out = daemon
        .exec
        .exec_sync(&req.container_id, req.cmd, req.timeout)
        .await?;
    Ok(cri::ExecSyncResponse {
        stdout: out.stdout,
        stderr: out.stderr,
        exit_code: out.exit_code,
    })
}

pub async fn exec(daemon: &Arc<Daemon>, req: cri::ExecRequest) -> Result<cri::ExecResponse> {
    super::required("container_id", &req.container_id)?;
    let url = daemon.exec.exec_url(daemon.streaming(), req)?;
    Ok(cri::ExecResponse { url })
}

pub async fn attach(daemon: &Arc<Daemon>, req: cri::AttachRequest) -> Result<cri::AttachResponse> {
    super::required("container_id", &req.container_id)?;
    let url = daemon.exec.attach_url(daemon.streaming(), req)?;
    Ok(cri::AttachResponse { url })
}

pub async fn port_forward(
    daemon: &Arc<Daemon>,
    req: cri::PortForwardRequest,
) -> Result<cri::PortForwardResponse> {
    super::required("pod_sandbox_id", &req.pod_sandbox_id)?;
    let url = daemon.exec.port_forward_url(daemon.streaming(), req)?;
    Ok(cri::PortForwardResponse { url })
}
