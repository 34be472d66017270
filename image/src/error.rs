//! The crate's error type. Every variant carries enough context to be read in a
//! log line on its own; [`Error::kind`] tells the daemon which gRPC code to use.

use std::io;

/// What a caller (the CRI server) should make of an [`Error`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// gRPC NotFound: a tag, manifest, image or file that does not exist.
    NotFound,
    /// gRPC InvalidArgument: a malformed reference or request.
    InvalidArgument,
    /// gRPC Unauthenticated: the registry wants credentials we do not have or it rejected.
    Unauthenticated,
    /// gRPC PermissionDenied: the registry knows who we are and says no, or the signature
    /// policy refuses the image.
    PermissionDenied,
    /// gRPC AlreadyExists.
    AlreadyExists,
    /// gRPC Unavailable: the registry could not be reached, or kept refusing (5xx, 429).
    Unavailable,
    /// gRPC ResourceExhausted: the disk is full (the message names what was being written).
    ResourceExhausted,
    /// gRPC FailedPrecondition: the node's own configuration (a hosts.toml, a certificate,
    /// a signature policy) does not load; the message names the file and the field.
    FailedPrecondition,
    /// gRPC Internal / Unknown: everything else (I/O, corrupt content, protocol errors).
    Internal,
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("invalid image reference {reference:?}: {reason}")]
    InvalidReference { reference: String, reason: String },

    #[error("invalid argument: {0}")]
    InvalidArgument(String),

    #[error("not found: {0}")]
    NotFound(String),

    #[error("already exists: {0}")]
    AlreadyExists(String),

    #[error("registry {registry}: authentication required or rejected: {message}")]
    Unauthenticated { registry: String, message: String },

    #[error("registry {registry}: access denied: {message}")]
    PermissionDenied { registry: String, message: String },

    #[error("registry request {url} failed: {message}")]
    Registry { url: String, message: String },

    #[error("registry request {url} kept failing ({message}) after {tries} tries")]
    RegistryBusy {
        url: String,
        message: String,
        tries: u32,
    },

    #[error("pull of {reference} did not finish within {limit:?} (registry.pull_timeout_seconds)")]
    PullTimeout {
        reference: String,
        limit: std::time::Duration,
    },

    // The chain, not just reqwest's top line ("error sending request for url"): what went
    // wrong is underneath (a TLS alert, an unknown CA, a refused connection).
    #[error("cannot reach registry at {url}: {}", chain(source))]
    Http {
        url: String,
        #[source]
        source: reqwest::Error,
    },

    /// An HTTPS registry that dropped the connection while we had no client certificate to
    /// offer: TLS 1.3 servers refuse a missing one after the handshake, so what the client
    /// sees is a broken pipe or a reset, not an alert. `hint` says where one is configured.
    #[error("cannot reach registry at {url}: {}; {hint}", chain(source))]
    HttpNoClientCertificate {
        url: String,
        #[source]
        source: reqwest::Error,
        hint: String,
    },

    #[error("{what}: digest mismatch: expected {expected}, got {actual}")]
    DigestMismatch {
        what: String,
        expected: String,
        actual: String,
    },

    #[error("registry host configuration {file}: {}{message}", if field.is_empty() { String::new() } else { format!("{field}: ") })]
    HostsConfig {
        file: std::path::PathBuf,
        field: String,
        message: String,
    },

    #[error("signature policy {file}: {}{message}", if field.is_empty() { String::new() } else { format!("{field}: ") })]
    PolicyConfig {
        file: std::path::PathBuf,
        field: String,
        message: String,
    },

    #[error("signature policy {file} (scope {scope}) refuses {reference}: {reason}")]
    PolicyDenied {
        file: std::path::PathBuf,
        scope: String,
        reference: String,
        reason: String,
    },

    #[error("invalid image content: {0}")]
    InvalidImage(String),

    #[error("unsafe layer entry {entry:?}: {reason}")]
    UnsafeLayer { entry: String, reason: String },

    #[error("unsupported: {0}")]
    Unsupported(String),

    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: io::Error,
    },

    #[error("{context}: {source}")]
    Json {
        context: String,
        #[source]
        source: serde_json::Error,
    },
}

impl Error {
    /// Maps the error to the CRI-facing category (and so a gRPC code).
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::InvalidReference { .. } | Error::InvalidArgument(_) => {
                ErrorKind::InvalidArgument
            }
            Error::NotFound(_) => ErrorKind::NotFound,
            Error::AlreadyExists(_) => ErrorKind::AlreadyExists,
            Error::Unauthenticated { .. } => ErrorKind::Unauthenticated,
            Error::PermissionDenied { .. } => ErrorKind::PermissionDenied,
            Error::Http { .. }
            | Error::HttpNoClientCertificate { .. }
            | Error::PullTimeout { .. }
            | Error::RegistryBusy { .. } => ErrorKind::Unavailable,
            Error::Io { source, .. }
                if matches!(
                    source.raw_os_error(),
                    Some(libc::ENOSPC) | Some(libc::EDQUOT)
                ) || source.kind() == io::ErrorKind::StorageFull =>
            {
                ErrorKind::ResourceExhausted
            }
            Error::HostsConfig { .. } | Error::PolicyConfig { .. } => ErrorKind::FailedPrecondition,
            Error::PolicyDenied { .. } => ErrorKind::PermissionDenied,
            Error::Registry { .. }
            | Error::DigestMismatch { .. }
            | Error::InvalidImage(_)
            | Error::UnsafeLayer { .. }
            | Error::Unsupported(_)
            | Error::Io { .. }
            | Error::Json { .. } => ErrorKind::Internal,
        }
    }

    pub(crate) fn io(context: impl Into<String>, source: io::Error) -> Error {
        Error::Io {
            context: context.into(),
            source,
        }
    }

    pub(crate) fn json(context: impl Into<String>, source: serde_json::Error) -> Error {
        Error::Json {
            context: context.into(),
            source,
        }
    }
}

/// An error and its sources, each once, joined by ": ".
pub(crate) fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let t = c.to_string();
        if !s.contains(&t) {
            s.push_str(": ");
            s.push_str(&t);
        }
        cur = c.source();
    }
    s
}

/// `.ctx("reading x")?` on io results: attaches what we were doing.
pub(crate) trait IoContext<T> {
    fn ctx(self, context: impl FnOnce() -> String) -> Result<T, Error>;
}

impl<T> IoContext<T> for Result<T, io::Error> {
    fn ctx(self, context: impl FnOnce() -> String) -> Result<T, Error> {
        self.map_err(|e| Error::io(context(), e))
    }
}

impl<T> IoContext<T> for Result<T, nix::Error> {
    fn ctx(self, context: impl FnOnce() -> String) -> Result<T, Error> {
        self.map_err(|e| Error::io(context(), io::Error::from(e)))
    }
}
