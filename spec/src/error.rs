//! The one error type of the crate.

/// Why a spec could not be generated.
///
/// `InvalidArgument` is the client's fault and names the CRI field (map it to gRPC
/// `InvalidArgument`); `Internal` is ours or the host's (map it to `Internal`/`Unknown`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    /// The request cannot be honoured as given; the message names the CRI field.
    #[error("{0}")]
    InvalidArgument(String),
    /// Something on our side failed (a host lookup, a serialization).
    #[error("{0}")]
    Internal(String),
}

impl SpecError {
    pub(crate) fn invalid(msg: impl Into<String>) -> Self {
        SpecError::InvalidArgument(msg.into())
    }

    pub(crate) fn internal(msg: impl Into<String>) -> Self {
        SpecError::Internal(msg.into())
    }
}

pub type Result<T, E = SpecError> = std::result::Result<T, E>;
