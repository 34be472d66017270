//! Blocking work called from synchronous code that runs on the async runtime (a record's
//! fsync, a mount, reading a configuration directory): [`off_runtime`] keeps it from stalling
//! the other tasks of the worker it happens to run on.

/// Runs blocking host work called from synchronous code on an async worker thread: on the
/// daemon's multi-threaded runtime, `block_in_place` hands this worker's other tasks to
/// another thread first, so a slow mount never stalls unrelated RPCs (Version, List*). Outside
/// a runtime, or on a current-thread one (where `block_in_place` is not allowed), it just runs.
pub fn off_runtime<T>(work: impl FnOnce() -> T) -> T {
    match tokio::runtime::Handle::try_current() {
        Ok(h) if h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(work)
        }
        _ => work(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `off_runtime` runs its work wherever it is called from: outside a runtime, on a
    /// current-thread runtime (where `block_in_place` would panic), on a multi-threaded one
    /// while other tasks keep running, and on the blocking pool.
    #[test]
    fn off_runtime_runs_everywhere_and_leaves_the_workers_free() {
        assert_eq!(off_runtime(|| 1), 1);
        let current = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        assert_eq!(current.block_on(async { off_runtime(|| 2) }), 2);
        let multi = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        multi.block_on(async {
            // With one worker, a task spawned before the blocking work can only finish while
            // that work waits if the worker was handed over.
            let (tx, rx) = std::sync::mpsc::channel();
            let work = tokio::spawn(async move {
                off_runtime(|| rx.recv_timeout(std::time::Duration::from_secs(20)))
            });
            let other = tokio::spawn(async move { tx.send(3).unwrap() });
            other.await.unwrap();
            assert_eq!(work.await.unwrap(), Ok(3));
            let on_pool = tokio::task::spawn_blocking(|| off_runtime(|| 4));
            assert_eq!(on_pool.await.unwrap(), 4);
        });
    }
}
