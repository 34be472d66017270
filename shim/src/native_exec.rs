//! The runtime with exec done natively ([`crate::nsexec`]): every command goes to the OCI
//! runtime but `exec`, which the shim's own helper does when it can (a few milliseconds
//! instead of a `runc exec`; a terminal's pty made in the container by the helper's child,
//! its master sent to the console socket as runc sends it), and the runtime does otherwise:
//! an enforced AppArmor or SELinux label, a seccomp notify listener, an unreadable spec. The
//! choice is made before anything starts, from the same files the helper reads. The helper that does it is the container's
//! resident one ([`crate::residents`]), started at its first exec and kept.
//!
//! What decides it in the container's config.json is read at the container's first exec and
//! kept until it is deleted: an exec probe comes every few seconds, and the spec (with its
//! seccomp profile, the largest part) does not change while the container lives.

use crate::nsexec::spec::{self, Config, Lsm, Process};
use crate::reaper::Reaper;
use crate::residents::{ExecRequest, Residents};
use crate::runtime_cli::{CreateCommand, ExecCommand, RuntimeCli, RuntimeCliError, RuntimeStatus};
use async_trait::async_trait;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

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
    runc: Arc<dyn RuntimeCli>,
    residents: Residents,
    lsm: Lsm,
    spec_verdicts: SpecVerdicts,
}

impl NativeExec {
    /// `helper`: this program (`peapod-shim`), run as `peapod-shim nsexec --resident`.
    /// `runc`: the runtime underneath (runc, or the shim's own doing of runc's commands).
    pub fn new(runc: Arc<dyn RuntimeCli>, helper: PathBuf, reaper: Arc<Reaper>) -> NativeExec {
        NativeExec {
            runc,
            residents: Residents::new(helper, reaper),
            lsm: Lsm::of_host(),
            spec_verdicts: SpecVerdicts::new(),
        }
    }

    /// Why this exec (its Process as `process_json`) goes to the runtime, if it does.
    fn leave_to_runtime(
        &self,
        id: &str,
        c: &ExecCommand<'_>,
        process_json: &[u8],
    ) -> Option<String> {
        if c.init_pid == 0 {
            return Some("the container's init pid is unknown".into());
        }
        let process: Process = match serde_json::from_slice(process_json) {
            Ok(p) => p,
            Err(e) => return Some(format!("parse {}: {e}", c.process_json.display())),
        };
        if process.terminal != c.console_socket.is_some() {
            return Some("a terminal without a console socket, or the reverse".into());
        }
        if let Some(why) = spec::unsupported_exec_process(&process, &self.lsm) {
            return Some(why.to_string());
        }
        if let Some(why) = self.spec_verdicts.get(id, c.bundle) {
            return Some(why);
        }
        if process.capabilities.is_none() {
            return Some("a process without capabilities".into());
        }
        None
    }
}

/// Per container: why its spec leaves every exec to the runtime (None: it does not).
struct SpecVerdicts {
    by_container: Mutex<HashMap<String, Option<String>>>,
}

impl SpecVerdicts {
    fn new() -> SpecVerdicts {
        SpecVerdicts {
            by_container: Mutex::new(HashMap::new()),
        }
    }

    /// Why container `id`'s spec leaves its execs to the runtime, if it does: read from its
    /// bundle's config.json at the first exec, then kept (a spec that cannot be read is read
    /// again at the next exec).
    fn get(&self, id: &str, bundle: &Path) -> Option<String> {
        if let Some(verdict) = self.map().get(id) {
            return verdict.clone();
        }
        let config: Config = match spec::read(&bundle.join("config.json")) {
            Ok(c) => c,
            Err(e) => return Some(e),
        };
        let verdict = spec::unsupported_config(&config).map(str::to_string);
        self.map().insert(id.to_string(), verdict.clone());
        verdict
    }

    /// Forgets container `id` (deleted: one made again under its id has a new spec).
    fn forget(&self, id: &str) {
        self.map().remove(id);
    }

    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<String, Option<String>>> {
        self.by_container.lock().unwrap_or_else(|p| p.into_inner())
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
        self.spec_verdicts.forget(id);
        self.runc.delete(id, force).await
    }
    async fn exec(&self, id: &str, cmd: ExecCommand<'_>) -> Result<u32, RuntimeCliError> {
        let process_json = std::fs::read(cmd.process_json).unwrap_or_default();
        match self.leave_to_runtime(id, &cmd, &process_json) {
            None => {
                let req = ExecRequest {
                    bundle: cmd.bundle,
                    init_pid: cmd.init_pid,
                    process: &process_json,
                    console_socket: cmd.console_socket,
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

#[cfg(test)]
mod tests {
    use super::*;

    fn bundle_with(config: &str) -> tempfile::TempDir {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("config.json"), config).expect("write config.json");
        dir
    }

    #[test]
    fn a_spec_is_read_at_the_first_exec_and_kept_until_the_container_goes() {
        let verdicts = SpecVerdicts::new();
        let plain = bundle_with(r#"{"linux":{"seccomp":{"defaultAction":"SCMP_ACT_ERRNO"}}}"#);
        assert_eq!(verdicts.get("a", plain.path()), None);
        // Read once: a later change to the file (none happens while a container lives) is
        // not read again, so this proves the spec is not parsed at every exec.
        std::fs::write(
            plain.path().join("config.json"),
            r#"{"linux":{"personality":{}}}"#,
        )
        .expect("rewrite");
        assert_eq!(verdicts.get("a", plain.path()), None);
        // Deleted and made again under the same id: its new spec counts.
        verdicts.forget("a");
        assert!(verdicts
            .get("a", plain.path())
            .is_some_and(|why| why.contains("personality")));
    }

    #[test]
    fn an_unreadable_spec_is_not_kept() {
        let verdicts = SpecVerdicts::new();
        let dir = tempfile::tempdir().expect("tempdir");
        assert!(verdicts
            .get("b", dir.path())
            .is_some_and(|why| why.contains("config.json")));
        std::fs::write(dir.path().join("config.json"), "{}").expect("write");
        assert_eq!(verdicts.get("b", dir.path()), None);
    }
}
