//! OCI artifacts (image-spec 1.1: an `artifactType`, or a config that is not an image's, such
//! as the empty `application/vnd.oci.empty.v1+json`) pulled for image volumes, as CRI-O 1.33+
//! mounts them: each layer is a file, whatever its media type (nothing is unpacked), named by
//! its `org.opencontainers.image.title` annotation; layers without a title cannot be named and
//! are left out, as CRI-O leaves them out.
//!
//! The files go into one directory that the store keeps like an unpacked layer, keyed by the
//! artifact's manifest digest (`layers/<hex>/fs/`): an image volume of the artifact is then a
//! read-only bind of it, and removal and collection work as for images. An artifact is never
//! a container's root filesystem (the daemon refuses it by [`Image::artifact_type`]).

use super::types::Image;
use super::{ImageRecord, Store};
use crate::error::IoContext;
use crate::manifest::{self, AnyManifest, Descriptor};
use crate::reference::{validate_digest, Reference};
use crate::registry::Session;
use crate::unpack::LayerStats;
use crate::Error;
use futures_util::StreamExt;
use sha2::{Digest, Sha256};
use std::collections::BTreeSet;
use std::io::Write;
use std::path::Path;

pub(crate) const ANNOTATION_TITLE: &str = "org.opencontainers.image.title";

/// Whether `m` is an artifact rather than a container image.
pub(super) fn is_artifact(m: &AnyManifest) -> bool {
    m.artifact_type.is_some()
        || m.config.as_ref().is_some_and(|c| {
            c.media_type != manifest::OCI_CONFIG
                && c.media_type != manifest::DOCKER_CONFIG
                && !c.media_type.is_empty()
        })
}

/// What an artifact is, as ImageStatus shows it: its `artifactType`, else its config's type.
fn artifact_type(m: &AnyManifest) -> String {
    m.artifact_type
        .clone()
        .or_else(|| m.config.as_ref().map(|c| c.media_type.clone()))
        .unwrap_or_default()
}

/// The file name a layer gets: its title, if it is one plain name.
fn file_name(r: &Reference, i: usize, l: &Descriptor) -> Result<Option<String>, Error> {
    let Some(title) = l.annotations.as_ref().and_then(|a| a.get(ANNOTATION_TITLE)) else {
        return Ok(None);
    };
    let ok = !title.is_empty()
        && title.len() <= 255
        && title != "."
        && title != ".."
        && !title.contains(['/', '\0']);
    if !ok {
        return Err(Error::InvalidImage(format!(
            "{r}: layers[{i}]: the title {title:?} ({ANNOTATION_TITLE}) is not a file name"
        )));
    }
    Ok(Some(title.clone()))
}

/// An artifact's manifest as the pull found it.
pub(super) struct Resolved<'a> {
    pub manifest: &'a AnyManifest,
    /// The manifest's own digest (below an index, the chosen entry's).
    pub digest: String,
    /// What the reference resolved to: the repo digest.
    pub top_digest: &'a str,
    /// The documents fetched so far (index, manifest), stored with it.
    pub blobs: Vec<(String, Vec<u8>)>,
}

impl Store {
    /// Pulls the artifact `a` (its manifest served by endpoint `ep`).
    pub(super) async fn pull_artifact(
        &self,
        session: &Session,
        ep: usize,
        r: &Reference,
        a: Resolved<'_>,
    ) -> Result<Image, Error> {
        let Resolved {
            manifest: m,
            digest,
            top_digest,
            mut blobs,
        } = a;
        let digest = digest.as_str();
        let layers = m.layers.clone().unwrap_or_default();
        if layers.is_empty() {
            return Err(Error::InvalidImage(format!(
                "{r} is an OCI artifact ({}) with no layers: nothing to mount",
                artifact_type(m)
            )));
        }
        let mut files = Vec::new();
        let mut names = BTreeSet::new();
        for (i, l) in layers.iter().enumerate() {
            validate_digest(&l.digest).map_err(Error::InvalidImage)?;
            if l.size < 0 {
                return Err(Error::InvalidImage(format!(
                    "{r}: layers[{i}]: negative size"
                )));
            }
            match file_name(r, i, l)? {
                Some(name) => {
                    if !names.insert(name.clone()) {
                        return Err(Error::InvalidImage(format!(
                            "{r}: two layers are titled {name:?}"
                        )));
                    }
                    files.push((name, l.clone()));
                }
                None => {
                    tracing::warn!(reference = %r, layer = i, digest = %l.digest, "artifact layer without a title ({ANNOTATION_TITLE}) left out: it cannot be named")
                }
            }
        }
        if files.is_empty() {
            return Err(Error::InvalidImage(format!(
                "{r}: no layer of the artifact has a title ({ANNOTATION_TITLE}) to name its file"
            )));
        }
        if let Some(c) = &m.config {
            validate_digest(&c.digest).map_err(Error::InvalidImage)?;
            let body = session
                .small_blob(&c.digest, ep, manifest::MAX_CONFIG_BYTES)
                .await?;
            blobs.push((c.digest.clone(), body));
        }

        // The artifact's directory is keyed by its manifest digest, like a layer by its diff_id.
        let key = digest.to_string();
        let _lease = self.lease(std::slice::from_ref(&key));
        if !self.has_layer(&key) {
            let tmp = self
                .root
                .join("layers")
                .join(format!(".tmp-artifact-{}", crate::digest::hex_of(digest)));
            let _ = tokio::fs::remove_dir_all(&tmp).await;
            let fs = tmp.join("fs");
            tokio::fs::create_dir_all(&fs)
                .await
                .ctx(|| format!("creating {}", fs.display()))?;
            crate::fsutil::chmod(&fs, 0o755)?;
            let res = self.fetch_files(session, ep, &fs, &files).await;
            let stats = match res {
                Ok(s) => s,
                Err(e) => {
                    let _ = tokio::fs::remove_dir_all(&tmp).await;
                    return Err(e);
                }
            };
            let meta = serde_json::to_vec(&super::LayerMeta {
                diff_id: key.clone(),
                stats,
            })
            .map_err(|e| Error::json("serialising artifact meta", e))?;
            std::fs::write(tmp.join("meta.json"), meta).ctx(|| "writing artifact meta".into())?;
            self.commit_layer(&tmp, &key, stats).await?;
        }
        for (d, b) in &blobs {
            self.write_blob(d, b).await?;
        }
        let record = ImageRecord {
            // The manifest's digest: artifacts' configs are often the same empty one.
            id: key.clone(),
            repo_tags: r.tagged().into_iter().collect(),
            repo_digests: vec![r.with_digest(top_digest)],
            size: layers.iter().map(|l| l.size.max(0) as u64).sum(),
            config: Default::default(),
            pinned: false,
            layers: vec![key],
            blobs: blobs.iter().map(|(d, _)| d.clone()).collect(),
            artifact_type: Some(artifact_type(m)),
        };
        self.commit_image(record).await
    }

