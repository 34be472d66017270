//! The daemon's side of the streaming server: its sessions run through the [`ExecService`].

use super::ExecService;
use crate::error::{Code, Error};
use async_trait::async_trait;
use peapod_streaming::{AsyncReadWrite, RuntimeError, StreamIo};
use std::sync::Arc;

/// The streaming server's sessions, run by the exec service. (The streaming crate calls its
/// side `Runtime`; here that is this backend.)
pub struct StreamingBackend {
    pub exec: Arc<ExecService>,
}

fn to_runtime_error(id: &str, e: Error) -> RuntimeError {
    match e.code() {
        Code::NotFound => RuntimeError::ContainerNotFound(id.to_string()),
        Code::FailedPrecondition => RuntimeError::ContainerNotRunning(id.to_string()),
        _ => RuntimeError::Other(e.to_string()),
    }
}

#[async_trait]
impl peapod_streaming::Runtime for StreamingBackend {
    async fn exec(
        &self,
        container_id: &str,
        cmd: Vec<String>,
        io: StreamIo,
    ) -> Result<i32, RuntimeError> {
        self.exec
            .exec_session(container_id, cmd, io)
            .await
            .map_err(|e| to_runtime_error(container_id, e))
    }

    async fn attach(&self, container_id: &str, io: StreamIo) -> Result<(), RuntimeError> {
        self.exec
            .attach_session(container_id, io)
            .await
            .map_err(|e| to_runtime_error(container_id, e))
    }

    async fn port_forward(
        &self,
        sandbox_id: &str,
        port: u16,
        stream: Box<dyn AsyncReadWrite>,
    ) -> Result<(), RuntimeError> {
        self.exec
            .port_forward_session(sandbox_id, port, stream)
            .await
            .map_err(|e| match e.code() {
                Code::NotFound => RuntimeError::SandboxNotFound(sandbox_id.to_string()),
                _ => RuntimeError::Other(e.to_string()),
            })
    }
}
