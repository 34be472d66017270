//! ExecSync, Exec, Attach, PortForward.

use crate::error::{Error, Result};
use crate::runtime::Runtime;
use peapod_proto::v1 as cri;
use std::sync::Arc;

fn unimplemented<T>(rpc: &str) -> Result<T> {
    Err(Error::Unimplemented(format!(
        "{rpc}: exec, attach and port-forward are not implemented yet"
    )))
}

pub async fn exec_sync(
    _rt: &Arc<Runtime>,
    _req: cri::ExecSyncRequest,
) -> Result<cri::ExecSyncResponse> {
    unimplemented("ExecSync")
}

pub async fn exec(_rt: &Arc<Runtime>, _req: cri::ExecRequest) -> Result<cri::ExecResponse> {
    unimplemented("Exec")
}

pub async fn attach(_rt: &Arc<Runtime>, _req: cri::AttachRequest) -> Result<cri::AttachResponse> {
    unimplemented("Attach")
}

pub async fn port_forward(
    _rt: &Arc<Runtime>,
    _req: cri::PortForwardRequest,
) -> Result<cri::PortForwardResponse> {
    unimplemented("PortForward")
}
