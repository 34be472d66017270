//! `peapod exec NAME [-c C] [-i] [-t] -- CMD...`: ExecSync for a plain command, CRI Exec over the
//! daemon's streaming server (SPDY, as kubectl) with stdin and/or a terminal. The command's
//! exit code becomes this process's.

use super::target::{get_pod, pick, pod_name, DefaultContainer};
use super::{Clients, KubeError, NamespaceArg};
use peapod_proto::v1 as cri;
use peapod_streaming::client::{remote_command_spdy, ClientOptions, CommandIo, Outcome};
use peapod_streaming::protocol::STREAM_PROTOCOL_V4;
use peapod_streaming::TerminalSize;
use std::io::Write;

#[derive(clap::Args, Debug)]
pub struct ExecArgs {
    /// The pod (or `pod/NAME`).
    pub pod: String,
    /// The container (default: the first app container).
    #[arg(short = 'c', long = "container")]
    pub container: Option<String>,
    /// Pass stdin to the command.
    #[arg(short = 'i', long)]
    pub stdin: bool,
    /// Give the command a terminal.
    #[arg(short = 't', long)]
    pub tty: bool,
    /// Only print the command's output (no notice about the chosen container).
    #[arg(short = 'q', long)]
    pub quiet: bool,
    #[command(flatten)]
    pub ns: NamespaceArg,
    /// The command and its arguments (after `--`).
    #[arg(last = true, required = true)]
    pub command: Vec<String>,
}

pub async fn run(c: &mut Clients, a: ExecArgs) -> anyhow::Result<i32> {
    let name = pod_name(&a.pod)?;
    let pod = get_pod(c, &a.ns.namespace, name).await?;
    let (picked, notice) = pick(&pod, a.container.as_deref(), DefaultContainer::First)?;
    if let (Some(n), false) = (notice, a.quiet) {
        eprintln!("{n}");
    }
    let running = pod
        .pointer("/status/containerStatuses")
        .and_then(serde_json::Value::as_array)
        .into_iter()
        .chain(
            pod.pointer("/status/initContainerStatuses")
                .and_then(serde_json::Value::as_array),
        )
        .flatten()
        .any(|st| {
            st.get("name").and_then(serde_json::Value::as_str) == Some(&picked.name)
                && st.pointer("/state/running").is_some()
        });
    let Some(id) = picked.container_id.filter(|_| running) else {
        return Err(KubeError::Usage(format!(
            "cannot exec into a container in a completed pod or a container that is not running: container \"{}\" in pod \"{name}\"",
            picked.name
        ))
        .into());
    };
    // SAFETY: isatty only inspects the descriptor.
    let stdin_is_terminal = unsafe { libc::isatty(libc::STDIN_FILENO) } == 1;
    let tty = a.tty && a.stdin && stdin_is_terminal;
    if a.tty && !a.stdin {
        eprintln!("Unable to use a TTY - input is not provided (use -i)");
    } else if a.tty && !stdin_is_terminal {
        eprintln!("Unable to use a TTY - input is not a terminal or the right kind of file");
    }
    let code = if !a.stdin {
        exec_sync(c, &id, &a.command).await?
    } else {
        exec_stream(c, &id, &a.command, tty).await?
    };
    if code != 0 {
        eprintln!("command terminated with exit code {code}");
    }
    Ok(code)
}

async fn exec_sync(c: &mut Clients, id: &str, cmd: &[String]) -> anyhow::Result<i32> {
    let r = c
        .cri
        .runtime
        .exec_sync(cri::ExecSyncRequest {
            container_id: id.to_string(),
            cmd: cmd.to_vec(),
            timeout: 0,
        })
        .await
        .map_err(|s| KubeError::from_status(s, ""))?
        .into_inner();
    std::io::stdout().write_all(&r.stdout)?;
    std::io::stdout().flush()?;
    std::io::stderr().write_all(&r.stderr)?;
    Ok(r.exit_code)
}

async fn exec_stream(c: &mut Clients, id: &str, cmd: &[String], tty: bool) -> anyhow::Result<i32> {
    let url = c
        .cri
        .runtime
        .exec(cri::ExecRequest {
            container_id: id.to_string(),
            cmd: cmd.to_vec(),
            tty,
            stdin: true,
            stdout: true,
            stderr: !tty,
        })
        .await
        .map_err(|s| KubeError::from_status(s, ""))?
        .into_inner()
        .url;
    let (resize, _raw) = if tty {
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        spawn_resizer(tx);
        (Some(rx), terminal::RawMode::enter())
    } else {
        (None, None)
    };
    let io = CommandIo {
        stdin: Some(Box::new(tokio::io::stdin())),
        stdout: Some(Box::new(tokio::io::stdout())),
        stderr: (!tty).then(|| Box::new(tokio::io::stderr()) as _),
        tty,
        resize,
    };
    let result = remote_command_spdy(&url, &[STREAM_PROTOCOL_V4], io, &ClientOptions::default())
        .await
        .map_err(|e| anyhow::anyhow!("exec through the streaming server: {e}"))?;
    match result.outcome {
        Outcome::Success => Ok(0),
        Outcome::ExitCode(code) => Ok(code),
        Outcome::Failure(msg) => Err(KubeError::Usage(msg).into()),
    }
}

/// Sends the terminal's size now and on every SIGWINCH.
fn spawn_resizer(tx: tokio::sync::mpsc::Sender<TerminalSize>) {
    tokio::spawn(async move {
        use tokio::signal::unix::{signal, SignalKind};
        if let Some(size) = terminal::size() {
            let _ = tx.send(size).await;
        }
        let Ok(mut winch) = signal(SignalKind::window_change()) else {
            return;
        };
        while winch.recv().await.is_some() {
            if let Some(size) = terminal::size() {
                if tx.send(size).await.is_err() {
                    break;
                }
            }
        }
    });
}

mod terminal {
    use nix::sys::termios::{cfmakeraw, tcgetattr, tcsetattr, SetArg, Termios};
    use peapod_streaming::TerminalSize;

    /// The local terminal in raw mode while this lives (restored on drop, also on errors).
    pub struct RawMode {
        saved: Termios,
    }

    impl RawMode {
        /// None when stdin is not a terminal.
        pub fn enter() -> Option<RawMode> {
            let stdin = std::io::stdin();
            let saved = tcgetattr(&stdin).ok()?;
            let mut raw = saved.clone();
            cfmakeraw(&mut raw);
            tcsetattr(&stdin, SetArg::TCSANOW, &raw).ok()?;
            Some(RawMode { saved })
        }
    }

    impl Drop for RawMode {
        fn drop(&mut self) {
            let _ = tcsetattr(std::io::stdin(), SetArg::TCSANOW, &self.saved);
        }
    }

    /// The size of the terminal on stdout (or stdin).
    pub fn size() -> Option<TerminalSize> {
        for fd in [libc::STDOUT_FILENO, libc::STDIN_FILENO] {
            let mut ws = libc::winsize {
                ws_row: 0,
                ws_col: 0,
                ws_xpixel: 0,
                ws_ypixel: 0,
            };
            // SAFETY: TIOCGWINSZ writes one winsize into the struct we pass.
            let rc = unsafe { libc::ioctl(fd, libc::TIOCGWINSZ, &mut ws) };
            if rc == 0 && ws.ws_col > 0 {
                return Some(TerminalSize {
                    width: ws.ws_col,
                    height: ws.ws_row,
                });
            }
        }
        None
    }
}
