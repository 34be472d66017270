//! Application containers: CreateContainer and the lifecycle after it.
//!
//! The OCI spec itself comes from the pure `peapod-spec` crate; this module gathers its inputs
//! (sandbox, image, user, rootfs, host facts), hands the bundle to the pod's shim, keeps the
//! record, and follows the container's exit.

mod create;
mod lifecycle;
#[cfg(test)]
mod lifecycle_tests;
pub mod query;
mod rootfs_files;
mod watch;

use crate::error::Error;
use crate::store::container::ContainerRecord;

pub use create::CreateContainer;

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
