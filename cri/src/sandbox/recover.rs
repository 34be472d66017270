//! The sandbox side of recovery at start (see `crate::recovery` for the invariants):
//! half-made sandboxes are rolled back, ready ones checked against their shim and pause, and
//! what no record claims (pinned namespaces, root filesystems, directories) is removed.

use super::SandboxService;
use crate::error::{Error, Result};
use crate::store::sandbox::{Sandbox, SandboxState};
use containerd_shim_protos::types::task::Status;
use std::collections::HashSet;
use std::path::Path;
use std::sync::Arc;

/// What [`SandboxService::recover`] did, for the start-up log and tests.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct SandboxRecovery {
    pub rolled_back: usize,
    /// Ready sandboxes whose shim or pause is gone: now not ready.
    pub lost: usize,
    pub ready: usize,
    /// Things no record claims that were removed.
    pub orphans: Vec<String>,
}

impl SandboxService {
    /// Reconciles every sandbox record with its shim; call before serving, before the
    /// containers' `recover` (a half-made sandbox takes its containers with it).
    pub async fn recover(self: &Arc<Self>) -> SandboxRecovery {
        let mut report = SandboxRecovery::default();
        for sb in self.sandboxes.all() {
            match sb.get().state {
                SandboxState::Creating => match self.roll_back(&sb).await {
                    Ok(()) => report.rolled_back += 1,
                    Err(e) => {
                        tracing::error!(sandbox = %sb.id, error = %e, "rolling back a half-made sandbox; it stays NOTREADY for RemovePodSandbox");
                        self.mark_not_ready(&sb);
                    }
                },
                state => match self.live_shim(&sb).await {
                    None => {
                        // A reboot, or the shim died while the daemon was down: what it held
                        // is killed through the OCI runtime, its containers reported exited.
                        let _op = sb.op.lock().await;
                        let why = "the pod's shim was gone when the daemon started";
                        self.settle_dead_shim(&sb, why).await;
                        report.lost += usize::from(state == SandboxState::Ready);
                    }
                    Some(_) if state == SandboxState::NotReady => {}
                    Some(_) if self.pause_running(&sb).await => report.ready += 1,
                    Some(_) => {
                        tracing::info!(sandbox = %sb.id, "its pause is gone: not ready");
                        self.mark_not_ready(&sb);
                        report.lost += 1;
                    }
                },
            }
        }
        report
    }

    /// Removes a sandbox a crash left half-made (record in `Creating`), and its record. The
    /// same steps as a failed RunPodSandbox's cleanup: each tolerates its piece being absent,
    /// and CNI DEL runs if the record says ADD started.
    async fn roll_back(&self, sb: &Arc<Sandbox>) -> Result<()> {
        if sb.get().pause_create_sent {
            if let Some(shim) = self.live_shim(sb).await {
                crate::recovery::until_task_lands(shim.as_ref(), &sb.id).await;
            }
        }
        self.destroy_sandbox(sb).await?;
        self.sandboxes.write().remove(&sb.id);
        tracing::info!(sandbox = %sb.id, "rolled back a sandbox a crash left half-made");
        Ok(())
    }

    async fn pause_running(&self, sb: &Sandbox) -> bool {
        let Some(shim) = self.live_shim(sb).await else {
            return false;
        };
        matches!(
            shim.state(&sb.id, "").await,
            Ok(s) if s.status == Status::RUNNING || s.status == Status::PAUSED
        )
    }

    fn mark_not_ready(&self, sb: &Sandbox) {
        if let Err(e) = sb.update(|r| r.state = SandboxState::NotReady) {
            tracing::error!(sandbox = %sb.id, error = %e, "persisting not ready");
        }
    }

    /// Removes what no record claims: pinned namespaces, image-store root filesystems
    /// (containers', image volumes' `<id>-iv<n>` and pauses') and per-object directories.
    /// `containers` are the ids of the container records.
    pub async fn sweep_orphans(&self, containers: &HashSet<String>) -> Vec<String> {
        let sandboxes: HashSet<String> = self.sandboxes.read().by_id.keys().cloned().collect();
        let netns_in_use: HashSet<std::path::PathBuf> = self
            .sandboxes
            .all()
            .iter()
            .filter_map(|s| s.get().netns)
            // A pod with its own user namespace has it pinned beside its network namespace.
            .flat_map(|ns| [crate::network::netns::userns_pin(&ns), ns])
            .collect();
        let known = |id: &str| {
            let owner = id.split("-iv").next().unwrap_or(id);
            sandboxes.contains(owner) || containers.contains(owner)
        };
        let mut removed = Vec::new();
        let mut note = |what: String, result: Result<()>| match result {
            Ok(()) => {
                tracing::info!(orphan = %what, "removed what no record claims");
                removed.push(what);
            }
            Err(e) => tracing::warn!(orphan = %what, error = %e, "removing an orphan"),
        };
        for path in entries(&self.paths.netns_dir()) {
            if !netns_in_use.contains(&path) {
                note(
                    format!("netns {}", path.display()),
                    self.host.unpin_netns(&path),
                );
            }
        }
        for id in self.images.rootfs_ids() {
            if !known(&id) {
                let target = self.paths.container_state_dir(&id).join("rootfs");
                let result = self.images.remove_rootfs(&id, &target).await;
                note(format!("rootfs {id}"), result);
            }
        }
        let dirs = [
            (self.paths.root.join("sandboxes"), &sandboxes),
            (self.paths.state.join("sandboxes"), &sandboxes),
            (self.paths.root.join("containers"), containers),
            (self.paths.state.join("containers"), containers),
        ];
        for (base, ids) in dirs {
            for path in entries(&base) {
                let id = path.file_name().map(|n| n.to_string_lossy().into_owned());
                if id.is_some_and(|id| !ids.contains(&id)) {
                    note(
                        format!("directory {}", path.display()),
                        remove_orphan_dir(&path),
                    );
                }
            }
        }
        removed
    }
}

/// The entries of a directory (none if it is missing).
fn entries(dir: &Path) -> Vec<std::path::PathBuf> {
    std::fs::read_dir(dir)
        .map(|rd| rd.flatten().map(|e| e.path()).collect())
        .unwrap_or_default()
}

/// Removes a directory no record claims, unless something is still mounted in it (then it
/// is left, and said: removing files under a live mount would reach into what is mounted).
fn remove_orphan_dir(path: &Path) -> Result<()> {
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let prefix = format!("{}/", path.display());
    let busy = mounts
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .any(|m| m == path.to_string_lossy() || m.starts_with(&prefix));
    if busy {
        return Err(Error::failed_precondition(format!(
            "{} has mounts in it",
            path.display()
        )));
    }
    peapod_host::fs::remove_dir_all_if_exists(path).map_err(|e| Error::path("remove", path, e))
}
