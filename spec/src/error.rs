//! The one error type of the crate.

/// The cause of an internal error: a serialization, a host lookup, or a plain message.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Why a spec could not be generated.
///
/// `InvalidArgument` is the client's fault and names the CRI field (map it to gRPC
/// `InvalidArgument`); `Internal` is ours or the host's (map it to `Internal`/`Unknown`) and
/// keeps its cause as the error's `source`.
#[derive(Debug, thiserror::Error)]
pub enum SpecError {
    /// The request cannot be honoured as given; the message names the CRI field.
    #[error("{0}")]
    InvalidArgument(String),
    /// Something on our side failed while doing `context`.
    #[error("{context}: {source}")]
    Internal {
        context: String,
        #[source]
        source: BoxError,
    },
}

impl SpecError {
    pub(crate) fn invalid(msg: impl Into<String>) -> Self {
        SpecError::InvalidArgument(msg.into())
    }

    pub(crate) fn internal(context: impl Into<String>, source: impl Into<BoxError>) -> Self {
        SpecError::Internal {
            context: context.into(),
            source: source.into(),
        }
    }
}

pub type Result<T, E = SpecError> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn internal_errors_keep_their_cause() {
        let cause = serde_json::from_str::<u32>("x").unwrap_err();
        let text = cause.to_string();
        let err = SpecError::internal("runtime spec", cause);
        assert_eq!(err.to_string(), format!("runtime spec: {text}"));
        let source = std::error::Error::source(&err).unwrap();
        assert!(source.downcast_ref::<serde_json::Error>().is_some());
    }
}
