//! SPDY/3.1, as much of it as the Kubernetes streaming protocols use.
//!
//! Kubernetes (client-go, the kubelet, crictl) multiplexes exec/attach/port-forward streams
//! over an HTTP connection upgraded to `SPDY/3.1`, through `moby/spdystream`. No maintained
//! Rust SPDY crate exists, so this module implements the parts that matter:
//!
//! * [`frame`]: every SPDY/3 frame type, encoded and incrementally decoded, with bounded
//!   control frames and DATA handed out in bounded pieces;
//! * [`headers`]: name/value header blocks and their per-connection zlib contexts primed with
//!   the SPDY dictionary ([`dictionary`]);
//! * [`conn`]: an async connection over any `AsyncRead + AsyncWrite` that opens, accepts,
//!   replies to, half-closes and resets streams, answers pings and honours GOAWAY.
//!
//! Flow control (WINDOW_UPDATE) is accepted and ignored, as spdystream does: Kubernetes peers
//! neither send window updates nor wait for them, so enforcing windows would stall them after
//! 64 KiB. Memory is bounded instead by a per-connection receive budget (see `mux`).

pub mod conn;
pub mod dictionary;
pub mod frame;
pub mod headers;

pub use conn::{Connection, Incoming, Limits, Role, Stream, StreamReader, StreamWriter};
pub use headers::Headers;

/// Errors of the SPDY layer.
#[derive(Debug, thiserror::Error)]
pub enum SpdyError {
    /// The peer broke the framing rules.
    #[error("SPDY protocol error: {0}")]
    Protocol(String),
    /// A header block could not be (de)compressed.
    #[error("SPDY header compression failed: {0}")]
    Compression(String),
    /// A frame exceeded a size limit.
    #[error("SPDY frame of {len} bytes exceeds the {max}-byte limit")]
    FrameTooLarge {
        /// Announced length.
        len: usize,
        /// Limit in force.
        max: usize,
    },
    /// The peer speaks another SPDY version.
    #[error("unsupported SPDY version {0} (only 3 is spoken)")]
    Version(u16),
    /// Socket I/O failed.
    #[error("SPDY connection I/O failed: {0}")]
    Io(#[from] std::io::Error),
    /// The peer reset the stream.
    #[error("SPDY stream {stream_id} was reset by the peer (status {status})")]
    Reset {
        /// Stream.
        stream_id: u32,
        /// RST_STREAM status.
        status: u32,
    },
    /// The connection is closed or going away.
    #[error("SPDY connection is closed")]
    Closed,
    /// No stream could be opened.
    #[error("SPDY stream refused: {0}")]
    Refused(String),
}
