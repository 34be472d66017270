//! Exec: the streaming server's URL for a command in a running container, and the session
//! it then runs: the command wired to the client's streams.
//!
//! Every task a session spawns lives in a `JoinSet` owned by the session's future, so when
//! the client goes away (the server drops the future) they are aborted, and the exec guard
//! kills an exec'd process that is still running.

use super::{streaming_err, ExecGuard, ExecService, Fifos, Prepared, OUTPUT_GRACE};
use crate::error::{Error, Result};
use crate::shim::ExecIo;
use peapod_proto::v1 as cri;
use peapod_streaming::StreamIo;
use std::sync::Arc;
use tokio::io::AsyncWriteExt;
use tokio::task::JoinSet;

impl ExecService {
    /// Exec: where the client runs `req.cmd` in the running container (a URL of the
    /// streaming server, valid once).
    pub fn exec_url(
        &self,
        streaming: Result<&peapod_streaming::Server>,
        req: cri::ExecRequest,
    ) -> Result<String> {
        let rec = self.running_container(&req.container_id)?;
        streaming?
            .exec_url(peapod_streaming::ExecRequest {
                container_id: rec.id.clone(),
                cmd: req.cmd,
                tty: req.tty,
                stdin: req.stdin,
                stdout: req.stdout,
                stderr: req.stderr,
            })
            .map_err(streaming_err)
    }

    /// Runs `cmd` in a container wired to the client's streams; returns the exit code.
    pub async fn exec_session(
        self: &Arc<Self>,
        id: &str,
        cmd: Vec<String>,
        io: StreamIo,
    ) -> Result<i32> {
        let Prepared {
            rec,
            process,
            shim,
            exec_id,
        } = self.prepare(id, &cmd, io.tty).await?;
        let StreamIo {
            stdin,
            stdout,
            stderr,
            tty,
            resize,
        } = io;
        let fifos = Fifos::create(
            &rec.bundle.join("exec"),
            &exec_id,
            stdin.is_some(),
            stdout.is_some(),
            stderr.is_some() && !tty,
        )?;
        // Opened before the process exists: stdin read-write so that it neither blocks nor
        // looks closed to the process, the outputs non-blocking for reading.
        let stdin_tx = match &fifos.stdin {
            Some(p) => Some(
                tokio::net::unix::pipe::OpenOptions::new()
                    .read_write(true)
                    .open_sender(p)
                    .map_err(|e| Error::path("open fifo", p, e))?,
            ),
            None => None,
        };
        let open_rx =
            |p: &Option<std::path::PathBuf>| -> Result<Option<tokio::net::unix::pipe::Receiver>> {
                match p {
                    Some(p) => tokio::net::unix::pipe::OpenOptions::new()
                        .open_receiver(p)
                        .map(Some)
                        .map_err(|e| Error::path("open fifo", p, e)),
                    None => Ok(None),
                }
            };
        let (out_rx, err_rx) = (open_rx(&fifos.stdout)?, open_rx(&fifos.stderr)?);
        let exec_io = ExecIo {
            terminal: tty,
            stdin: Fifos::path_str(&fifos.stdin),
            stdout: Fifos::path_str(&fifos.stdout),
            stderr: Fifos::path_str(&fifos.stderr),
        };
        shim.exec(&rec.id, &exec_id, process, &exec_io).await?;
        let guard = ExecGuard::new(shim.clone(), &rec.id, &exec_id);
        shim.start(&rec.id, &exec_id).await?;

        let mut outputs = JoinSet::new();
        for (rx, writer) in [(out_rx, stdout), (err_rx, stderr)] {
            if let (Some(mut rx), Some(mut w)) = (rx, writer) {
                outputs.spawn(async move {
                    let _ = tokio::io::copy(&mut rx, &mut w).await;
                    let _ = w.shutdown().await;
                });
            }
        }
        let mut inputs = JoinSet::new();
        if let (Some(mut from), Some(mut to)) = (stdin, stdin_tx) {
            inputs.spawn(async move {
                let _ = tokio::io::copy(&mut from, &mut to).await;
                // Dropping the last writer is the process's EOF.
                drop(to);
            });
        }
        if let Some(mut sizes) = resize {
            let (shim, cid, eid) = (shim.clone(), rec.id.clone(), exec_id.clone());
            inputs.spawn(async move {
                while let Some(size) = sizes.recv().await {
                    if let Err(e) = shim
                        .resize(&cid, &eid, size.width.into(), size.height.into())
                        .await
                    {
                        tracing::debug!(exec = %eid, error = %e, "resize");
                    }
                }
            });
        }
        let exit = shim.wait(&rec.id, &exec_id).await?;
        let _ = tokio::time::timeout(OUTPUT_GRACE, async {
            while outputs.join_next().await.is_some() {}
        })
        .await;
        guard.finish().await;
        drop(fifos);
        Ok(exit.code as i32)
    }
}
