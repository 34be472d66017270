//! The daemon's side of the streaming server: its sessions run through [`Runtime`].

use crate::error::{Code, Error};
use crate::runtime::Runtime;
use async_trait::async_trait;
use peapod_streaming::{AsyncReadWrite, RuntimeError, StreamIo};
use std::sync::{Arc, Weak};

/// Holds the runtime weakly: the runtime owns the server that owns this.
pub struct Backend {
    pub rt: Weak<Runtime>,
}

impl Backend {
    fn rt(&self) -> Result<Arc<Runtime>, RuntimeError> {
        self.rt
            .upgrade()
            .ok_or_else(|| RuntimeError::Other("the runtime is shutting down".into()))
    }
}

fn to_runtime_error(id: &str, e: Error) -> RuntimeError {
    match e.code() {
        Code::NotFound => RuntimeError::ContainerNotFound(id.to_string()),
        Code::FailedPrecondition => RuntimeError::ContainerNotRunning(id.to_string()),
        _ => RuntimeError::Other(e.to_string()),
    }
}

#[async_trait]
impl peapod_streaming::Runtime for Backend {
    async fn exec(
        &self,
        container_id: &str,
        cmd: Vec<String>,
        io: StreamIo,
    ) -> Result<i32, RuntimeError> {
        self.rt()?
            .exec_session(container_id, cmd, io)
            .await
            .map_err(|e| to_runtime_error(container_id, e))
    }

    async fn attach(&self, container_id: &str, io: StreamIo) -> Result<(), RuntimeError> {
        self.rt()?
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
        self.rt()?
            .port_forward_session(sandbox_id, port, stream)
            .await
            .map_err(|e| match e.code() {
                Code::NotFound => RuntimeError::SandboxNotFound(sandbox_id.to_string()),
                _ => RuntimeError::Other(e.to_string()),
            })
    }
}
