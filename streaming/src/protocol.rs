//! Names and negotiation rules of the Kubernetes streaming protocols.

/// Remotecommand v1 (SPDY and WebSocket): streams, error text only, no resize.
pub const STREAM_PROTOCOL_V1: &str = "channel.k8s.io";
/// Remotecommand v2: v1 with the error stream fixed.
pub const STREAM_PROTOCOL_V2: &str = "v2.channel.k8s.io";
/// Remotecommand v3: v2 with terminal resize.
pub const STREAM_PROTOCOL_V3: &str = "v3.channel.k8s.io";
/// Remotecommand v4: v3 with the exit status as a `metav1.Status` JSON.
pub const STREAM_PROTOCOL_V4: &str = "v4.channel.k8s.io";
/// Remotecommand v5 (WebSocket only): v4 with the stream close signal.
pub const STREAM_PROTOCOL_V5: &str = "v5.channel.k8s.io";
/// WebSocket v1 with base64 text messages.
pub const BASE64_STREAM_PROTOCOL_V1: &str = "base64.channel.k8s.io";
/// WebSocket v4 with base64 text messages.
pub const BASE64_STREAM_PROTOCOL_V4: &str = "v4.base64.channel.k8s.io";
/// Port-forward over SPDY.
pub const PORT_FORWARD_PROTOCOL_V1: &str = "portforward.k8s.io";
/// Prefix kubectl puts on a SPDY protocol it tunnels through a WebSocket.
pub const SPDY_TUNNELING_PREFIX: &str = "SPDY/3.1+";

/// The `Upgrade` token of SPDY.
pub const UPGRADE_SPDY: &str = "SPDY/3.1";
/// Request header listing the client's protocols; response header naming the chosen one.
pub const HEADER_PROTOCOL_VERSION: &str = "X-Stream-Protocol-Version";
/// Response header listing the server's protocols when negotiation fails.
pub const HEADER_ACCEPTED_PROTOCOL_VERSIONS: &str = "X-Accepted-Stream-Protocol-Versions";

/// SPDY stream header naming the stream's role.
pub const HEADER_STREAM_TYPE: &str = "streamType";
/// SPDY port-forward stream header: the remote port.
pub const HEADER_PORT: &str = "port";
/// SPDY port-forward stream header pairing a data stream with its error stream.
pub const HEADER_REQUEST_ID: &str = "requestID";

/// Stream types (`streamType` header values).
pub mod stream_type {
    /// Exit status / error messages, server to client.
    pub const ERROR: &str = "error";
    /// Client input.
    pub const STDIN: &str = "stdin";
    /// Process output.
    pub const STDOUT: &str = "stdout";
    /// Process error output.
    pub const STDERR: &str = "stderr";
    /// Terminal sizes, client to server.
    pub const RESIZE: &str = "resize";
    /// Port-forward payload.
    pub const DATA: &str = "data";
}

/// WebSocket remotecommand channel numbers (the first byte of each message).
pub mod channel {
    /// Client input.
    pub const STDIN: u8 = 0;
    /// Process output.
    pub const STDOUT: u8 = 1;
    /// Process error output.
    pub const STDERR: u8 = 2;
    /// Exit status.
    pub const ERROR: u8 = 3;
    /// Terminal sizes.
    pub const RESIZE: u8 = 4;
    /// v5: `[CLOSE, n]` half-closes channel n.
    pub const CLOSE: u8 = 255;
}

/// Query parameters of the streaming URLs, as the kubelet's handlers read them.
pub mod query {
    /// Command argument (repeated).
    pub const COMMAND: &str = "command";
    /// `1`/`true`: attach stdin.
    pub const STDIN: &str = "input";
    /// `1`/`true`: attach stdout.
    pub const STDOUT: &str = "output";
    /// `1`/`true`: attach stderr.
    pub const STDERR: &str = "error";
    /// `1`/`true`: allocate a terminal.
    pub const TTY: &str = "tty";
    /// WebSocket port-forward: a port, or a comma-separated list (repeatable).
    pub const PORT: &str = "port";
}

/// A remotecommand protocol version.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum RemoteCommandVersion {
    /// `channel.k8s.io` (or no protocol header at all).
    V1,
    /// `v2.channel.k8s.io`.
    V2,
    /// `v3.channel.k8s.io`.
    V3,
    /// `v4.channel.k8s.io`.
    V4,
    /// `v5.channel.k8s.io`.
    V5,
}

impl RemoteCommandVersion {
    /// Whether the protocol carries terminal sizes.
    pub fn supports_resize(self) -> bool {
        self >= RemoteCommandVersion::V3
    }

    /// Whether the error stream carries a `metav1.Status` JSON (else plain error text).
    pub fn json_status(self) -> bool {
        self >= RemoteCommandVersion::V4
    }

    /// Whether the client may half-close channels (`[255, n]`).
    pub fn close_signal(self) -> bool {
        self >= RemoteCommandVersion::V5
    }
}

/// How WebSocket payloads are framed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WsEncoding {
    /// Binary messages, first byte the channel number.
    Binary,
    /// Text messages: `'0' + channel`, then the payload in standard base64.
    Base64,
}

