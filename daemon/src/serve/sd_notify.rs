//! systemd's readiness protocol (sd_notify(3)) for `Type=notify` in peapod.service: READY=1
//! once the CRI socket accepts connections (so `systemctl start peapod` returns, and units
//! ordered after peapod start, only when a client can connect), STOPPING=1 when a signal ends
//! the daemon. `NOTIFY_SOCKET` is taken out of the environment at start: the shims and the
//! OCI runtime they run must not inherit it (runc, seeing it, would proxy a notify socket into
//! every container it starts and wait for the container to use it).

use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::sync::OnceLock;

static SOCKET: OnceLock<Option<String>> = OnceLock::new();

/// Takes `NOTIFY_SOCKET` out of the environment and keeps it for [`notify`]. Call it first
/// thing, while the process has one thread (changing the environment is unsound beside
/// threads that read it).
pub fn take_from_env() {
    let socket = std::env::var("NOTIFY_SOCKET")
        .ok()
        .filter(|s| !s.is_empty());
    if socket.is_some() {
        std::env::remove_var("NOTIFY_SOCKET");
    }
    let _ = SOCKET.set(socket);
}

/// Sends `state` ("READY=1", "STOPPING=1") to systemd when it started the daemon with a
/// notify socket; nothing otherwise. A failure is logged, never fatal: systemd then times the
/// start out by itself, with its own message.
pub fn notify(state: &str) {
    let Some(Some(path)) = SOCKET.get() else {
        return;
    };
    if let Err(e) = send(path, state) {
        tracing::warn!(socket = %path, error = %e, "sd_notify {state}");
    }
}

/// The address systemd gives: a path, or `@name` for the abstract namespace.
fn address(socket: &str) -> std::io::Result<SocketAddr> {
    match socket.strip_prefix('@') {
        Some(name) => SocketAddr::from_abstract_name(name.as_bytes()),
        None => SocketAddr::from_pathname(socket),
    }
}

fn send(socket: &str, state: &str) -> std::io::Result<()> {
    let addr = address(socket)?;
    let sock = UnixDatagram::unbound()?;
    sock.send_to_addr(state.as_bytes(), &addr)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What systemd's side reads, at a path and in the abstract namespace.
    #[test]
    fn a_state_reaches_the_socket_by_path_and_by_abstract_name() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notify");
        let listener = UnixDatagram::bind(&path).unwrap();
        send(path.to_str().unwrap(), "READY=1").unwrap();
        let mut buf = [0u8; 64];
        let n = listener.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"READY=1");

        let name = format!("peapod-sd-notify-test-{}", std::process::id());
        let addr = SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
        let listener = UnixDatagram::bind_addr(&addr).unwrap();
        send(&format!("@{name}"), "STOPPING=1").unwrap();
        let n = listener.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"STOPPING=1");
    }

    #[test]
    fn a_missing_socket_is_an_error_not_a_panic() {
        let dir = tempfile::tempdir().unwrap();
        assert!(send(dir.path().join("none").to_str().unwrap(), "READY=1").is_err());
    }
}
