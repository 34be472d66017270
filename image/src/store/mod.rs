//! The image store: metadata, content, unpacked layers, pulls, root filesystems.
//!
//! On disk, under the root (e.g. /var/lib/peapod/image):
//!
//! ```text
//! LOCK                    flock()ed by the one Store that has the root open
//! state.json              image records (atomically replaced on every change)
//! blobs/sha256/<hex>      manifests, indexes and configs, verified on write and read
//! layers/<hex>/fs/        an unpacked layer, keyed by its diff_id, an overlay lower dir
//! layers/<hex>/meta.json  {diff_id, bytes, inodes}
//! layers/.tmp-*           layers being unpacked (removed at open)
//! containers/<id>/        upper/ and work/ of a container rootfs, meta.json
//! pulls/<hex>.json        progress of running pulls (see progress.rs)
//! ```
//!
//! Layers are keyed by diff_id rather than chain id: each is unpacked into a
//! directory of its own (whiteouts become overlay whiteouts and are only
//! interpreted at mount time), so its content depends on its own diff alone,
//! and two images sharing a layer at different depths share the directory.
//!
//! Invariants: a layer directory appears (by rename) only once its compressed
//! digest and diff_id were verified; an image record appears only once all its
//! layers are present; layers used by an in-flight pull or import (leases) or
//! by a container rootfs are never collected.
//!
//! Modules, one job each: `types` (the public types), `blobs` (content blobs), `query`
//! (lookups and progress), `pull` (registry pulls), `layers` (unpack, verify, commit a layer),
//! `local` (images built here, imported records), `gc` (removal, pinning, collection),
//! `rootfs` (container root filesystems), `fsinfo` (disk usage). This file holds the store's
//! state, opening it, and the records every part shares.

mod artifact;
mod blobs;
mod download;
mod fsinfo;
mod gc;
mod layers;
mod local;
mod pull;
mod query;
mod rootfs;
mod types;

pub(crate) use layers::LayerSource;
pub use query::progress_path;
// testsupport builds images the way the store records them.
#[cfg(feature = "testsupport")]
pub(crate) use types::runtime_config;
pub use types::{FsInfo, FsUsage, Image, ImageConfig, Rootfs, RootfsRequest};

use crate::digest::hex_of;
use crate::error::IoContext;
use crate::progress::Tracker;
use crate::registry::RegistryConfig;
use crate::tarball::Limits;
use crate::unpack::LayerStats;
use crate::Error;
use peapod_host::fs::write_file_atomic;
use peapod_host::sync::LockUnpoisoned;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

#[derive(Debug, Clone, Serialize, Deserialize)]
struct ImageRecord {
    id: String,
    repo_tags: Vec<String>,
    repo_digests: Vec<String>,
    size: u64,
    config: ImageConfig,
    pinned: bool,
    /// diff_ids, bottom layer first.
    layers: Vec<String>,
    /// Blobs (manifests, indexes, config) this record keeps alive.
    blobs: Vec<String>,
    /// An OCI artifact's type: its one "layer" is the directory of its files (artifact.rs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    artifact_type: Option<String>,
}

impl ImageRecord {
    fn to_image(&self) -> Image {
        Image {
            id: self.id.clone(),
            repo_tags: self.repo_tags.clone(),
            repo_digests: self.repo_digests.clone(),
            size: self.size,
            config: self.config.clone(),
            pinned: self.pinned,
            artifact_type: self.artifact_type.clone(),
        }
    }
}

#[derive(Serialize, Deserialize, Default)]
struct StateFile {
    version: u32,
    images: Vec<ImageRecord>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct ContainerRecord {
    image_id: String,
    layers: Vec<String>,
    target: PathBuf,
    readonly: bool,
}

#[derive(Debug, Serialize, Deserialize)]
struct LayerMeta {
    diff_id: String,
    #[serde(flatten)]
    stats: LayerStats,
}

#[derive(Default)]
struct Inner {
    images: BTreeMap<String, ImageRecord>,
    containers: HashMap<String, ContainerRecord>,
    /// Present (committed) layers.
    layers: HashMap<String, LayerStats>,
    /// diff_id -> number of in-flight pulls/imports that will reference it.
    leases: HashMap<String, usize>,
    /// state.json could not be read at open (set aside): nothing is collected at this open.
    metadata_torn: bool,
}

/// The image store. Cheap to share (`Arc<Store>`), safe for concurrent use.
pub struct Store {
    root: PathBuf,
    cfg: RegistryConfig,
    client: reqwest::Client,
    /// Clients of registry hosts with TLS settings of their own (hosts.toml).
    tls_clients: crate::hosts::Clients,
    limits: Limits,
    inner: Mutex<Inner>,
    /// Serialises state.json rewrites so the last snapshot taken is the last written.
    persist_lock: tokio::sync::Mutex<()>,
    /// Per-key async locks: one download/unpack per layer, one pull per reference.
    key_locks: Mutex<HashMap<String, Weak<tokio::sync::Mutex<()>>>>,
    pulls: Mutex<HashMap<String, Arc<Tracker>>>,
    _lock_file: std::fs::File,
}

/// Releases layer leases when a pull or import ends, however it ends.
pub(crate) struct Lease<'a> {
    store: &'a Store,
    layers: Vec<String>,
}

