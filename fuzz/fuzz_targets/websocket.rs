//! WebSocket framing as a client's bytes reach the server: tungstenite's frame parser with the
//! limits the server sets (`ws::websocket_config`), then the channel protocol's decoding of
//! every message (binary and base64, with and without close signals).
#![no_main]
use libfuzzer_sys::fuzz_target;
use peapod_streaming::protocol::WsEncoding;
use peapod_streaming::ws;
use std::io::{Cursor, Read, Write};
use tokio_tungstenite::tungstenite::protocol::{Role, WebSocket};
use tokio_tungstenite::tungstenite::Message;

/// The client's bytes to read; what the server writes goes nowhere.
struct Wire(Cursor<Vec<u8>>);

impl Read for Wire {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.0.read(buf)
    }
}

impl Write for Wire {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fuzz_target!(|data: &[u8]| {
    for (encoding, close) in [
        (WsEncoding::Binary, true),
        (WsEncoding::Binary, false),
        (WsEncoding::Base64, true),
    ] {
        let _ = ws::decode(encoding, data, close);
    }
    let mut socket = WebSocket::from_raw_socket(
        Wire(Cursor::new(data.to_vec())),
        Role::Server,
        Some(ws::websocket_config()),
    );
    for _ in 0..10_000 {
        match socket.read() {
            Ok(Message::Binary(b)) => {
                let _ = ws::decode(WsEncoding::Binary, &b, true);
            }
            Ok(Message::Text(t)) => {
                let _ = ws::decode(WsEncoding::Base64, t.as_bytes(), true);
            }
            Ok(_) => {}
            Err(_) => break,
        }
    }
});
