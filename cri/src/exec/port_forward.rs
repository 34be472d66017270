//! A port-forward session of the streaming server: a stream to a TCP port on localhost in
//! the pod's network namespace.

use super::ExecService;
use crate::error::{Error, Result};
use crate::network::netns;
use crate::store::sandbox::SandboxState;
use peapod_streaming::AsyncReadWrite;
use std::sync::Arc;

impl ExecService {
    /// Connects `stream` to TCP `port` on localhost inside the pod's network namespace.
    pub async fn port_forward_session(
        self: &Arc<Self>,
        sandbox_id: &str,
        port: u16,
        mut stream: Box<dyn AsyncReadWrite>,
    ) -> Result<()> {
        let rec = self.sandboxes.records().read().resolve(sandbox_id)?.get();
        if rec.state != SandboxState::Ready {
            return Err(Error::failed_precondition(format!(
                "pod sandbox {} is not ready",
                rec.id
            )));
        }
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
        let mut tcp = tokio::net::TcpStream::from_std(std_stream)
            .map_err(|e| Error::io("port-forward socket", e))?;
        tokio::io::copy_bidirectional(&mut stream, &mut tcp)
            .await
            .map_err(|e| Error::io(format!("forwarding port {port}"), e))?;
        Ok(())
    }
}
