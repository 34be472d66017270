//! The runtime with exec done natively ([`crate::nsexec`]): every command goes to the OCI
//! runtime but `exec`, which the shim's own helper does when it can (a few milliseconds
//! instead of a `runc exec`), and the runtime does otherwise: a terminal, an enforced
//! AppArmor or SELinux label, a seccomp notify listener, a container with a seccomp profile
//! on a host without libseccomp, an unreadable spec. The choice is made before anything
//! starts, from the same files the helper reads. The helper that does it is the container's
//! resident one ([`crate::residents`]), started at its first exec and kept.

use crate::nsexec::spec::{self, Config, Lsm, Process};
use crate::reaper::Reaper;
use crate::residents::{ExecRequest, Residents};
use crate::runc::Runc;
use crate::runtime_cli::{CreateCommand, ExecCommand, RuntimeCli, RuntimeCliError, RuntimeStatus};
use async_trait::async_trait;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// How execs are started (the shim's `--exec`, the daemon's `runtime.exec`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExecMode {
    /// The helper where it can, the runtime elsewhere.
    Native,
    /// Always `runc exec`.
    Runtime,
}

impl ExecMode {
    pub fn parse(s: &str) -> Option<ExecMode> {
        match s {
            "native" => Some(ExecMode::Native),
            "runc" | "runtime" => Some(ExecMode::Runtime),
            _ => None,
        }
    }
}

pub struct NativeExec {
    runc: Arc<Runc>,
    residents: Residents,
    lsm: Lsm,
    libseccomp: bool,
}

impl NativeExec {
    /// `helper`: this program (`peapod-shim`), run as `peapod-shim nsexec --resident`.
    pub fn new(runc: Arc<Runc>, helper: PathBuf, reaper: Arc<Reaper>) -> NativeExec {
        NativeExec {
            runc,
            residents: Residents::new(helper, reaper),
            lsm: Lsm::of_host(),
            libseccomp: crate::nsexec::seccomp::available(),
        }
    }

    /// Why this exec (its Process as `process_json`) goes to the runtime, if it does.
    fn leave_to_runtime(&self, c: &ExecCommand<'_>, process_json: &[u8]) -> Option<String> {
        if c.init_pid == 0 {
            return Some("the container's init pid is unknown".into());
        }
        if c.console_socket.is_some() {
            return Some("a terminal".into());
        }
        let process: Process = match serde_json::from_slice(process_json) {
            Ok(p) => p,
            Err(e) => return Some(format!("parse {}: {e}", c.process_json.display())),
        };
        let config: Config = match spec::read(&c.bundle.join("config.json")) {
            Ok(c) => c,
            Err(e) => return Some(e),
        };
        if let Some(why) = spec::unsupported(&process, &config, &self.lsm) {
            return Some(why.to_string());
        }
        if config.linux.seccomp.is_some() && !self.libseccomp {
            return Some("a seccomp profile and no libseccomp.so.2 on this host".into());
        }
        if process.capabilities.is_none() {
            return Some("a process without capabilities".into());
        }
        None
    }
}

#[async_trait]
impl RuntimeCli for NativeExec {
    async fn create(&self, id: &str, cmd: CreateCommand<'_>) -> Result<u32, RuntimeCliError> {
        self.runc.create(id, cmd).await
    }
    async fn start(&self, id: &str) -> Result<(), RuntimeCliError> {
        self.runc.start(id).await
    }
    async fn state(&self, id: &str) -> Result<Option<RuntimeStatus>, RuntimeCliError> {
        self.runc.state(id).await
    }
    async fn kill(&self, id: &str, signal: u32, all: bool) -> Result<(), RuntimeCliError> {
        self.runc.kill(id, signal, all).await
    }
    async fn delete(&self, id: &str, force: bool) -> Result<(), RuntimeCliError> {
        // The helper first: a cgroup with a process in it cannot be removed.
        self.residents.remove(id).await;
        self.runc.delete(id, force).await
    }
    async fn exec(&self, id: &str, cmd: ExecCommand<'_>) -> Result<u32, RuntimeCliError> {
        let process_json = std::fs::read(cmd.process_json).unwrap_or_default();
        match self.leave_to_runtime(&cmd, &process_json) {
            None => {
                let req = ExecRequest {
                    bundle: cmd.bundle,
                    init_pid: cmd.init_pid,
                    process: &process_json,
                };
                self.residents.exec(id, req, cmd.io).await
            }
            Some(why) => {
                eprintln!("exec in {id} through the runtime: {why}");
                self.runc.exec(id, cmd).await
            }
        }
    }
    async fn update(&self, id: &str, resources_json: &Path) -> Result<(), RuntimeCliError> {
        self.runc.update(id, resources_json).await
    }
    async fn pause(&self, id: &str) -> Result<(), RuntimeCliError> {
        self.runc.pause(id).await
    }
    async fn resume(&self, id: &str) -> Result<(), RuntimeCliError> {
        self.runc.resume(id).await
    }
    async fn ps(&self, id: &str) -> Result<Vec<u32>, RuntimeCliError> {
        let mut pids = self.runc.ps(id).await?;
        // The resident helper is in the container's cgroups but none of its processes.
        if let Some(helper) = self.residents.pid(id) {
            pids.retain(|p| *p != helper);
        }
        Ok(pids)
    }
}
