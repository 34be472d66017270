//! The allocator's arenas: one for the whole process.
//!
//! glibc's malloc gives every thread that allocates an arena of its own, up to eight per core,
//! and memory freed into one arena is never reused by another or returned while anything above
//! it in that arena is live. The daemon's threads (two async workers, the blocking pool's
//! threads that come and go, the blocking runtime of `peapod_daemon::blocking`) each came to hold an
//! arena. With one arena its anonymous memory went from 15.0 to 9.0 MB with 20 pods and from
//! 28.0 to 20.0 MB with 300 (peapod-bench `--scale`, both builds side by side), the pod
//! lifecycle, pulls and exec unchanged within noise (docs/performance.md). Our threads rarely
//! allocate at the same instant (two cores, work that waits on system calls), and each keeps
//! glibc's per-thread cache of small blocks, so the one lock costs little.

/// Has the process use one malloc arena, unless `MALLOC_ARENA_MAX` says otherwise (glibc has
/// read it already; an operator's explicit choice stands). Call it first thing in `main`,
/// before any thread exists: glibc fixes its arena limit when a second thread first
/// allocates, and a limit set after that is ignored. `tests/heap.rs` checks it.
pub fn use_one_arena() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    if std::env::var_os("MALLOC_ARENA_MAX").is_none() {
        // SAFETY: mallopt changes a malloc parameter under malloc's own lock; no memory is
        // handed over.
        unsafe {
            libc::mallopt(libc::M_ARENA_MAX, 1);
        }
    }
}
