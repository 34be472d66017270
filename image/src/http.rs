//! The HTTP client settings every registry request shares (user agent, timeouts); hosts with
//! TLS settings of their own (`hosts::tls`) build on the same.

use crate::Error;
use std::time::Duration;

/// The settings every registry client shares; hosts with TLS settings of their own add to it.
pub(crate) fn client_builder(idle_timeout: Duration) -> reqwest::ClientBuilder {
    reqwest::Client::builder()
        .user_agent(concat!("peapod/", env!("CARGO_PKG_VERSION")))
        .connect_timeout(Duration::from_secs(30))
        // An idle timeout, not a total one: big layers may take long, stalls may not (the
        // whole pull is bounded by `pull_timeout`, in `Store::pull`).
        .read_timeout(idle_timeout)
}

pub(crate) fn build_client(idle_timeout: Duration) -> Result<reqwest::Client, Error> {
    client_builder(idle_timeout)
        .build()
        .map_err(|e| Error::Registry {
            url: String::new(),
            message: format!("building HTTP client: {e}"),
        })
}
