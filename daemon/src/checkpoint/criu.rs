//! Whether CRIU works on this host: `criu check`, run once at the first checkpoint or restore
//! and its answer kept (the kernel and the installed criu do not change under a running
//! daemon). Behind a narrow trait so that the lifecycle's tests choose the answer.
//!
//! Why once: Debian's criu 3.17 fails on some kernels before it does anything (on a 6.18
//! kernel: "vdso: Unexpected rt vDSO area bounds"), and every call would fail the same way
//! after a second of probing; the client is told that reason, not a dump's log.

use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The answer to "can CRIU checkpoint and restore here?"; `Err` says why not.
pub trait CriuCheck: Send + Sync {
    fn usable(&self) -> Result<(), String>;
}

/// The real check: the `criu` runc finds (the first on PATH).
pub struct Criu {
    program: String,
    answer: OnceLock<Result<(), String>>,
}

/// Longest `criu check` may take.
const CHECK_TIMEOUT: Duration = Duration::from_secs(60);

impl Criu {
    pub fn new(program: impl Into<String>) -> Criu {
        Criu {
            program: program.into(),
            answer: OnceLock::new(),
        }
    }

    fn check(&self) -> Result<(), String> {
        let mut child = Command::new(&self.program)
            .arg("check")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| match e.kind() {
                std::io::ErrorKind::NotFound => format!(
                    "CRIU is not installed ({} not found on PATH); checkpoints need it",
                    self.program
                ),
                _ => format!("cannot run {} check: {e}", self.program),
            })?;
        let started = Instant::now();
        loop {
            match child.try_wait() {
                Ok(Some(_)) => break,
                Ok(None) if started.elapsed() > CHECK_TIMEOUT => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(format!(
                        "{} check did not finish within {CHECK_TIMEOUT:?}",
                        self.program
                    ));
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(50)),
                Err(e) => return Err(format!("waiting for {} check: {e}", self.program)),
            }
        }
        let out = child
            .wait_with_output()
            .map_err(|e| format!("reading {} check: {e}", self.program))?;
        if out.status.success() {
            return Ok(());
        }
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        Err(format!(
            "CRIU does not work on this host ({} check: {})",
            self.program,
            first_error(&text).unwrap_or_else(|| out.status.to_string())
        ))
    }
}

impl CriuCheck for Criu {
    fn usable(&self) -> Result<(), String> {
        self.answer.get_or_init(|| self.check()).clone()
    }
}

/// The first error criu printed: the cause, before what failed because of it.
fn first_error(output: &str) -> Option<String> {
    output
        .lines()
        .map(str::trim)
        .find(|l| l.starts_with("Error") || l.contains("Error ("))
        .map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cause_is_the_first_error_line() {
        let out = "Error (criu/vdso.c:381): vdso: Unexpected rt vDSO area bounds\n\
                   Error (criu/kerndat.c:1615): kerndat_vdso_fill_symtable failed\n";
        assert_eq!(
            first_error(out).unwrap(),
            "Error (criu/vdso.c:381): vdso: Unexpected rt vDSO area bounds"
        );
        assert_eq!(first_error("Looks good.\n"), None);
    }

    #[test]
    fn a_missing_criu_says_so_and_the_answer_is_kept() {
        let criu = Criu::new("/nonexistent/peapod-test-criu");
        let err = criu.usable().unwrap_err();
        assert!(err.contains("not installed"), "{err}");
        assert_eq!(criu.usable().unwrap_err(), err);
    }

    #[test]
    fn a_failing_check_names_its_first_error() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let fake = dir.path().join("criu");
        std::fs::write(
            &fake,
            "#!/bin/sh\necho 'Error (criu/vdso.c:1): vdso: bad' >&2\necho 'Error (x): later' >&2\nexit 1\n",
        )
        .unwrap();
        std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
        let err = Criu::new(fake.to_string_lossy()).usable().unwrap_err();
        assert!(err.contains("vdso: bad") && !err.contains("later"), "{err}");
    }
}
