//! `peapod image import FILE`: `docker save` archives and OCI image-layout
//! tars, for machines without a registry.
//!
//! The archive is indexed once (name -> offset, size; links followed), then
//! documents and layers are read by seeking, so a large archive is never
//! unpacked to disk as a whole. A gzip- or zstd-compressed archive is first
//! decompressed into a temp file under the store root (seeking needs it).
//!
//! Names: `docker save` lists `RepoTags`; an OCI layout names images with the
//! `io.containerd.image.name` annotation or, if that is absent, with
//! `org.opencontainers.image.ref.name` when it holds a full reference. A bare
//! tag there (`latest`, as `skopeo copy oci:DIR:latest` writes) names no
//! repository, so such an image is imported without a name and found by id.

use crate::digest::{self, hex_of};
use crate::error::IoContext;
use crate::fsutil::random_hex;
use crate::manifest::{self, AnyManifest, ConfigFile};
use crate::reference::{validate_digest, Reference};
use crate::store::{Image, LayerSource, Store};
use crate::tarball::{Kind, Limits, TarReader};
use crate::unpack::clean_components;
use crate::Error;
use std::collections::HashMap;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::Arc;

enum Entry {
    File { offset: u64, size: u64 },
    Link(Vec<u8>, bool /* symbolic */),
}

struct ArchiveIndex {
    path: PathBuf,
    entries: HashMap<Vec<u8>, Entry>,
}

fn key(name: &[u8]) -> Result<Vec<u8>, Error> {
    clean_components(name).map(|c| c.join(&b'/')).map_err(|e| {
        Error::InvalidImage(format!(
            "archive entry {:?}: {e}",
            String::from_utf8_lossy(name)
        ))
    })
}

impl ArchiveIndex {
    fn scan(path: &Path) -> Result<ArchiveIndex, Error> {
        let f = std::fs::File::open(path).ctx(|| format!("opening {}", path.display()))?;
        let mut entries = HashMap::new();
        {
            let mut tar = TarReader::new(
                std::io::BufReader::with_capacity(256 * 1024, f),
                Limits::default(),
            );
            loop {
                let Some(h) = tar.next_header()? else { break };
                let k = key(&h.name)?;
                match h.kind {
                    Kind::File => {
                        // The header has just been consumed: data starts here.
                        let offset = tar.position();
                        entries.insert(
                            k,
                            Entry::File {
                                offset,
                                size: h.size,
                            },
                        );
                    }
                    Kind::Symlink => {
                        entries.insert(k, Entry::Link(h.link.clone(), true));
                    }
                    Kind::HardLink => {
                        entries.insert(k, Entry::Link(h.link.clone(), false));
                    }
                    _ => {}
                }
            }
        }
        Ok(ArchiveIndex {
            path: path.to_path_buf(),
            entries,
        })
    }

    /// (offset, size) of a regular file, following links inside the archive.
    fn locate(&self, name: &str) -> Result<(u64, u64), Error> {
        let mut k = key(name.as_bytes())?;
        for _ in 0..16 {
            match self.entries.get(&k) {
                Some(Entry::File { offset, size }) => return Ok((*offset, *size)),
                Some(Entry::Link(target, symbolic)) => {
                    k = if *symbolic && !target.starts_with(b"/") {
                        let mut base: Vec<u8> = match k.iter().rposition(|&b| b == b'/') {
                            Some(i) => k[..=i].to_vec(),
                            None => Vec::new(),
                        };
                        base.extend_from_slice(target);
                        key(&base)?
                    } else {
                        key(target)?
                    };
                }
                None => return Err(Error::InvalidImage(format!("archive has no {name}"))),
            }
        }
        Err(Error::InvalidImage(format!(
            "too many links resolving {name} in the archive"
        )))
    }

    fn has(&self, name: &str) -> bool {
        self.locate(name).is_ok()
    }

