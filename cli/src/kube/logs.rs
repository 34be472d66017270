//! `peapod logs NAME [-c C] [-f] [--previous] [--tail N] [--timestamps]`: reads the container's
//! CRI log file (its path from CRI ContainerStatus; this CLI runs as root on the daemon's host).

use super::target::{get_pod, pick, pod_name, DefaultContainer};
use super::{crilog, Clients, KubeError, NamespaceArg};
use peapod_proto::v1 as cri;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::MetadataExt;
use std::time::Duration;

#[derive(clap::Args, Debug)]
pub struct LogsArgs {
    /// The pod (or `pod/NAME`).
    pub pod: String,
    /// The container (default: the pod's only app container).
    #[arg(short = 'c', long = "container")]
    pub container: Option<String>,
    /// Follow the log until the container exits.
    #[arg(short = 'f', long)]
    pub follow: bool,
    /// The previous instance of the container (before its last restart).
    #[arg(short = 'p', long)]
    pub previous: bool,
    /// Only the last N lines (-1: all).
    #[arg(long, default_value_t = -1, allow_negative_numbers = true)]
    pub tail: i64,
    /// Prefix each line with its time.
    #[arg(long)]
    pub timestamps: bool,
    #[command(flatten)]
    pub ns: NamespaceArg,
}

async fn container_status(c: &mut Clients, id: &str) -> anyhow::Result<cri::ContainerStatus> {
    let r = c
        .cri
        .runtime
        .container_status(cri::ContainerStatusRequest {
            container_id: id.to_string(),
            verbose: false,
        })
        .await
        .map_err(|s| KubeError::from_status(s, ""))?;
    r.into_inner()
        .status
        .ok_or_else(|| anyhow::anyhow!("the daemon sent no status for container {id}"))
}

pub async fn run(c: &mut Clients, a: LogsArgs) -> anyhow::Result<()> {
    let name = pod_name(&a.pod)?;
    let pod = get_pod(c, &a.ns.namespace, name).await?;
    let (picked, _) = pick(&pod, a.container.as_deref(), DefaultContainer::OnlyOne)?;
    let id = if a.previous {
        picked.previous_id.clone().ok_or_else(|| {
            KubeError::Usage(format!(
                "previous terminated container \"{}\" in pod \"{name}\" not found",
                picked.name
            ))
        })?
    } else {
        // A container waiting to be restarted (CrashLoopBackOff) shows its last instance, as
        // the kubelet's log endpoint does.
        match picked.container_id.as_ref().or(picked.previous_id.as_ref()) {
            Some(id) => id.clone(),
            None => {
                return Err(KubeError::Usage(format!(
                    "container \"{}\" in pod \"{name}\" is waiting to start: {}",
                    picked.name,
                    picked
                        .waiting_reason
                        .as_deref()
                        .unwrap_or("ContainerCreating")
                ))
                .into())
            }
        }
    };
    let status = container_status(c, &id).await?;
    if status.log_path.is_empty() {
        return Err(KubeError::Usage(format!(
            "container \"{}\" in pod \"{name}\" has no log file",
            picked.name
        ))
        .into());
    }
    let tail = usize::try_from(a.tail).ok();
    let follow = a.follow && !a.previous;
    print_log(c, &id, &status.log_path, tail, a.timestamps, follow).await
}

/// Prints the log (the last `tail` lines), then with `follow` keeps printing what is appended,
/// across rotation (a new file at the same path), until the container has exited.
async fn print_log(
    c: &mut Clients,
    id: &str,
    path: &str,
    tail: Option<usize>,
    timestamps: bool,
    follow: bool,
) -> anyhow::Result<()> {
    use anyhow::Context;
    let mut file = std::fs::File::open(path).with_context(|| format!("open log {path}"))?;
    let mut text = String::new();
    file.read_to_string(&mut text)
        .with_context(|| format!("read log {path}"))?;
    // Only complete lines now; a trailing incomplete one is read again when it completes.
    let complete = text.rfind('\n').map(|i| i + 1).unwrap_or(0);
    let mut out = std::io::stdout().lock();
    let mut assembler = crilog::Assembler::default();
    let initial: Vec<crilog::Line> = if follow {
        text[..complete]
            .lines()
            .filter_map(|l| assembler.push(l))
            .collect()
    } else {
        crilog::lines(&text, None)
    };
    let skip = tail.map(|n| initial.len().saturating_sub(n)).unwrap_or(0);
    for l in &initial[skip..] {
        out.write_all(l.render(timestamps).as_bytes())?;
    }
    out.flush()?;
    if !follow {
        return Ok(());
    }
    drop(out);
    let mut pos = complete as u64;
    let mut inode = file.metadata()?.ino();
    let mut carry = Vec::new();
    loop {
        let read = read_new(&mut file, &mut pos, &mut carry)?;
        emit_complete(&mut carry, &mut assembler, timestamps)?;
        if read > 0 {
            continue;
        }
        // At the end: a rotated file (a new one at the path, or this one truncated) is
        // followed from its start, once what the old one still held has been read: the shim
        // writes to the new file only, once it exists.
        if let Ok(meta) = std::fs::metadata(path) {
            if meta.ino() != inode || meta.len() < pos {
                if let Ok(f) = std::fs::File::open(path) {
                    if meta.ino() != inode {
                        read_new(&mut file, &mut pos, &mut carry)?;
                        emit_complete(&mut carry, &mut assembler, timestamps)?;
                    }
                    file = f;
                    inode = meta.ino();
                    pos = 0;
                    continue;
                }
            }
        }
        let exited = container_status(c, id)
            .await
            .map(|st| st.state == cri::ContainerState::ContainerExited as i32)
            .unwrap_or(true);
        if exited {
            // One last read: output written just before the exit.
            read_new(&mut file, &mut pos, &mut carry)?;
            carry.push(b'\n');
            emit_complete(&mut carry, &mut assembler, timestamps)?;
            let mut out = std::io::stdout().lock();
            for l in assembler.finish() {
                out.write_all(l.render(timestamps).as_bytes())?;
            }
            out.flush()?;
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Appends what `file` holds past `pos` to `carry`; returns how many bytes that was.
fn read_new(
    file: &mut std::fs::File,
    pos: &mut u64,
    carry: &mut Vec<u8>,
) -> std::io::Result<usize> {
    file.seek(SeekFrom::Start(*pos))?;
    let before = carry.len();
    file.read_to_end(carry)?;
    let n = carry.len() - before;
    *pos += n as u64;
    Ok(n)
}

/// Prints the complete lines at the front of `carry`, keeping an unfinished last one.
fn emit_complete(
    carry: &mut Vec<u8>,
    assembler: &mut crilog::Assembler,
    timestamps: bool,
) -> std::io::Result<()> {
    let Some(end) = carry.iter().rposition(|b| *b == b'\n') else {
        return Ok(());
    };
    let lines: Vec<u8> = carry.drain(..=end).collect();
    let mut out = std::io::stdout().lock();
    for raw in String::from_utf8_lossy(&lines).lines() {
        if let Some(l) = assembler.push(raw) {
            out.write_all(l.render(timestamps).as_bytes())?;
        }
    }
    out.flush()
}
