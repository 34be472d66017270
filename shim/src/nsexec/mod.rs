//! Exec without the OCI runtime: `peapod-shim nsexec`, a helper the shim starts for an exec
//! instead of `runc exec`, that joins the container and becomes the process itself (see
//! `enter`). It reads the same `process.json`, writes the same pid file and reports a
//! failure the same way (a JSON line in `--log`, exit status 1), so the shim handles both
//! alike. What it does not do (a terminal, an enforced AppArmor or SELinux label, a seccomp
//! notify listener: `spec::unsupported`) stays with the runtime, decided before it starts.
//!
//! ```text
//! peapod-shim nsexec --bundle DIR --process FILE --pid-file FILE --init-pid PID --log FILE
//! ```

pub mod caps;
pub mod enter;
pub mod seccomp;
pub mod spec;

use std::path::PathBuf;

/// The helper's entry point; returns its exit status.
pub fn main(args: impl Iterator<Item = String>) -> i32 {
    let mut bundle = None;
    let mut process = None;
    let mut pid_file = None;
    let mut init_pid = None;
    let mut log = None;
    let mut args = args;
    while let Some(flag) = args.next() {
        let Some(value) = args.next() else {
            return usage();
        };
        match flag.as_str() {
            "--bundle" => bundle = Some(PathBuf::from(value)),
            "--process" => process = Some(PathBuf::from(value)),
            "--pid-file" => pid_file = Some(PathBuf::from(value)),
            "--init-pid" => init_pid = value.parse::<i32>().ok(),
            "--log" => log = Some(PathBuf::from(value)),
            _ => return usage(),
        }
    }
    let (Some(bundle), Some(process), Some(pid_file), Some(init_pid), Some(log)) =
        (bundle, process, pid_file, init_pid, log)
    else {
        return usage();
    };
    // Opened now: once the container's mount namespace is joined, this path is not ours.
    let mut log_file = match std::fs::File::create(&log) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("peapod-shim nsexec: create {}: {e}", log.display());
            return 1;
        }
    };
    let req = enter::Request {
        bundle: &bundle,
        process: &process,
        pid_file: &pid_file,
        init_pid,
    };
    match enter::run(&req) {
        Ok(_) => 0,
        Err(message) => {
            // The shim reads the last error line of the log, as it reads runc's.
            let line = serde_json::json!({"level": "error", "msg": message});
            use std::io::Write;
            let _ = writeln!(log_file, "{line}");
            1
        }
    }
}

fn usage() -> i32 {
    eprintln!(
        "usage: peapod-shim nsexec --bundle DIR --process FILE --pid-file FILE --init-pid PID --log FILE"
    );
    2
}
