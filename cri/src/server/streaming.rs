//! ExecSync, Exec, Attach, PortForward.

use crate::daemon::Daemon;
use crate::error::{Error, Result};
use peapod_proto::v1 as cri;
use std::sync::Arc;

fn streaming_err(e: peapod_streaming::Error) -> Error {
    match e {
        peapod_streaming::Error::InvalidRequest(v) => {
            Error::invalid(format!("{}: {}", v.field, v.message))
        }
        other => Error::unavailable(other.to_string()),
    }
}

pub async fn exec_sync(
    rt: &Arc<Daemon>,
    req: cri::ExecSyncRequest,
) -> Result<cri::ExecSyncResponse> {
    super::required("container_id", &req.container_id)?;
    let out = rt
        .exec
        .exec_sync(&req.container_id, req.cmd, req.timeout)
        .await?;
    Ok(cri::ExecSyncResponse {
        stdout: out.stdout,
        stderr: out.stderr,
        exit_code: out.exit_code,
    })
}

pub async fn exec(rt: &Arc<Daemon>, req: cri::ExecRequest) -> Result<cri::ExecResponse> {
    super::required("container_id", &req.container_id)?;
    let rec = rt.exec.running_container(&req.container_id)?;
    let url = rt
        .streaming()?
        .exec_url(peapod_streaming::ExecRequest {
            container_id: rec.id,
            cmd: req.cmd,
            tty: req.tty,
            stdin: req.stdin,
            stdout: req.stdout,
            stderr: req.stderr,
        })
        .map_err(streaming_err)?;
    Ok(cri::ExecResponse { url })
}

pub async fn attach(rt: &Arc<Daemon>, req: cri::AttachRequest) -> Result<cri::AttachResponse> {
    super::required("container_id", &req.container_id)?;
    let rec = rt.exec.running_container(&req.container_id)?;
    if req.stdin && !rec.config.stdin {
        return Err(Error::invalid(
            "stdin: the container was not created with stdin (config.stdin)",
        ));
    }
    if req.tty != rec.config.tty {
        return Err(Error::invalid(format!(
            "tty: the container was created with tty={}",
            rec.config.tty
        )));
    }
    let url = rt
        .streaming()?
        .attach_url(peapod_streaming::AttachRequest {
            container_id: rec.id,
            tty: req.tty,
            stdin: req.stdin,
            stdout: req.stdout,
            stderr: req.stderr,
        })
        .map_err(streaming_err)?;
    Ok(cri::AttachResponse { url })
}

pub async fn port_forward(
    rt: &Arc<Daemon>,
    req: cri::PortForwardRequest,
) -> Result<cri::PortForwardResponse> {
    super::required("pod_sandbox_id", &req.pod_sandbox_id)?;
    let rec = rt.sandboxes.status(&req.pod_sandbox_id)?;
    if rec.state != crate::store::sandbox::SandboxState::Ready {
        return Err(Error::failed_precondition(format!(
            "pod sandbox {} is not ready",
            rec.id
        )));
    }
    let url = rt
        .streaming()?
        .port_forward_url(peapod_streaming::PortForwardRequest {
            sandbox_id: rec.id,
            ports: req.port,
        })
        .map_err(streaming_err)?;
    Ok(cri::PortForwardResponse { url })
}