impl Drop for Lease<'_> {
    fn drop(&mut self) {
        let mut inner = self.store.inner();
        for l in &self.layers {
            if let Some(n) = inner.leases.get_mut(l) {
                *n -= 1;
                if *n == 0 {
                    inner.leases.remove(l);
                }
            }
        }
    }
}

fn validate_container_id(id: &str) -> Result<(), Error> {
    let ok = !id.is_empty()
        && id.len() <= 128
        && id != "."
        && id != ".."
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.');
    if ok {
        Ok(())
    } else {
        Err(Error::InvalidArgument(format!(
            "invalid container id {id:?}"
        )))
    }
}

/// A blocking task that panicked or was cancelled; the JoinError stays the source.
pub(crate) fn join_err(e: tokio::task::JoinError) -> Error {
    Error::io("background task failed", std::io::Error::other(e))
}

impl Store {
    /// Opens (creating if needed) the store at `root`. Only one Store may have
    /// a root open at a time (an flock on `root/LOCK`). Leftovers of an
    /// interrupted run (temp layers, partial downloads, progress files) are
    /// removed, and unreferenced layers and blobs collected.
    ///
    /// A root whose lock another process holds (a predecessor still dying after kill -9) is
    /// waited for up to [`peapod_host::held::DEFAULT_WAIT`]; see [`Store::open_waiting`].
    pub async fn open(root: &Path, cfg: RegistryConfig) -> Result<Arc<Store>, Error> {
        Self::open_waiting(root, cfg, peapod_host::held::DEFAULT_WAIT).await
    }

    /// [`Store::open`], waiting at most `lock_wait` for the root's lock while another process
    /// holds it (logged once), then failing with an error that says so.
    pub async fn open_waiting(
        root: &Path,
        cfg: RegistryConfig,
        lock_wait: std::time::Duration,
    ) -> Result<Arc<Store>, Error> {
        let root = root.to_path_buf();
        let r2 = root.clone();
        let (lock_file, inner) =
            tokio::task::spawn_blocking(move || Self::open_blocking(&r2, lock_wait))
                .await
                .map_err(join_err)??;
        // The registry host configuration is read at every pull; checked whole here, so that
        // a daemon with a file that does not load does not start.
        if let Some(dir) = &cfg.config_path {
            let hosts = crate::hosts::check_all(dir, cfg.idle_timeout)?;
            for host in cfg.mirrors.keys().filter(|h| h.as_str() != "*") {
                if let Some(d) = crate::hosts::find_dir(dir, host)? {
                    tracing::warn!(%host, dir = %d.display(), "[registry.mirrors] of this host are not used: its host directory configures its endpoints");
                }
            }
            tracing::info!(config_path = %dir.display(), hosts, "registry host configuration");
        }
        if let Some(p) = &cfg.signature_policy {
            crate::policy::Policy::load(p)?;
            tracing::info!(signature_policy = %p.display(), "signature policy");
        }
        let client = crate::http::build_client(cfg.idle_timeout)?;
        let store = Arc::new(Store {
            root,
            tls_clients: crate::hosts::Clients::new(cfg.idle_timeout),
            cfg,
            client,
            limits: Limits::default(),
            inner: Mutex::new(inner),
            persist_lock: tokio::sync::Mutex::new(()),
            key_locks: Mutex::new(HashMap::new()),
            pulls: Mutex::new(HashMap::new()),
            _lock_file: lock_file,
        });
        if !store.inner().metadata_torn {
            store.gc().await;
        }
        tracing::info!(root = %store.root.display(), images = store.inner().images.len(), "image store open");
        Ok(store)
    }