    fn read_small(&self, name: &str, max: u64) -> Result<Vec<u8>, Error> {
        let (offset, size) = self.locate(name)?;
        if size > max {
            return Err(Error::InvalidImage(format!(
                "{name} in the archive is larger than {max} bytes"
            )));
        }
        let mut f =
            std::fs::File::open(&self.path).ctx(|| format!("opening {}", self.path.display()))?;
        f.seek(SeekFrom::Start(offset))
            .ctx(|| format!("seeking to {name}"))?;
        let mut buf = vec![0u8; size as usize];
        f.read_exact(&mut buf)
            .ctx(|| format!("reading {name} from the archive"))?;
        Ok(buf)
    }

    fn open(&self, name: &str) -> Result<Box<dyn Read + Send>, Error> {
        let (offset, size) = self.locate(name)?;
        let mut f =
            std::fs::File::open(&self.path).ctx(|| format!("opening {}", self.path.display()))?;
        f.seek(SeekFrom::Start(offset))
            .ctx(|| format!("seeking to {name}"))?;
        Ok(Box::new(
            std::io::BufReader::with_capacity(256 * 1024, f).take(size),
        ))
    }
}

struct Planned {
    config_digest: String,
    config: ConfigFile,
    /// (source, archive entry name)
    layers: Vec<(LayerSource, String)>,
    docs: Vec<(String, Vec<u8>)>,
    names: Vec<String>,
    repo_digests: Vec<String>,
    size: u64,
}

#[derive(serde::Deserialize)]
struct DockerManifestEntry {
    #[serde(rename = "Config")]
    config: String,
    #[serde(rename = "RepoTags", default)]
    repo_tags: Option<Vec<String>>,
    #[serde(rename = "Layers", default)]
    layers: Vec<String>,
}

fn blob_name(digest: &str) -> String {
    format!("blobs/sha256/{}", hex_of(digest))
}

fn parse_config(bytes: &[u8], what: &str) -> Result<ConfigFile, Error> {
    serde_json::from_slice(bytes).map_err(|e| Error::json(format!("parsing config {what}"), e))
}

fn plan(index: &ArchiveIndex) -> Result<Vec<Planned>, Error> {
    if index.has("manifest.json") {
        return plan_docker(index);
    }
    if index.has("index.json") {
        return plan_oci(index);
    }
    Err(Error::InvalidImage(
        "archive is neither a docker save archive (manifest.json) nor an OCI image layout (index.json)".into(),
    ))
}

fn normalise_names(names: impl IntoIterator<Item = String>) -> Vec<String> {
    let mut out = Vec::new();
    for n in names {
        match Reference::parse(&n) {
            Ok(r) => match r.tagged() {
                Some(t) if r.digest.is_none() => out.push(t),
                _ => tracing::warn!(name = %n, "ignoring image name that is not name:tag"),
            },
            Err(e) => {
                tracing::warn!(name = %n, error = %e, "ignoring invalid image name in archive")
            }
        }
    }
    out.sort();
    out.dedup();
    out
}

fn plan_docker(index: &ArchiveIndex) -> Result<Vec<Planned>, Error> {
    let m = index.read_small("manifest.json", manifest::MAX_MANIFEST_BYTES)?;
    let entries: Vec<DockerManifestEntry> = serde_json::from_slice(&m)
        .map_err(|e| Error::json("parsing manifest.json of the archive", e))?;
    let mut out = Vec::new();
    for e in entries {
        let config_bytes = index.read_small(&e.config, manifest::MAX_CONFIG_BYTES)?;
        let config_digest = digest::sha256_digest(&config_bytes);
        let config = parse_config(&config_bytes, &e.config)?;
        if config.rootfs.diff_ids.len() != e.layers.len() {
            return Err(Error::InvalidImage(format!(
                "{}: {} layers listed but the config has {} diff_ids",
                e.config,
                e.layers.len(),
                config.rootfs.diff_ids.len()
            )));
        }
        let mut layers = Vec::new();
        let mut size = config_bytes.len() as u64;
        for (path, diff) in e.layers.iter().zip(&config.rootfs.diff_ids) {
            validate_digest(diff).map_err(Error::InvalidImage)?;
            size += index.locate(path)?.1;
            layers.push((
                LayerSource {
                    blob_digest: None,
                    diff_id: diff.clone(),
                },
                path.clone(),
            ));
        }
        out.push(Planned {
            config_digest: config_digest.clone(),
            config,
            layers,
            docs: vec![(config_digest, config_bytes)],
            names: normalise_names(e.repo_tags.unwrap_or_default()),
            repo_digests: vec![],
            size,
        });
    }
    Ok(out)
}

