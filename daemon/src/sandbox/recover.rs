//! The sandbox side of recovery at start (`crate::pod_lifecycle::recovery` runs it and states the
//! invariants): a pause checked against its shim, and what no record claims (pinned
//! namespaces, root filesystems, directories) removed.

use super::SandboxService;
use crate::error::{Error, Result};
use crate::store::sandbox::{Sandbox, SandboxState};
use containerd_shim_protos::types::task::Status;
use peapod_host::mount::mounts_under;
use std::collections::HashSet;
use std::path::Path;

impl SandboxService {
    /// A CNI ADD or the pause's runtime create a dead daemon started on `sb` may still run:
    /// they are killed (and waited for) before a rollback, so that they cannot finish after
    /// it (a veth and an address made after DEL).
    pub(crate) fn kill_leftover_helpers(&self, sb: &Sandbox) {
        let (id, handlers) = (sb.id.clone(), self.settings.handlers.clone());
        crate::blocking::off_runtime(|| {
            for runtime in handlers.runtimes() {
                crate::orphan_helpers::kill_and_wait(&id, &runtime.path);
            }
        });
    }

    /// Whether the pause runs (its shim answers and says so).
    pub(crate) async fn pause_running(&self, sb: &Sandbox) -> bool {
        let Some(shim) = self.live_shim(sb).await else {
            return false;
        };
        matches!(
            shim.state(&sb.id, "").await,
            Ok(s) if s.status == Status::RUNNING || s.status == Status::PAUSED
        )
    }

    /// Persists NOTREADY whatever the state was (no event: recovery, before anyone watches).
    pub(crate) fn mark_not_ready(&self, sb: &Sandbox) {
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
            .flat_map(|ns| [crate::host_ops::netns::userns_pin(&ns), ns])
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
                    let result = self.remove_orphan_dir(&path);
                    note(format!("directory {}", path.display()), result);
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

impl SandboxService {
    /// Removes a directory no record claims, detaching what is mounted in it first (a pod's
    /// /dev/shm, a root filesystem: the daemon's own mounts, or there would be a record), so
    /// that removing files never reaches into a mount.
    fn remove_orphan_dir(&self, path: &Path) -> Result<()> {
        for m in mounts_under(path) {
            self.host.unmount(&m)?;
        }
        if let Some(m) = mounts_under(path).first() {
            return Err(Error::failed_precondition(format!(
                "{} is still mounted",
                m.display()
            )));
        }
        peapod_host::fs::remove_dir_all_if_exists(path).map_err(|e| Error::path("remove", path, e))
    }
}
