//! Attach: the streaming server's URL for a running container's main process, and the
//! session it then runs: the client's streams on that process, through the shim's attach
//! socket.

use super::{streaming_err, ExecService};
use crate::error::{Error, Result};
use peapod_proto::v1 as cri;
use peapod_shim::protocol::attach::{ClientFrame, ServerFrame};
use peapod_streaming::StreamIo;
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::task::JoinSet;

impl ExecService {
    /// Attach: where the client attaches to the container's main process. The streams asked
    /// for must be the container's (stdin only if it was created with one, its tty setting).
    pub fn attach_url(
        &self,
        streaming: Result<&peapod_streaming::Server>,
        req: cri::AttachRequest,
    ) -> Result<String> {
        let rec = self.running_container(&req.container_id)?;
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
        streaming?
            .attach_url(peapod_streaming::AttachRequest {
                container_id: rec.id.clone(),
                tty: req.tty,
                stdin: req.stdin,
                stdout: req.stdout,
                stderr: req.stderr,
            })
            .map_err(streaming_err)
    }

    /// Attaches the client's streams to a container's main process until it exits.
    pub async fn attach_session(self: &Arc<Self>, id: &str, io: StreamIo) -> Result<()> {
        let rec = self.running_container(id)?;
        let socket = self.shims.attach_socket_path(&rec.id);
        let conn = tokio::net::UnixStream::connect(&socket)
            .await
            .map_err(|e| Error::path("connect to the attach socket", &socket, e))?;
        let (mut rd, mut wr) = conn.into_split();
        let StreamIo {
            stdin,
            mut stdout,
            mut stderr,
            tty,
            resize,
        } = io;
        let stdin_once = rec.config.stdin_once;
        let (frames_tx, mut frames_rx) = tokio::sync::mpsc::channel::<ClientFrame>(16);
        let mut tasks = JoinSet::new();
        tasks.spawn(async move {
            while let Some(frame) = frames_rx.recv().await {
                if frame.write_to(&mut wr).await.is_err() {
                    break;
                }
            }
        });
        if let Some(mut from) = stdin {
            let tx = frames_tx.clone();
            tasks.spawn(async move {
                let mut buf = vec![0u8; 32 * 1024];
                loop {
                    match from.read(&mut buf).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => {
                            if tx
                                .send(ClientFrame::Stdin(buf[..n].to_vec()))
                                .await
                                .is_err()
                            {
                                return;
                            }
                        }
                    }
                }
                if stdin_once {
                    let _ = tx.send(ClientFrame::CloseStdin).await;
                }
            });
        }
        if let Some(mut sizes) = resize {
            let tx = frames_tx.clone();
            tasks.spawn(async move {
                while let Some(s) = sizes.recv().await {
                    let frame = ClientFrame::Resize {
                        width: s.width,
                        height: s.height,
                    };
                    if tx.send(frame).await.is_err() {
                        return;
                    }
                }
            });
        }
        drop(frames_tx);
        // Output until the shim closes the connection (the container exited).
        loop {
            match ServerFrame::read_from(&mut rd).await {
                Ok(Some(ServerFrame::Stdout(data))) => {
                    if let Some(w) = stdout.as_mut() {
                        let _ = w.write_all(&data).await;
                    }
                }
                Ok(Some(ServerFrame::Stderr(data))) => {
                    let target = if tty {
                        stdout.as_mut()
                    } else {
                        stderr.as_mut()
                    };
                    if let Some(w) = target {
                        let _ = w.write_all(&data).await;
                    }
                }
                Ok(None) | Err(_) => break,
            }
        }
        for w in [stdout.as_mut(), stderr.as_mut()].into_iter().flatten() {
            let _ = w.shutdown().await;
        }
        tasks.abort_all();
        Ok(())
    }
}
