//! Recovery at start: the records are made true again before the daemon serves a call.
//!
//! The daemon may end at any instruction (kill -9, a crash, a reboot). Every lifecycle step
//! writes what it is about to make into its object's record before making it (intent before
//! side effect: the netns path before the pin, the CNI plan before ADD, the shim socket and
//! the rootfs target in the record before the shim or the mount, a container's record in
//! `Creating` before its rootfs and its runtime create), so a record always names a superset
//! of what exists. From that, at start:
//!
//! 1. A sandbox record in `Creating` is a half-made sandbox: the cleanup of a failed
//!    RunPodSandbox runs (its containers, kill pause, CNI DEL if ADD was started, unpin,
//!    unmount, shim shutdown, the pause through the OCI runtime in case its create was under
//!    way, directories, record). If that fails the sandbox is kept NOTREADY, so that
//!    RemovePodSandbox finishes it.
//! 2. A sandbox whose shim is gone (a reboot: the state directory is empty, no shims, no
//!    processes; or the shim died while the daemon was down) is settled as a dead shim: what
//!    the OCI runtime still has of it is killed and deleted, its containers become EXITED
//!    (the shim's durable exit record if it wrote one, else 137 `ShimDied`), the pod
//!    NOTREADY. RemovePodSandbox then releases what is left, CNI DEL included (DEL
//!    tolerates a namespace that no longer exists). A READY sandbox whose pause is gone but
//!    whose shim answers becomes NOTREADY. (A StopPodSandbox records NOTREADY before it
//!    kills anything or runs CNI DEL, so a stop cut short leaves it NOTREADY too.)
//! 3. A container record in `Creating` is a half-made container: its runtime task (if any),
//!    image volumes, rootfs, directories and record are removed; its name is free again.
//! 4. A created container the runtime shows started (StartContainer was cut short) is
//!    RUNNING (or EXITED with the runtime's exit, if it ended since). A running one with a
//!    live shim keeps running, with its recorded started_at; its exit, if it happened while
//!    the daemon was down, comes from the shim (code and time).
//! 5. Orphans no record claims are removed: pinned namespaces under the state directory,
//!    image-store root filesystems, and per-object directories under root and state.
//!
//! A create the daemon sent to a shim just before it died still runs in the shim, which
//! registers the container when the runtime is done; records say when a create was sent
//! (`runtime_create_sent`, `pause_create_sent`), and the rollback then waits (bounded, see
//! [`crate::shim::until_task_lands`]) for the task to land before deleting it, and reaps through the OCI
//! runtime what might have landed there regardless.
//! 0. First, a record file that cannot be read (torn, garbage) is set aside as `.torn` with a
//!    log line, and a placeholder takes its place from what the host still has under its id
//!    (`sandbox/torn.rs`, `container/torn.rs`): it then goes through the steps below like any
//!    other, NOTREADY or EXITED in the end and removable.
//! 6. Then the watchers start: pause exits, container exits, exec's process specs.

use super::PodLifecycle;
use crate::container::ContainerRecovery;
use crate::error::Result;
use crate::store::sandbox::{Sandbox, SandboxState};
use std::sync::Arc;
use std::time::Instant;

/// What recovery found and did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Recovery {
    pub containers: ContainerRecovery,
    pub sandboxes: SandboxRecovery,
    pub elapsed_ms: u64,
}

/// What recovery did with the sandboxes, for the start-up log and tests.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct SandboxRecovery {
    pub rolled_back: usize,
    /// Ready sandboxes whose shim or pause is gone: now not ready.
    pub lost: usize,
    pub ready: usize,
    /// Things no record claims that were removed.
    pub orphans: Vec<String>,
    /// Records that could not be read, replaced by placeholders (see `sandbox/torn.rs`).
    pub torn: usize,
}

impl PodLifecycle {
    /// Reconciles the records with the host; the daemon serves nothing until it returns.
    pub async fn recover(self: &Arc<Self>) -> Recovery {
        let started = Instant::now();
        let mut sandboxes = self.recover_sandboxes().await;
        let containers = self.containers.recover().await;
        sandboxes.orphans = self
            .sandboxes
            .sweep_orphans(&self.containers.known_ids())
            .await;
        self.resume_watches();
        self.containers.resume();
        let report = Recovery {
            containers,
            sandboxes,
            elapsed_ms: started.elapsed().as_millis() as u64,
        };
        tracing::info!(
            elapsed_ms = report.elapsed_ms,
            pods_ready = report.sandboxes.ready,
            pods_lost = report.sandboxes.lost,
            pods_rolled_back = report.sandboxes.rolled_back,
            containers_lost = report.containers.lost,
            containers_found_running = report.containers.found_running,
            containers_rolled_back = report.containers.rolled_back,
            orphans = report.sandboxes.orphans.len(),
            "recovery at start done"
        );
        report
    }

    /// Reconciles every sandbox record with its shim; before the containers' `recover` (a
    /// half-made sandbox takes its containers with it).
    async fn recover_sandboxes(&self) -> SandboxRecovery {
        let mut report = SandboxRecovery {
            torn: self.sandboxes.replace_torn_records(),
            ..Default::default()
        };
        for sb in self.sandboxes.records().all() {
            match sb.snapshot().state {
                SandboxState::Creating => match self.roll_back(&sb).await {
                    Ok(()) => report.rolled_back += 1,
                    Err(e) => {
                        tracing::error!(sandbox = %sb.id, error = %e, "rolling back a half-made sandbox; it stays NOTREADY for RemovePodSandbox");
                        self.sandboxes.mark_not_ready(&sb);
                    }
                },
                state => match self.sandboxes.live_shim(&sb).await {
                    None => {
                        // A reboot, or the shim died while the daemon was down: what it held
                        // is killed through the OCI runtime, its containers reported exited.
                        let _op = sb.op.lock().await;
                        let why = "the pod's shim was gone when the daemon started";
                        self.settle_dead_shim(&sb, why).await;
                        report.lost += usize::from(state == SandboxState::Ready);
                    }
                    Some(_) if state == SandboxState::NotReady => {}
                    Some(_) if self.sandboxes.pause_running(&sb).await => report.ready += 1,
                    Some(_) => {
                        tracing::info!(sandbox = %sb.id, "its pause is gone: not ready");
                        self.sandboxes.mark_not_ready(&sb);
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
        self.sandboxes.kill_leftover_helpers(sb);
        if sb.snapshot().pause_create_sent {
            if let Some(shim) = self.sandboxes.live_shim(sb).await {
                crate::shim::until_task_lands(shim.as_ref(), &sb.id).await;
            }
        }
        self.destroy(sb).await?;
        self.sandboxes.records().write().remove(&sb.id);
        tracing::info!(sandbox = %sb.id, "rolled back a sandbox a crash left half-made");
        Ok(())
    }
}
