//! The calls peapod does not implement yet: CheckpointContainer. It answers Unimplemented,
//! naming what is missing.

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
