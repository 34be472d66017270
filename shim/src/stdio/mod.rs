//! A process's stdio as the shim holds it.
//!
//! A container's main process gets pipes (or a pty) whose other ends the shim keeps: its
//! output is written to the CRI log and copied to attached clients, its stdin is fed from
//! attach sessions. An exec'd process gets the FIFOs the daemon created (for a tty the shim
//! copies between the FIFOs and the pty master).
//!
//! Here: the pipes, the copying and the attach socket ([`IoHandle`]). Below: `console` (a
//! terminal's master, received from the runtime or the helper), `logio` (the CRI log
//! format), `log_uri` (containerd's `file://` and `binary://` log URIs), `init` (a
//! container's stdio as its launcher wants it: peapod's own, or containerd's FIFOs).

pub mod console;
pub mod init;
pub mod log_uri;
pub mod logio;

use crate::backend::runtime_cli::ProcessIo;
use console::{AsyncFile, ConsoleSocket};
use logio::{CriLog, Stream};
use peapod_shim::protocol::attach::{ClientFrame, ServerFrame};
use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::Path;
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::net::UnixListener;
use tokio::sync::{broadcast, watch};

type Writer = Box<dyn AsyncWrite + Send + Unpin>;

fn dup(fd: RawFd) -> io::Result<OwnedFd> {
    // SAFETY: F_DUPFD_CLOEXEC returns a new descriptor we then own.
    let new = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 3) };
    if new < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: new is a fresh descriptor.
    Ok(unsafe { OwnedFd::from_raw_fd(new) })
}

fn set_blocking(fd: RawFd) -> io::Result<()> {
    // SAFETY: fcntl on a descriptor we own.
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFL);
        if flags < 0 || libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_NONBLOCK) < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Opens one end of a FIFO the daemon made, without blocking (the daemon already holds the
/// other end; if it does not, this fails instead of hanging), then makes it blocking for the
/// process that inherits it.
fn open_fifo(path: &str, write: bool) -> io::Result<OwnedFd> {
    let c = CString::new(path).map_err(io::Error::other)?;
    let mode = if write {
        libc::O_WRONLY
    } else {
        libc::O_RDONLY
    };
    // SAFETY: open with a valid C string.
    let fd = unsafe { libc::open(c.as_ptr(), mode | libc::O_NONBLOCK | libc::O_CLOEXEC) };
    if fd < 0 {
        let err = io::Error::last_os_error();
        return Err(io::Error::new(
            err.kind(),
            format!("open fifo {path}: {err}"),
        ));
    }
    // SAFETY: fd is fresh.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    set_blocking(fd.as_raw_fd())?;
    Ok(fd)
}

/// The attach-facing side of a running process's stdio.
pub struct IoHandle {
    stdin: Arc<tokio::sync::Mutex<Option<Writer>>>,
    master: Option<OwnedFd>,
    output: Arc<Fanout>,
    /// Becomes true when every output stream reached EOF (and the log is flushed).
    done: watch::Receiver<bool>,
    stdin_once: bool,
    pub log: Option<Arc<Mutex<CriLog>>>,
}

impl IoHandle {
    pub async fn write_stdin(&self, data: &[u8]) -> io::Result<()> {
        let mut guard = self.stdin.lock().await;
        match guard.as_mut() {
            Some(w) => w.write_all(data).await,
            None => Err(io::Error::new(io::ErrorKind::BrokenPipe, "stdin is closed")),
        }
    }

    pub async fn close_stdin(&self) {
        let mut guard = self.stdin.lock().await;
        if let Some(mut w) = guard.take() {
            let _ = w.shutdown().await;
        }
    }

    pub fn resize(&self, width: u16, height: u16) -> io::Result<()> {
        match &self.master {
            Some(m) => console::resize(m.as_raw_fd(), width, height),
            None => Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "the process has no terminal",
            )),
        }
    }

    /// Waits until all output has been copied (bounded by the caller).
    pub async fn wait_output_done(&self) {
        let mut done = self.done.clone();
        let _ = done.wait_for(|d| *d).await;
    }

    /// Stops handing output to attach clients; their connections then end.
    pub fn close_output(&self) {
        self.output.close();
    }

    fn subscribe(&self) -> Option<broadcast::Receiver<ServerFrame>> {
        self.output.subscribe()
    }
}

