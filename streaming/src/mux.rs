//! The receiving half of a multiplexed stream, shared by the SPDY streams and the WebSocket
//! channels.
//!
//! A connection's reader task demultiplexes incoming payload into one queue per stream. The
//! queues themselves are unbounded, but every queued byte holds a permit of one per-connection
//! `Budget`: when a consumer stops reading, the budget runs out and the reader task stops
//! reading the socket, which pushes back on the peer through TCP. So a peer can make us buffer
//! at most the budget, however many streams it opens — the same head-of-line behaviour the
//! Go implementations (spdystream's bounded frame queues, wsstream's io.Pipe) have.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use bytes::{Buf, Bytes};
use tokio::io::{AsyncRead, ReadBuf};
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};

/// What a reader task hands a stream.
pub(crate) enum Inbound {
    /// Payload, holding its share of the connection budget until consumed.
    Data(Bytes, OwnedSemaphorePermit),
    /// The peer will send no more (FIN, or the v5 close signal).
    Fin,
    /// The peer aborted the stream.
    Reset,
}

/// Bytes a connection may hold in stream queues at once.
#[derive(Clone)]
pub(crate) struct Budget {
    sem: Arc<Semaphore>,
    max: usize,
}

impl Budget {
    pub(crate) fn new(bytes: usize) -> Self {
        let max = bytes.clamp(1, Semaphore::MAX_PERMITS);
        Self {
            sem: Arc::new(Semaphore::new(max)),
            max,
        }
    }

    /// Waits until `len` bytes fit. A piece larger than the whole budget waits for all of it,
    /// so it can still pass (alone).
    pub(crate) async fn acquire(&self, len: usize) -> Option<OwnedSemaphorePermit> {
        let n = len.clamp(1, self.max) as u32;
        self.sem.clone().acquire_many_owned(n).await.ok()
    }
}

/// Sending side of a stream queue, held by the reader task.
#[derive(Clone)]
pub(crate) struct InboundSender {
    tx: mpsc::UnboundedSender<Inbound>,
}

impl InboundSender {
    /// Queues payload; false when the stream's reader is gone (the payload is dropped and
    /// its budget returned, as a closed pipe would).
    pub(crate) async fn data(&self, budget: &Budget, data: Bytes) -> bool {
        if data.is_empty() {
            return !self.tx.is_closed();
        }
        if self.tx.is_closed() {
            return false;
        }
        match budget.acquire(data.len()).await {
            Some(permit) => self.tx.send(Inbound::Data(data, permit)).is_ok(),
            None => false,
        }
    }

    pub(crate) fn fin(&self) {
        let _ = self.tx.send(Inbound::Fin);
    }

    pub(crate) fn reset(&self) {
        let _ = self.tx.send(Inbound::Reset);
    }
}

/// A new queue: the sender for the reader task, the reader for the stream's user.
pub(crate) fn channel() -> (InboundSender, InboundReader) {
    let (tx, rx) = mpsc::unbounded_channel();
    (
        InboundSender { tx },
        InboundReader {
            rx,
            current: None,
            state: ReadState::Open,
        },
    )
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum ReadState {
    Open,
    Eof,
    Reset,
}

/// The readable half of a stream or channel.
///
/// Reads return EOF after the peer's FIN, `ConnectionReset` after the peer's reset, and
/// `ConnectionAborted` if the connection ended without either.
pub struct InboundReader {
    rx: mpsc::UnboundedReceiver<Inbound>,
    current: Option<(Bytes, OwnedSemaphorePermit)>,
    state: ReadState,
}

impl std::fmt::Debug for InboundReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InboundReader").finish_non_exhaustive()
    }
}

impl AsyncRead for InboundReader {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        loop {
            if let Some((data, _permit)) = self.current.as_mut() {
                let n = data.len().min(buf.remaining());
                buf.put_slice(&data[..n]);
                data.advance(n);
                if data.is_empty() {
                    // Dropping the permit returns this piece's share of the budget.
                    self.current = None;
                }
                return Poll::Ready(Ok(()));
            }
            match self.state {
                ReadState::Eof => return Poll::Ready(Ok(())),
                ReadState::Reset => {
                    return Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::ConnectionReset,
                        "stream reset by peer",
                    )))
                }
                ReadState::Open => {}
            }
            if buf.remaining() == 0 {
                return Poll::Ready(Ok(()));
            }
            match ready!(self.rx.poll_recv(cx)) {
                Some(Inbound::Data(data, permit)) => self.current = Some((data, permit)),
                Some(Inbound::Fin) => self.state = ReadState::Eof,
                Some(Inbound::Reset) => self.state = ReadState::Reset,
                None => {
                    return Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::ConnectionAborted,
                        "connection closed before the stream ended",
                    )))
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use tokio::io::AsyncReadExt;

    #[tokio::test]
    async fn data_then_fin_reads_then_eofs() {
        let budget = Budget::new(1024);
        let (tx, mut rx) = channel();
        assert!(tx.data(&budget, Bytes::from_static(b"abc")).await);
        tx.fin();
        let mut out = Vec::new();
        rx.read_to_end(&mut out).await.unwrap();
        assert_eq!(out, b"abc");
    }

    #[tokio::test]
    async fn reset_and_abort_are_errors() {
        let (tx, mut rx) = channel();
        tx.reset();
        let err = rx.read_to_end(&mut Vec::new()).await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::ConnectionReset);
        let (tx, mut rx) = channel();
        drop(tx);
        let err = rx.read_to_end(&mut Vec::new()).await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::ConnectionAborted);
    }

    #[tokio::test]
    async fn budget_blocks_until_consumed() {
        let budget = Budget::new(8);
        let (tx, mut rx) = channel();
        assert!(tx.data(&budget, Bytes::from_static(b"12345678")).await);
        // The budget is spent: the next piece waits for the reader.
        let blocked = tokio::time::timeout(
            Duration::from_millis(50),
            tx.data(&budget, Bytes::from_static(b"9")),
        )
        .await;
        assert!(blocked.is_err());
        let mut buf = [0u8; 8];
        rx.read_exact(&mut buf).await.unwrap();
        assert!(tx.data(&budget, Bytes::from_static(b"9")).await);
        // A piece larger than the budget still passes, alone.
        let big = tokio::spawn({
            let budget = budget.clone();
            async move { tx.data(&budget, Bytes::from(vec![0u8; 100])).await }
        });
        let mut out = vec![0u8; 101];
        rx.read_exact(&mut out).await.unwrap();
        assert!(big.await.unwrap());
    }

    #[tokio::test]
    async fn dropped_reader_returns_budget() {
        let budget = Budget::new(4);
        let (tx, rx) = channel();
        drop(rx);
        assert!(!tx.data(&budget, Bytes::from_static(b"1234")).await);
        assert!(budget.acquire(4).await.is_some());
    }
}
