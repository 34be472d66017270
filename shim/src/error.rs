//! The shim's error: what went wrong, with its cause kept, and the ttrpc code a client gets.
//!
//! The Task service's methods return [`ShimError`]; the ttrpc adapter turns it into a status
//! in one place ([`From<ShimError> for ttrpc::Error`]), so codes and messages are decided here
//! and nowhere else.

use crate::backend::runtime_cli::RuntimeCliError;
use ttrpc::Code;

#[derive(Debug, thiserror::Error)]
pub enum ShimError {
    /// A request field is missing or malformed.
    #[error("invalid request: {0}")]
    InvalidArgument(String),

    #[error("container {id} not found")]
    ContainerNotFound { id: String },

    #[error("exec {exec_id} not found in {id}")]
    ExecNotFound { id: String, exec_id: String },

    /// An exec that is not started (or whose stdio could not be set up) has no stdio.
    #[error("exec {exec_id} has no stdio in {id}")]
    NoStdio { id: String, exec_id: String },

    #[error("{0} already exists")]
    AlreadyExists(String),

    /// The object exists but is in the wrong state for the call (running, not started, ...).
    #[error("{0}")]
    FailedPrecondition(String),

    /// A call's own deadline passed (a checkpoint's dump).
    #[error("{0}")]
    DeadlineExceeded(String),

    /// A container or exec was deleted while the caller waited for its exit.
    #[error("{0} was removed before it exited")]
    Removed(String),

    /// The OCI runtime failed, and `runtime state` says it does not know the container.
    #[error("container {id} does not exist in the runtime: {source}")]
    RuntimeNotFound {
        id: String,
        #[source]
        source: RuntimeCliError,
    },

    /// The OCI runtime failed on a container it knows.
    #[error(transparent)]
    Runtime(#[from] RuntimeCliError),

    /// A local operation of the shim failed (stdio, sockets, files).
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
}

impl ShimError {
    pub fn io(context: impl Into<String>, source: std::io::Error) -> ShimError {
        ShimError::Io {
            context: context.into(),
            source,
        }
    }

    /// The ttrpc code a client sees (containerd's errdefs meaning of each).
    pub fn code(&self) -> Code {
        match self {
            ShimError::InvalidArgument(_) => Code::INVALID_ARGUMENT,
            ShimError::ContainerNotFound { .. }
            | ShimError::ExecNotFound { .. }
            | ShimError::NoStdio { .. }
            | ShimError::Removed(_)
            | ShimError::RuntimeNotFound { .. } => Code::NOT_FOUND,
            ShimError::AlreadyExists(_) => Code::ALREADY_EXISTS,
            ShimError::FailedPrecondition(_) => Code::FAILED_PRECONDITION,
            ShimError::DeadlineExceeded(_) => Code::DEADLINE_EXCEEDED,
            // The runtime said it succeeded but left no pid: our side cannot go on.
            ShimError::Runtime(RuntimeCliError::NoPidFile { .. }) => Code::INTERNAL,
            ShimError::Runtime(_) => Code::UNKNOWN,
            ShimError::Io { .. } => Code::INTERNAL,
        }
    }
}

impl ShimError {
    /// The message a client sees: this error and its whole cause chain, since a status has
    /// no room for the source itself.
    pub fn message(&self) -> String {
        let mut message = self.to_string();
        let mut source = std::error::Error::source(self);
        while let Some(cause) = source {
            let text = cause.to_string();
            // `#[error("{context}: {source}")]` variants already print their source.
            if !message.ends_with(&text) {
                message.push_str(": ");
                message.push_str(&text);
            }
            source = cause.source();
        }
        message
    }
}

/// The one place a ttrpc status is built from a shim error.
impl From<ShimError> for ttrpc::Error {
    fn from(err: ShimError) -> ttrpc::Error {
        ttrpc::Error::RpcStatus(ttrpc::get_status(err.code(), err.message()))
    }
}

/// The server boundary: a failed call is logged with its method, object and code, then
/// becomes a status.
pub fn reply<T>(method: &str, object: &str, result: Result<T>) -> ttrpc::Result<T> {
    result.map_err(|err| {
        eprintln!(
            "peapod-shim: {method} {object}: {:?}: {}",
            err.code(),
            err.message()
        );
        err.into()
    })
}

pub type Result<T, E = ShimError> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    fn status(err: ShimError) -> (Code, String) {
        match ttrpc::Error::from(err) {
            ttrpc::Error::RpcStatus(s) => (s.code(), s.message),
            other => panic!("not a status: {other:?}"),
        }
    }

    #[test]
    fn each_error_has_its_code_and_a_message_with_its_cause() {
        assert_eq!(
            status(ShimError::ExecNotFound {
                id: "c1".into(),
                exec_id: "e1".into()
            }),
            (Code::NOT_FOUND, "exec e1 not found in c1".to_string())
        );
        let (code, msg) = status(ShimError::io(
            "container stdio",
            std::io::Error::from_raw_os_error(libc::EMFILE),
        ));
        assert_eq!(code, Code::INTERNAL);
        assert!(msg.starts_with("container stdio: "), "{msg}");
        assert_eq!(msg.matches("open files").count(), 1, "{msg}");

        let failed = RuntimeCliError::Failed {
            runtime: "runc".into(),
            command: "kill".into(),
            exit_status: 1,
            message: "container not running".into(),
        };
        let (code, msg) = status(ShimError::RuntimeNotFound {
            id: "c1".into(),
            source: failed,
        });
        assert_eq!(code, Code::NOT_FOUND);
        assert!(msg.contains("runc kill"), "{msg}");
        assert_eq!(
            status(ShimError::FailedPrecondition(
                "container c1 is running".into()
            ))
            .0,
            Code::FAILED_PRECONDITION
        );
    }

    #[test]
    fn the_source_is_kept() {
        let err = ShimError::Runtime(RuntimeCliError::Timeout {
            runtime: "runc".into(),
            command: "start".into(),
            limit: std::time::Duration::from_secs(60),
        });
        assert_eq!(err.code(), Code::UNKNOWN);
        let err = ShimError::RuntimeNotFound {
            id: "x".into(),
            source: RuntimeCliError::Timeout {
                runtime: "runc".into(),
                command: "start".into(),
                limit: std::time::Duration::from_secs(60),
            },
        };
        assert!(std::error::Error::source(&err).is_some());
    }

    #[test]
    fn reply_passes_values_and_turns_errors_into_statuses() {
        assert_eq!(reply("State", "c1", Ok(7)).unwrap(), 7);
        let err = reply::<()>(
            "State",
            "c1",
            Err(ShimError::ContainerNotFound { id: "c1".into() }),
        )
        .unwrap_err();
        match err {
            ttrpc::Error::RpcStatus(s) => {
                assert_eq!(s.code(), Code::NOT_FOUND);
                assert_eq!(s.message, "container c1 not found");
            }
            other => panic!("{other:?}"),
        }
    }
}
