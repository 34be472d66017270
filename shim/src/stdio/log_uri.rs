//! containerd's log URIs for a container's output, instead of FIFOs (`ctr run --log-uri`):
//! - `file:///path`: stdout and stderr appended to the file;
//! - `binary:///path/to/logger?arg=value`: a logging program started by the shim, reading the
//!   container's stdout on fd 3 and stderr on fd 4, and closing fd 5 once it is ready; it gets
//!   `CONTAINER_ID` and `CONTAINER_NAMESPACE` in its environment, and exits at end of input.
//!
//! The container is given the file or the pipes' write ends directly, so the shim copies
//! nothing.

use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

/// How long a logging program may take to signal that it is ready.
const LOGGER_READY: Duration = Duration::from_secs(10);

/// A parsed log URI.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LogUri {
    File(PathBuf),
    Binary { path: PathBuf, args: Vec<String> },
}

/// Decodes `%XX` escapes (and `+` as a space, as in a query).
fn unescape(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' if i + 2 < bytes.len()
                && bytes[i + 1].is_ascii_hexdigit()
                && bytes[i + 2].is_ascii_hexdigit() =>
            {
                let hex = |b: u8| (b as char).to_digit(16).unwrap_or(0) as u8;
                out.push(hex(bytes[i + 1]) << 4 | hex(bytes[i + 2]));
                i += 3;
                continue;
            }
            b'+' => out.push(b' '),
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

impl LogUri {
    /// `None` when `s` is not a log URI (a FIFO path, or empty).
    pub fn parse(s: &str) -> Option<io::Result<LogUri>> {
        let invalid = |m: String| io::Error::new(io::ErrorKind::InvalidInput, m);
        if let Some(rest) = s.strip_prefix("file://") {
            let path = unescape(rest);
            if !path.starts_with('/') {
                return Some(Err(invalid(format!(
                    "log URI {s}: the path must be absolute"
                ))));
            }
            return Some(Ok(LogUri::File(PathBuf::from(path))));
        }
        let rest = s.strip_prefix("binary://")?;
        let (path, query) = rest.split_once('?').unwrap_or((rest, ""));
        let path = unescape(path);
        if !path.starts_with('/') {
            return Some(Err(invalid(format!(
                "log URI {s}: the path must be absolute"
            ))));
        }
        let mut args = Vec::new();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            args.push(unescape(k));
            if !v.is_empty() {
                args.push(unescape(v));
            }
        }
        Some(Ok(LogUri::Binary {
            path: PathBuf::from(path),
            args,
        }))
    }
}

/// Waits until the logger closes (or writes to) its end of the ready pipe.
fn wait_ready(ready: &OwnedFd) -> io::Result<()> {
    if peapod_shim::launch::readable_within(ready.as_fd(), LOGGER_READY)? {
        Ok(())
    } else {
        Err(io::Error::new(
            io::ErrorKind::TimedOut,
            format!("the logging program was not ready within {LOGGER_READY:?}"),
        ))
    }
}

/// The container's stdout and stderr for `uri`; for a binary, the logger is started and ready.
pub fn open(uri: &LogUri, container_id: &str) -> io::Result<(OwnedFd, OwnedFd)> {
    match uri {
        LogUri::File(path) => {
            if let Some(dir) = path.parent() {
                std::fs::create_dir_all(dir)?;
            }
            let file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .map_err(|e| io::Error::new(e.kind(), format!("open {}: {e}", path.display())))?;
            let err = file.try_clone()?;
            Ok((file.into(), err.into()))
        }
        LogUri::Binary { path, args } => start_logger(path, args, container_id),
    }
}

fn start_logger(
    path: &Path,
    args: &[String],
    container_id: &str,
) -> io::Result<(OwnedFd, OwnedFd)> {
    let (out_r, out_w) = peapod_shim::launch::pipe()?;
    let (err_r, err_w) = peapod_shim::launch::pipe()?;
    let (ready_r, ready_w) = peapod_shim::launch::pipe()?;
    let fds = [out_r.as_raw_fd(), err_r.as_raw_fd(), ready_w.as_raw_fd()];
    let mut cmd = Command::new(path);
    cmd.args(args)
        .env("CONTAINER_ID", container_id)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    // SAFETY: only dup2 (async-signal-safe) between fork and exec; dup2 clears CLOEXEC on the
    // copies, so exactly fds 3, 4 and 5 are inherited.
    unsafe {
        cmd.pre_exec(move || {
            // Move the sources above 5 first, so that dup2 onto 3..5 cannot clobber them.
            let mut high = [0; 3];
            for (i, fd) in fds.iter().enumerate() {
                high[i] = libc::fcntl(*fd, libc::F_DUPFD_CLOEXEC, 10);
                if high[i] < 0 {
                    return Err(io::Error::last_os_error());
                }
            }
            for (i, fd) in high.iter().enumerate() {
                if libc::dup2(*fd, 3 + i as i32) < 0 {
                    return Err(io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
    // The shim's reaper collects the logger's exit; nobody waits on this handle.
    cmd.spawn()
        .map_err(|e| io::Error::new(e.kind(), format!("start {}: {e}", path.display())))?;
    drop((out_r, err_r, ready_w));
    wait_ready(&ready_r)?;
    Ok((out_w, err_w))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    #[test]
    fn parses_file_and_binary_uris() {
        assert!(LogUri::parse("/run/fifo").is_none());
        assert!(LogUri::parse("").is_none());
        assert_eq!(
            LogUri::parse("file:///var/log/c%201.log").unwrap().unwrap(),
            LogUri::File(PathBuf::from("/var/log/c 1.log"))
        );
        assert_eq!(
            LogUri::parse("binary:///usr/bin/logger?tag=web&verbose")
                .unwrap()
                .unwrap(),
            LogUri::Binary {
                path: PathBuf::from("/usr/bin/logger"),
                args: vec!["tag".into(), "web".into(), "verbose".into()],
            }
        );
        assert!(LogUri::parse("file://relative").unwrap().is_err());
    }

    #[test]
    fn a_logger_reads_fds_3_and_4_and_sees_the_container_id() {
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("logger");
        let out = dir.path().join("out");
        std::fs::write(
            &script,
            format!(
                "#!/bin/sh\nexec 5>&-\n{{ echo \"id=$CONTAINER_ID\"; cat <&3; cat <&4; }} > {}\n",
                out.display()
            ),
        )
        .unwrap();
        std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        let uri = LogUri::Binary {
            path: script,
            args: vec![],
        };
        let (stdout, stderr) = open(&uri, "c1").unwrap();
        let status = Command::new("sh")
            .args(["-c", "echo to-out; echo to-err >&2"])
            .stdout(stdout)
            .stderr(stderr)
            .status()
            .unwrap();
        assert!(status.success());
        // The logger exits at end of input; its output file is then complete.
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            let mut text = String::new();
            if let Ok(mut f) = std::fs::File::open(&out) {
                f.read_to_string(&mut text).unwrap();
            }
            if text == "id=c1\nto-out\nto-err\n" {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "logger wrote {text:?}"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    #[test]
    fn a_file_uri_appends_both_streams() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/c.log");
        let (stdout, stderr) = open(&LogUri::File(path.clone()), "c1").unwrap();
        let status = Command::new("sh")
            .args(["-c", "echo one; echo two >&2"])
            .stdout(stdout)
            .stderr(stderr)
            .status()
            .unwrap();
        assert!(status.success());
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "one\ntwo\n");
    }
}
