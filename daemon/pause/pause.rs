//! The built-in pause: the process that holds a pod's namespaces.
//!
//! It does nothing but wait. When it is PID 1 of the pod's PID namespace it reaps the zombies
//! that orphaned processes leave there. SIGINT and SIGTERM make it exit 0, which is how
//! StopPodSandbox stops it gracefully.
//!
//! This file is not a crate: `daemon/build.rs` compiles it with `rustc -C target-feature=+crt-static`
//! into a static binary and the daemon embeds it, so the pause root filesystem is this one file
//! and a pod starts with no image pulled. It therefore uses only `std` and declares the few libc
//! functions it needs itself.

use std::os::raw::c_int;

const SIGINT: c_int = 2;
const SIGTERM: c_int = 15;
const SIGCHLD: c_int = 17;
const WNOHANG: c_int = 1;

extern "C" {
    fn signal(signum: c_int, handler: extern "C" fn(c_int)) -> usize;
    fn pause() -> c_int;
    fn waitpid(pid: c_int, status: *mut c_int, options: c_int) -> c_int;
    fn getpid() -> c_int;
    fn _exit(code: c_int) -> !;
}

extern "C" fn exit_cleanly(_signal: c_int) {
    // SAFETY: _exit is async-signal-safe.
    unsafe { _exit(0) }
}

extern "C" fn reap_children(_signal: c_int) {
    // SAFETY: waitpid is async-signal-safe; a null status pointer is allowed.
    unsafe { while waitpid(-1, std::ptr::null_mut(), WNOHANG) > 0 {} }
}

fn main() {
    if std::env::args().nth(1).as_deref() == Some("-v") {
        println!("peapod-pause {}", env!("CARGO_PKG_VERSION"));
        return;
    }
    // SAFETY: installing plain C handlers; glibc's signal() gives BSD semantics (SA_RESTART,
    // handler stays installed), which is what a process that only ever pause()s needs.
    unsafe {
        signal(SIGINT, exit_cleanly);
        signal(SIGTERM, exit_cleanly);
        if getpid() == 1 {
            signal(SIGCHLD, reap_children);
        }
    }
    loop {
        // SAFETY: pause has no preconditions; it returns after each handled signal.
        unsafe { pause() };
    }
}
