//! What the SPDY and WebSocket connections share: the clock of a connection's last traffic
//! (for the idle watchdog) and its reader, writer and watchdog tasks, aborted when the last
//! handle goes, with the graceful close that waits for them up to a linger.

use peapod_host::sync::LockUnpoisoned;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tokio::task::JoinHandle;

/// When traffic last moved on a connection.
pub(crate) struct Activity {
    started: Instant,
    last_ms: AtomicU64,
}

impl Activity {
    pub(crate) fn new() -> Activity {
        Activity {
            started: Instant::now(),
            last_ms: AtomicU64::new(0),
        }
    }

    /// Traffic moved now.
    pub(crate) fn touch(&self) {
        self.last_ms
            .store(self.started.elapsed().as_millis() as u64, Ordering::Relaxed);
    }

    fn idle_for(&self) -> Duration {
        let now = self.started.elapsed().as_millis() as u64;
        Duration::from_millis(now.saturating_sub(self.last_ms.load(Ordering::Relaxed)))
    }

    /// Resolves once nothing has moved for `idle`, with how long it has been quiet: the idle
    /// watchdog's wait.
    pub(crate) async fn quiet_for(&self, idle: Duration) -> Duration {
        loop {
            let quiet = self.idle_for();
            if quiet >= idle {
                return quiet;
            }
            tokio::time::sleep(idle - quiet).await;
        }
    }
}

/// A connection's tasks; all are aborted when this is dropped (with the last handle).
pub(crate) struct Tasks {
    reader: Mutex<Option<JoinHandle<()>>>,
    writer: Mutex<Option<JoinHandle<()>>>,
    watchdog: Option<JoinHandle<()>>,
}

impl Tasks {
    pub(crate) fn new(
        reader: JoinHandle<()>,
        writer: JoinHandle<()>,
        watchdog: Option<JoinHandle<()>>,
    ) -> Tasks {
        Tasks {
            reader: Mutex::new(Some(reader)),
            writer: Mutex::new(Some(writer)),
            watchdog,
        }
    }

    /// The graceful end: `send_close` queues the protocol's goodbye, then the writer flushes
    /// it and the reader drains what the peer still sends until the peer closes, for at most
    /// `linger`; the reader is aborted after. False when `linger` ran out first.
    pub(crate) async fn close(
        &self,
        send_close: impl Future<Output = ()>,
        linger: Duration,
    ) -> bool {
        let writer = take(&self.writer);
        let mut reader = take(&self.reader);
        let graceful = async {
            send_close.await;
            if let Some(w) = writer {
                let _ = w.await;
            }
            if let Some(r) = reader.as_mut() {
                let _ = r.await;
            }
        };
        let in_time = tokio::time::timeout(linger, graceful).await.is_ok();
        if let Some(r) = reader {
            r.abort();
        }
        in_time
    }
}

fn take(slot: &Mutex<Option<JoinHandle<()>>>) -> Option<JoinHandle<()>> {
    slot.lock_unpoisoned().take()
}

impl Drop for Tasks {
    fn drop(&mut self) {
        for slot in [&self.reader, &self.writer] {
            if let Some(h) = take(slot) {
                h.abort();
            }
        }
        if let Some(h) = &self.watchdog {
            h.abort();
        }
    }
}
