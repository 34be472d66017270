//! The daemon's one error type: what the client is told (a gRPC code and a message), and the
//! cause it came from.
//!
//! Errors are made where the failure is understood (`Error::not_found`, `Error::io`, the
//! `From` impls of the crates below) and travel up unchanged; the server turns them into a
//! `tonic::Status` once, at the boundary, where each failed call is logged with its cause.
//! The message already says everything the client needs (it includes the cause's text), so
//! the cause is kept for logs and for code that asks what went wrong, not re-rendered.

use std::path::Path;

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Whether an I/O error says the disk is full (no space, or the quota is used up).
pub fn is_disk_full(e: &std::io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::ENOSPC) | Some(libc::EDQUOT))
        || e.kind() == std::io::ErrorKind::StorageFull
}

/// The cause of an error, kept as it came.
pub type Cause = Box<dyn std::error::Error + Send + Sync + 'static>;

/// The gRPC code an error maps to: what kind of failure it is for the client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Code {
    /// The request is malformed; the message names the field.
    InvalidArgument,
    NotFound,
    AlreadyExists,
    /// The object is not in a state that allows the call.
    FailedPrecondition,
    /// A capability a later part of peapod fills in.
    Unimplemented,
    DeadlineExceeded,
    Unauthenticated,
    PermissionDenied,
    Unavailable,
    /// A disk is full (ENOSPC, EDQUOT): the message names what was being written.
    ResourceExhausted,
    /// peapod or the host failed (I/O, the shim, CNI, the image store).
    Internal,
}

impl Code {
    pub fn to_tonic(self) -> tonic::Code {
        match self {
            Code::InvalidArgument => tonic::Code::InvalidArgument,
            Code::NotFound => tonic::Code::NotFound,
            Code::AlreadyExists => tonic::Code::AlreadyExists,
            Code::FailedPrecondition => tonic::Code::FailedPrecondition,
            Code::Unimplemented => tonic::Code::Unimplemented,
            Code::DeadlineExceeded => tonic::Code::DeadlineExceeded,
            Code::Unauthenticated => tonic::Code::Unauthenticated,
            Code::PermissionDenied => tonic::Code::PermissionDenied,
            Code::Unavailable => tonic::Code::Unavailable,
            Code::ResourceExhausted => tonic::Code::ResourceExhausted,
            Code::Internal => tonic::Code::Internal,
        }
    }

    /// Whether the caller, not the daemon, is the reason for the failure (logged quieter).
    pub fn is_client_error(self) -> bool {
        matches!(
            self,
            Code::InvalidArgument
                | Code::NotFound
                | Code::AlreadyExists
                | Code::FailedPrecondition
                | Code::Unimplemented
        )
    }
}

#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct Error {
    code: Code,
    message: String,
    #[source]
    source: Option<Cause>,
}

impl Error {
    pub fn new(code: Code, message: impl Into<String>) -> Error {
        Error {
            code,
            message: message.into(),
            source: None,
        }
    }

    /// `context: cause`, keeping the cause.
    pub fn caused(code: Code, context: impl std::fmt::Display, cause: impl Into<Cause>) -> Error {
        let cause = cause.into();
        Error {
            code,
            message: format!("{context}: {cause}"),
            source: Some(cause),
        }
    }

    /// Keeps `cause` behind an error whose message already tells what it needs to.
    pub fn with_cause(mut self, cause: impl Into<Cause>) -> Error {
        self.source = Some(cause.into());
        self
    }

    pub fn invalid(message: impl Into<String>) -> Error {
        Error::new(Code::InvalidArgument, message)
    }

    pub fn not_found(message: impl Into<String>) -> Error {
        Error::new(Code::NotFound, message)
    }

    pub fn already_exists(message: impl Into<String>) -> Error {
        Error::new(Code::AlreadyExists, message)
    }

    pub fn failed_precondition(message: impl Into<String>) -> Error {
        Error::new(Code::FailedPrecondition, message)
    }

    pub fn unimplemented(message: impl Into<String>) -> Error {
        Error::new(Code::Unimplemented, message)
    }

    pub fn deadline_exceeded(message: impl Into<String>) -> Error {
        Error::new(Code::DeadlineExceeded, message)
    }

    pub fn unavailable(message: impl Into<String>) -> Error {
        Error::new(Code::Unavailable, message)
    }

    pub fn internal(message: impl Into<String>) -> Error {
        Error::new(Code::Internal, message)
    }

