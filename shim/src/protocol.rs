//! What the daemon and the shim agree on beyond the fields of containerd's Task API.
//!
//! The daemon drives the shim with the shim v2 Task API (`containerd.task.v3.Task`) over ttrpc.
//! Where that API carries an opaque `google.protobuf.Any`, peapod puts JSON with the type URLs
//! below. Two things have no Task RPC at all and get their own small pieces:
//! - reopening a container's log file after rotation: the extra ttrpc method
//!   [`EXTENSION_SERVICE`]/[`METHOD_REOPEN_LOG`];
//! - attaching to a container's main process: a unix socket per container speaking the framing
//!   in [`attach`].

use serde::{Deserialize, Serialize};
use std::io;
use std::path::Path;

/// `CreateTaskRequest.options`: how the shim wires the container's stdio.
pub const CREATE_OPTIONS_TYPE_URL: &str = "types.peapod.dev/shim/CreateOptions";
/// `ExecProcessRequest.spec`: an OCI runtime-spec `Process` as JSON (containerd's URL).
pub const PROCESS_TYPE_URL: &str = "types.containerd.io/opencontainers/runtime-spec/1/Process";
/// `CreateTaskRequest.options` of a restore: [`CreateOptions`] with `restore` set. A URL of its
/// own, so that a shim older than the field (a pod started before an upgrade) refuses it as an
/// unknown options type rather than creating the container afresh.
pub const RESTORE_OPTIONS_TYPE_URL: &str = "types.peapod.dev/shim/CreateOptions+restore";
/// `CheckpointTaskRequest.options`: [`CheckpointOptions`] as JSON.
pub const CHECKPOINT_OPTIONS_TYPE_URL: &str = "types.peapod.dev/shim/CheckpointOptions";
/// `UpdateTaskRequest.resources`: an OCI runtime-spec `LinuxResources` as JSON.
pub const RESOURCES_TYPE_URL: &str =
    "types.containerd.io/opencontainers/runtime-spec/1/LinuxResources";

/// The ttrpc service peapod adds beside `containerd.task.v3.Task`.
pub const EXTENSION_SERVICE: &str = "peapod.shim.v1.Shim";
/// Reopen a container's log file (request: `StateRequest{id}`, response: `Empty`).
pub const METHOD_REOPEN_LOG: &str = "ReopenLog";

/// Options of `CreateTaskRequest` that the Task API has no field for.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct CreateOptions {
    /// The CRI log file the shim writes the container's stdout and stderr to; empty discards them.
    #[serde(default)]
    pub log_path: String,
    /// Keep a stdin pipe open to the container for attach.
    #[serde(default)]
    pub stdin: bool,
    /// Close stdin after the first attach session ends.
    #[serde(default)]
    pub stdin_once: bool,
    /// Where the exit record is written (and fsynced) before the exit is reported.
    pub exit_file: String,
    /// The unix socket on which the shim serves attach sessions; empty: none.
    #[serde(default)]
    pub attach_socket: String,
    /// Start the process right away (one `runc run --detach` instead of create + start):
    /// for the pause container, which never waits between the two. Start then only reports
    /// the pid.
    #[serde(default)]
    pub start: bool,
    /// With `start`: the shim may start the process itself instead of through the runtime,
    /// where the spec allows (the pause: `peapod-shim nsexec --pause`). A shim that does not
    /// know the field ignores it and uses the runtime.
    #[serde(default)]
    pub native: bool,
    /// A directory of CRIU images (a checkpoint's `checkpoint/`): the container is restored
    /// from them (`runc restore`) instead of created, and runs from here on, as with `start`.
    /// Empty: an ordinary create. Sent under [`RESTORE_OPTIONS_TYPE_URL`].
    #[serde(default)]
    pub restore: String,
}

