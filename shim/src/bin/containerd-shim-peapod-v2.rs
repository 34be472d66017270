//! `containerd-shim-peapod-v2`: the name containerd looks for on PATH for the runtime
//! `io.containerd.peapod.v2`. It is not a second shim: it replaces itself (exec, no extra
//! process) with `peapod-shim` from its own directory, keeping its name as `argv[0]`, from
//! which `peapod-shim` chooses its containerd face. Install both binaries side by side (or
//! make `containerd-shim-peapod-v2` a symlink to `peapod-shim`, which works the same way).

use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::Command;

/// The shim program this one stands for.
const SHIM: &str = "peapod-shim";

fn main() {
    let mut args = std::env::args_os();
    let name = args
        .next()
        .unwrap_or_else(|| "containerd-shim-peapod-v2".into());
    let shim = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(|dir| dir.join(SHIM)))
        .unwrap_or_else(|| PathBuf::from(SHIM));
    let err = Command::new(&shim).arg0(name).args(args).exec();
    eprintln!(
        "containerd-shim-peapod-v2: cannot run {}: {err}",
        shim.display()
    );
    std::process::exit(1);
}
