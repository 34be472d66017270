//! How a helper that starts a container's process (`--pause`, `--create`) tells the shim what
//! it started: its exit status, the process's pid in the pid file (written whole, then
//! renamed), and otherwise why on its stderr, which the shim gives it as a log file. Both
//! sides are here: [`report`] in the helper, [`read`] in the shim.

use crate::pidfd::Pidfd;
use std::path::Path;

/// A helper's exit status for `started`: 0 with the process's pid written to `pid_file`, or
/// 1 with why on stderr.
pub fn report(started: Result<i32, String>, pid_file: &Path) -> i32 {
    match started {
        Ok(pid) => {
            // Written whole, then renamed: the shim reads it only after this exits, but a
            // torn file must never name a wrong process.
            let tmp = pid_file.with_extension("tmp");
            match std::fs::write(&tmp, pid.to_string())
                .and_then(|()| std::fs::rename(&tmp, pid_file))
            {
                Ok(()) => 0,
                Err(e) => {
                    eprintln!("write {}: {e}", pid_file.display());
                    1
                }
            }
        }
        Err(message) => {
            eprintln!("{message}");
            1
        }
    }
}

/// What a helper that exited with `code` started: its process's pid (from `pid_file`) and a
/// pidfd of it, or why not (the helper's `log`).
pub fn read(code: i32, pid_file: &Path, log: &Path) -> Result<(u32, Pidfd), String> {
    match code {
        0 => std::fs::read_to_string(pid_file)
            .ok()
            .and_then(|s| s.trim().parse::<u32>().ok())
            .ok_or_else(|| format!("no pid in {}", pid_file.display()))
            // The process is the shim's child (cloned with CLONE_PARENT) and not reaped
            // before its exit is subscribed to, so the pid names it here.
            .and_then(|pid| {
                Pidfd::open(pid)
                    .map(|fd| (pid, fd))
                    .map_err(|e| format!("pidfd_open({pid}): {e}"))
            }),
        _ => Err(std::fs::read_to_string(log)
            .unwrap_or_default()
            .trim()
            .to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reported_pid_is_read_back_and_a_failure_is_the_log() {
        let dir = tempfile::tempdir().unwrap();
        let (pid_file, log) = (dir.path().join("init.pid"), dir.path().join("log"));
        assert_eq!(report(Ok(std::process::id() as i32), &pid_file), 0);
        let (pid, fd) = read(0, &pid_file, &log).unwrap();
        assert_eq!(pid, std::process::id());
        assert!(fd.running());
        std::fs::write(&log, "a native pause cannot do hooks\n").unwrap();
        assert_eq!(
            read(1, &pid_file, &log).unwrap_err(),
            "a native pause cannot do hooks"
        );
        std::fs::remove_file(&pid_file).unwrap();
        assert!(read(0, &pid_file, &log).unwrap_err().starts_with("no pid"));
    }
}