/// Stdio prepared for `runc create`; [`PreparedInit::start`] wires it up once created.
pub struct PreparedInit {
    pub process_io: ProcessIo,
    pub console: Option<ConsoleSocket>,
    stdout: Option<OwnedFd>,
    stderr: Option<OwnedFd>,
    stdin: Option<OwnedFd>,
    stdin_once: bool,
    log: Option<Arc<Mutex<CriLog>>>,
}

/// Pipes (or a console socket) for a container's main process.
pub fn prepare_init(
    log_path: &str,
    want_stdin: bool,
    stdin_once: bool,
    console_path: Option<&Path>,
) -> io::Result<PreparedInit> {
    let log = if log_path.is_empty() {
        None
    } else {
        Some(Arc::new(Mutex::new(CriLog::open(Path::new(log_path))?)))
    };
    if let Some(path) = console_path {
        return Ok(PreparedInit {
            process_io: ProcessIo::null(),
            console: Some(ConsoleSocket::bind(path)?),
            stdout: None,
            stderr: None,
            stdin: None,
            stdin_once,
            log,
        });
    }
    let (out_r, out_w) = peapod_shim::launch::pipe()?;
    let (err_r, err_w) = peapod_shim::launch::pipe()?;
    let (stdin_child, stdin_keep) = if want_stdin {
        let (r, w) = peapod_shim::launch::pipe()?;
        (Some(r), Some(w))
    } else {
        (None, None)
    };
    Ok(PreparedInit {
        process_io: ProcessIo {
            stdin: stdin_child,
            stdout: Some(out_w),
            stderr: Some(err_w),
        },
        console: None,
        stdout: Some(out_r),
        stderr: Some(err_r),
        stdin: stdin_keep,
        stdin_once,
        log,
    })
}

async fn pump(
    reader: AsyncFile,
    stream: Stream,
    log: Option<Arc<Mutex<CriLog>>>,
    out: Arc<Fanout>,
    mut copy_to: Option<Writer>,
) {
    loop {
        // The log and the attach sessions take the chunk while it is in the read buffer;
        // only a copy to a FIFO (an exec's terminal) needs it past an await.
        let want_copy = copy_to.is_some();
        let chunk = reader.read_chunk(|data| {
            if let Some(log) = &log {
                if let Ok(mut l) = log.lock() {
                    if let Err(err) = l.write(stream, data) {
                        eprintln!("peapod-shim: writing the container log: {err}");
                    }
                }
            }
            out.send(stream, data);
            want_copy.then(|| data.to_vec())
        });
        let copy = match chunk.await {
            Ok(Some(copy)) => copy,
            Ok(None) | Err(_) => break,
        };
        if let (Some(w), Some(data)) = (copy_to.as_mut(), copy) {
            if w.write_all(&data).await.is_err() {
                copy_to = None;
            }
        }
    }
    if let Some(log) = &log {
        if let Ok(mut l) = log.lock() {
            let _ = l.finish(stream);
        }
    }
}

/// A process's output on its way to attach sessions.
///
/// The broadcast channel (256 frames: 28 KiB) is made by the first attach, not with the
/// process: most containers are never attached to, and until one is, output is not copied
/// into frames at all.
pub struct Fanout {
    state: Mutex<FanoutState>,
}

enum FanoutState {
    /// Nobody attached yet.
    Idle,
    Open(broadcast::Sender<ServerFrame>),
    /// The process's output was handed over for the last time: attach sessions end.
    Closed,
}

/// Frames an attach session may fall behind by before it loses some.
const FANOUT_FRAMES: usize = 256;

impl Fanout {
    fn new() -> Arc<Fanout> {
        Arc::new(Fanout {
            state: Mutex::new(FanoutState::Idle),
        })
    }

    fn closed() -> Arc<Fanout> {
        Arc::new(Fanout {
            state: Mutex::new(FanoutState::Closed),
        })
    }