/// Options of `CheckpointTaskRequest` (its `path` is where CRIU's images go).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct CheckpointOptions {
    /// Where CRIU writes its log and work files (kept apart from the images).
    pub work_path: String,
    /// The longest the dump may take, in milliseconds; 0: the shim's own limit.
    #[serde(default)]
    pub timeout_ms: u64,
}

/// A container's exit, recorded by the shim so that it survives the daemon (and the shim).
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
pub struct ExitRecord {
    pub pid: u32,
    /// The exit code, or 128 + signal number when a signal ended the process.
    pub exit_code: i32,
    pub exited_at_ns: i64,
    /// The memory cgroup killed it.
    #[serde(default)]
    pub oom_killed: bool,
}

impl ExitRecord {
    /// Reads a record; `Ok(None)` when there is none (the process has not exited).
    pub fn read(path: &Path) -> io::Result<Option<ExitRecord>> {
        match std::fs::read(path) {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .map(Some)
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Writes the record durably: a temporary file, fsync, rename, fsync of the directory.
    pub fn write(&self, path: &Path) -> io::Result<()> {
        let bytes = serde_json::to_vec(self).map_err(io::Error::other)?;
        write_file_atomic(path, &bytes)
    }
}

/// Kept for the daemon's record store, which imports it from here today; new code calls
/// `peapod_host::fs::write_file_atomic` directly.
pub use peapod_host::fs::write_file_atomic;

/// The attach socket's framing: 1 byte kind, 4 bytes big-endian length, then the payload.
pub mod attach {
    use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

    /// Payloads larger than this are refused: a peer cannot make the other allocate more.
    pub const MAX_PAYLOAD: usize = 64 * 1024;

    const STDIN: u8 = 0;
    const CLOSE_STDIN: u8 = 1;
    const RESIZE: u8 = 2;
    const STDOUT: u8 = 11;
    const STDERR: u8 = 12;

    /// What an attach client sends.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub enum ClientFrame {
        Stdin(Vec<u8>),
        CloseStdin,
        Resize { width: u16, height: u16 },
    }

    /// What the shim sends an attach client.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub enum ServerFrame {
        Stdout(Vec<u8>),
        Stderr(Vec<u8>),
    }

