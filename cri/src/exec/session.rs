//! Interactive sessions behind the streaming server: exec with streams, attach, port-forward.
//!
//! Every task a session spawns lives in a `JoinSet` owned by the session's future, so when
//! the client goes away (the server drops the future) they are aborted, and the exec guard
//! kills an exec'd process that is still running.

use super::{new_exec_id, ExecGuard, Fifos, OUTPUT_GRACE};
use crate::error::{Error, Result};
use crate::network::netns;
use crate::runtime::Runtime;
use crate::shim::ExecIo;
use crate::store::sandbox::SandboxState;
use peapod_shim::protocol::attach::{ClientFrame, ServerFrame};
use peapod_streaming::{AsyncReadWrite, StreamIo};
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::task::JoinSet;

impl Runtime {
    /// Runs `cmd` in a container wired to the client's streams; returns the exit code.
    pub async fn exec_session(
        self: &Arc<Self>,
        id: &str,
        cmd: Vec<String>,
        io: StreamIo,
    ) -> Result<i32> {
        if cmd.is_empty() {
            return Err(Error::invalid("cmd is required"));
        }
        let rec = self.running_container(id)?;
        let process = self.containers.exec_process_json(&rec, &cmd, io.tty)?;
        let shim = self.shims.get(&rec.sandbox_id).await?;
        let exec_id = new_exec_id();
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