    /// An I/O failure: `context: cause`.
    pub fn io(context: impl std::fmt::Display, source: std::io::Error) -> Error {
        // A full disk is the node's state, not a bug: the client may retry once space is freed.
        let code = if is_disk_full(&source) {
            Code::ResourceExhausted
        } else {
            Code::Internal
        };
        Error::caused(code, context, source)
    }

    /// An I/O error about a path: `what path: cause`.
    pub fn path(what: &str, path: &Path, source: std::io::Error) -> Error {
        Error::io(format_args!("{what} {}", path.display()), source)
    }

    pub fn code(&self) -> Code {
        self.code
    }

    pub fn message(&self) -> &str {
        &self.message
    }

    pub fn is_not_found(&self) -> bool {
        self.code == Code::NotFound
    }

    /// The same failure with its message rewritten (e.g. to say which input it was about),
    /// keeping the code and the cause.
    pub fn reworded(mut self, f: impl FnOnce(&str) -> String) -> Error {
        self.message = f(&self.message);
        self
    }

    /// The chain of causes below this error, outermost first, for logs.
    pub fn causes(&self) -> Vec<String> {
        let mut out = Vec::new();
        let mut next = std::error::Error::source(self);
        while let Some(e) = next {
            out.push(e.to_string());
            next = e.source();
        }
        out
    }

    /// The status the client gets.
    pub fn to_status(&self) -> tonic::Status {
        tonic::Status::new(self.code.to_tonic(), self.message.clone())
    }
}

/// Absence as a value: for the calls the CRI makes idempotent (stopping or removing what is
/// already gone), and the shim calls whose object may already be gone.
pub trait Optional<T> {
    /// `Ok(None)` for a NotFound error; other errors stay errors.
    fn optional(self) -> Result<Option<T>>;
}

impl<T> Optional<T> for Result<T> {
    fn optional(self) -> Result<Option<T>> {
        match self {
            Ok(v) => Ok(Some(v)),
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(e),
        }
    }
}

impl From<peapod_image::Error> for Error {
    fn from(err: peapod_image::Error) -> Error {
        use peapod_image::ErrorKind;
        let (code, prefix) = match err.kind() {
            ErrorKind::NotFound => (Code::NotFound, ""),
            ErrorKind::InvalidArgument => (Code::InvalidArgument, ""),
            ErrorKind::AlreadyExists => (Code::AlreadyExists, ""),
            ErrorKind::Unauthenticated => (Code::Unauthenticated, ""),
            ErrorKind::PermissionDenied => (Code::PermissionDenied, ""),
            ErrorKind::Unavailable => (Code::Unavailable, ""),
            ErrorKind::ResourceExhausted => (Code::ResourceExhausted, "image: "),
            ErrorKind::FailedPrecondition => (Code::FailedPrecondition, ""),
            ErrorKind::Internal => (Code::Internal, "image: "),
        };
        Error {
            code,
            message: format!("{prefix}{err}"),
            source: Some(Box::new(err)),
        }
    }
}

impl From<peapod_spec::SpecError> for Error {
    fn from(err: peapod_spec::SpecError) -> Error {
        match err {
            // The message names the field of the request.
            peapod_spec::SpecError::InvalidArgument(m) => Error::invalid(m),
            other => Error::caused(Code::Internal, "runtime spec", other),
        }
    }
}

impl From<Error> for tonic::Status {
    fn from(err: Error) -> tonic::Status {
        err.to_status()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_io_error_keeps_its_cause_and_says_it() {
        let e = Error::path(
            "create",
            Path::new("/x"),
            std::io::Error::from(std::io::ErrorKind::PermissionDenied),
        );
        assert_eq!(e.code(), Code::Internal);
        assert!(e.message().starts_with("create /x: "), "{e}");
        let cause = std::error::Error::source(&e).expect("a cause");
        assert!(cause.downcast_ref::<std::io::Error>().is_some());
        assert_eq!(e.to_status().code(), tonic::Code::Internal);
    }

    #[test]
    fn rewording_keeps_code_and_cause() {
        let e = Error::caused(
            Code::NotFound,
            "read /proc/self/fd/7",
            std::io::Error::other("gone"),
        )
        .reworded(|m| m.replace("/proc/self/fd/7", "/a.tar"));
        assert_eq!(e.to_status().code(), tonic::Code::NotFound);
        assert_eq!(e.to_string(), "read /a.tar: gone");
        assert_eq!(e.causes(), vec!["gone".to_string()]);
    }
}