    fn open_blocking(
        root: &Path,
        lock_wait: std::time::Duration,
    ) -> Result<(std::fs::File, Inner), Error> {
        for d in ["blobs/sha256", "layers", "containers", "pulls"] {
            std::fs::create_dir_all(root.join(d))
                .ctx(|| format!("creating {}", root.join(d).display()))?;
        }
        // Layers hold images' setuid binaries and device nodes, containers/ their writable
        // layers: no local user may reach them, so the store's root is 0700 — set, not left
        // to the umask, so that a store made by an older version is closed too.
        crate::fsutil::chmod(root, 0o700)?;
        let lock_path = root.join("LOCK");
        let lock_file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .ctx(|| format!("opening {}", lock_path.display()))?;
        // The lock lives as long as the file stays open (the Store's life).
        let what = format!("image store {}", root.display());
        peapod_host::held::lock_exclusive(&lock_file, &what, lock_wait, |e| {
            tracing::warn!(
                store = %root.display(),
                error = %e,
                wait_s = lock_wait.as_secs_f64(),
                "the image store's lock is held by another process (a peapod still exiting?); waiting for it"
            )
        })
        .map_err(|e| Error::io(format!("locking {}", lock_path.display()), e))?;

        // Leftovers of interrupted work: never trusted, always removed.
        for (dir, prefix) in [
            ("layers", ".tmp-"),
            ("layers", ".trash-"),
            ("blobs/sha256", ".tmp-"),
            ("pulls", ""),
            ("", ".tmp-"),
        ] {
            let d = root.join(dir);
            if let Ok(rd) = std::fs::read_dir(&d) {
                for e in rd.flatten() {
                    let name = e.file_name();
                    let name = name.to_string_lossy();
                    if name.starts_with(prefix) {
                        let p = e.path();
                        let _ = if p.is_dir() {
                            std::fs::remove_dir_all(&p)
                        } else {
                            std::fs::remove_file(&p)
                        };
                    }
                }
            }
        }

        let mut inner = Inner::default();
        let state_path = root.join("state.json");
        match std::fs::read(&state_path) {
            Ok(data) => match serde_json::from_slice::<StateFile>(&data) {
                Ok(st) => {
                    for r in st.images {
                        inner.images.insert(r.id.clone(), r);
                    }
                }
                Err(e) => {
                    // A torn or corrupt metadata file must not stop the daemon from starting
                    // (a crash loop leaves the node without a runtime): it is set aside, the
                    // images it listed are forgotten (pulled again, their layers are kept
                    // for that: no collection at this start) and everything else goes on.
                    inner.metadata_torn = true;
                    let aside = root.join("state.json.torn");
                    let moved = std::fs::rename(&state_path, &aside);
                    tracing::error!(
                        file = %state_path.display(),
                        set_aside_as = %aside.display(),
                        error = %e,
                        moved = moved.is_ok(),
                        "the image store's metadata cannot be read (torn or corrupt); set aside: its images must be pulled or imported again, their layers are kept"
                    );
                }
            },
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(Error::io(format!("reading {}", state_path.display()), e)),
        }
        if let Ok(rd) = std::fs::read_dir(root.join("layers")) {
            for e in rd.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                if name.starts_with('.') {
                    continue;
                }
                let meta: Option<LayerMeta> = std::fs::read(e.path().join("meta.json"))
                    .ok()
                    .and_then(|d| serde_json::from_slice(&d).ok());
                let meta = match meta {
                    None if e.path().join("meta.json").is_file()
                        && e.path().join("fs").is_dir() =>
                    {
                        // Written before the rename that committed the layer, so a committed
                        // layer has one: this one was torn. Its content was verified at that
                        // rename (and containers may use it), so it stays, its sizes counted
                        // again.
                        Self::recount_layer(&e.path(), &name)
                    }
                    m => m,
                };
                match meta {
                    Some(m) if hex_of(&m.diff_id) == name && e.path().join("fs").is_dir() => {
                        inner.layers.insert(m.diff_id, m.stats);
                    }
                    _ => {
                        tracing::warn!(layer = %name, "removing incomplete layer directory");
                        let _ = std::fs::remove_dir_all(e.path());
                    }
                }
            }
        }
        if let Ok(rd) = std::fs::read_dir(root.join("containers")) {
            for e in rd.flatten() {
                let id = e.file_name().to_string_lossy().into_owned();
                let meta = e.path().join("meta.json");
                match std::fs::read(&meta)
                    .ok()
                    .and_then(|d| serde_json::from_slice::<ContainerRecord>(&d).ok())
                {
                    Some(rec) => {
                        inner.containers.insert(id, rec);
                    }
                    None if meta.is_file() || e.path().join("meta.json.torn").is_file() => {
                        // Recorded, then torn: its upper directory may be a running
                        // container's writable layer, so it is kept (set aside, logged);
                        // the container's removal unmounts its target and a start after it
                        // is gone removes the directory.
                        let aside = e.path().join("meta.json.torn");
                        if meta.is_file() {
                            let _ = std::fs::rename(&meta, &aside);
                            tracing::error!(file = %meta.display(), set_aside_as = %aside.display(), "a container root filesystem's record cannot be read; set aside, its writable layer is kept");
                        } else if !crate::mount::any_overlay_upper_in(&e.path()) {
                            let _ = std::fs::remove_dir_all(e.path());
                        }
                    }
                    None => {
                        // Created but never recorded: the mount never happened.
                        let _ = std::fs::remove_dir_all(e.path());
                    }
                }
            }
        }
        // An image whose layers vanished (tampering, disk trouble) is unusable.
        let missing: Vec<String> = inner
            .images
            .values()
            .filter(|r| r.layers.iter().any(|l| !inner.layers.contains_key(l)))
            .map(|r| r.id.clone())
            .collect();
        for id in missing {
            tracing::warn!(image = %id, "dropping image record whose layers are missing");
            inner.images.remove(&id);
        }
        Ok((lock_file, inner))
    }

    /// Counts a committed layer again (its meta.json was torn) and writes its meta.json anew.
    fn recount_layer(dir: &Path, name: &str) -> Option<LayerMeta> {
        fn walk(p: &Path, stats: &mut LayerStats) {
            let Ok(rd) = std::fs::read_dir(p) else {
                return;
            };
            for e in rd.flatten() {
                let Ok(md) = e.metadata() else {
                    continue;
                };
                stats.inodes += 1;
                if md.is_file() {
                    stats.bytes += md.len();
                } else if md.is_dir() {
                    walk(&e.path(), stats);
                }
            }
        }
        let mut stats = LayerStats::default();
        walk(&dir.join("fs"), &mut stats);
        let meta = LayerMeta {
            diff_id: format!("sha256:{name}"),
            stats,
        };
        let file = dir.join("meta.json");
        let written = serde_json::to_vec(&meta)
            .map_err(std::io::Error::other)
            .and_then(|d| write_file_atomic(&file, &d));
        tracing::error!(file = %file.display(), rewritten = written.is_ok(), "a layer's metadata cannot be read (torn or corrupt); its sizes are counted again");
        Some(meta)
    }

    /// The store's root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    fn inner(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock_unpoisoned()
    }

    fn layer_dir(&self, diff_id: &str) -> PathBuf {
        self.root.join("layers").join(hex_of(diff_id))
    }

    fn blob_path(&self, digest: &str) -> PathBuf {
        self.root.join("blobs/sha256").join(hex_of(digest))
    }

    fn key_lock(&self, key: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut m = self.key_locks.lock_unpoisoned();
        if let Some(l) = m.get(key).and_then(Weak::upgrade) {
            return l;
        }
        m.retain(|_, w| w.strong_count() > 0);
        let l = Arc::new(tokio::sync::Mutex::new(()));
        m.insert(key.to_string(), Arc::downgrade(&l));
        l
    }

    pub(crate) fn lease(&self, layers: &[String]) -> Lease<'_> {
        let mut inner = self.inner();
        for l in layers {
            *inner.leases.entry(l.clone()).or_insert(0) += 1;
        }
        Lease {
            store: self,
            layers: layers.to_vec(),
        }
    }

    fn has_layer(&self, diff_id: &str) -> bool {
        self.inner().layers.contains_key(diff_id)
    }

    async fn persist(&self) -> Result<(), Error> {
        let _g = self.persist_lock.lock().await;
        let data = {
            let inner = self.inner();
            serde_json::to_vec_pretty(&StateFile {
                version: 1,
                images: inner.images.values().cloned().collect(),
            })
            .map_err(|e| Error::json("serialising image state", e))?
        };
        let path = self.root.join("state.json");
        tokio::task::spawn_blocking(move || {
            write_file_atomic(&path, &data).ctx(|| format!("writing {}", path.display()))
        })
        .await
        .map_err(join_err)?
    }

    /// Adds or merges an image record, moving its tags away from other images.
    async fn commit_image(&self, mut record: ImageRecord) -> Result<Image, Error> {
        let img = {
            let mut inner = self.inner();
            if let Some(missing) = record
                .layers
                .iter()
                .find(|l| !inner.layers.contains_key(*l))
            {
                return Err(Error::InvalidImage(format!(
                    "layer {missing} vanished before the image was recorded"
                )));
            }
            for other in inner.images.values_mut() {
                if other.id != record.id {
                    other.repo_tags.retain(|t| !record.repo_tags.contains(t));
                }
            }
            if let Some(existing) = inner.images.get(&record.id) {
                for t in &existing.repo_tags {
                    if !record.repo_tags.contains(t) {
                        record.repo_tags.push(t.clone());
                    }
                }
                for d in &existing.repo_digests {
                    if !record.repo_digests.contains(d) {
                        record.repo_digests.push(d.clone());
                    }
                }
                for b in &existing.blobs {
                    if !record.blobs.contains(b) {
                        record.blobs.push(b.clone());
                    }
                }
                record.pinned |= existing.pinned;
            }
            record.repo_tags.sort();
            record.repo_digests.sort();
            let img = record.to_image();
            inner.images.insert(record.id.clone(), record);
            img
        };
        self.persist().await?;
        Ok(img)
    }
}

#[cfg(test)]
mod tests;
