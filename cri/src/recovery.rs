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
//!    whose shim answers becomes NOTREADY.
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
//! [`until_task_lands`]) for the task to land before deleting it, and reaps through the OCI
//! runtime what might have landed there regardless.
//! 6. Then the watchers start: pause exits, container exits, exec's process specs.

use crate::container::ContainerRecovery;
use crate::daemon::Daemon;
use crate::error::Optional;
use crate::sandbox::SandboxRecovery;
use crate::shim::Shim;
use std::time::{Duration, Instant};

/// How long a rollback waits for a create that was sent before the crash to land in the shim.
const CREATE_LANDING: Duration = Duration::from_secs(3);

/// Waits until the shim knows task `id` (a create sent before the daemon died finished), at
/// most [`CREATE_LANDING`]; false if it never did (the create never reached the shim, or it
/// failed there).
pub(crate) async fn until_task_lands(shim: &dyn Shim, id: &str) -> bool {
    let landed = async {
        loop {
            if let Ok(Some(_)) = shim.state(id, "").await.optional() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    tokio::time::timeout(CREATE_LANDING, landed).await.is_ok()
}

/// What recovery found and did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Recovery {
    pub containers: ContainerRecovery,
    pub sandboxes: SandboxRecovery,
    pub elapsed_ms: u64,
}

/// Reconciles the records with the host; the daemon serves nothing until it returns.
pub async fn recover(daemon: &Daemon) -> Recovery {
    let started = Instant::now();
    let mut sandboxes = daemon.sandboxes.recover().await;
    let containers = daemon.containers.recover().await;
    sandboxes.orphans = daemon
        .sandboxes
        .sweep_orphans(&daemon.containers.known_ids())
        .await;
    daemon.resume();
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
