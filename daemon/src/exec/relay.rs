//! One forwarded connection's bytes, both ways, between the client's stream and the pod's
//! TCP socket, and which of its ends is an error to report.
//!
//! Only the pod's side can fail a forward. The client ends its stream as it likes: with a FIN
//! when its local connection closed, or with a reset, which is how client-go (kubectl,
//! critest) ends every forwarded connection once the pod's side is done ("to discard any
//! unsent data"), then waits on the error stream. Reported as an error, that reset makes
//! client-go drop the whole port-forward session ("lost connection to pod"): critest's
//! portforward specs then failed whenever the drop came before the spec ended.

use std::io;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

/// How long the client's direction may go on once the pod closed its side: client-go resets
/// at once; a client that keeps its stream open gets no more from the pod anyway.
const CLIENT_LINGER: std::time::Duration = std::time::Duration::from_secs(1);

/// A failure, and the side it came from.
#[derive(Debug)]
enum Failed {
    Client,
    Pod(io::Error),
}

/// Copies `from` to `to` until `from` ends, then shuts `to` down. `from` is the client's
/// stream when `client_reads` (and `to` the pod's socket), or the other way round: a read
/// error is `from`'s side's, a write error `to`'s.
async fn pump(
    from: &mut (impl AsyncRead + Unpin),
    to: &mut (impl AsyncWrite + Unpin),
    client_reads: bool,
) -> Result<(), Failed> {
    let blame = |client: bool, e: io::Error| {
        if client {
            Failed::Client
        } else {
            Failed::Pod(e)
        }
    };
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = from
            .read(&mut buf)
            .await
            .map_err(|e| blame(client_reads, e))?;
        if n == 0 {
            break;
        }
        to.write_all(&buf[..n])
            .await
            .map_err(|e| blame(!client_reads, e))?;
    }
    to.shutdown().await.map_err(|e| blame(!client_reads, e))
}

/// Relays `stream` (the client's) and `tcp` (the pod's) until the connection is over: the
/// pod's answer runs to its end after the client's FIN; once the pod closes, the client's
/// direction gets [`CLIENT_LINGER`]. An error is returned only if the pod's side failed.
pub async fn relay(stream: impl AsyncRead + AsyncWrite + Unpin, tcp: TcpStream) -> io::Result<()> {
    let (mut client_r, mut client_w) = tokio::io::split(stream);
    let (mut pod_r, mut pod_w) = tcp.into_split();
    let to_pod = pump(&mut client_r, &mut pod_w, true);
    let to_client = pump(&mut pod_r, &mut client_w, false);
    tokio::pin!(to_pod, to_client);
    let outcome = tokio::select! {
        r = &mut to_pod => match r {
            Ok(()) => to_client.await,
            Err(e) => Err(e),
        },
        r = &mut to_client => match r {
            Ok(()) => tokio::time::timeout(CLIENT_LINGER, to_pod).await.unwrap_or(Ok(())),
            Err(e) => Err(e),
        },
    };
    match outcome {
        Ok(()) | Err(Failed::Client) => Ok(()),
        Err(Failed::Pod(e)) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::pin::Pin;
    use std::task::{Context, Poll};
    use tokio::net::TcpListener;

    /// A pod's server that answers one request and closes.
    async fn pod_answering(answer: &'static [u8]) -> TcpStream {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            let mut buf = [0u8; 64];
            let _ = s.read(&mut buf).await;
            s.write_all(answer).await.unwrap();
        });
        TcpStream::connect(addr).await.unwrap()
    }

    /// The client's stream: it sends `request`, then ends with a FIN or (`reset`) as a reset
    /// stream's reads fail; what it is sent is kept.
    struct Client {
        request: io::Cursor<Vec<u8>>,
        reset: bool,
        got: Vec<u8>,
    }

    impl Client {
        fn new(request: &[u8], reset: bool) -> Client {
            Client {
                request: io::Cursor::new(request.to_vec()),
                reset,
                got: Vec::new(),
            }
        }
    }

    impl AsyncRead for Client {
        fn poll_read(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            buf: &mut tokio::io::ReadBuf<'_>,
        ) -> Poll<io::Result<()>> {
            let before = buf.filled().len();
            let reset = self.reset;
            match Pin::new(&mut self.request).poll_read(cx, buf) {
                Poll::Ready(Ok(())) if reset && buf.filled().len() == before => Poll::Ready(Err(
                    io::Error::new(io::ErrorKind::ConnectionReset, "stream reset by peer"),
                )),
                other => other,
            }
        }
    }

    impl AsyncWrite for Client {
        fn poll_write(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<io::Result<usize>> {
            self.got.extend_from_slice(buf);
            Poll::Ready(Ok(buf.len()))
        }
        fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
        fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    #[tokio::test]
    async fn a_client_that_resets_its_stream_ends_the_forward_without_error() {
        let tcp = pod_answering(b"HTTP/1.0 200 OK\r\n\r\nhello").await;
        let mut client = Client::new(b"GET / HTTP/1.0\r\n\r\n", true);
        relay(&mut client, tcp).await.unwrap();
    }

    #[tokio::test]
    async fn after_the_clients_fin_the_pods_answer_runs_to_its_end() {
        let tcp = pod_answering(b"HTTP/1.0 200 OK\r\n\r\nhello").await;
        let mut client = Client::new(b"GET / HTTP/1.0\r\n\r\n", false);
        relay(&mut client, tcp).await.unwrap();
        assert_eq!(client.got, b"HTTP/1.0 200 OK\r\n\r\nhello");
    }

    #[tokio::test]
    async fn a_pod_that_resets_the_connection_is_an_error() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let (s, _) = listener.accept().await.unwrap();
            // SO_LINGER 0: closing sends RST, not FIN.
            let s = s.into_std().unwrap();
            let linger = libc::linger {
                l_onoff: 1,
                l_linger: 0,
            };
            // SAFETY: a valid socket, and a linger struct whose size is passed.
            let r = unsafe {
                libc::setsockopt(
                    std::os::fd::AsRawFd::as_raw_fd(&s),
                    libc::SOL_SOCKET,
                    libc::SO_LINGER,
                    (&linger as *const libc::linger).cast(),
                    std::mem::size_of::<libc::linger>() as libc::socklen_t,
                )
            };
            assert_eq!(r, 0);
            drop(s);
        });
        let tcp = TcpStream::connect(addr).await.unwrap();
        let (client, _far) = tokio::io::duplex(1024);
        let err = relay(client, tcp).await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::ConnectionReset, "{err}");
    }
}
