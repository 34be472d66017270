//! The runtime with exec done natively ([`crate::nsexec`]): every command goes to the OCI
//! runtime but `exec`, which the shim's own helper does when it can (a few milliseconds
//! instead of a `runc exec`), and the runtime does otherwise: a terminal, an enforced
//! AppArmor or SELinux label, a seccomp notify listener, a container with a seccomp profile
//! on a host without libseccomp, an unreadable spec. The choice is made before anything
//! starts, from the same files the helper reads.

use crate::nsexec::spec::{self, Config, Lsm, Process};
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
    /// This program (`peapod-shim`), run as `peapod-shim nsexec`.
    helper: PathBuf,
    lsm: Lsm,
    libseccomp: bool,
}

impl NativeExec {
    pub fn new(runc: Arc<Runc>, helper: PathBuf) -> NativeExec {
        NativeExec {
            runc,
            helper,
            lsm: Lsm::of_host(),
            libseccomp: crate::nsexec::seccomp::available(),
        }
    }

    /// Why this exec goes to the runtime, if it does.
    fn leave_to_runtime(&self, c: &ExecCommand<'_>) -> Option<String> {
        if c.init_pid == 0 {
            return Some("the container's init pid is unknown".into());
        }
        if c.console_socket.is_some() {
            return Some("a terminal".into());
        }
        let process: Process = match spec::read(c.process_json) {
            Ok(p) => p,
            Err(e) => return Some(e),
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
        self.runc.delete(id, force).await
    }
    async fn exec(&self, id: &str, cmd: ExecCommand<'_>) -> Result<u32, RuntimeCliError> {
        match self.leave_to_runtime(&cmd) {
            None => self.runc.exec_native(&self.helper, cmd).await,
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
        self.runc.ps(id).await
    }
}
