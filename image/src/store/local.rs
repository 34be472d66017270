//! Images built here (the built-in pause) and records of imported ones.

use super::layers::LayerSource;
use super::types::{Image, ImageConfig};
use super::{ImageRecord, Store};
use crate::digest::{self};
use crate::error::IoContext;
use crate::manifest::{self, AnyManifest, ConfigFile, Descriptor};
use crate::reference::Reference;
use crate::unpack::{self};
use crate::Error;
use std::collections::HashSet;
use std::io::Read;

impl Store {
    /// Builds a one-layer image from `files` (path in the rootfs, content,
    /// permission bits; parent directories are created 0755, everything owned
    /// by root, times zero so the same input gives the same image id) and
    /// records it under `name`. Used for the built-in pause image.
    pub async fn add_local_image(
        &self,
        name: &str,
        files: &[(String, Vec<u8>, u32)],
        config: ImageConfig,
    ) -> Result<Image, Error> {
        let r = Reference::parse(name)?;
        let tag = r.tagged().ok_or_else(|| {
            Error::InvalidArgument(format!(
                "local image name {name:?} needs a tag, not a digest"
            ))
        })?;
        let layer = build_layer_tar(files)?;
        let diff_id = digest::sha256_digest(&layer);
        let platform = manifest::host_platform();
        let cfg_file = ConfigFile {
            platform,
            created: Some("1970-01-01T00:00:00Z".into()),
            config: Some(super::types::runtime_config(&config)),
            rootfs: manifest::RootFs {
                kind: "layers".into(),
                diff_ids: vec![diff_id.clone()],
            },
        };
        let config_bytes = serde_json::to_vec(&cfg_file)
            .map_err(|e| Error::json("serialising local image config", e))?;
        let config_digest = digest::sha256_digest(&config_bytes);
        let manifest = AnyManifest {
            schema_version: 2,
            artifact_type: None,
            media_type: Some(manifest::OCI_MANIFEST.into()),
            config: Some(Descriptor {
                media_type: manifest::OCI_CONFIG.into(),
                digest: config_digest.clone(),
                size: config_bytes.len() as i64,
                platform: None,
                annotations: None,
                urls: None,
            }),
            layers: Some(vec![Descriptor {
                media_type: manifest::OCI_LAYER_TAR.into(),
                digest: diff_id.clone(),
                size: layer.len() as i64,
                platform: None,
                annotations: None,
                urls: None,
            }]),
            manifests: None,
            annotations: None,
        };
        let manifest_bytes = serde_json::to_vec(&manifest)
            .map_err(|e| Error::json("serialising local manifest", e))?;
        let manifest_digest = digest::sha256_digest(&manifest_bytes);

        let _lease = self.lease(std::slice::from_ref(&diff_id));
        self.ensure_layer_from(
            LayerSource {
                blob_digest: Some(diff_id.clone()),
                diff_id: diff_id.clone(),
            },
            move || Ok(Box::new(std::io::Cursor::new(layer)) as Box<dyn Read + Send>),
        )
        .await?;
        self.write_blob(&config_digest, &config_bytes).await?;
        self.write_blob(&manifest_digest, &manifest_bytes).await?;
        let record = ImageRecord {
            id: config_digest.clone(),
            repo_tags: vec![tag],
            repo_digests: vec![],
            size: (config_bytes.len()
                + manifest
                    .layers
                    .as_ref()
                    .map(|l| l[0].size as usize)
                    .unwrap_or(0)) as u64,
            config: super::types::image_config(&cfg_file),
            pinned: false,
            layers: vec![diff_id],
            blobs: vec![config_digest, manifest_digest],
            artifact_type: None,
        };
        let img = self.commit_image(record).await?;
        tracing::info!(name = %r, id = %img.id, "local image added");
        Ok(img)
    }

    /// Records an imported image (all its layers must be present).
    pub(crate) async fn record_imported(
        &self,
        config_digest: &str,
        config: &ConfigFile,
        names: Vec<String>,
        repo_digests: Vec<String>,
        size: u64,
        blobs: Vec<String>,
    ) -> Result<Image, Error> {
        self.commit_image(ImageRecord {
            id: config_digest.to_string(),
            repo_tags: names,
            repo_digests,
            size,
            config: super::types::image_config(config),
            pinned: false,
            layers: config.rootfs.diff_ids.clone(),
            blobs,
            artifact_type: None,
        })
        .await
    }
}

pub(super) fn build_layer_tar(files: &[(String, Vec<u8>, u32)]) -> Result<Vec<u8>, Error> {
    let mut b = tar::Builder::new(Vec::new());
    let mut dirs: HashSet<String> = HashSet::new();
    let mut sorted: Vec<&(String, Vec<u8>, u32)> = files.iter().collect();
    sorted.sort_by(|a, b| a.0.cmp(&b.0));
    for (path, data, mode) in sorted {
        let comps = unpack::clean_components(path.as_bytes())
            .map_err(|e| Error::InvalidArgument(format!("local image file {path:?}: {e}")))?;
        if comps.is_empty() {
            return Err(Error::InvalidArgument(format!(
                "local image file {path:?} names the root"
            )));
        }
        let comps: Vec<String> = comps
            .into_iter()
            .map(|c| String::from_utf8_lossy(&c).into_owned())
            .collect();
        for i in 1..comps.len() {
            let d = comps[..i].join("/");
            if dirs.insert(d.clone()) {
                let mut h = tar::Header::new_ustar();
                h.set_entry_type(tar::EntryType::Directory);
                h.set_mode(0o755);
                h.set_size(0);
                h.set_mtime(0);
                b.append_data(&mut h, format!("{d}/"), std::io::empty())
                    .ctx(|| format!("building layer entry {d}"))?;
            }
        }
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::Regular);
        h.set_mode(*mode & 0o7777);
        h.set_size(data.len() as u64);
        h.set_mtime(0);
        b.append_data(&mut h, comps.join("/"), &data[..])
            .ctx(|| format!("building layer entry {path}"))?;
    }
    b.into_inner().ctx(|| "finishing layer tar".into())
}
