//! Unpacked layers: the shared unpack-verify-commit path of pulls, imports and local images.

use super::{join_err, LayerMeta, Store};
use crate::digest::{self, HashingReader};
use crate::error::IoContext;
use crate::fsutil::random_hex;
use crate::tarball::Limits;
use crate::unpack::{self, LayerStats};
use crate::Error;
use std::io::Read;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};

/// Where a layer's bytes come from, for the shared unpack path.
pub(crate) struct LayerSource {
    /// Compressed blob digest to verify, if known (docker-save archives have none).
    pub blob_digest: Option<String>,
    pub diff_id: String,
}

impl Store {
    /// Renames a verified temp layer into place and records it.
    pub(super) async fn commit_layer(
        &self,
        tmp: &Path,
        diff_id: &str,
        stats: LayerStats,
    ) -> Result<(), Error> {
        let dest = self.layer_dir(diff_id);
        let tmp = tmp.to_path_buf();
        let layers_dir = self.root.join("layers");
        tokio::task::spawn_blocking(move || -> Result<(), Error> {
            if dest.exists() {
                // Someone else committed it (only possible after a crash left it
                // unrecorded); theirs was verified too.
                let _ = std::fs::remove_dir_all(&tmp);
                return Ok(());
            }
            std::fs::rename(&tmp, &dest).ctx(|| format!("committing layer {}", dest.display()))?;
            peapod_host::fs::sync_dir(&layers_dir).ctx(|| "syncing layers directory".into())
        })
        .await
        .map_err(join_err)??;
        self.inner().layers.insert(diff_id.to_string(), stats);
        tracing::debug!(%diff_id, bytes = stats.bytes, inodes = stats.inodes, "layer committed");
        Ok(())
    }

    /// Makes a layer present from a local byte source (imports, local images).
    pub(crate) async fn ensure_layer_from<F>(&self, src: LayerSource, open: F) -> Result<(), Error>
    where
        F: FnOnce() -> Result<Box<dyn Read + Send>, Error> + Send + 'static,
    {
        if self.has_layer(&src.diff_id) {
            return Ok(());
        }
        let lock = self.key_lock(&format!("layer:{}", src.diff_id));
        let _g = lock.lock().await;
        if self.has_layer(&src.diff_id) {
            return Ok(());
        }
        let layers_dir = self.root.join("layers");
        let diff_id = src.diff_id.clone();
        let limits = self.limits;
        let (tmp, stats) = tokio::task::spawn_blocking(move || {
            let reader = open()?;
            unpack_layer_blocking(reader, &layers_dir, &src, limits)
        })
        .await
        .map_err(join_err)??;
        self.commit_layer(&tmp, &diff_id, stats).await
    }
}

/// At most this much may follow a tar's end marker (real archives pad to a
/// 10 KiB record); more is refused rather than hashed forever.
const MAX_TRAILING: u64 = 1 << 20;

/// Decompresses, hashes and unpacks one layer into `layers/.tmp-*`,
/// verifying the blob digest (if given) and the diff_id. Returns the temp
/// directory, ready to be renamed into place; on error nothing is left.
pub(super) fn unpack_layer_blocking<R: Read>(
    src: R,
    layers_dir: &Path,
    want: &LayerSource,
    limits: Limits,
) -> Result<(PathBuf, LayerStats), Error> {
    let tmp = layers_dir.join(format!(".tmp-{}", random_hex()));
    let fs_dir = tmp.join("fs");
    std::fs::create_dir_all(&fs_dir).ctx(|| format!("creating {}", fs_dir.display()))?;
    // The layer's root is a container's `/` when it is the only layer (or an image volume):
    // 0755 whatever the daemon's umask; a `./` entry in the tar sets its own mode over this.
    crate::fsutil::chmod(&fs_dir, 0o755)?;
    let res = || -> Result<LayerStats, Error> {
        let mut compressed = HashingReader::new(src);
        let (stats, diff_id) = {
            let dec = digest::decompress(&mut compressed).ctx(|| "reading layer".into())?;
            let mut plain = HashingReader::new(dec);
            // A write that fails (a full disk) names the layer and where it was going.
            let stats = unpack::unpack(&mut plain, &fs_dir, limits).map_err(|e| match e {
                Error::Io { context, source } => Error::Io {
                    context: format!(
                        "unpacking layer {} into {}: {context}",
                        want.diff_id,
                        fs_dir.display()
                    ),
                    source,
                },
                other => other,
            })?;
            let trailing = std::io::copy(
                &mut (&mut plain).take(MAX_TRAILING + 1),
                &mut std::io::sink(),
            )
            .ctx(|| "reading layer".into())?;
            if trailing > MAX_TRAILING {
                return Err(Error::InvalidImage(
                    "too much data after the end of the layer archive".into(),
                ));
            }
            (stats, plain.finish().0)
        };
        compressed.drain().ctx(|| "reading layer".into())?;
        let (blob_digest, _, _) = compressed.finish();
        if let Some(want_blob) = &want.blob_digest {
            if &blob_digest != want_blob {
                return Err(Error::DigestMismatch {
                    what: "layer blob".into(),
                    expected: want_blob.clone(),
                    actual: blob_digest,
                });
            }
        }
        if diff_id != want.diff_id {
            return Err(Error::DigestMismatch {
                what: "layer diff_id (uncompressed content)".into(),
                expected: want.diff_id.clone(),
                actual: diff_id,
            });
        }
        let meta = serde_json::to_vec(&LayerMeta {
            diff_id: want.diff_id.clone(),
            stats,
        })
        .map_err(|e| Error::json("serialising layer meta", e))?;
        std::fs::write(tmp.join("meta.json"), meta).ctx(|| "writing layer meta".into())?;
        // One syncfs instead of an fsync per file: the layer is durable before
        // the rename that makes it visible.
        let dir = std::fs::File::open(&tmp).ctx(|| format!("opening {}", tmp.display()))?;
        crate::sys::syncfs(dir.as_fd()).ctx(|| "syncing layer".into())?;
        Ok(stats)
    };
    match res() {
        Ok(stats) => Ok((tmp, stats)),
        Err(e) => {
            let _ = std::fs::remove_dir_all(&tmp);
            Err(e)
        }
    }
}
