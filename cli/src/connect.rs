//! Which socket the client verbs talk to, and connecting to it.

use peapod_uds::client::Cri;

/// The socket the client verbs talk to: --endpoint, else $PEAPOD_SOCKET, else the default.
pub fn endpoint(flag: Option<&str>) -> String {
    flag.map(str::to_string)
        .or_else(|| std::env::var("PEAPOD_SOCKET").ok())
        .unwrap_or_else(|| "/run/peapod/peapod.sock".to_string())
}

pub async fn connect(flag: Option<&str>) -> anyhow::Result<Cri> {
    use anyhow::Context;
    let ep = endpoint(flag);
    Cri::connect(&ep)
        .await
        .with_context(|| format!("connect to peapod at {ep} (is `peapod serve` running?)"))
}
