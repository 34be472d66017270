//! Lifecycle work that runs to its end even when the caller stops waiting.
//!
//! tonic drops a handler's future when the client's deadline expires or its connection
//! closes. A lifecycle call dropped half-way would leave a reserved name, a half-made object
//! or a started container nobody follows, so each one runs in a task of its own: the handler
//! only awaits it, and dropping the handler drops the waiting, not the work.

use crate::error::{Error, Result};
use std::future::Future;
use tracing::Instrument;

/// Runs `work` in a task of its own (in the current span) and waits for its result.
pub async fn run_to_completion<T, F>(work: F) -> Result<T>
where
    T: Send + 'static,
    F: Future<Output = Result<T>> + Send + 'static,
{
    let task = tokio::spawn(work.instrument(tracing::Span::current()));
    match task.await {
        Ok(result) => result,
        Err(e) => Err(Error::internal(format!("a lifecycle task failed: {e}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    #[tokio::test]
    async fn work_finishes_after_its_caller_is_dropped() {
        let done = Arc::new(AtomicBool::new(false));
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let flag = done.clone();
        let caller = run_to_completion(async move {
            let _ = rx.await;
            flag.store(true, Ordering::SeqCst);
            Ok(())
        });
        // The caller gives up before the work could finish.
        assert!(
            tokio::time::timeout(std::time::Duration::from_millis(10), caller)
                .await
                .is_err()
        );
        tx.send(()).expect("the work still waits");
        for _ in 0..1000 {
            if done.load(Ordering::SeqCst) {
                return;
            }
            tokio::task::yield_now().await;
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
        panic!("the dropped caller's work never finished");
    }
}
