//! The calls peapod does not implement yet: CheckpointContainer, CheckpointPod and RestorePod
//! (all need CRIU). They answer Unimplemented, naming the call and what is missing, without
//! looking at the request: nothing is checked, made or changed.

use crate::daemon::Daemon;
use crate::error::{Error, Result};
use peapod_proto::v1 as cri;

fn unimplemented<T>(what: &str) -> Result<T> {
    Err(Error::unimplemented(format!(
        "{what} is not implemented yet"
    )))
}

pub fn checkpoint_container(
    _rt: &Daemon,
    _req: cri::CheckpointContainerRequest,
) -> Result<cri::CheckpointContainerResponse> {
    unimplemented("CheckpointContainer: container checkpointing (CRIU)")
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
