//! Terminal resize events: a stream of JSON objects `{"Width":80,"Height":24}` (client-go's
//! `TerminalSize` through `json.Encoder`), one after another, on the resize stream or channel.

use std::time::Duration;

use bytes::{Buf, BytesMut};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tracing::{debug, trace};

use crate::TerminalSize;

/// A JSON object larger than this is not a terminal size; stop listening rather than buffer.
const MAX_EVENT: usize = 4096;

/// The wire form. Go matches JSON keys case-insensitively, so lowercase keys are accepted too;
/// absent fields are 0, as in Go.
#[derive(Debug, Serialize, Deserialize, Default)]
pub(crate) struct WireSize {
    #[serde(rename = "Width", alias = "width", default)]
    pub(crate) width: u16,
    #[serde(rename = "Height", alias = "height", default)]
    pub(crate) height: u16,
}

impl From<TerminalSize> for WireSize {
    fn from(s: TerminalSize) -> Self {
        WireSize {
            width: s.width,
            height: s.height,
        }
    }
}

/// Splits complete JSON values off the front of `buf`.
pub(crate) struct EventParser {
    buf: BytesMut,
}

impl EventParser {
    pub(crate) fn new() -> Self {
        EventParser {
            buf: BytesMut::new(),
        }
    }

    pub(crate) fn buffer(&mut self) -> &mut BytesMut {
        &mut self.buf
    }

    /// The next complete event; `Ok(None)` if more bytes are needed.
    pub(crate) fn next(&mut self) -> Result<Option<TerminalSize>, String> {
        let mut it = serde_json::Deserializer::from_slice(&self.buf).into_iter::<WireSize>();
        match it.next() {
            None => {
                // Only whitespace so far.
                self.buf.clear();
                Ok(None)
            }
            Some(Ok(w)) => {
                let used = it.byte_offset();
                self.buf.advance(used);
                Ok(Some(TerminalSize {
                    width: w.width,
                    height: w.height,
                }))
            }
            Some(Err(e)) if e.is_eof() => {
                if self.buf.len() > MAX_EVENT {
                    Err(format!("resize event longer than {MAX_EVENT} bytes"))
                } else {
                    Ok(None)
                }
            }
            Some(Err(e)) => Err(e.to_string()),
        }
    }
}

/// Reads resize events from `src` and delivers them on the returned channel.
///
/// Events are coalesced: if the runtime has not taken the previous size yet, a newer one
/// replaces it, so the runtime always gets the latest size and a runtime that ignores resizes
/// never makes the pump — and through it the connection — stall. The pump keeps draining
/// `src` after the runtime drops the receiver, for the same reason.
pub(crate) fn spawn_pump<R>(mut src: R) -> (mpsc::Receiver<TerminalSize>, PumpGuard)
where
    R: AsyncRead + Send + Unpin + 'static,
{
    let (tx, rx) = mpsc::channel(1);
    let task = tokio::spawn(async move {
        let mut parser = EventParser::new();
        let mut pending: Option<TerminalSize> = None;
        let mut listening = true;
        loop {
            tokio::select! {
                biased;
                permit = tx.reserve(), if pending.is_some() && listening => match permit {
                    Ok(permit) => {
                        if let Some(size) = pending.take() {
                            trace!(?size, "terminal resize");
                            permit.send(size);
                        }
                    }
                    Err(_) => listening = false,
                },
                read = src.read_buf(parser.buffer()) => {
                    match read {
                        Ok(0) | Err(_) => break,
                        Ok(_) => {}
                    }
                    loop {
                        match parser.next() {
                            Ok(Some(size)) => pending = Some(size),
                            Ok(None) => break,
                            Err(e) => {
                                debug!("ignoring the rest of the resize stream: {e}");
                                drain(&mut src).await;
                                return;
                            }
                        }
                    }
                }
            }
        }
        // The client closed the resize stream; hand over the last size if still pending.
        if let Some(size) = pending {
            if listening {
                let _ = tokio::time::timeout(Duration::from_secs(1), tx.send(size)).await;
            }
        }
    });
    (rx, PumpGuard(task))
}

/// Stops the pump when the session that started it ends, however it ends.
pub(crate) struct PumpGuard(JoinHandle<()>);

impl Drop for PumpGuard {
    fn drop(&mut self) {
        self.0.abort();
    }
}

async fn drain<R: AsyncRead + Unpin>(src: &mut R) {
    let mut sink = vec![0u8; 4096];
    while let Ok(n) = src.read(&mut sink).await {
        if n == 0 {
            break;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;

    #[test]
    fn parses_concatenated_and_split_events() {
        let mut p = EventParser::new();
        p.buffer()
            .extend_from_slice(b"{\"Width\":80,\"Height\":24}\n{\"width\":100,");
        assert_eq!(
            p.next().unwrap(),
            Some(TerminalSize {
                width: 80,
                height: 24
            })
        );
        assert_eq!(p.next().unwrap(), None);
        p.buffer().extend_from_slice(b"\"height\":50}");
        assert_eq!(
            p.next().unwrap(),
            Some(TerminalSize {
                width: 100,
                height: 50
            })
        );
        assert_eq!(p.next().unwrap(), None);
        p.buffer().extend_from_slice(b"{\"Width\":-1}");
        assert!(p.next().is_err());
    }

    #[test]
    fn overlong_events_are_refused() {
        let mut p = EventParser::new();
        p.buffer().extend_from_slice(b"{\"Width\":");
        p.buffer().extend_from_slice(&vec![b' '; MAX_EVENT]);
        assert!(p.next().is_err());
    }

    #[tokio::test]
    async fn pump_coalesces_and_survives_a_deaf_runtime() {
        let (mut client, server) = tokio::io::duplex(1024);
        let (mut rx, task) = spawn_pump(server);
        for w in 1..=50u16 {
            client
                .write_all(format!("{{\"Width\":{w},\"Height\":1}}").as_bytes())
                .await
                .unwrap();
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        // The runtime sees at most one stale size, then the latest.
        let mut last = rx.recv().await.unwrap();
        while let Ok(Some(s)) = tokio::time::timeout(Duration::from_millis(50), rx.recv()).await {
            last = s;
        }
        assert_eq!(last.width, 50);
        // Nobody listens any more: the client can still write.
        drop(rx);
        for _ in 0..1000 {
            client
                .write_all(b"{\"Width\":1,\"Height\":1}")
                .await
                .unwrap();
        }
        drop(client);
        // The pump ends by itself at EOF.
        for _ in 0..100 {
            if task.0.is_finished() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(task.0.is_finished());
    }
}