    async fn write_frame<W: AsyncWrite + Unpin>(
        w: &mut W,
        kind: u8,
        payload: &[u8],
    ) -> std::io::Result<()> {
        if payload.len() > MAX_PAYLOAD {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "attach frame too large",
            ));
        }
        let mut buf = Vec::with_capacity(5 + payload.len());
        buf.push(kind);
        buf.extend_from_slice(&(payload.len() as u32).to_be_bytes());
        buf.extend_from_slice(payload);
        w.write_all(&buf).await?;
        w.flush().await
    }

    /// Reads one frame; `Ok(None)` at a clean end of stream.
    async fn read_frame<R: AsyncRead + Unpin>(r: &mut R) -> std::io::Result<Option<(u8, Vec<u8>)>> {
        let mut header = [0u8; 5];
        match r.read_exact(&mut header).await {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
            Err(e) => return Err(e),
        }
        let len = u32::from_be_bytes([header[1], header[2], header[3], header[4]]) as usize;
        if len > MAX_PAYLOAD {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("attach frame of {len} bytes exceeds {MAX_PAYLOAD}"),
            ));
        }
        let mut payload = vec![0u8; len];
        r.read_exact(&mut payload).await?;
        Ok(Some((header[0], payload)))
    }

    fn invalid(kind: u8) -> std::io::Error {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("unknown attach frame kind {kind}"),
        )
    }

    impl ClientFrame {
        pub async fn write_to<W: AsyncWrite + Unpin>(&self, w: &mut W) -> std::io::Result<()> {
            match self {
                ClientFrame::Stdin(data) => {
                    for chunk in data.chunks(MAX_PAYLOAD) {
                        write_frame(w, STDIN, chunk).await?;
                    }
                    Ok(())
                }
                ClientFrame::CloseStdin => write_frame(w, CLOSE_STDIN, &[]).await,
                ClientFrame::Resize { width, height } => {
                    let mut p = width.to_be_bytes().to_vec();
                    p.extend_from_slice(&height.to_be_bytes());
                    write_frame(w, RESIZE, &p).await
                }
            }
        }

        pub async fn read_from<R: AsyncRead + Unpin>(r: &mut R) -> std::io::Result<Option<Self>> {
            let Some((kind, payload)) = read_frame(r).await? else {
                return Ok(None);
            };
            match kind {
                STDIN => Ok(Some(ClientFrame::Stdin(payload))),
                CLOSE_STDIN => Ok(Some(ClientFrame::CloseStdin)),
                RESIZE if payload.len() == 4 => Ok(Some(ClientFrame::Resize {
                    width: u16::from_be_bytes([payload[0], payload[1]]),
                    height: u16::from_be_bytes([payload[2], payload[3]]),
                })),
                other => Err(invalid(other)),
            }
        }
    }

    impl ServerFrame {
        pub async fn write_to<W: AsyncWrite + Unpin>(&self, w: &mut W) -> std::io::Result<()> {
            let (kind, data) = match self {
                ServerFrame::Stdout(d) => (STDOUT, d),
                ServerFrame::Stderr(d) => (STDERR, d),
            };
            for chunk in data.chunks(MAX_PAYLOAD) {
                write_frame(w, kind, chunk).await?;
            }
            Ok(())
        }

        pub async fn read_from<R: AsyncRead + Unpin>(r: &mut R) -> std::io::Result<Option<Self>> {
            let Some((kind, payload)) = read_frame(r).await? else {
                return Ok(None);
            };
            match kind {
                STDOUT => Ok(Some(ServerFrame::Stdout(payload))),
                STDERR => Ok(Some(ServerFrame::Stderr(payload))),
                other => Err(invalid(other)),
            }
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[tokio::test]
        async fn frames_round_trip() {
            let (mut a, mut b) = tokio::io::duplex(1 << 20);
            let sent = vec![
                ClientFrame::Stdin(b"hello".to_vec()),
                ClientFrame::Resize {
                    width: 80,
                    height: 24,
                },
                ClientFrame::CloseStdin,
            ];
            for f in &sent {
                f.write_to(&mut a).await.unwrap();
            }
            ServerFrame::Stderr(b"oops".to_vec())
                .write_to(&mut b)
                .await
                .unwrap();
            drop(a);
            for f in &sent {
                assert_eq!(
                    ClientFrame::read_from(&mut b).await.unwrap().as_ref(),
                    Some(f)
                );
            }
            assert_eq!(ClientFrame::read_from(&mut b).await.unwrap(), None);
        }

        #[tokio::test]
        async fn oversized_and_unknown_frames_are_refused() {
            let (mut a, mut b) = tokio::io::duplex(64);
            let mut header = vec![STDIN];
            header.extend_from_slice(&(u32::MAX).to_be_bytes());
            tokio::io::AsyncWriteExt::write_all(&mut a, &header)
                .await
                .unwrap();
            assert!(ClientFrame::read_from(&mut b).await.is_err());
            let (mut a, mut b) = tokio::io::duplex(64);
            tokio::io::AsyncWriteExt::write_all(&mut a, &[99, 0, 0, 0, 0])
                .await
                .unwrap();
            assert!(ServerFrame::read_from(&mut b).await.is_err());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_record_round_trips_and_missing_is_none() {
        let dir = std::env::temp_dir().join(format!("peapod-exit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("exit");
        assert_eq!(ExitRecord::read(&path).unwrap(), None);
        let rec = ExitRecord {
            pid: 42,
            exit_code: 137,
            exited_at_ns: 5,
            oom_killed: true,
        };
        rec.write(&path).unwrap();
        assert_eq!(ExitRecord::read(&path).unwrap(), Some(rec));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
