//! Terminals: the runtime creates the pty inside the container and sends its master end over
//! a `--console-socket`; the shim then owns the master (output, input, resize).

use std::io::{self, IoSliceMut};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::UnixListener;

/// A listening console socket, removed when dropped.
pub struct ConsoleSocket {
    path: PathBuf,
    listener: UnixListener,
}

impl ConsoleSocket {
    pub fn bind(path: &Path) -> io::Result<ConsoleSocket> {
        let _ = std::fs::remove_file(path);
        let listener = UnixListener::bind(path)?;
        Ok(ConsoleSocket {
            path: path.to_path_buf(),
            listener,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Waits for the runtime to connect and send the pty master.
    pub async fn receive_master(&self) -> io::Result<OwnedFd> {
        let (stream, _) = self.listener.accept().await?;
        loop {
            stream.readable().await?;
            match receive_fd(stream.as_raw_fd()) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                other => return other,
            }
        }
    }
}

impl Drop for ConsoleSocket {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

fn receive_fd(sock: RawFd) -> io::Result<OwnedFd> {
    use nix::sys::socket::{recvmsg, ControlMessageOwned, MsgFlags};
    let mut buf = [0u8; 4096];
    let mut iov = [IoSliceMut::new(&mut buf)];
    let mut space = nix::cmsg_space!([RawFd; 1]);
    let msg = recvmsg::<()>(sock, &mut iov, Some(&mut space), MsgFlags::MSG_CMSG_CLOEXEC)
        .map_err(io::Error::from)?;
    for cmsg in msg.cmsgs().map_err(io::Error::from)? {
        if let ControlMessageOwned::ScmRights(fds) = cmsg {
            if let Some(&fd) = fds.first() {
                for &extra in &fds[1..] {
                    // SAFETY: extra descriptors were just received and are owned by nobody.
                    drop(unsafe { OwnedFd::from_raw_fd(extra) });
                }
                // SAFETY: fd was just received over SCM_RIGHTS and is owned by nobody else.
                return Ok(unsafe { OwnedFd::from_raw_fd(fd) });
            }
        }
    }
    Err(io::Error::new(
        io::ErrorKind::InvalidData,
        "console socket message carried no file descriptor",
    ))
}

/// Sets the terminal size of a pty master.
pub fn resize(master: RawFd, width: u16, height: u16) -> io::Result<()> {
    let ws = libc::winsize {
        ws_row: height,
        ws_col: width,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCSWINSZ reads a winsize from the pointer, which is valid for the call.
    if unsafe { libc::ioctl(master, libc::TIOCSWINSZ, &ws) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

pub fn set_nonblocking(fd: RawFd) -> io::Result<()> {
    // SAFETY: fcntl on a descriptor we own.
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFL);
        if flags < 0 || libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Any non-blocking descriptor (a pty master, a pipe end) as tokio AsyncRead + AsyncWrite.
pub struct AsyncFile {
    inner: AsyncFd<OwnedFd>,
}

impl AsyncFile {
    pub fn new(fd: OwnedFd) -> io::Result<AsyncFile> {
        set_nonblocking(fd.as_raw_fd())?;
        // SAFETY: the OwnedFd is moved into the AsyncFd, so the descriptor stays open and
        // refers to the same file description for the AsyncFd's whole life.
        let inner = unsafe { AsyncFd::register(fd) }.map_err(|e| e.into_parts().1)?;
        Ok(AsyncFile { inner })
    }

    /// Waits until the file can be read, reads at most `CHUNK` bytes into a buffer on the
    /// stack and hands them to `each`; `None` at end of file (a pty master's EIO included).
    ///
    /// No buffer is held while waiting: a container's output streams sit idle almost all
    /// the time, and a buffer each (32 KiB, one per stream) was most of an idle shim's heap.
    /// The buffer lives only inside the synchronous read below, so every stream of the
    /// shim's one thread shares the same stack pages.
    pub async fn read_chunk<T>(&self, mut each: impl FnMut(&[u8]) -> T) -> io::Result<Option<T>> {
        loop {
            let mut guard = self.inner.readable().await?;
            match read_into_stack(guard.get_inner().as_raw_fd(), &mut each) {
                Err(err) if err.kind() == io::ErrorKind::WouldBlock => guard.clear_ready(),
                Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
                Err(err) if err.raw_os_error() == Some(libc::EIO) => return Ok(None),
                other => return other,
            }
        }
    }
}

/// The most [`AsyncFile::read_chunk`] reads at once.
const CHUNK: usize = 32 * 1024;

/// One `read(2)` into a stack buffer, given to `each`; `None` at end of file. Kept out of
/// the async function so that the buffer can never become part of a future's state.
#[inline(never)]
fn read_into_stack<T>(fd: RawFd, each: &mut impl FnMut(&[u8]) -> T) -> io::Result<Option<T>> {
    let mut buf = [0u8; CHUNK];
    // SAFETY: reading into a buffer of CHUNK bytes that we own.
    let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
    match n {
        0 => Ok(None),
        n if n > 0 => Ok(Some(each(&buf[..n as usize]))),
        _ => Err(io::Error::last_os_error()),
    }
}

impl AsyncRead for AsyncFile {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        loop {
            let mut guard = match self.inner.poll_read_ready(cx) {
                Poll::Ready(g) => g?,
                Poll::Pending => return Poll::Pending,
            };
            let unfilled = buf.initialize_unfilled();
            let fd = guard.get_inner().as_raw_fd();
            // SAFETY: reading into an initialized buffer of the given length.
            let n = unsafe { libc::read(fd, unfilled.as_mut_ptr().cast(), unfilled.len()) };
            if n >= 0 {
                buf.advance(n as usize);
                return Poll::Ready(Ok(()));
            }
            let err = io::Error::last_os_error();
            match err.kind() {
                io::ErrorKind::WouldBlock => guard.clear_ready(),
                io::ErrorKind::Interrupted => {}
                // A pty master reads EIO once the last slave fd is closed: that is its EOF.
                _ if err.raw_os_error() == Some(libc::EIO) => return Poll::Ready(Ok(())),
                _ => return Poll::Ready(Err(err)),
            }
        }
    }
}

impl AsyncWrite for AsyncFile {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        loop {
            let mut guard = match self.inner.poll_write_ready(cx) {
                Poll::Ready(g) => g?,
                Poll::Pending => return Poll::Pending,
            };
            let fd = guard.get_inner().as_raw_fd();
            // SAFETY: writing from a valid slice.
            let n = unsafe { libc::write(fd, data.as_ptr().cast(), data.len()) };
            if n >= 0 {
                return Poll::Ready(Ok(n as usize));
            }
            let err = io::Error::last_os_error();
            match err.kind() {
                io::ErrorKind::WouldBlock => guard.clear_ready(),
                io::ErrorKind::Interrupted => {}
                _ => return Poll::Ready(Err(err)),
            }
        }
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}
