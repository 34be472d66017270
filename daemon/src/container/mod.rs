//! Application containers: [`ContainerService`] owns the container records and serves the
//! container calls, one file per call (create, start, stop, remove, status, list,
//! update_resources, reopen_log, checkpoint; restore: the create and start of a checkpoint
//! archive's container); `exit` follows each running container to its end.
//!
//! The OCI spec itself comes from the pure `peapod-spec` crate; CreateContainer gathers its
//! inputs (sandbox, image, user, rootfs, host facts), hands the bundle to the pod's shim and
//! keeps the record.

#[cfg(test)]
mod cdi_tests;
mod checkpoint;
#[cfg(test)]
mod checkpoint_tests;
mod create;
mod exit;
#[cfg(test)]
mod exit_tests;
mod idmapped_mounts;
mod image_volumes;
#[cfg(test)]
mod lifecycle_tests;
mod list;
#[cfg(test)]
mod nri_tests;
mod nri_updates;
mod process;
mod recover;
mod remove;
mod reopen_log;
mod restore;
mod start;
mod status;
mod stop;
mod torn;
mod update_resources;

use crate::config::CgroupDriver;
use crate::error::Error;
use crate::events::Events;
use crate::host_ops::HostOps;
use crate::images::Images;
use crate::paths::Paths;
use crate::shim::Shims;
use crate::store::container::{ContainerRecord, ContainerRecords};
use crate::store::sandbox::SandboxRecords;
use std::sync::Arc;

pub use checkpoint::CheckpointContainer;
pub use create::CreateContainer;
pub use nri_updates::NriUpdates;
pub use recover::ContainerRecovery;
pub use restore::staging_root as restore_staging_root;
pub use status::verbose_info;

/// The container calls, over the container records and the services they use.
pub struct ContainerService {
    containers: Arc<ContainerRecords>,
    /// Read only: the pod a container is made in.
    sandboxes: Arc<SandboxRecords>,
    shims: Arc<dyn Shims>,
    images: Arc<dyn Images>,
    /// Root's host operations: a pod user namespace's ownership and idmapped binds.
    host: Arc<dyn HostOps>,
    events: Arc<Events>,
    paths: Paths,
    cgroup_driver: CgroupDriver,
    /// The OCI runtime knows recursive read-only mounts.
    runtime_rro: bool,
    /// Whether AppArmor profiles apply (decided at start: `crate::apparmor`).
    apparmor: bool,
    /// NRI plugins, told of each container event.
    nri: Arc<dyn crate::nri::Nri>,
    /// Each container's process spec, for exec.
    processes: process::Processes,
    /// The runtime handlers (recovery looks for their commands a dead daemon left running;
    /// recursive read-only mounts only with the default runtime, which was probed).
    handlers: Arc<crate::runtime_handlers::RuntimeHandlers>,
    /// Where the CDI spec files are, read for a create that asks for CDI devices.
    cdi: crate::cdi::CdiDirs,
    /// Whether CRIU works here, for checkpoints and restores.
    criu: Arc<dyn crate::checkpoint::CriuCheck>,
}

/// What a [`ContainerService`] is made of.
pub struct ContainerDeps {
    pub containers: Arc<ContainerRecords>,
    pub sandboxes: Arc<SandboxRecords>,
    pub shims: Arc<dyn Shims>,
    pub images: Arc<dyn Images>,
    pub host: Arc<dyn HostOps>,
    pub events: Arc<Events>,
    pub paths: Paths,
    pub cgroup_driver: CgroupDriver,
    pub runtime_rro: bool,
    pub apparmor: bool,
    pub nri: Arc<dyn crate::nri::Nri>,
    pub handlers: Arc<crate::runtime_handlers::RuntimeHandlers>,
    pub cdi: crate::cdi::CdiDirs,
    pub criu: Arc<dyn crate::checkpoint::CriuCheck>,
}

impl ContainerService {
    pub fn new(d: ContainerDeps) -> ContainerService {
        ContainerService {
            containers: d.containers,
            sandboxes: d.sandboxes,
            shims: d.shims,
            images: d.images,
            host: d.host,
            events: d.events,
            paths: d.paths,
            cgroup_driver: d.cgroup_driver,
            runtime_rro: d.runtime_rro,
            apparmor: d.apparmor,
            nri: d.nri,
            processes: Default::default(),
            handlers: d.handlers,
            cdi: d.cdi,
            criu: d.criu,
        }
    }

    /// The container records, for the calls that only read them (exec, stats).
    pub fn records(&self) -> &ContainerRecords {
        &self.containers
    }
}

/// What the spec generation needs to know about this host (detected once), with recursive
/// read-only mounts only when the OCI runtime knows them too, and AppArmor only where the
/// daemon made its default profile ready (`apparmor`, from `crate::apparmor::prepare`).
pub fn host_facts(runtime_rro: bool, apparmor: bool) -> peapod_spec::HostFacts {
    static FACTS: std::sync::OnceLock<peapod_spec::HostFacts> = std::sync::OnceLock::new();
    let mut facts = FACTS
        .get_or_init(|| peapod_spec::HostFacts::detect(true))
        .clone();
    facts.rro_supported &= runtime_rro;
    facts.apparmor_enabled = apparmor;
    facts.oom_score_adj_floor = crate::oom_score::floor();
    facts
}

impl ContainerService {
    /// Whether recursive read-only mounts work here (RuntimeStatus advertises it).
    pub fn rro_supported(&self) -> bool {
        host_facts(self.runtime_rro, self.apparmor).rro_supported
    }

    /// Whether a pod of `runtime_handler` runs the runtime the start-up probes were made
    /// with (what was found, e.g. recursive read-only mounts, holds only for it).
    pub(crate) fn runs_default_runtime(&self, runtime_handler: &str) -> bool {
        self.handlers
            .resolve(runtime_handler)
            .is_ok_and(|h| self.handlers.runs_default_runtime(h))
    }
}

/// `<container>_<pod>_<namespace>_<pod uid>_<attempt>`, as the kubelet builds container names.
pub fn name_of(
    config: &peapod_proto::v1::ContainerConfig,
    sandbox: &peapod_proto::v1::PodSandboxConfig,
) -> String {
    let c = config.metadata.clone().unwrap_or_default();
    let p = sandbox.metadata.clone().unwrap_or_default();
    format!(
        "{}_{}_{}_{}_{}",
        c.name, p.name, p.namespace, p.uid, c.attempt
    )
}

/// The reason CRI reports for an exit.
pub fn exit_reason(code: i32, oom_killed: bool) -> &'static str {
    if oom_killed {
        "OOMKilled"
    } else if code == 0 {
        "Completed"
    } else {
        "Error"
    }
}

fn not_running(rec: &ContainerRecord, what: &str) -> Error {
    Error::failed_precondition(format!(
        "container {} is {:?}, not running: cannot {what}",
        rec.id, rec.state
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons() {
        assert_eq!(exit_reason(0, false), "Completed");
        assert_eq!(exit_reason(3, false), "Error");
        assert_eq!(exit_reason(137, true), "OOMKilled");
    }
}
