//! Exec without the OCI runtime: `peapod-shim nsexec --resident`, a helper the shim starts
//! at a container's first exec instead of `runc exec`, that joins the container once and then
//! forks each exec the shim sends it over a socket ([`wire`], [`resident`]); each child becomes
//! the process itself ([`enter`]). A failure comes back as runc's would (its wording, in an
//! error), so the shim handles both alike. What it does not do (an enforced
//! AppArmor or SELinux label, a seccomp notify listener: `spec::unsupported`) stays with the
//! runtime, decided before it starts.
//!
//! ```text
//! peapod-shim nsexec --resident --bundle DIR --init-pid PID    (stdin: the shim's socket)
//! ```
//!
//! The same machinery starts a pod's pause without the runtime ([`pause`]) and creates its
//! app containers ([`create`], [`rootfs`]):
//!
//! ```text
//! peapod-shim nsexec --pause --bundle DIR --pid-file FILE
//! peapod-shim nsexec --create --bundle DIR --pid-file FILE
//! ```

pub mod caps;
pub mod create;
pub mod enter;
pub mod pause;
pub mod resident;
pub mod rootfs;
pub mod seccomp;
pub mod spec;
pub mod wire;

use std::path::PathBuf;

/// The helper's entry point; returns its exit status.
pub fn main(args: impl Iterator<Item = String>) -> i32 {
    let mut bundle = None;
    let mut init_pid = None;
    let mut pid_file = None;
    let mut resident = false;
    let mut pause = false;
    let mut create = false;
    let mut args = args;
    while let Some(flag) = args.next() {
        if flag == "--resident" {
            resident = true;
            continue;
        }
        if flag == "--pause" {
            pause = true;
            continue;
        }
        if flag == "--create" {
            create = true;
            continue;
        }
        let Some(value) = args.next() else {
            return usage();
        };
        match flag.as_str() {
            "--bundle" => bundle = Some(PathBuf::from(value)),
            "--init-pid" => init_pid = value.parse::<i32>().ok(),
            "--pid-file" => pid_file = Some(PathBuf::from(value)),
            _ => return usage(),
        }
    }
    match (resident, pause, create, bundle, init_pid, pid_file) {
        (true, false, false, Some(bundle), Some(init_pid), None) => {
            resident::main(&bundle, init_pid)
        }
        (false, true, false, Some(bundle), None, Some(pid_file)) => pause::main(&bundle, &pid_file),
        (false, false, true, Some(bundle), None, Some(pid_file)) => {
            create::main(&bundle, &pid_file)
        }
        _ => usage(),
    }
}

fn usage() -> i32 {
    eprintln!("usage: peapod-shim nsexec --resident --bundle DIR --init-pid PID (stdin: the shim's socket)\n       peapod-shim nsexec --pause --bundle DIR --pid-file FILE\n       peapod-shim nsexec --create --bundle DIR --pid-file FILE (fd 3: start pipe, fd 4: stderr)");
    2
}