    fn send(&self, stream: Stream, data: &[u8]) {
        let Ok(state) = self.state.lock() else { return };
        let FanoutState::Open(tx) = &*state else {
            return;
        };
        if tx.receiver_count() == 0 {
            return;
        }
        let frame = match stream {
            Stream::Stdout => ServerFrame::Stdout(data.to_vec()),
            Stream::Stderr => ServerFrame::Stderr(data.to_vec()),
        };
        // A session that ended in between is fine.
        let _ = tx.send(frame);
    }

    fn subscribe(&self) -> Option<broadcast::Receiver<ServerFrame>> {
        let mut state = self.state.lock().ok()?;
        match &*state {
            FanoutState::Closed => None,
            FanoutState::Open(tx) => Some(tx.subscribe()),
            FanoutState::Idle => {
                let (tx, rx) = broadcast::channel(FANOUT_FRAMES);
                *state = FanoutState::Open(tx);
                Some(rx)
            }
        }
    }

    fn close(&self) {
        if let Ok(mut state) = self.state.lock() {
            *state = FanoutState::Closed;
        }
    }
}

impl PreparedInit {
    /// After a successful create: starts copying output and returns the handle.
    pub async fn start(mut self) -> io::Result<Arc<IoHandle>> {
        let out = Fanout::new();
        let (done_tx, done_rx) = watch::channel(false);
        let mut tasks = Vec::new();
        let (stdin, master): (Option<Writer>, Option<OwnedFd>) = match self.console.take() {
            Some(console) => {
                let master = tokio::time::timeout(
                    std::time::Duration::from_secs(10),
                    console.receive_master(),
                )
                .await
                .map_err(|_| {
                    io::Error::new(io::ErrorKind::TimedOut, "no console from the runtime")
                })??;
                let reader = AsyncFile::new(dup(master.as_raw_fd())?)?;
                let writer = AsyncFile::new(dup(master.as_raw_fd())?)?;
                tasks.push(tokio::spawn(pump(
                    reader,
                    Stream::Stdout,
                    self.log.clone(),
                    out.clone(),
                    None,
                )));
                (Some(Box::new(writer) as Writer), Some(master))
            }
            None => {
                for (fd, stream) in [
                    (self.stdout.take(), Stream::Stdout),
                    (self.stderr.take(), Stream::Stderr),
                ] {
                    if let Some(fd) = fd {
                        let reader = AsyncFile::new(fd)?;
                        tasks.push(tokio::spawn(pump(
                            reader,
                            stream,
                            self.log.clone(),
                            out.clone(),
                            None,
                        )));
                    }
                }
                let stdin = match self.stdin.take() {
                    Some(fd) => Some(Box::new(AsyncFile::new(fd)?) as Writer),
                    None => None,
                };
                (stdin, None)
            }
        };
        tokio::spawn(async move {
            for t in tasks {
                let _ = t.await;
            }
            let _ = done_tx.send(true);
        });
        Ok(Arc::new(IoHandle {
            stdin: Arc::new(tokio::sync::Mutex::new(stdin)),
            master,
            output: out,
            done: done_rx,
            stdin_once: self.stdin_once,
            log: self.log,
        }))
    }
}

/// Stdio prepared for `runc exec` from the daemon's FIFOs.
pub struct PreparedExec {
    pub process_io: ProcessIo,
    pub console: Option<ConsoleSocket>,
    stdin_fifo: Option<OwnedFd>,
    stdout_fifo: Option<OwnedFd>,
}

pub fn prepare_exec(
    stdin: &str,
    stdout: &str,
    stderr: &str,
    console_path: Option<&Path>,
) -> io::Result<PreparedExec> {
    let stdin_fd = if stdin.is_empty() {
        None
    } else {
        Some(open_fifo(stdin, false)?)
    };
    let stdout_fd = if stdout.is_empty() {
        None
    } else {
        Some(open_fifo(stdout, true)?)
    };
    if let Some(path) = console_path {
        return Ok(PreparedExec {
            process_io: ProcessIo::null(),
            console: Some(ConsoleSocket::bind(path)?),
            stdin_fifo: stdin_fd,
            stdout_fifo: stdout_fd,
        });
    }
    let stderr_fd = if stderr.is_empty() {
        None
    } else {
        Some(open_fifo(stderr, true)?)
    };
    Ok(PreparedExec {
        process_io: ProcessIo {
            stdin: stdin_fd,
            stdout: stdout_fd,
            stderr: stderr_fd,
        },
        console: None,
        stdin_fifo: None,
        stdout_fifo: None,
    })
}