    /// Downloads each titled layer into `dir/<title>`, verified against its digest and size.
    async fn fetch_files(
        &self,
        session: &Session,
        ep: usize,
        dir: &Path,
        files: &[(String, Descriptor)],
    ) -> Result<LayerStats, Error> {
        let mut stats = LayerStats::default();
        for (name, l) in files {
            let path = dir.join(name);
            let resp = session.blob(&l.digest, ep).await?;
            let url = resp.url().to_string();
            let mut out = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&path)
                .ctx(|| format!("creating {}", path.display()))?;
            let mut hash = Sha256::new();
            let mut n: u64 = 0;
            let mut stream = resp.bytes_stream();
            while let Some(chunk) = stream.next().await {
                let chunk = chunk.map_err(|e| Error::Http {
                    url: url.clone(),
                    source: e,
                })?;
                n += chunk.len() as u64;
                if n > l.size as u64 || n > self.limits.max_entry_size {
                    return Err(Error::InvalidImage(format!(
                        "{url}: more than the {} bytes the manifest declares",
                        l.size
                    )));
                }
                hash.update(&chunk);
                out.write_all(&chunk)
                    .ctx(|| format!("writing {}", path.display()))?;
            }
            let actual = format!("sha256:{}", hex::encode(hash.finalize()));
            if actual != l.digest || n != l.size as u64 {
                return Err(Error::DigestMismatch {
                    what: format!("artifact file {name} ({url})"),
                    expected: format!("{} ({} bytes)", l.digest, l.size),
                    actual: format!("{actual} ({n} bytes)"),
                });
            }
            out.sync_all()
                .ctx(|| format!("syncing {}", path.display()))?;
            crate::fsutil::chmod(&path, 0o444)?;
            stats.bytes += n;
            stats.inodes += 1;
        }
        Ok(stats)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn desc(title: Option<&str>) -> Descriptor {
        Descriptor {
            media_type: "text/plain".into(),
            digest: format!("sha256:{}", "0".repeat(64)),
            size: 1,
            platform: None,
            annotations: title.map(|t| [(ANNOTATION_TITLE.to_string(), t.to_string())].into()),
            urls: None,
        }
    }

    #[test]
    fn titles_must_be_plain_file_names() {
        let r = Reference::parse("reg:5000/art:v1").unwrap();
        assert_eq!(
            file_name(&r, 0, &desc(Some("a.txt"))).unwrap(),
            Some("a.txt".into())
        );
        assert_eq!(file_name(&r, 0, &desc(None)).unwrap(), None);
        for bad in ["", ".", "..", "a/b", "../x", "/etc/passwd", "a\0b"] {
            let e = file_name(&r, 2, &desc(Some(bad))).unwrap_err().to_string();
            assert!(e.contains("layers[2]"), "{bad:?}: {e}");
        }
    }

    #[test]
    fn artifacts_are_told_from_images() {
        let mut m = AnyManifest {
            config: Some(Descriptor {
                media_type: manifest::OCI_CONFIG.into(),
                ..desc(None)
            }),
            ..Default::default()
        };
        assert!(!is_artifact(&m));
        m.artifact_type = Some("application/vnd.example+type".into());
        assert!(is_artifact(&m));
        assert_eq!(artifact_type(&m), "application/vnd.example+type");
        m.artifact_type = None;
        m.config = Some(Descriptor {
            media_type: manifest::OCI_EMPTY.into(),
            ..desc(None)
        });
        assert!(is_artifact(&m));
        assert_eq!(artifact_type(&m), manifest::OCI_EMPTY);
    }
}
