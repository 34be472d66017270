//! The stdio of a container's main process, in one of the two ways its launcher wants it:
//! - peapod's daemon passes [`CreateOptions`](peapod_shim::protocol::CreateOptions): the shim
//!   keeps pipes (or the pty), writes the CRI log itself and serves attach;
//! - containerd passes no peapod options but FIFO paths in `CreateTaskRequest.stdin/stdout/
//!   stderr` and copies the streams itself: the process gets the FIFOs, exactly as an exec does
//!   (or, for a log URI, the file or the logging program's pipes: `log_uri`).

use super::console::ConsoleSocket;
use super::log_uri::{self, LogUri};
use super::{IoHandle, PreparedExec, PreparedInit};
use crate::backend::runtime_cli::ProcessIo;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub enum PreparedStdio {
    /// Pipes the shim owns, copied to the CRI log.
    Own(PreparedInit),
    /// The launcher's FIFOs, given to the process.
    Fifos(PreparedExec),
}

/// The FIFO paths of a create request (empty: that stream is discarded).
pub struct FifoPaths<'a> {
    pub stdin: &'a str,
    pub stdout: &'a str,
    pub stderr: &'a str,
}

impl PreparedStdio {
    /// The launcher's FIFOs, or a log URI in `stdout` (containerd sends it in both
    /// `stdout` and `stderr`): see [`super::log_uri`].
    pub fn fifos(
        id: &str,
        paths: FifoPaths<'_>,
        console: Option<&Path>,
    ) -> io::Result<PreparedStdio> {
        let Some(uri) = LogUri::parse(paths.stdout) else {
            return super::prepare_exec(paths.stdin, paths.stdout, paths.stderr, console)
                .map(PreparedStdio::Fifos);
        };
        let uri = uri?;
        if console.is_some() {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "a terminal's output cannot go to a log URI",
            ));
        }
        let mut prepared = super::prepare_exec(paths.stdin, "", "", None)?;
        let (stdout, stderr) = log_uri::open(&uri, id)?;
        (prepared.process_io.stdout, prepared.process_io.stderr) = (Some(stdout), Some(stderr));
        Ok(PreparedStdio::Fifos(prepared))
    }

    /// The stdio the runtime command gets (taken once).
    pub fn take_process_io(&mut self) -> ProcessIo {
        let io = match self {
            PreparedStdio::Own(p) => &mut p.process_io,
            PreparedStdio::Fifos(p) => &mut p.process_io,
        };
        std::mem::replace(io, ProcessIo::null())
    }

    pub fn console_path(&self) -> Option<PathBuf> {
        let console: Option<&ConsoleSocket> = match self {
            PreparedStdio::Own(p) => p.console.as_ref(),
            PreparedStdio::Fifos(p) => p.console.as_ref(),
        };
        console.map(|c| c.path().to_path_buf())
    }

    /// After a successful create: starts copying and returns the handle.
    pub async fn start(self) -> io::Result<Arc<IoHandle>> {
        match self {
            PreparedStdio::Own(p) => p.start().await,
            PreparedStdio::Fifos(p) => p.start().await,
        }
    }
}