impl PreparedExec {
    /// After a successful exec: for a tty, copies between the FIFOs and the pty master.
    pub async fn start(mut self) -> io::Result<Arc<IoHandle>> {
        let (done_tx, done_rx) = watch::channel(false);
        let Some(console) = self.console.take() else {
            let _ = done_tx.send(true);
            return Ok(Arc::new(IoHandle {
                stdin: Arc::new(tokio::sync::Mutex::new(None)),
                master: None,
                output: Fanout::closed(),
                done: done_rx,
                stdin_once: false,
                log: None,
            }));
        };
        let master =
            tokio::time::timeout(std::time::Duration::from_secs(10), console.receive_master())
                .await
                .map_err(|_| {
                    io::Error::new(io::ErrorKind::TimedOut, "no console from the runtime")
                })??;
        let reader = AsyncFile::new(dup(master.as_raw_fd())?)?;
        let stdout = match self.stdout_fifo.take() {
            Some(fd) => Some(Box::new(AsyncFile::new(fd)?) as Writer),
            None => None,
        };
        // Nobody attaches to an exec: its output goes to the daemon's FIFO only.
        let pump_task = tokio::spawn(pump(reader, Stream::Stdout, None, Fanout::closed(), stdout));
        tokio::spawn(async move {
            let _ = pump_task.await;
            let _ = done_tx.send(true);
        });
        if let Some(fd) = self.stdin_fifo.take() {
            let mut from = AsyncFile::new(fd)?;
            let mut to = AsyncFile::new(dup(master.as_raw_fd())?)?;
            tokio::spawn(async move {
                let _ = tokio::io::copy(&mut from, &mut to).await;
                // End of input on a terminal is ^D, which the line discipline turns into EOF.
                let _ = to.write_all(&[4]).await;
            });
        }
        Ok(Arc::new(IoHandle {
            stdin: Arc::new(tokio::sync::Mutex::new(None)),
            master: Some(master),
            output: Fanout::closed(),
            done: done_rx,
            stdin_once: false,
            log: None,
        }))
    }
}

/// Serves attach sessions for a container on a unix socket until `stop` fires.
pub fn serve_attach(
    path: &Path,
    io: Arc<IoHandle>,
    mut stop: watch::Receiver<bool>,
) -> io::Result<()> {
    let _ = std::fs::remove_file(path);
    let listener = UnixListener::bind(path)?;
    let path = path.to_path_buf();
    tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = stop.wait_for(|s| *s) => break,
                accepted = listener.accept() => {
                    let Ok((conn, _)) = accepted else { break };
                    tokio::spawn(attach_session(conn, io.clone()));
                }
            }
        }
        let _ = std::fs::remove_file(&path);
    });
    Ok(())
}

async fn attach_session(conn: tokio::net::UnixStream, io: Arc<IoHandle>) {
    let (mut rd, mut wr) = conn.into_split();
    let output = io.subscribe();
    let writer = tokio::spawn(async move {
        let Some(mut output) = output else { return };
        loop {
            match output.recv().await {
                Ok(frame) => {
                    if frame.write_to(&mut wr).await.is_err() {
                        break;
                    }
                }
                Err(broadcast::error::RecvError::Lagged(_)) => continue,
                Err(broadcast::error::RecvError::Closed) => break,
            }
        }
        let _ = wr.shutdown().await;
    });
    loop {
        match ClientFrame::read_from(&mut rd).await {
            Ok(Some(ClientFrame::Stdin(data))) => {
                if io.write_stdin(&data).await.is_err() {
                    // Stdin closed: keep the session for output.
                }
            }
            Ok(Some(ClientFrame::CloseStdin)) => io.close_stdin().await,
            Ok(Some(ClientFrame::Resize { width, height })) => {
                let _ = io.resize(width, height);
            }
            Ok(None) | Err(_) => break,
        }
    }
    if io.stdin_once {
        io.close_stdin().await;
    }
    // The client went away; the output side ends when the client's socket errors or the
    // process's output ends.
    let _ = writer.await;
}