fn read_doc(index: &ArchiveIndex, digest: &str, max: u64) -> Result<Vec<u8>, Error> {
    validate_digest(digest).map_err(Error::InvalidImage)?;
    let b = index.read_small(&blob_name(digest), max)?;
    digest::verify(&format!("archive blob {digest}"), digest, &b)?;
    Ok(b)
}

fn plan_oci(index: &ArchiveIndex) -> Result<Vec<Planned>, Error> {
    let top = index.read_small("index.json", manifest::MAX_MANIFEST_BYTES)?;
    let top: AnyManifest = serde_json::from_slice(&top)
        .map_err(|e| Error::json("parsing index.json of the archive", e))?;
    let mut out = Vec::new();
    for desc in top.manifests.unwrap_or_default() {
        let ann = desc.annotations.clone().unwrap_or_default();
        let name = ann
            .get(manifest::ANNOTATION_CONTAINERD_NAME)
            .cloned()
            .or_else(|| {
                ann.get(manifest::ANNOTATION_REF_NAME)
                    .filter(|n| n.contains('/') || n.contains(':'))
                    .cloned()
            });
        if name.is_none() {
            if let Some(tag) = ann.get(manifest::ANNOTATION_REF_NAME) {
                tracing::warn!(%tag, "OCI layout entry names only a tag; importing it without a name");
            }
        }
        let names = normalise_names(name);
        let mut docs = Vec::new();
        let mut cur = desc.clone();
        let manifest = loop {
            let body = read_doc(index, &cur.digest, manifest::MAX_MANIFEST_BYTES)?;
            docs.push((cur.digest.clone(), body.clone()));
            let m: AnyManifest = serde_json::from_slice(&body)
                .map_err(|e| Error::json(format!("parsing {}", cur.digest), e))?;
            let ct = if cur.media_type.is_empty() {
                None
            } else {
                Some(cur.media_type.as_str())
            };
            if !m.is_index(ct) {
                break m;
            }
            if docs.len() > 4 {
                return Err(Error::InvalidImage("indexes nested too deeply".into()));
            }
            let want = manifest::host_platform();
            cur = manifest::select_platform(m.manifests.as_deref().unwrap_or(&[]), &want)
                .cloned()
                .ok_or_else(|| {
                    Error::NotFound(format!(
                        "no image for {}/{} in the archive's index {}",
                        want.os, want.architecture, cur.digest
                    ))
                })?;
        };
        let cdesc = manifest
            .config
            .clone()
            .ok_or_else(|| Error::InvalidImage(format!("manifest {} has no config", cur.digest)))?;
        let config_bytes = read_doc(index, &cdesc.digest, manifest::MAX_CONFIG_BYTES)?;
        let config = parse_config(&config_bytes, &cdesc.digest)?;
        let mlayers = manifest.layers.clone().unwrap_or_default();
        if config.rootfs.diff_ids.len() != mlayers.len() {
            return Err(Error::InvalidImage(format!(
                "manifest {} has {} layers but its config lists {} diff_ids",
                cur.digest,
                mlayers.len(),
                config.rootfs.diff_ids.len()
            )));
        }
        let mut layers = Vec::new();
        let mut size = cdesc.size.max(0) as u64;
        for (l, diff) in mlayers.iter().zip(&config.rootfs.diff_ids) {
            validate_digest(&l.digest).map_err(Error::InvalidImage)?;
            validate_digest(diff).map_err(Error::InvalidImage)?;
            size += l.size.max(0) as u64;
            layers.push((
                LayerSource {
                    blob_digest: Some(l.digest.clone()),
                    diff_id: diff.clone(),
                },
                blob_name(&l.digest),
            ));
        }
        let repo_digests = names
            .iter()
            .filter_map(|n| Reference::parse(n).ok())
            .map(|r| r.with_digest(&desc.digest))
            .collect();
        docs.push((cdesc.digest.clone(), config_bytes));
        out.push(Planned {
            config_digest: cdesc.digest.clone(),
            config,
            layers,
            docs,
            names,
            repo_digests,
            size,
        });
    }
    Ok(out)
}

