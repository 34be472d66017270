//! PortForward: the streaming server's URL for a ready pod's ports, and the session it then
//! runs: a stream to a TCP port on localhost in the pod's network namespace.

use super::{streaming_err, ExecService};
use crate::error::{Error, Result};
use crate::host_ops::netns;
use crate::store::sandbox::{SandboxRecord, SandboxState};
use peapod_proto::v1 as cri;
use peapod_streaming::AsyncReadWrite;
use std::sync::Arc;

impl ExecService {
    /// PortForward: where the client forwards `req.port` of the pod.
    pub fn port_forward_url(
        &self,
        streaming: Result<&peapod_streaming::Server>,
        req: cri::PortForwardRequest,
    ) -> Result<String> {
        let rec = self.ready_sandbox(&req.pod_sandbox_id)?;
        streaming?
            .port_forward_url(peapod_streaming::PortForwardRequest {
                sandbox_id: rec.id,
                ports: req.port,
            })
            .map_err(streaming_err)
    }

    fn ready_sandbox(&self, id: &str) -> Result<SandboxRecord> {
        let rec = self.sandboxes.records().read().resolve(id)?.get();
        if rec.state != SandboxState::Ready {
            return Err(Error::failed_precondition(format!(
                "pod sandbox {} is not ready",
                rec.id
            )));
        }
        Ok(rec)
    }

    /// Connects `stream` to TCP `port` on localhost inside the pod's network namespace.
    pub async fn port_forward_session(
        self: &Arc<Self>,
        sandbox_id: &str,
        port: u16,
        stream: Box<dyn AsyncReadWrite>,
    ) -> Result<()> {
        let rec = self.ready_sandbox(sandbox_id)?;
        let connect = move || std::net::TcpStream::connect(("127.0.0.1", port));
        let std_stream = match rec.netns.clone() {
            Some(ns) => tokio::task::spawn_blocking(move || netns::run_in(&ns, connect))
                .await
                .map_err(|e| Error::internal(format!("port-forward connect: {e}")))??,
            None => connect().map_err(|e| Error::io(format!("connect to localhost:{port}"), e))?,
        };
        std_stream
            .set_nonblocking(true)
            .map_err(|e| Error::io("port-forward socket", e))?;
        let tcp = tokio::net::TcpStream::from_std(std_stream)
            .map_err(|e| Error::io("port-forward socket", e))?;
        super::relay::relay(stream, tcp)
            .await
            .map_err(|e| Error::io(format!("forwarding port {port}"), e))
    }
}
