//! Termination messages as the kubelet gives them: a host file bind-mounted at the container's
//! terminationMessagePath, read when the container exits (at most 4096 bytes); with
//! `FallbackToLogsOnError`, the tail of the log when the file is empty and the exit failed.

use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

const MAX_MESSAGE: u64 = 4096;
const MAX_LOG_TAIL_BYTES: u64 = 2048;
const MAX_LOG_TAIL_LINES: usize = 80;

/// The host file for one attempt of one container.
pub fn host_file(pod_dir: &Path, container: &str, attempt: u32) -> PathBuf {
    pod_dir
        .join("containers")
        .join(container)
        .join(format!("{attempt}.termination-log"))
}

/// Makes the (empty) file the container writes its message to.
pub fn prepare(path: &Path) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::File::create(path)?;
    // The container may run as any user.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o666))
}

fn read_tail(path: &Path, max: u64) -> Option<String> {
    let mut f = std::fs::File::open(path).ok()?;
    let len = f.metadata().ok()?.len();
    f.seek(SeekFrom::Start(len.saturating_sub(max))).ok()?;
    let mut buf = Vec::new();
    f.take(max).read_to_end(&mut buf).ok()?;
    Some(String::from_utf8_lossy(&buf).into_owned())
}

/// The message of an exited attempt.
pub fn message(file: &Path, log: &Path, exit_code: i32, fallback_to_logs: bool) -> String {
    let msg = std::fs::File::open(file)
        .ok()
        .and_then(|f| {
            let mut s = String::new();
            f.take(MAX_MESSAGE).read_to_string(&mut s).ok().map(|_| s)
        })
        .unwrap_or_default();
    if !msg.is_empty() || !fallback_to_logs || exit_code == 0 {
        return msg;
    }
    // CRI log lines are `<time> <stream> <P|F> <text>`: keep the text of the last lines.
    let tail = read_tail(log, MAX_LOG_TAIL_BYTES * 4).unwrap_or_default();
    let lines: Vec<&str> = tail
        .lines()
        .filter_map(|l| l.splitn(4, ' ').nth(3))
        .collect();
    let start = lines.len().saturating_sub(MAX_LOG_TAIL_LINES);
    let mut text = lines[start..].join("\n");
    if text.len() as u64 > MAX_LOG_TAIL_BYTES {
        let cut = text.len() - MAX_LOG_TAIL_BYTES as usize;
        let cut = (cut..text.len())
            .find(|i| text.is_char_boundary(*i))
            .unwrap_or(text.len());
        text = text[cut..].to_string();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_then_log_fallback() {
        let t = tempfile::tempdir().unwrap();
        let f = host_file(t.path(), "c", 2);
        prepare(&f).unwrap();
        let log = t.path().join("2.log");
        std::fs::write(
            &log,
            "2024-01-01T00:00:00Z stdout F hello\n2024-01-01T00:00:01Z stderr F it broke\n",
        )
        .unwrap();
        assert_eq!(message(&f, &log, 1, false), "");
        assert_eq!(message(&f, &log, 1, true), "hello\nit broke");
        assert_eq!(message(&f, &log, 0, true), "");
        std::fs::write(&f, "bye").unwrap();
        assert_eq!(message(&f, &log, 1, true), "bye");
        std::fs::write(&f, "x".repeat(10_000)).unwrap();
        assert_eq!(message(&f, &log, 0, false).len(), 4096);
    }
}
