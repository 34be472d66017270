//! The old name of the daemon's core, kept for callers outside this crate's reach (the
//! binary's `serve`); new code says [`crate::daemon::Daemon`].

pub use crate::daemon::Daemon as Runtime;