/// SPDY remotecommand protocols the server accepts.
pub const SPDY_REMOTECOMMAND_PROTOCOLS: &[&str] = &[
    STREAM_PROTOCOL_V4,
    STREAM_PROTOCOL_V3,
    STREAM_PROTOCOL_V2,
    STREAM_PROTOCOL_V1,
];

/// SPDY port-forward protocols the server accepts.
pub const SPDY_PORTFORWARD_PROTOCOLS: &[&str] = &[PORT_FORWARD_PROTOCOL_V1];

/// WebSocket remotecommand protocols the server accepts.
pub const WS_REMOTECOMMAND_PROTOCOLS: &[&str] = &[
    STREAM_PROTOCOL_V5,
    STREAM_PROTOCOL_V4,
    BASE64_STREAM_PROTOCOL_V4,
    STREAM_PROTOCOL_V3,
    STREAM_PROTOCOL_V2,
    STREAM_PROTOCOL_V1,
    BASE64_STREAM_PROTOCOL_V1,
];

/// WebSocket port-forward protocols the server accepts ("" is no subprotocol at all).
pub const WS_PORTFORWARD_PROTOCOLS: &[&str] = &[
    STREAM_PROTOCOL_V4,
    BASE64_STREAM_PROTOCOL_V4,
    "SPDY/3.1+portforward.k8s.io",
];

/// Version and encoding of a WebSocket remotecommand subprotocol ("" means none was asked
/// for, which the kubelet treats as binary v1).
pub fn ws_remotecommand(protocol: &str) -> Option<(RemoteCommandVersion, WsEncoding)> {
    use RemoteCommandVersion::*;
    Some(match protocol {
        "" | STREAM_PROTOCOL_V1 => (V1, WsEncoding::Binary),
        BASE64_STREAM_PROTOCOL_V1 => (V1, WsEncoding::Base64),
        STREAM_PROTOCOL_V2 => (V2, WsEncoding::Binary),
        STREAM_PROTOCOL_V3 => (V3, WsEncoding::Binary),
        STREAM_PROTOCOL_V4 => (V4, WsEncoding::Binary),
        BASE64_STREAM_PROTOCOL_V4 => (V4, WsEncoding::Base64),
        STREAM_PROTOCOL_V5 => (V5, WsEncoding::Binary),
        _ => return None,
    })
}

/// Version of a SPDY remotecommand protocol ("" means none was asked for: v1).
pub fn spdy_remotecommand(protocol: &str) -> Option<RemoteCommandVersion> {
    use RemoteCommandVersion::*;
    Some(match protocol {
        "" | STREAM_PROTOCOL_V1 => V1,
        STREAM_PROTOCOL_V2 => V2,
        STREAM_PROTOCOL_V3 => V3,
        STREAM_PROTOCOL_V4 => V4,
        _ => return None,
    })
}

/// Splits header values the way the Go code does: every value, comma-separated, trimmed,
/// empties dropped.
pub fn split_header_values<'a>(values: impl IntoIterator<Item = &'a str>) -> Vec<String> {
    values
        .into_iter()
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

/// Picks the first of the client's protocols (in the client's order of preference) that the
/// server supports, as `httpstream.Handshake` and `wsstream` do.
pub fn negotiate<'a>(client: &[String], server: &[&'a str]) -> Option<&'a str> {
    client
        .iter()
        .find_map(|c| server.iter().find(|s| **s == c.as_str()).copied())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn negotiation_follows_the_client_preference() {
        let client =
            split_header_values(["v4.channel.k8s.io, v3.channel.k8s.io", "channel.k8s.io"]);
        assert_eq!(client.len(), 3);
        assert_eq!(
            negotiate(&client, SPDY_REMOTECOMMAND_PROTOCOLS),
            Some(STREAM_PROTOCOL_V4)
        );
        let client = split_header_values(["v9.channel.k8s.io", "v2.channel.k8s.io"]);
        assert_eq!(
            negotiate(&client, SPDY_REMOTECOMMAND_PROTOCOLS),
            Some(STREAM_PROTOCOL_V2)
        );
        assert_eq!(
            negotiate(&split_header_values(["x"]), SPDY_REMOTECOMMAND_PROTOCOLS),
            None
        );
    }

    #[test]
    fn protocol_features() {
        assert_eq!(
            ws_remotecommand("v4.base64.channel.k8s.io"),
            Some((RemoteCommandVersion::V4, WsEncoding::Base64))
        );
        assert_eq!(
            ws_remotecommand(""),
            Some((RemoteCommandVersion::V1, WsEncoding::Binary))
        );
        assert!(ws_remotecommand("v5.base64.channel.k8s.io").is_none());
        assert!(spdy_remotecommand(STREAM_PROTOCOL_V5).is_none());
        let v3 = spdy_remotecommand(STREAM_PROTOCOL_V3).unwrap();
        assert!(v3.supports_resize() && !v3.json_status());
        assert!(RemoteCommandVersion::V5.close_signal());
        assert!(!RemoteCommandVersion::V4.close_signal());
    }
}
