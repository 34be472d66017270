//! The containerd face of the shim: `containerd-shim-peapod-v2`, a containerd runtime v2 shim
//! (`runtime_type = "io.containerd.peapod.v2"`), serving the same Task service as peapod's own
//! daemon uses.
//!
//! ```text
//! containerd-shim-peapod-v2 -namespace NS -address SOCK -publish-binary BIN -id ID [-debug] start
//! containerd-shim-peapod-v2 -namespace NS -address SOCK -id ID -bundle DIR delete
//! ```
//!
//! - `flags`: containerd's command line (Go `flag` syntax);
//! - `bootstrap`: what containerd writes to `start`'s stdin and expects on its stdout (1.6's
//!   options and plain address; 2.3+'s BootstrapParams and BootstrapResult);
//! - `options`: containerd's runtime options (`containerd.runc.v1.Options`, the CRI's
//!   `runtimeoptions.v1.Options`): BinaryName, Root, SystemdCgroup;
//! - `launch`: `start` (one shim per pod, grouped by the CRI sandbox id; socket, `address` and
//!   `shim.pid` files) and `delete` (cleanup after a shim that is gone);
//! - `serve`: the detached shim process: the Task service under both of containerd's names;
//! - `task`: the Task service as containerd calls it (rootfs mounts, events, Stats, ...);
//! - `events`: publishing task events to containerd's ttrpc events service;
//! - `mounts`: the container's root filesystem from the request's mounts;
//! - `oom`: TaskOOM as the memory cgroup reports it;
//! - `stats`: cgroup v1 metrics of a container.

mod bootstrap;
mod events;
mod flags;
mod launch;
mod mounts;
mod oom;
mod options;
mod serve;
mod stats;
mod task;

use std::path::Path;

/// The name containerd derives from `io.containerd.peapod.v2`.
pub const PROGRAM: &str = "containerd-shim-peapod-v2";

/// Whether the program was run as containerd's shim (by path or by bare name).
pub fn is_program_name(argv0: &str) -> bool {
    Path::new(argv0)
        .file_name()
        .is_some_and(|name| name == PROGRAM)
}

/// Runs one subcommand; the process's exit code.
pub fn main(argv: impl Iterator<Item = String>) -> i32 {
    let flags = match flags::Flags::parse(argv) {
        Ok(flags) => flags,
        Err(err) => {
            eprintln!("{PROGRAM}: {err}");
            eprintln!("{}", flags::USAGE);
            return 2;
        }
    };
    let result = match flags.action.as_str() {
        "start" => launch::start(&flags),
        "delete" => launch::delete(&flags),
        "serve" => serve::serve(&flags),
        "version" => {
            println!("{PROGRAM} (peapod-shim {})", env!("CARGO_PKG_VERSION"));
            Ok(())
        }
        other => Err(format!("unknown action {other:?}\n{}", flags::USAGE)),
    };
    match result {
        Ok(()) => 0,
        Err(err) => {
            eprintln!("{PROGRAM}: {err}");
            1
        }
    }
}
