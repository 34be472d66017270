//! The unix-socket transport of peapod's gRPC servers, such that any gRPC client can call them.
//!
//! grpcio (since 1.57), grpc-java, grpc-swift and grpcurl send the socket path, often
//! percent-encoded (`%2Frun%2Fpeapod%2Fpeapod.sock`), as the HTTP/2 `:authority` of requests on
//! unix sockets. The `h2` server under tonic parses `:authority` as a URI authority, finds it
//! malformed and resets the stream with PROTOCOL_ERROR before any service code runs; Go servers
//! (containerd, CRI-O) accept it. h2 has no option to relax the check, and a forked h2 would be
//! ours to keep in step with every hyper release. So the fix sits below h2, on the byte stream:
//! [`AuthorityStream`] watches the client's first header block and, only when its authority is
//! one h2 would refuse, re-encodes that connection's header blocks with `:authority: localhost`
//! (what grpc-go itself sends on unix sockets). Connections from grpc-go, tonic and crictl are
//! recognised on their first request and then pass through untouched.
//!
//! The authority of a unix-socket request names nothing the server routes on, so replacing it
//! loses nothing.
//!
//! Also the gRPC contract on deadlines, which tonic's server keeps only in part: a call past
//! the client's `grpc-timeout` ends with DEADLINE_EXCEEDED ([`deadline::DeadlineLayer`]).
//!
//! The other side of the socket is here too: [`client`] connects tonic clients to a unix
//! socket (the CLI, the integration tests and the benchmarks use its [`client::Cri`]).

pub mod client;
pub mod deadline;
mod rewrite;

pub use rewrite::{authority_is_valid, AuthorityRewriter, REPLACEMENT_AUTHORITY};

use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{UnixListener, UnixStream};
use tokio_stream::Stream;

/// How much is read from the client at a time while header blocks are inspected.
const READ_CHUNK: usize = 16 * 1024;

/// A connection whose client-to-server bytes go through an [`AuthorityRewriter`].
pub struct AuthorityStream<T> {
    inner: T,
    rewriter: AuthorityRewriter,
    /// Rewritten bytes not yet handed to the reader, from `pending_pos` on.
    pending: Vec<u8>,
    pending_pos: usize,
    eof: bool,
}

impl<T> AuthorityStream<T> {
    pub fn new(inner: T) -> Self {
        AuthorityStream {
            inner,
            rewriter: AuthorityRewriter::default(),
            pending: Vec::new(),
            pending_pos: 0,
            eof: false,
        }
    }

    pub fn get_ref(&self) -> &T {
        &self.inner
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for AuthorityStream<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        loop {
            if this.pending_pos < this.pending.len() {
                let n = buf.remaining().min(this.pending.len() - this.pending_pos);
                buf.put_slice(&this.pending[this.pending_pos..this.pending_pos + n]);
                this.pending_pos += n;
                if this.pending_pos == this.pending.len() {
                    this.pending.clear();
                    this.pending_pos = 0;
                }
                return Poll::Ready(Ok(()));
            }
            if this.eof {
                return Poll::Ready(Ok(()));
            }
            if this.rewriter.is_pass_through() {
                // The common case after the first request: no copy, no parsing.
                return Pin::new(&mut this.inner).poll_read(cx, buf);
            }
            let mut chunk = [0u8; READ_CHUNK];
            let mut read = ReadBuf::new(&mut chunk);
            ready!(Pin::new(&mut this.inner).poll_read(cx, &mut read))?;
            if read.filled().is_empty() {
                this.rewriter.finish(&mut this.pending);
                this.eof = true;
            } else {
                this.rewriter.feed(read.filled(), &mut this.pending);
            }
        }
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for AuthorityStream<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

impl<T: tonic::transport::server::Connected> tonic::transport::server::Connected
    for AuthorityStream<T>
{
    type ConnectInfo = T::ConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.inner.connect_info()
    }
}

/// The accepted connections of `listener`, each wrapped in an [`AuthorityStream`]: pass it to
/// tonic's `serve_with_incoming`.
pub fn incoming(
    listener: UnixListener,
) -> impl Stream<Item = io::Result<AuthorityStream<UnixStream>>> + Send + 'static {
    use tokio_stream::StreamExt;
    tokio_stream::wrappers::UnixListenerStream::new(listener)
        .map(|conn| conn.map(AuthorityStream::new))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// Bytes written by the client come out rewritten on the server side, and the other
    /// direction is untouched.
    #[tokio::test]
    async fn stream_rewrites_what_the_server_reads() {
        let (mut client, server) = tokio::io::duplex(64);
        let mut server = AuthorityStream::new(server);
        let mut enc = loona_hpack::Encoder::new();
        let block = enc.encode(vec![
            (&b":method"[..], &b"POST"[..]),
            (b":scheme", b"http"),
            (b":path", b"/x"),
            (b":authority", b"%2Ftmp%2Fa.sock"),
        ]);
        let mut bytes = rewrite::PREFACE.to_vec();
        bytes.extend_from_slice(&(block.len() as u32).to_be_bytes()[1..]);
        bytes.extend_from_slice(&[1, 0x5, 0, 0, 0, 1]);
        bytes.extend_from_slice(&block);
        let writer = tokio::spawn(async move {
            client.write_all(&bytes).await.unwrap();
            client.shutdown().await.unwrap();
            let mut back = Vec::new();
            client.read_to_end(&mut back).await.unwrap();
            back
        });
        let mut got = Vec::new();
        server.read_to_end(&mut got).await.unwrap();
        server.write_all(b"reply").await.unwrap();
        server.shutdown().await.unwrap();
        assert_eq!(writer.await.unwrap(), b"reply");
        let headers = loona_hpack::Decoder::new()
            .decode(&got[rewrite::PREFACE.len() + 9..])
            .unwrap();
        let authority = headers.iter().find(|(n, _)| n == b":authority").unwrap();
        assert_eq!(authority.1, REPLACEMENT_AUTHORITY);
    }
}
