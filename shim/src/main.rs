//! `peapod-shim`, one process per pod.
//!
//! ```text
//! peapod-shim serve --id SANDBOX_ID --socket PATH --runtime runc --runtime-root DIR [--log FILE]
//! ```
//!
//! The daemon runs `serve` in a session of its own (it outlives the daemon) and learns that it
//! serves from a pipe (`peapod_shim::launch`). `serve` makes itself a child subreaper, so that
//! every container process is reparented to it when `runc create` or `runc exec --detach`
//! returns, and it reaps them itself.
//!
//! `peapod-shim nsexec ...` is the same program run as one of the native paths' helpers
//! (`peapod_runtime::helper`).
//!
//! Layers, each using only those below it (`tools/layers` fails CI on an import circle, and
//! the module-map test fails when this list and the modules part):
//!
//! 1. the faces — `containerd/`: containerd's runtime v2 shim (`containerd-shim-peapod-v2`,
//!    the same binary under that name, `src/bin/containerd-shim-peapod-v2.rs`): its launch
//!    protocol, rootfs mounts, events, OOM events, Stats; `server`: peapod's, `serve`'s
//!    bootstrap (the reaper, the backends, the services on the socket, shutdown);
//! 2. the ttrpc services — `task_api` (containerd's `Task` trait over the Task service:
//!    fields in and out, no logic), `extension` (peapod's ReopenLog);
//! 3. `task` — the Task service itself, what each call does (`task_tests.rs` tests it over
//!    fakes);
//! 4. state — `container` (a container: its backend, init, execs, options), `process` (a
//!    process's pid, stdio and exit, published once); `error` (`ShimError`, its ttrpc code,
//!    the one place statuses are built);
//! 5. `stdio/` — a process's stdio as the shim holds it: pipes, attach, ptys (`console`), the
//!    CRI log (`logio`), containerd's log URIs, a container's stdio as its launcher wants it;
//! 6. `backend/` — one backend per container, chosen at its create: the OCI runtime CLI
//!    (`runc`, behind the `RuntimeCli` trait), runc assisted by the shim, or the shim's own
//!    helpers (`peapod-runtime`), and native execs through a resident helper;
//! 7. host processes — `process_control` (exits, signals and OOM counters of host
//!    processes, behind a trait), `reaper` (the subreaper's one `waitpid` loop),
//!    `oom_kill_counter` (telling an OOM kill from another SIGKILL), `kernel_log` (the
//!    kernel's record of its OOM kills, when the cgroup is gone); `after_burst` (the
//!    memory a burst of requests left, given back once the shim is quiet).
//!
//! `fakes` (tests only): a fake runtime CLI and fake processes.

mod after_burst;
mod backend;
mod container;
mod containerd;
mod error;
mod extension;
#[cfg(test)]
mod fakes;
mod kernel_log;
mod oom_kill_counter;
mod process;
mod process_control;
mod reaper;
mod server;
mod stdio;
mod task;
mod task_api;

use std::path::PathBuf;
use std::sync::Arc;

/// The shim's command line.
#[derive(Debug, Clone)]
pub struct Args {
    pub id: String,
    pub socket: PathBuf,
    pub runtime: String,
    pub runtime_root: PathBuf,
    /// Flags the runtime gets before every command (`--runtime-arg`, repeated: the
    /// handler's `args`).
    pub runtime_args: Vec<String>,
    /// The runtime makes its own sandbox per pod (`--sandboxed true`: gVisor's runsc).
    pub sandboxed: bool,
    pub log: Option<PathBuf>,
    /// How execs start: natively where possible (`native`, the default) or by `runc exec`.
    pub exec: backend::ExecMode,
    /// How app containers are created: natively where possible (`native`, the default, with
    /// native execs only) or by `runc create`.
    pub create: backend::CreateMode,
    /// The cgroup driver of the daemon that started us (`--cgroup-driver systemd`): runc is
    /// then run with `--systemd-cgroup`, and the native paths read the path alike, so that a
    /// `slice:prefix:name` cgroupsPath becomes a scope unit in that slice instead of a
    /// directory of that name.
    pub systemd_cgroup: bool,
}

