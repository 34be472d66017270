//! The calls peapod does not implement yet: CheckpointPod and RestorePod (a whole pod's
//! checkpoint; a container's is `container.rs`'s CheckpointContainer). They answer
//! Unimplemented, naming the call and what is missing, without looking at the request:
//! nothing is checked, made or changed.

use crate::daemon::Daemon;
use crate::error::{Error, Result};
use peapod_proto::v1 as cri;

fn unimplemented<T>(what: &str) -> Result<T> {
    Err(Error::unimplemented(format!(
        "{what} is not implemented yet"
    )))
}

pub fn checkpoint_pod(
    _rt: &Daemon,
    _req: cri::CheckpointPodRequest,
) -> Result<cri::CheckpointPodResponse> {
    unimplemented("CheckpointPod: pod checkpointing (CRIU)")
}

pub fn restore_pod(_rt: &Daemon, _req: cri::RestorePodRequest) -> Result<cri::RestorePodResponse> {
    unimplemented("RestorePod: restoring a pod from a checkpoint (CRIU)")
}
