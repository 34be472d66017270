//! Looking images up: list, resolve by any reference form, raw config, pull progress.

use super::types::Image;
use super::{ImageRecord, Inner, Store};
use crate::digest::{self, hex_of};
use crate::manifest;
use crate::progress::PullProgress;
use crate::reference::{is_lower_hex, Reference};
use peapod_host::sync::LockUnpoisoned;
use std::path::{Path, PathBuf};

impl Store {
    /// All images.
    pub fn list(&self) -> Vec<Image> {
        self.inner()
            .images
            .values()
            .map(ImageRecord::to_image)
            .collect()
    }

    pub(super) fn find_id(inner: &Inner, reference: &str) -> Option<String> {
        let r = reference.trim();
        if r.is_empty() {
            return None;
        }
        let by_prefix = |hexp: &str| -> Option<String> {
            let mut it = inner
                .images
                .keys()
                .filter(|id| hex_of(id).starts_with(hexp));
            match (it.next(), it.next()) {
                (Some(id), None) => Some(id.clone()),
                _ => None,
            }
        };
        if let Some(h) = r.strip_prefix("sha256:") {
            if !is_lower_hex(h) {
                return None;
            }
            return by_prefix(h);
        }
        if r.len() == 64 && is_lower_hex(r) {
            let id = format!("sha256:{r}");
            return inner.images.contains_key(&id).then_some(id);
        }
        if let Ok(parsed) = Reference::parse(r) {
            let found = match &parsed.digest {
                Some(d) => {
                    let want = parsed.with_digest(d);
                    inner
                        .images
                        .values()
                        .find(|i| i.repo_digests.contains(&want))
                }
                None => parsed
                    .tagged()
                    .and_then(|t| inner.images.values().find(|i| i.repo_tags.contains(&t))),
            };
            if let Some(f) = found {
                return Some(f.id.clone());
            }
        }
        if is_lower_hex(r) {
            return by_prefix(r);
        }
        None
    }

    /// Finds an image by normalised tag (`busybox` finds
    /// `docker.io/library/busybox:latest`), by `name@sha256:...` (repo digest),
    /// by full id (`sha256:<hex>` or bare hex) or by a unique id prefix (with
    /// or without `sha256:`). A tag match wins over an id prefix.
    pub fn resolve(&self, reference: &str) -> Option<Image> {
        let inner = self.inner();
        let id = Self::find_id(&inner, reference)?;
        inner.images.get(&id).map(ImageRecord::to_image)
    }

    /// The raw image config JSON (for verbose ImageStatus), verified against the id.
    pub async fn config_json(&self, reference: &str) -> Option<Vec<u8>> {
        let id = Self::find_id(&self.inner(), reference)?;
        self.read_blob(&id, manifest::MAX_CONFIG_BYTES).await
    }

    /// The image's layers as diff_ids, bottom first (for verbose ImageStatus).
    pub fn layers(&self, reference: &str) -> Option<Vec<String>> {
        let inner = self.inner();
        let id = Self::find_id(&inner, reference)?;
        inner.images.get(&id).map(|r| r.layers.clone())
    }

    /// Progress of a running pull of `reference` in this process, if any.
    pub fn progress(&self, reference: &str) -> Option<PullProgress> {
        let key = Reference::parse(reference)
            .map(|r| r.to_string())
            .unwrap_or_else(|_| reference.to_string());
        self.pulls.lock_unpoisoned().get(&key).map(|t| t.snapshot())
    }

    /// The file a running pull of `reference` writes its progress to (see
    /// [`crate::progress`]); read it with [`crate::read_progress`].
    pub fn progress_path(&self, reference: &str) -> PathBuf {
        progress_path(&self.root, reference)
    }
}

/// `<root>/pulls/<sha256 of the normalised reference>.json`
pub fn progress_path(root: &Path, reference: &str) -> PathBuf {
    let key = Reference::parse(reference)
        .map(|r| r.to_string())
        .unwrap_or_else(|_| reference.to_string());
    root.join("pulls").join(format!(
        "{}.json",
        hex_of(&digest::sha256_digest(key.as_bytes()))
    ))
}
