//! Test doubles: a fake runtime and TCP echo servers on loopback.

#![allow(dead_code)]

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use peapod_streaming::{
    AsyncReadWrite, Config, ExecRequest, Runtime, RuntimeError, Server, StreamIo,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

pub fn init_tracing() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
}

/// Sets a counter when dropped: proves the server dropped a runtime future.
struct DropFlag(Arc<AtomicUsize>);

impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// A runtime whose "commands" are test behaviours:
///
/// * `echo`: stdin to stdout until EOF, exit 0;
/// * `echo-exit N`: stdin to stdout until EOF, `bye` to stderr, exit N;
/// * `print OUT ERR N`: OUT to stdout, ERR to stderr, exit N;
/// * `resizes N`: prints `WxH` for each of N terminal sizes, exit 0;
/// * `big N`: N bytes of a pattern to stdout;
/// * `hang`: never ends (until dropped);
/// * `fail`: the runtime fails.
///
/// Attach echoes stdin to stdout (and says `attached` on stderr). Port-forward connects
/// to the loopback port mapped for the requested port.
#[derive(Default)]
pub struct Fake {
    pub ports: HashMap<u16, u16>,
    pub log: Mutex<Vec<String>>,
    pub dropped: Arc<AtomicUsize>,
}

impl Fake {
    pub fn log(&self) -> Vec<String> {
        self.log.lock().unwrap().clone()
    }
}

fn io_err(context: &str) -> impl FnOnce(std::io::Error) -> RuntimeError + '_ {
    move |source| RuntimeError::Io {
        context: context.to_string(),
        source,
    }
}

pub fn pattern(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i % 251) as u8).collect()
}

#[async_trait]
impl Runtime for Fake {
    async fn exec(
        &self,
        container_id: &str,
        cmd: Vec<String>,
        mut io: StreamIo,
    ) -> Result<i32, RuntimeError> {
        self.log.lock().unwrap().push(format!(
            "exec {container_id} {} tty={}",
            cmd.join(" "),
            io.tty
        ));
        let arg = |i: usize| cmd.get(i).cloned().unwrap_or_default();
        match cmd[0].as_str() {
            "echo" | "echo-exit" => {
                if let (Some(mut i), Some(mut o)) = (io.stdin.take(), io.stdout.take()) {
                    tokio::io::copy(&mut i, &mut o)
                        .await
                        .map_err(io_err("copy"))?;
                    o.shutdown().await.map_err(io_err("close stdout"))?;
                }
                if let Some(mut e) = io.stderr.take() {
                    e.write_all(b"bye\n").await.map_err(io_err("stderr"))?;
                }
                Ok(arg(1).parse().unwrap_or(0))
            }
            "print" => {
                if let Some(o) = io.stdout.as_mut() {
                    o.write_all(arg(1).as_bytes())
                        .await
                        .map_err(io_err("stdout"))?;
                }
                if let Some(e) = io.stderr.as_mut() {
                    e.write_all(arg(2).as_bytes())
                        .await
                        .map_err(io_err("stderr"))?;
                }
                Ok(arg(3).parse().unwrap_or(0))
            }
            "resizes" => {
                let n: usize = arg(1).parse().unwrap_or(1);
                let mut rx = io
                    .resize
                    .take()
                    .ok_or_else(|| RuntimeError::Other("no resize channel".into()))?;
                let mut out = io
                    .stdout
                    .take()
                    .ok_or_else(|| RuntimeError::Other("no stdout".into()))?;
                for _ in 0..n {
                    let Some(s) = rx.recv().await else { break };
                    out.write_all(format!("{}x{}\n", s.width, s.height).as_bytes())
                        .await
                        .map_err(io_err("stdout"))?;
                }
                Ok(0)
            }
            "big" => {
                let n: usize = arg(1).parse().unwrap_or(0);
                if let Some(o) = io.stdout.as_mut() {
                    o.write_all(&pattern(n)).await.map_err(io_err("stdout"))?;
                }
                Ok(0)
            }
            "hang" => {
                let _flag = DropFlag(self.dropped.clone());
                std::future::pending::<()>().await;
                Ok(0)
            }
            "fail" => Err(RuntimeError::ContainerNotRunning(container_id.to_string())),
            other => Err(RuntimeError::Other(format!("unknown test command {other}"))),
        }
    }

