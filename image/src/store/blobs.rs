//! Content blobs (manifests, indexes, configs) under `blobs/sha256/`, verified on write and read.

use super::{join_err, Store};
use crate::digest::{self};
use crate::error::IoContext;
use crate::Error;
use peapod_host::fs::write_file_atomic;

impl Store {
    pub(crate) async fn write_blob(&self, digest: &str, data: &[u8]) -> Result<(), Error> {
        digest::verify(&format!("blob {digest}"), digest, data)?;
        let path = self.blob_path(digest);
        let data = data.to_vec();
        tokio::task::spawn_blocking(move || {
            if path.exists() {
                // Refresh its age so a concurrent GC (which spares young
                // unreferenced blobs) does not take it before our record lands.
                if let Ok(f) = std::fs::File::options().append(true).open(&path) {
                    let _ = f.set_modified(std::time::SystemTime::now());
                }
                return Ok(());
            }
            write_file_atomic(&path, &data).ctx(|| format!("writing blob {}", path.display()))
        })
        .await
        .map_err(join_err)?
    }

    /// A stored blob, verified; None if absent or corrupt (then it is refetched).
    pub(super) async fn read_blob(&self, digest: &str, max: u64) -> Option<Vec<u8>> {
        let path = self.blob_path(digest);
        let data = tokio::fs::read(&path).await.ok()?;
        if data.len() as u64 > max || digest::verify("blob", digest, &data).is_err() {
            tracing::warn!(%digest, "stored blob is corrupt; discarding");
            let _ = tokio::fs::remove_file(&path).await;
            return None;
        }
        Some(data)
    }
}
