//! Memory a burst of requests left behind, given back once the shim is quiet.
//!
//! A shim is busy for a few milliseconds when its pod starts, stops or is exec-probed, and
//! idle the rest of its life. Its busy moments leave pages resident that nothing uses
//! afterwards: the main thread's stack touched by the deepest call (a pod's start took it
//! from 12 to 40 kB) and the allocator's freed blocks. Every ttrpc method is wrapped
//! ([`note_every_method`]) so that its end is noted; after [`QUIET`] without a request the
//! shim calls `peapod_host::heap::release_after_burst` once, from the shallow frame of its
//! own task. No timer runs while the shim is idle: the wait starts at a request and ends
//! at the release.

use async_trait::async_trait;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;
use ttrpc::asynchronous::{MethodHandler, Service, TtrpcContext};

/// How long without a request counts as the end of a burst: longer than the gaps between
/// the calls of one pod operation (create, start, state), far shorter than exec probes'
/// periods (1 s at the least).
pub const QUIET: Duration = Duration::from_millis(100);

/// The end of each request, told to the task that waits for the quiet.
#[derive(Default)]
pub struct Bursts {
    request_ended: Notify,
}

impl Bursts {
    /// Starts the waiting task (on the caller's runtime) and returns the handle that
    /// requests note their ends on.
    pub fn start() -> Arc<Bursts> {
        let bursts = Arc::new(Bursts::default());
        let waiter = bursts.clone();
        tokio::spawn(async move {
            loop {
                waiter.next_quiet().await;
                peapod_host::heap::release_after_burst();
            }
        });
        bursts
    }

    fn noted(&self) {
        self.request_ended.notify_one();
    }

    /// Returns once a request has ended and then QUIET passed without another.
    async fn next_quiet(&self) {
        self.request_ended.notified().await;
        while tokio::time::timeout(QUIET, self.request_ended.notified())
            .await
            .is_ok()
        {}
    }
}

/// Wraps every unary method of `services` so that its end is noted on `bursts`.
pub fn note_every_method(services: &mut HashMap<String, Service>, bursts: &Arc<Bursts>) {
    for service in services.values_mut() {
        let methods = std::mem::take(&mut service.methods);
        service.methods = methods
            .into_iter()
            .map(|(name, inner)| {
                let wrapped: Box<dyn MethodHandler + Send + Sync> = Box::new(Noted {
                    inner,
                    bursts: bursts.clone(),
                });
                (name, wrapped)
            })
            .collect();
    }
}

struct Noted {
    inner: Box<dyn MethodHandler + Send + Sync>,
    bursts: Arc<Bursts>,
}

#[async_trait]
impl MethodHandler for Noted {
    async fn handler(
        &self,
        ctx: TtrpcContext,
        req: ttrpc::Request,
    ) -> ttrpc::Result<ttrpc::Response> {
        let answer = self.inner.handler(ctx, req).await;
        self.bursts.noted();
        answer
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn the_quiet_comes_after_the_last_request_of_a_burst() {
        let bursts = Arc::new(Bursts::default());
        let started = tokio::time::Instant::now();
        let waiter = bursts.clone();
        let quiet = tokio::spawn(async move {
            waiter.next_quiet().await;
            started.elapsed()
        });
        // Five requests 50 ms apart (each gap shorter than QUIET), then nothing.
        for _ in 0..5 {
            tokio::time::sleep(Duration::from_millis(50)).await;
            bursts.noted();
        }
        let at = quiet.await.expect("the waiting task");
        assert_eq!(at, Duration::from_millis(250) + QUIET);
    }

    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn no_quiet_is_waited_for_before_a_request() {
        let bursts = Arc::new(Bursts::default());
        let waiter = bursts.clone();
        let quiet = tokio::spawn(async move { waiter.next_quiet().await });
        tokio::time::sleep(Duration::from_secs(3600)).await;
        assert!(!quiet.is_finished(), "a release without any request");
        bursts.noted();
        tokio::time::sleep(QUIET * 2).await;
        assert!(quiet.is_finished());
    }
}
