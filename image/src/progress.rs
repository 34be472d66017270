//! Pull progress, visible across processes.
//!
//! While a pull runs, the store rewrites `<root>/pulls/<sha256(normalised ref)>.json`
//! every 250 ms (temp file + rename, so a reader never sees half a document)
//! and removes it when the pull ends, successfully or not. The CLI, which asks
//! the daemon to pull over CRI PullImage (no progress field there), polls that
//! file to draw its bar; the daemon logs the same numbers. In-process callers
//! can use [`crate::Store::progress`] instead.

use peapod_host::sync::LockUnpoisoned;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub const PROGRESS_INTERVAL: Duration = Duration::from_millis(250);

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct PullProgress {
    /// The normalised reference being pulled.
    pub reference: String,
    /// Compressed size of all the image's layers.
    pub total_bytes: u64,
    /// Bytes fetched so far; layers already in the store count as done.
    pub done_bytes: u64,
    pub layers: Vec<LayerProgress>,
    /// Seconds since the epoch when the pull started.
    pub started_unix: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct LayerProgress {
    /// Compressed blob digest.
    pub digest: String,
    pub size: u64,
    pub done_bytes: u64,
    pub status: LayerStatus,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum LayerStatus {
    /// Not started yet.
    Waiting,
    /// Another pull is fetching it; we wait for that one.
    Shared,
    Downloading,
    /// Fetched and unpacked by this pull.
    Done,
    /// Was already in the store.
    Present,
}

/// Reads a progress file; None if there is no pull of that reference running.
pub fn read_progress(path: &Path) -> Option<PullProgress> {
    let data = std::fs::read(path).ok()?;
    serde_json::from_slice(&data).ok()
}

pub(crate) struct Tracker {
    pub state: Mutex<PullProgress>,
    pub path: PathBuf,
    /// Serialises file writes with the final removal; true once stopped, so a
    /// write racing with the end of the pull cannot resurrect the file.
    pub file_lock: Mutex<bool>,
}

impl Tracker {
    pub fn snapshot(&self) -> PullProgress {
        self.state.lock_unpoisoned().clone()
    }

    pub fn update(&self, f: impl FnOnce(&mut PullProgress)) {
        let mut s = self.state.lock_unpoisoned();
        f(&mut s);
        s.done_bytes = s.layers.iter().map(|l| l.done_bytes).sum();
    }

    pub fn set_status(&self, idx: usize, status: LayerStatus) {
        self.update(|s| {
            if let Some(l) = s.layers.get_mut(idx) {
                l.status = status;
                if matches!(status, LayerStatus::Done | LayerStatus::Present) {
                    l.done_bytes = l.size;
                }
            }
        });
    }

    pub fn add_bytes(&self, idx: usize, n: u64) {
        self.update(|s| {
            if let Some(l) = s.layers.get_mut(idx) {
                l.done_bytes = (l.done_bytes + n).min(l.size);
            }
        });
    }

    fn write(&self) {
        let stopped = self.file_lock.lock_unpoisoned();
        if *stopped {
            return;
        }
        let snap = self.snapshot();
        if let Ok(data) = serde_json::to_vec(&snap) {
            // Progress is advisory: no fsync, and a failed write is only logged.
            if let Err(e) = peapod_host::fs::write_atomic(
                &self.path,
                &data,
                peapod_host::fs::Durability::AtomicOnly,
            ) {
                tracing::debug!(path = %self.path.display(), error = %e, "cannot write pull progress");
            }
        }
    }
}

/// Writes the progress file periodically and logs; stops (and removes the
/// file) when dropped.
pub(crate) struct ProgressWriter {
    tracker: Arc<Tracker>,
    task: tokio::task::JoinHandle<()>,
}

impl ProgressWriter {
    pub fn start(tracker: Arc<Tracker>) -> ProgressWriter {
        let t = tracker.clone();
        let task = tokio::spawn(async move {
            let mut last_log = std::time::Instant::now();
            loop {
                // File I/O: on the blocking pool, not this async worker. `write` takes the
                // stop flag's lock, so a write still running when the writer is dropped
                // cannot bring the removed file back.
                let w = t.clone();
                let _ = tokio::task::spawn_blocking(move || w.write()).await;
                if last_log.elapsed() >= Duration::from_secs(5) {
                    let s = t.snapshot();
                    tracing::info!(reference = %s.reference, done = s.done_bytes, total = s.total_bytes, "pull progress");
                    last_log = std::time::Instant::now();
                }
                tokio::time::sleep(PROGRESS_INTERVAL).await;
            }
        });
        ProgressWriter { tracker, task }
    }
}

impl Drop for ProgressWriter {
    fn drop(&mut self) {
        self.task.abort();
        let mut stopped = self.tracker.file_lock.lock_unpoisoned();
        *stopped = true;
        let _ = std::fs::remove_file(&self.tracker.path);
    }
}
