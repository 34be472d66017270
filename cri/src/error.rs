//! The daemon's errors and their gRPC codes.

use std::path::Path;

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The request is malformed; the message names the field.
    #[error("{0}")]
    InvalidArgument(String),
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    AlreadyExists(String),
    /// The object is not in a state that allows the call.
    #[error("{0}")]
    FailedPrecondition(String),
    /// A capability a later part of peapod fills in.
    #[error("{0}")]
    Unimplemented(String),
    #[error("{0}")]
    DeadlineExceeded(String),
    #[error("{0}")]
    Unauthenticated(String),
    #[error("{0}")]
    PermissionDenied(String),
    #[error("{0}")]
    Unavailable(String),
    #[error("image: {0}")]
    Image(String),
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
    #[error("network: {0}")]
    Network(String),
    #[error("shim: {0}")]
    Shim(String),
    #[error("{0}")]
    Internal(String),
}

impl Error {
    pub fn io(context: impl Into<String>, source: std::io::Error) -> Error {
        Error::Io {
            context: context.into(),
            source,
        }
    }

    /// An I/O error about a path.
    pub fn path(what: &str, path: &Path, source: std::io::Error) -> Error {
        Error::io(format!("{what} {}", path.display()), source)
    }

    pub fn invalid(msg: impl Into<String>) -> Error {
        Error::InvalidArgument(msg.into())
    }

    pub fn not_found(msg: impl Into<String>) -> Error {
        Error::NotFound(msg.into())
    }

    pub fn is_not_found(&self) -> bool {
        matches!(self, Error::NotFound(_))
    }
}

impl From<peapod_image::Error> for Error {
    fn from(err: peapod_image::Error) -> Error {
        use peapod_image::ErrorKind;
        let msg = err.to_string();
        match err.kind() {
            ErrorKind::NotFound => Error::NotFound(msg),
            ErrorKind::InvalidArgument => Error::InvalidArgument(msg),
            ErrorKind::AlreadyExists => Error::AlreadyExists(msg),
            ErrorKind::Unauthenticated => Error::Unauthenticated(msg),
            ErrorKind::PermissionDenied => Error::PermissionDenied(msg),
            ErrorKind::Unavailable => Error::Unavailable(msg),
            ErrorKind::Internal => Error::Image(msg),
        }
    }
}

impl From<Error> for tonic::Status {
    fn from(err: Error) -> tonic::Status {
        let msg = err.to_string();
        match err {
            Error::InvalidArgument(_) => tonic::Status::invalid_argument(msg),
            Error::NotFound(_) => tonic::Status::not_found(msg),
            Error::AlreadyExists(_) => tonic::Status::already_exists(msg),
            Error::FailedPrecondition(_) => tonic::Status::failed_precondition(msg),
            Error::Unimplemented(_) => tonic::Status::unimplemented(msg),
            Error::DeadlineExceeded(_) => tonic::Status::deadline_exceeded(msg),
            Error::Unauthenticated(_) => tonic::Status::unauthenticated(msg),
            Error::PermissionDenied(_) => tonic::Status::permission_denied(msg),
            Error::Unavailable(_) => tonic::Status::unavailable(msg),
            Error::Io { .. }
            | Error::Network(_)
            | Error::Shim(_)
            | Error::Internal(_)
            | Error::Image(_) => tonic::Status::internal(msg),
        }
    }
}
