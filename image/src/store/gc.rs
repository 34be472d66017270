//! Removing images and tags, pinning, and collecting what no image, pull or container uses.

use super::Store;
use crate::digest::hex_of;
use crate::fsutil::random_hex;
use crate::reference::Reference;
use crate::Error;
use std::collections::HashSet;

impl Store {
    /// Removes the image `reference` names (by tag, digest, id or prefix)
    /// with all its tags and digests, as containerd does for CRI RemoveImage.
    /// An unknown reference succeeds. Layers a container rootfs still uses stay
    /// until that rootfs is removed.
    pub async fn remove(&self, reference: &str) -> Result<(), Error> {
        let removed = {
            let mut inner = self.inner();
            match Self::find_id(&inner, reference) {
                Some(id) => inner.images.remove(&id).is_some(),
                None => false,
            }
        };
        if removed {
            tracing::info!(%reference, "image removed");
            self.persist().await?;
            self.gc().await;
        }
        Ok(())
    }

    /// Removes just one name: a tag (`busybox:1`) or a repo digest. The image
    /// goes when its last name goes. Given an id, removes the whole image.
    /// Unknown references succeed. (For `peapod image rm NAME`.)
    pub async fn untag(&self, reference: &str) -> Result<(), Error> {
        let changed = {
            let mut inner = self.inner();
            let Some(id) = Self::find_id(&inner, reference) else {
                return Ok(());
            };
            let name = Reference::parse(reference).ok();
            let Some(rec) = inner.images.get_mut(&id) else {
                return Ok(());
            };
            let mut by_name = false;
            if let Some(n) = &name {
                let before = rec.repo_tags.len() + rec.repo_digests.len();
                if let Some(d) = &n.digest {
                    let want = n.with_digest(d);
                    rec.repo_digests.retain(|x| x != &want);
                } else if let Some(t) = n.tagged() {
                    rec.repo_tags.retain(|x| x != &t);
                }
                by_name = rec.repo_tags.len() + rec.repo_digests.len() != before;
            }
            if !by_name || (rec.repo_tags.is_empty() && rec.repo_digests.is_empty()) {
                inner.images.remove(&id);
            }
            true
        };
        if changed {
            self.persist().await?;
            self.gc().await;
        }
        Ok(())
    }

    /// Marks an image pinned (the sandbox image) or not.
    pub async fn set_pinned(&self, reference: &str, pinned: bool) -> Result<(), Error> {
        {
            let mut inner = self.inner();
            let id = Self::find_id(&inner, reference)
                .ok_or_else(|| Error::NotFound(format!("image {reference}")))?;
            if let Some(r) = inner.images.get_mut(&id) {
                r.pinned = pinned;
            }
        }
        self.persist().await
    }

    pub(crate) async fn collect_garbage(&self) {
        self.gc().await
    }

    /// Removes layers and blobs nothing references. Layers are first renamed
    /// aside under the lock (so no pull can find a half-deleted one), then
    /// deleted outside it.
    pub(super) async fn gc(&self) {
        let (trash, blob_keep) = {
            let mut inner = self.inner();
            let mut keep: HashSet<String> = inner.leases.keys().cloned().collect();
            for r in inner.images.values() {
                keep.extend(r.layers.iter().cloned());
            }
            for c in inner.containers.values() {
                keep.extend(c.layers.iter().cloned());
            }
            let drop_ids: Vec<String> = inner
                .layers
                .keys()
                .filter(|l| !keep.contains(*l))
                .cloned()
                .collect();
            let mut trash = Vec::new();
            for l in drop_ids {
                let dir = self.layer_dir(&l);
                let t = self
                    .root
                    .join("layers")
                    .join(format!(".trash-{}", random_hex()));
                match std::fs::rename(&dir, &t) {
                    Ok(()) => {
                        inner.layers.remove(&l);
                        trash.push(t);
                    }
                    Err(e) => tracing::warn!(layer = %l, error = %e, "cannot remove layer"),
                }
            }
            let blob_keep: HashSet<String> = inner
                .images
                .values()
                .flat_map(|r| r.blobs.iter().map(|b| hex_of(b).to_string()))
                .collect();
            (trash, blob_keep)
        };
        // Blobs being written by an in-flight pull are not in any record yet:
        // only collect blobs older than a minute, which no live pull can own.
        let blobs_dir = self.root.join("blobs/sha256");
        let res = tokio::task::spawn_blocking(move || {
            for t in trash {
                if let Err(e) = std::fs::remove_dir_all(&t) {
                    tracing::warn!(dir = %t.display(), error = %e, "cannot delete layer");
                }
            }
            if let Ok(rd) = std::fs::read_dir(&blobs_dir) {
                for e in rd.flatten() {
                    let name = e.file_name().to_string_lossy().into_owned();
                    if name.starts_with('.') || blob_keep.contains(&name) {
                        continue;
                    }
                    let old = e
                        .metadata()
                        .and_then(|m| m.modified())
                        .ok()
                        .and_then(|t| t.elapsed().ok())
                        .is_some_and(|a| a > std::time::Duration::from_secs(60));
                    if old {
                        let _ = std::fs::remove_file(e.path());
                    }
                }
            }
        })
        .await;
        if let Err(e) = res {
            tracing::warn!(error = %e, "image gc failed");
        }
    }
}