/// Decompresses a compressed archive into a temp file next to the store's
/// state (seeking needs a plain tar). Returns None for a plain tar.
fn decompress_if_needed(archive: &Path, tmp_dir: &Path) -> Result<Option<PathBuf>, Error> {
    let f = std::fs::File::open(archive).ctx(|| format!("opening {}", archive.display()))?;
    let mut br = std::io::BufReader::new(f);
    if digest::sniff(&mut br).ctx(|| format!("reading {}", archive.display()))?
        == digest::Compression::None
    {
        return Ok(None);
    }
    let tmp = tmp_dir.join(format!(".tmp-import-{}.tar", random_hex()));
    let res = (|| {
        let mut dec =
            digest::decompress(br).ctx(|| format!("decompressing {}", archive.display()))?;
        let mut out = std::fs::File::create(&tmp).ctx(|| format!("creating {}", tmp.display()))?;
        std::io::copy(&mut dec, &mut out).ctx(|| format!("decompressing {}", archive.display()))?;
        Ok(())
    })();
    match res {
        Ok(()) => Ok(Some(tmp)),
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            Err(e)
        }
    }
}

struct RemoveOnDrop(Option<PathBuf>);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        if let Some(p) = &self.0 {
            let _ = std::fs::remove_file(p);
        }
    }
}

impl Store {
    /// Imports every image of a `docker save` archive or an OCI image-layout
    /// tar (plain, gzip or zstd), with the names it carries. Layers already
    /// present are skipped; every layer's diff_id (and, for OCI, every blob
    /// digest) is verified. Returns the imported images.
    pub async fn import(&self, archive: &Path) -> Result<Vec<Image>, Error> {
        let res = self.import_inner(archive).await;
        if let Err(e) = &res {
            tracing::warn!(archive = %archive.display(), error = %e, "import failed");
            // Layers committed by the failed import but used by no image go.
            self.collect_garbage().await;
        }
        res
    }

    async fn import_inner(&self, archive: &Path) -> Result<Vec<Image>, Error> {
        let archive = archive.to_path_buf();
        let root = self.root().to_path_buf();
        let a2 = archive.clone();
        let (index, planned, _tmp) = tokio::task::spawn_blocking(move || -> Result<_, Error> {
            let tmp = RemoveOnDrop(decompress_if_needed(&a2, &root)?);
            let path = tmp.0.clone().unwrap_or_else(|| a2.clone());
            let index = ArchiveIndex::scan(&path)?;
            let planned = plan(&index)?;
            Ok((Arc::new(index), planned, tmp))
        })
        .await
        .map_err(crate::store::join_err)??;

        let mut images = Vec::new();
        for p in planned {
            let diff_ids: Vec<String> = p.layers.iter().map(|(s, _)| s.diff_id.clone()).collect();
            let _lease = self.lease(&diff_ids);
            for (src, entry) in p.layers {
                let index = index.clone();
                self.ensure_layer_from(src, move || index.open(&entry))
                    .await?;
            }
            let mut blobs = Vec::new();
            for (d, b) in &p.docs {
                self.write_blob(d, b).await?;
                blobs.push(d.clone());
            }
            let img = self
                .record_imported(
                    &p.config_digest,
                    &p.config,
                    p.names,
                    p.repo_digests,
                    p.size,
                    blobs,
                )
                .await?;
            tracing::info!(archive = %archive.display(), id = %img.id, tags = ?img.repo_tags, "image imported");
            images.push(img);
        }
        // Return each image once, in its final state (several entries may name one image).
        let mut seen = std::collections::HashSet::new();
        let mut out = Vec::new();
        for i in images.into_iter().rev() {
            if seen.insert(i.id.clone()) {
                out.push(self.resolve(&i.id).unwrap_or(i));
            }
        }
        out.reverse();
        Ok(out)
    }
}