fn usage() -> ! {
    eprintln!(
        "usage: peapod-shim serve --id ID --socket PATH --runtime PATH --runtime-root DIR [--runtime-arg FLAG]... [--sandboxed true|false] [--log FILE] [--exec native|runc] [--create native|runc] [--cgroup-driver cgroupfs|systemd]\n       peapod-shim nsexec ... (see peapod_runtime::helper)"
    );
    std::process::exit(2)
}

fn parse_args(mut argv: impl Iterator<Item = String>) -> (String, Args) {
    let command = argv.next().unwrap_or_else(|| usage());
    let mut id = None;
    let mut socket = None;
    let mut runtime = "runc".to_string();
    let mut runtime_root = None;
    let mut runtime_args = Vec::new();
    let mut sandboxed = false;
    let mut log = None;
    let mut exec = backend::ExecMode::Native;
    let mut create = backend::CreateMode::Native;
    let mut systemd_cgroup = false;
    while let Some(flag) = argv.next() {
        let value = argv.next().unwrap_or_else(|| usage());
        match flag.as_str() {
            "--id" => id = Some(value),
            "--socket" => socket = Some(PathBuf::from(value)),
            "--runtime" => runtime = value,
            "--runtime-root" => runtime_root = Some(PathBuf::from(value)),
            "--runtime-arg" => runtime_args.push(value),
            "--sandboxed" => sandboxed = value.parse().unwrap_or_else(|_| usage()),
            "--log" => log = Some(PathBuf::from(value)),
            "--exec" => exec = backend::ExecMode::parse(&value).unwrap_or_else(|| usage()),
            "--create" => create = backend::CreateMode::parse(&value).unwrap_or_else(|| usage()),
            "--cgroup-driver" => {
                systemd_cgroup = match value.as_str() {
                    "systemd" => true,
                    "cgroupfs" => false,
                    _ => usage(),
                }
            }
            _ => usage(),
        }
    }
    let (Some(id), Some(socket), Some(runtime_root)) = (id, socket, runtime_root) else {
        usage()
    };
    (
        command,
        Args {
            id,
            socket,
            runtime,
            runtime_root,
            runtime_args,
            sandboxed,
            log,
            exec,
            create,
            systemd_cgroup,
        },
    )
}

fn main() {
    // Before any thread (the blocking pool's, in `serve`): one arena, not one per thread.
    peapod_host::heap::use_one_arena();
    peapod_shim::launch::forget_malloc_tunables();
    // The shim is the parent of the OCI runtime, which creates mount points inside containers'
    // root filesystems: they must be 0755 as in any runtime, not shaped by the restrictive
    // umask of the daemon that launched us (0o077), which would shut out non-root containers.
    nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o022));
    let mut argv = std::env::args();
    let program = argv.next().unwrap_or_else(|| "peapod-shim".into());
    // The same code is containerd's runtime v2 shim when run under that name.
    if containerd::is_program_name(&program) {
        std::process::exit(containerd::main(argv));
    }
    if std::env::args().nth(1).as_deref() == Some("--version") {
        println!("peapod-shim {}", env!("CARGO_PKG_VERSION"));
        return;
    }
    if std::env::args().nth(1).as_deref() == Some("nsexec") {
        std::process::exit(peapod_runtime::helper::main(argv.skip(1)));
    }
    let (command, args) = parse_args(argv);
    let code = match command.as_str() {
        "serve" => serve(args),
        _ => usage(),
    };
    std::process::exit(code);
}

/// The shim proper: a single-threaded runtime serving the Task API until Shutdown.
fn serve(args: Args) -> i32 {
    let ready = peapod_shim::launch::take_ready_fd();
    // SAFETY: prctl with PR_SET_CHILD_SUBREAPER only changes this process's attributes.
    if unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) } != 0 {
        eprintln!(
            "peapod-shim: cannot become a subreaper: {}",
            std::io::Error::last_os_error()
        );
        return 1;
    }
    let runtime = match server::runtime() {
        Ok(rt) => rt,
        Err(err) => {
            eprintln!("peapod-shim: cannot build the async runtime: {err}");
            return 1;
        }
    };
    runtime.block_on(async move {
        match server::run(Arc::new(args), ready).await {
            Ok(()) => 0,
            Err(err) => {
                eprintln!("peapod-shim: {err}");
                1
            }
        }
    })
}