    async fn attach(&self, container_id: &str, mut io: StreamIo) -> Result<(), RuntimeError> {
        self.log
            .lock()
            .unwrap()
            .push(format!("attach {container_id} tty={}", io.tty));
        if let Some(mut e) = io.stderr.take() {
            e.write_all(b"attached\n").await.map_err(io_err("stderr"))?;
        }
        if let (Some(mut i), Some(mut o)) = (io.stdin.take(), io.stdout.take()) {
            tokio::io::copy(&mut i, &mut o)
                .await
                .map_err(io_err("copy"))?;
        }
        Ok(())
    }

    async fn port_forward(
        &self,
        sandbox_id: &str,
        port: u16,
        mut stream: Box<dyn AsyncReadWrite>,
    ) -> Result<(), RuntimeError> {
        self.log
            .lock()
            .unwrap()
            .push(format!("portforward {sandbox_id} {port}"));
        let Some(real) = self.ports.get(&port) else {
            return Err(RuntimeError::Other(format!(
                "dial tcp 127.0.0.1:{port}: connection refused"
            )));
        };
        let mut tcp = TcpStream::connect(("127.0.0.1", *real))
            .await
            .map_err(io_err("connect"))?;
        tokio::io::copy_bidirectional(&mut stream, &mut tcp)
            .await
            .map_err(io_err("forward"))?;
        Ok(())
    }
}

/// A TCP server on loopback that greets each connection with `hello from NAME\n`, then
/// echoes until EOF. Returns its port.
pub async fn echo_server(name: &'static str) -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = l.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            tokio::spawn(async move {
                s.write_all(format!("hello from {name}\n").as_bytes())
                    .await
                    .ok();
                let (mut r, mut w) = s.split();
                let _ = tokio::io::copy(&mut r, &mut w).await;
                let _ = w.shutdown().await;
            });
        }
    });
    port
}

pub async fn start(fake: Fake) -> (Server, Arc<Fake>) {
    start_with(fake, Config::default()).await
}

pub async fn start_with(fake: Fake, cfg: Config) -> (Server, Arc<Fake>) {
    init_tracing();
    let fake = Arc::new(fake);
    let server = Server::start(cfg, fake.clone()).await.unwrap();
    (server, fake)
}

pub fn exec_req(cmd: &[&str]) -> ExecRequest {
    ExecRequest {
        container_id: "ctr1".into(),
        cmd: cmd.iter().map(|s| s.to_string()).collect(),
        tty: false,
        stdin: true,
        stdout: true,
        stderr: true,
    }
}

/// A duplex pipe: give the first end to the client as stdout, read the second.
pub fn pipe() -> (tokio::io::DuplexStream, tokio::io::DuplexStream) {
    tokio::io::duplex(1024 * 1024)
}

pub async fn read_line(r: &mut (impl AsyncReadExt + Unpin)) -> String {
    let mut line = Vec::new();
    let mut b = [0u8; 1];
    loop {
        let n = tokio::time::timeout(Duration::from_secs(10), r.read(&mut b))
            .await
            .expect("timed out reading a line")
            .unwrap();
        if n == 0 || b[0] == b'\n' {
            break;
        }
        line.push(b[0]);
    }
    String::from_utf8(line).unwrap()
}

/// Sends a raw HTTP request and returns the status code and the response (headers and a
/// `Content-Length` body; the connection may stay open).
pub async fn raw_http(addr: std::net::SocketAddr, request: &str) -> (u16, String) {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(request.as_bytes()).await.unwrap();
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let n = match tokio::time::timeout(Duration::from_secs(5), s.read(&mut chunk)).await {
            Ok(Ok(n)) => n,
            _ => break,
        };
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
        let text = String::from_utf8_lossy(&buf);
        if let Some(end) = text.find("\r\n\r\n") {
            let len = text[..end]
                .lines()
                .find_map(|l| {
                    let (k, v) = l.split_once(':')?;
                    k.eq_ignore_ascii_case("content-length")
                        .then(|| v.trim().parse::<usize>().ok())
                        .flatten()
                })
                .unwrap_or(0);
            if buf.len() >= end + 4 + len {
                break;
            }
        }
    }
    let text = String::from_utf8_lossy(&buf).into_owned();
    let code = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (code, text)
}
