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

use crate::digest::{self, hex_of, HashingReader};
use crate::error::IoContext;
use crate::fsutil::{self, random_hex};
use crate::oci::{self, AnyManifest, ConfigFile, Descriptor};
use crate::progress::{self, LayerProgress, LayerStatus, PullProgress, Tracker};
use crate::reference::{is_lower_hex, validate_digest, Reference};
use crate::registry::{self, Credentials, RegistryConfig, Session};
use crate::tarball::Limits;
use crate::unpack::{self, LayerStats};
use crate::Error;
use futures_util::StreamExt;
use peapod_host::fs::write_file_atomic;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::Read;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

/// An image as the CRI sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Image {
    /// `sha256:<config digest>`.
    pub id: String,
    /// Normalised `name:tag`s.
    pub repo_tags: Vec<String>,
    /// `name@sha256:<manifest or index digest>`.
    pub repo_digests: Vec<String>,
    /// Config plus layer blob sizes, as the manifest declares them.
    pub size: u64,
    pub config: ImageConfig,
    /// A recommendation to exempt the image from kubelet's GC (the sandbox image).
    pub pinned: bool,
}

/// The parts of an image config a container needs.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageConfig {
    pub user: String,
    pub env: Vec<String>,
    pub entrypoint: Vec<String>,
    pub cmd: Vec<String>,
    pub working_dir: String,
    pub stop_signal: String,
    pub labels: HashMap<String, String>,
    /// `80/tcp`, ...
    pub exposed_ports: Vec<String>,
    /// Paths the image declares as volumes.
    pub volumes: Vec<String>,
}

impl ImageConfig {
    fn from_config_file(c: &ConfigFile) -> ImageConfig {
        let rc = c.config.clone().unwrap_or_default();
        ImageConfig {
            user: rc.user.unwrap_or_default(),
            env: rc.env.unwrap_or_default(),
            entrypoint: rc.entrypoint.unwrap_or_default(),
            cmd: rc.cmd.unwrap_or_default(),
            working_dir: rc.working_dir.unwrap_or_default(),
            stop_signal: rc.stop_signal.unwrap_or_default(),
            labels: rc.labels.unwrap_or_default().into_iter().collect(),
            exposed_ports: rc.exposed_ports.unwrap_or_default().into_keys().collect(),
            volumes: rc.volumes.unwrap_or_default().into_keys().collect(),
        }
    }

    pub(crate) fn to_runtime_config(&self) -> oci::RuntimeConfig {
        let opt_vec = |v: &Vec<String>| if v.is_empty() { None } else { Some(v.clone()) };
        let opt_str = |s: &String| if s.is_empty() { None } else { Some(s.clone()) };
        let set = |v: &Vec<String>| {
            if v.is_empty() {
                None
            } else {
                Some(
                    v.iter()
                        .map(|k| (k.clone(), serde_json::json!({})))
                        .collect(),
                )
            }
        };
        oci::RuntimeConfig {
            user: opt_str(&self.user),
            env: opt_vec(&self.env),
            entrypoint: opt_vec(&self.entrypoint),
            cmd: opt_vec(&self.cmd),
            working_dir: opt_str(&self.working_dir),
            stop_signal: opt_str(&self.stop_signal),
            labels: if self.labels.is_empty() {
                None
            } else {
                Some(
                    self.labels
                        .iter()
                        .map(|(k, v)| (k.clone(), v.clone()))
                        .collect(),
                )
            },
            exposed_ports: set(&self.exposed_ports),
            volumes: set(&self.volumes),
        }
    }
}

/// A mounted container root filesystem.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rootfs {
    /// Where it is mounted.
    pub target: PathBuf,
    /// The writable layer (None for a read-only rootfs).
    pub upper_dir: Option<PathBuf>,
    /// The image's layer directories, top-most first.
    pub lower_dirs: Vec<PathBuf>,
    pub readonly: bool,
}

/// Usage of one filesystem, for CRI ImageFsInfo.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FsUsage {
    /// The directory the usage is about (CRI `fs_id.mountpoint`).
    pub mountpoint: PathBuf,
    pub used_bytes: u64,
    pub inodes_used: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FsInfo {
    /// Content and unpacked layers.
    pub image: FsUsage,
    /// Writable layers of containers.
    pub container: FsUsage,
}

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
}

/// The image store. Cheap to share (`Arc<Store>`), safe for concurrent use.
pub struct Store {
    root: PathBuf,
    cfg: RegistryConfig,
    client: reqwest::Client,
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

/// Where a layer's bytes come from, for the shared unpack path.
pub(crate) struct LayerSource {
    /// Compressed blob digest to verify, if known (docker-save archives have none).
    pub blob_digest: Option<String>,
    pub diff_id: String,
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

fn join_err(e: tokio::task::JoinError) -> Error {
    Error::io(
        "background task failed",
        std::io::Error::other(e.to_string()),
    )
}

impl Store {
    /// Opens (creating if needed) the store at `root`. Only one Store may have
    /// a root open at a time (an flock on `root/LOCK`). Leftovers of an
    /// interrupted run (temp layers, partial downloads, progress files) are
    /// removed, and unreferenced layers and blobs collected.
    pub async fn open(root: &Path, cfg: RegistryConfig) -> Result<Arc<Store>, Error> {
        let root = root.to_path_buf();
        let r2 = root.clone();
        let (lock_file, inner) = tokio::task::spawn_blocking(move || Self::open_blocking(&r2))
            .await
            .map_err(join_err)??;
        let store = Arc::new(Store {
            root,
            cfg,
            client: registry::build_client()?,
            limits: Limits::default(),
            inner: Mutex::new(inner),
            persist_lock: tokio::sync::Mutex::new(()),
            key_locks: Mutex::new(HashMap::new()),
            pulls: Mutex::new(HashMap::new()),
            _lock_file: lock_file,
        });
        store.gc().await;
        tracing::info!(root = %store.root.display(), images = store.inner().images.len(), "image store open");
        Ok(store)
    }

    fn open_blocking(root: &Path) -> Result<(std::fs::File, Inner), Error> {
        for d in ["blobs/sha256", "layers", "containers", "pulls"] {
            std::fs::create_dir_all(root.join(d))
                .ctx(|| format!("creating {}", root.join(d).display()))?;
        }
        let lock_path = root.join("LOCK");
        let lock_file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .ctx(|| format!("opening {}", lock_path.display()))?;
        {
            use std::os::fd::AsRawFd;
            // SAFETY: a valid fd; the lock lives as long as the file stays open (the Store's life).
            if unsafe { libc::flock(lock_file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
                return Err(Error::io(
                    format!(
                        "image store {} is in use by another process",
                        root.display()
                    ),
                    std::io::Error::last_os_error(),
                ));
            }
        }

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
            Ok(data) => {
                let st: StateFile = serde_json::from_slice(&data)
                    .map_err(|e| Error::json(format!("parsing {}", state_path.display()), e))?;
                for r in st.images {
                    inner.images.insert(r.id.clone(), r);
                }
            }
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
                match std::fs::read(e.path().join("meta.json"))
                    .ok()
                    .and_then(|d| serde_json::from_slice::<ContainerRecord>(&d).ok())
                {
                    Some(rec) => {
                        inner.containers.insert(id, rec);
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

    /// The store's root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    fn inner(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn layer_dir(&self, diff_id: &str) -> PathBuf {
        self.root.join("layers").join(hex_of(diff_id))
    }

    fn blob_path(&self, digest: &str) -> PathBuf {
        self.root.join("blobs/sha256").join(hex_of(digest))
    }

    fn key_lock(&self, key: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut m = self.key_locks.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(l) = m.get(key).and_then(Weak::upgrade) {
            return l;
        }
        m.retain(|_, w| w.strong_count() > 0);
        let l = Arc::new(tokio::sync::Mutex::new(()));
        m.insert(key.to_string(), Arc::downgrade(&l));
        l
    }

    fn lease(&self, layers: &[String]) -> Lease<'_> {
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

    // ----- blobs -----

    async fn write_blob(&self, digest: &str, data: &[u8]) -> Result<(), Error> {
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
    async fn read_blob(&self, digest: &str, max: u64) -> Option<Vec<u8>> {
        let path = self.blob_path(digest);
        let data = tokio::fs::read(&path).await.ok()?;
        if data.len() as u64 > max || digest::verify("blob", digest, &data).is_err() {
            tracing::warn!(%digest, "stored blob is corrupt; discarding");
            let _ = tokio::fs::remove_file(&path).await;
            return None;
        }
        Some(data)
    }

    // ----- queries -----

    /// All images.
    pub fn list(&self) -> Vec<Image> {
        self.inner()
            .images
            .values()
            .map(ImageRecord::to_image)
            .collect()
    }

    fn find_id(inner: &Inner, reference: &str) -> Option<String> {
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
        self.read_blob(&id, oci::MAX_CONFIG_BYTES).await
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
        self.pulls
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&key)
            .map(|t| t.snapshot())
    }

    /// The file a running pull of `reference` writes its progress to (see
    /// [`crate::progress`]); read it with [`crate::read_progress`].
    pub fn progress_path(&self, reference: &str) -> PathBuf {
        progress_path(&self.root, reference)
    }

    // ----- pull -----

    /// Pulls `reference` from its registry (or a configured mirror) and
    /// records it. Concurrent pulls of one reference are serialised, so the
    /// second finds everything present; layers already in the store are never
    /// refetched; every blob is verified before it is trusted; a failed pull
    /// leaves no image and no layer behind.
    pub async fn pull(&self, reference: &str, creds: Option<&Credentials>) -> Result<Image, Error> {
        let r = Reference::parse(reference)?;
        let name = r.to_string();
        tracing::info!(reference = %name, "pulling image");
        let lock = self.key_lock(&format!("pull:{name}"));
        let _pull_guard = lock.lock().await;
        let started = std::time::Instant::now();
        let span = tracing::info_span!("pull", reference = %name);
        let res = tracing::Instrument::instrument(self.pull_inner(&r, creds), span).await;
        match &res {
            Ok(img) => {
                tracing::info!(reference = %name, id = %img.id, elapsed_ms = started.elapsed().as_millis() as u64, "pulled image")
            }
            Err(e) => {
                tracing::warn!(reference = %name, error = %e, "pull failed");
                // Layers this pull committed but no image references go again:
                // a failed pull leaves nothing stored.
                self.gc().await;
            }
        }
        res
    }

    async fn pull_inner(&self, r: &Reference, creds: Option<&Credentials>) -> Result<Image, Error> {
        let session = Session::new(self.client.clone(), &self.cfg, r, creds);
        let (top, top_ct, ep) = session.manifest(r.manifest_ref()).await?;
        let top_digest = digest::sha256_digest(&top);
        let mut blobs = vec![(top_digest.clone(), top.clone())];

        let mut doc = top;
        let mut ct = top_ct;
        // An index may point at another index (rare, but legal): follow at most a few.
        for depth in 0.. {
            let parsed: AnyManifest = serde_json::from_slice(&doc)
                .map_err(|e| Error::json(format!("parsing manifest of {r}"), e))?;
            if let Some(mt) = ct.as_deref().or(parsed.media_type.as_deref()) {
                if mt == oci::DOCKER_SCHEMA1
                    || mt == oci::DOCKER_SCHEMA1_SIGNED
                    || parsed.schema_version == 1
                {
                    return Err(Error::Unsupported(format!(
                        "{r}: Docker schema 1 manifests are not supported"
                    )));
                }
            }
            if !parsed.is_index(ct.as_deref()) {
                break;
            }
            if depth >= 3 {
                return Err(Error::InvalidImage(format!(
                    "{r}: indexes nested too deeply"
                )));
            }
            let want = oci::host_platform();
            let pick = oci::select_platform(parsed.manifests.as_deref().unwrap_or(&[]), &want)
                .ok_or_else(|| {
                    Error::NotFound(format!(
                        "{r}: no image for platform {}/{} in the index",
                        want.os, want.architecture
                    ))
                })?;
            validate_digest(&pick.digest).map_err(Error::InvalidImage)?;
            let (body, child_ct, _) = session.manifest(&pick.digest).await?;
            blobs.push((pick.digest.clone(), body.clone()));
            doc = body;
            ct = child_ct.or(Some(pick.media_type.clone()));
        }
        let manifest: AnyManifest = serde_json::from_slice(&doc)
            .map_err(|e| Error::json(format!("parsing manifest of {r}"), e))?;
        let config_desc = manifest
            .config
            .clone()
            .ok_or_else(|| Error::InvalidImage(format!("{r}: manifest has no config")))?;
        validate_digest(&config_desc.digest).map_err(Error::InvalidImage)?;
        let layers = manifest.layers.clone().unwrap_or_default();
        for l in &layers {
            validate_digest(&l.digest).map_err(Error::InvalidImage)?;
            if l.size < 0 {
                return Err(Error::InvalidImage(format!("{r}: negative layer size")));
            }
        }

        // The config is stored with the other documents when the image is
        // committed, so a failed pull leaves no blob behind.
        let config_bytes = match self
            .read_blob(&config_desc.digest, oci::MAX_CONFIG_BYTES)
            .await
        {
            Some(b) => b,
            None => {
                session
                    .small_blob(&config_desc.digest, ep, oci::MAX_CONFIG_BYTES)
                    .await?
            }
        };
        blobs.push((config_desc.digest.clone(), config_bytes.clone()));
        let config: ConfigFile = serde_json::from_slice(&config_bytes)
            .map_err(|e| Error::json(format!("parsing config of {r}"), e))?;
        let diff_ids = config.rootfs.diff_ids.clone();
        if diff_ids.len() != layers.len() {
            return Err(Error::InvalidImage(format!(
                "{r}: manifest has {} layers but the config lists {} diff_ids",
                layers.len(),
                diff_ids.len()
            )));
        }
        for d in &diff_ids {
            validate_digest(d).map_err(Error::InvalidImage)?;
        }

        let _lease = self.lease(&diff_ids);
        let tracker = Arc::new(Tracker {
            state: Mutex::new(PullProgress {
                reference: r.to_string(),
                total_bytes: 0,
                done_bytes: 0,
                layers: layers
                    .iter()
                    .zip(&diff_ids)
                    .map(|(l, d)| {
                        let present = self.has_layer(d);
                        LayerProgress {
                            digest: l.digest.clone(),
                            size: l.size as u64,
                            done_bytes: if present { l.size as u64 } else { 0 },
                            status: if present {
                                LayerStatus::Present
                            } else {
                                LayerStatus::Waiting
                            },
                        }
                    })
                    .collect(),
                started_unix: std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_secs())
                    .unwrap_or(0),
            }),
            path: self.progress_path(&r.to_string()),
            file_lock: Mutex::new(false),
        });
        tracker.update(|s| {
            s.total_bytes = s.layers.iter().map(|l| l.size).sum();
        });
        let _registered = PullRegistration::new(self, r.to_string(), tracker.clone());
        let _writer = progress::ProgressWriter::start(tracker.clone());

        // Up to three layers at a time: enough to hide per-request latency
        // without hammering the registry.
        // The futures are built eagerly into a Vec, with owned descriptors: a
        // lazy `map` closure borrowing them would make the pull future !Send
        // (a higher-ranked lifetime limitation of async closures).
        let session_ref = &session;
        let tracker_ref = &tracker;
        let jobs: Vec<_> = layers
            .iter()
            .cloned()
            .zip(diff_ids.iter().cloned())
            .enumerate()
            .map(|(i, (desc, diff))| async move {
                self.ensure_layer(session_ref, ep, &desc, &diff, tracker_ref, i)
                    .await
            })
            .collect();
        let results: Vec<Result<(), Error>> = futures_util::stream::iter(jobs)
            .buffer_unordered(3)
            .collect()
            .await;
        for res in results {
            res?;
        }

        for (d, b) in &blobs {
            self.write_blob(d, b).await?;
        }
        let size = config_desc.size.max(0) as u64
            + layers.iter().map(|l| l.size.max(0) as u64).sum::<u64>();
        let all_blobs: Vec<String> = blobs.iter().map(|(d, _)| d.clone()).collect();
        let record = ImageRecord {
            id: config_desc.digest.clone(),
            repo_tags: r.tagged().into_iter().collect(),
            repo_digests: vec![r.with_digest(&top_digest)],
            size,
            config: ImageConfig::from_config_file(&config),
            pinned: false,
            layers: diff_ids,
            blobs: all_blobs,
        };
        let img = self.commit_image(record).await?;
        Ok(img)
    }

    /// Makes sure one layer is present: fetched once even when several pulls want it.
    async fn ensure_layer(
        &self,
        session: &Session,
        ep: usize,
        desc: &Descriptor,
        diff_id: &str,
        tracker: &Tracker,
        idx: usize,
    ) -> Result<(), Error> {
        if self.has_layer(diff_id) {
            tracker.set_status(idx, LayerStatus::Present);
            return Ok(());
        }
        let lock = self.key_lock(&format!("layer:{diff_id}"));
        let guard = match lock.try_lock() {
            Ok(g) => g,
            Err(_) => {
                tracker.set_status(idx, LayerStatus::Shared);
                lock.lock().await
            }
        };
        if self.has_layer(diff_id) {
            tracker.set_status(idx, LayerStatus::Present);
            return Ok(());
        }
        tracker.set_status(idx, LayerStatus::Downloading);
        tracing::debug!(blob = %desc.digest, %diff_id, size = desc.size, "fetching layer");
        let resp = session.blob(&desc.digest, ep).await?;
        let declared = desc.size as u64;
        let (tx, mut rx) = tokio::sync::mpsc::channel::<std::io::Result<bytes::Bytes>>(32);
        let layers_dir = self.root.join("layers");
        let src = LayerSource {
            blob_digest: Some(desc.digest.clone()),
            diff_id: diff_id.to_string(),
        };
        let limits = self.limits;
        let unpacker = tokio::task::spawn_blocking(move || {
            let reader = ChannelReader {
                rx: &mut rx,
                cur: bytes::Bytes::new(),
            };
            unpack_layer_blocking(reader, &layers_dir, &src, limits)
        });
        let url = resp.url().to_string();
        let mut stream = resp.bytes_stream();
        let mut received: u64 = 0;
        let mut pump_err = None;
        while let Some(chunk) = stream.next().await {
            match chunk {
                Ok(c) => {
                    received += c.len() as u64;
                    if received > declared {
                        pump_err = Some(Error::InvalidImage(format!(
                            "blob {} is larger than its declared {declared} bytes",
                            desc.digest
                        )));
                        break;
                    }
                    tracker.add_bytes(idx, c.len() as u64);
                    if tx.send(Ok(c)).await.is_err() {
                        break; // the unpacker stopped; it says why
                    }
                }
                Err(e) => {
                    pump_err = Some(Error::Http {
                        url: url.clone(),
                        source: e,
                    });
                    break;
                }
            }
        }
        if pump_err.is_some() {
            let _ = tx
                .send(Err(std::io::Error::other("download aborted")))
                .await;
        }
        drop(tx);
        let unpacked = unpacker.await.map_err(join_err)?;
        let (tmp, stats) = match (pump_err, unpacked) {
            (Some(e), Ok((tmp, _))) => {
                let _ = tokio::fs::remove_dir_all(&tmp).await;
                return Err(e);
            }
            (Some(e), Err(_)) => return Err(e),
            (None, Err(e)) => return Err(e),
            (None, Ok(v)) => v,
        };
        self.commit_layer(&tmp, diff_id, stats).await?;
        tracker.set_status(idx, LayerStatus::Done);
        drop(guard);
        Ok(())
    }

    /// Renames a verified temp layer into place and records it.
    async fn commit_layer(
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

    // ----- removal and GC -----

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
    async fn gc(&self) {
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

    // ----- local images and import -----

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
        let platform = oci::host_platform();
        let cfg_file = ConfigFile {
            architecture: platform.architecture,
            os: platform.os,
            variant: platform.variant,
            created: Some("1970-01-01T00:00:00Z".into()),
            config: Some(config.to_runtime_config()),
            rootfs: oci::RootFs {
                kind: "layers".into(),
                diff_ids: vec![diff_id.clone()],
            },
        };
        let config_bytes = serde_json::to_vec(&cfg_file)
            .map_err(|e| Error::json("serialising local image config", e))?;
        let config_digest = digest::sha256_digest(&config_bytes);
        let manifest = AnyManifest {
            schema_version: 2,
            media_type: Some(oci::OCI_MANIFEST.into()),
            config: Some(Descriptor {
                media_type: oci::OCI_CONFIG.into(),
                digest: config_digest.clone(),
                size: config_bytes.len() as i64,
                platform: None,
                annotations: None,
                urls: None,
            }),
            layers: Some(vec![Descriptor {
                media_type: oci::OCI_LAYER_TAR.into(),
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
            config: ImageConfig::from_config_file(&cfg_file),
            pinned: false,
            layers: vec![diff_id],
            blobs: vec![config_digest, manifest_digest],
        };
        let img = self.commit_image(record).await?;
        tracing::info!(name = %r, id = %img.id, "local image added");
        Ok(img)
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

    pub(crate) fn lease_layers(&self, layers: &[String]) -> Lease<'_> {
        self.lease(layers)
    }

    pub(crate) async fn store_blob(&self, digest: &str, data: &[u8]) -> Result<(), Error> {
        self.write_blob(digest, data).await
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
            config: ImageConfig::from_config_file(config),
            pinned: false,
            layers: config.rootfs.diff_ids.clone(),
            blobs,
        })
        .await
    }

    // ----- root filesystems -----

    /// Mounts the root filesystem of container `container_id` from image
    /// `image_id` (any reference [`Store::resolve`] accepts) on `target`
    /// (created if missing): an overlay of the image's layers with a writable
    /// upper/work pair under `<root>/containers/<id>/`. With `readonly`, no
    /// writable layer: a single-layer image is bind-mounted read-only, a
    /// multi-layer one gets a lower-only (read-only) overlay. Many layers are
    /// fine (see mount.rs). The container keeps the image's layers alive until
    /// [`Store::remove_rootfs`]. On failure nothing is left behind.
    pub async fn create_rootfs(
        &self,
        image_id: &str,
        container_id: &str,
        target: &Path,
        readonly: bool,
    ) -> Result<Rootfs, Error> {
        validate_container_id(container_id)?;
        let record = {
            let mut inner = self.inner();
            if inner.containers.contains_key(container_id) {
                return Err(Error::AlreadyExists(format!(
                    "rootfs for container {container_id}"
                )));
            }
            let id = Self::find_id(&inner, image_id)
                .ok_or_else(|| Error::NotFound(format!("image {image_id}")))?;
            let layers = inner
                .images
                .get(&id)
                .map(|r| r.layers.clone())
                .unwrap_or_default();
            let rec = ContainerRecord {
                image_id: id,
                layers,
                target: target.to_path_buf(),
                readonly,
            };
            // Reserved now, so GC keeps the layers from here on.
            inner
                .containers
                .insert(container_id.to_string(), rec.clone());
            rec
        };
        let cdir = self.root.join("containers").join(container_id);
        let lowers: Vec<PathBuf> = record
            .layers
            .iter()
            .rev()
            .map(|l| self.layer_dir(l).join("fs"))
            .collect();
        let target_p = target.to_path_buf();
        let cdir2 = cdir.clone();
        let lowers2 = lowers.clone();
        let res = tokio::task::spawn_blocking(move || -> Result<Option<PathBuf>, Error> {
            std::fs::create_dir_all(&cdir2).ctx(|| format!("creating {}", cdir2.display()))?;
            let meta = serde_json::to_vec(&record)
                .map_err(|e| Error::json("serialising container record", e))?;
            write_file_atomic(&cdir2.join("meta.json"), &meta)
                .ctx(|| format!("writing {}", cdir2.join("meta.json").display()))?;
            std::fs::create_dir_all(&target_p)
                .ctx(|| format!("creating rootfs target {}", target_p.display()))?;
            let mut lowers = lowers2;
            if lowers.is_empty() {
                // An image without layers (FROM scratch, nothing added).
                let empty = cdir2.join("empty");
                std::fs::create_dir_all(&empty).ctx(|| format!("creating {}", empty.display()))?;
                lowers.push(empty);
            }
            if readonly {
                if lowers.len() == 1 {
                    crate::mount::bind_readonly(&lowers[0], &target_p)?;
                } else {
                    crate::mount::mount_overlay(&lowers, None, &target_p, true)?;
                }
                Ok(None)
            } else {
                let upper = cdir2.join("upper");
                let work = cdir2.join("work");
                std::fs::create_dir_all(&upper).ctx(|| format!("creating {}", upper.display()))?;
                std::fs::create_dir_all(&work).ctx(|| format!("creating {}", work.display()))?;
                crate::mount::mount_overlay(&lowers, Some((&upper, &work)), &target_p, false)?;
                Ok(Some(upper))
            }
        })
        .await
        .map_err(join_err)
        .and_then(|r| r);
        match res {
            Ok(upper_dir) => {
                tracing::debug!(container = %container_id, target = %target.display(), layers = lowers.len(), readonly, "rootfs mounted");
                Ok(Rootfs {
                    target: target.to_path_buf(),
                    upper_dir,
                    lower_dirs: lowers,
                    readonly,
                })
            }
            Err(e) => {
                let _ = tokio::fs::remove_dir_all(&cdir).await;
                self.inner().containers.remove(container_id);
                Err(e)
            }
        }
    }

    /// Unmounts `target` (lazily if busy), deletes the writable layer and the
    /// record, and lets unused layers go. Idempotent.
    pub async fn remove_rootfs(&self, container_id: &str, target: &Path) -> Result<(), Error> {
        validate_container_id(container_id)?;
        let recorded_target = self
            .inner()
            .containers
            .get(container_id)
            .map(|c| c.target.clone());
        let cdir = self.root.join("containers").join(container_id);
        let mut targets = vec![target.to_path_buf()];
        if let Some(t) = recorded_target {
            if t != target {
                targets.push(t);
            }
        }
        tokio::task::spawn_blocking(move || -> Result<(), Error> {
            for t in &targets {
                if crate::mount::is_mountpoint(t) {
                    crate::mount::unmount(t)?;
                }
                // The target was created by create_rootfs if missing; an empty one goes too.
                let _ = std::fs::remove_dir(t);
            }
            peapod_host::fs::remove_dir_all_if_exists(&cdir)
                .ctx(|| format!("removing {}", cdir.display()))
        })
        .await
        .map_err(join_err)??;
        let existed = self.inner().containers.remove(container_id).is_some();
        if existed {
            tracing::debug!(container = %container_id, "rootfs removed");
            self.gc().await;
        }
        Ok(())
    }

    /// Bytes and inodes used by a container's writable layer (None if the
    /// container has no rootfs here). Walks the directory: call it from a
    /// blocking-friendly context for big layers.
    pub fn rootfs_usage(&self, container_id: &str) -> Option<(u64, u64)> {
        validate_container_id(container_id).ok()?;
        if !self.inner().containers.contains_key(container_id) {
            return None;
        }
        Some(fsutil::disk_usage(
            &self
                .root
                .join("containers")
                .join(container_id)
                .join("upper"),
        ))
    }

    /// Usage of the image filesystem (blobs and unpacked layers, from the
    /// counts recorded at unpack time) and of the container filesystem
    /// (writable layers, walked).
    pub fn fs_info(&self) -> FsInfo {
        let (layer_bytes, layer_inodes, containers) = {
            let inner = self.inner();
            let b: u64 = inner.layers.values().map(|s| s.bytes).sum();
            let i: u64 = inner.layers.values().map(|s| s.inodes).sum();
            (b, i, inner.containers.keys().cloned().collect::<Vec<_>>())
        };
        let (blob_bytes, blob_inodes) = fsutil::disk_usage(&self.root.join("blobs"));
        let mut cb = 0;
        let mut ci = 0;
        for c in containers {
            let (b, i) = fsutil::disk_usage(&self.root.join("containers").join(c));
            cb += b;
            ci += i;
        }
        FsInfo {
            image: FsUsage {
                mountpoint: self.root.clone(),
                used_bytes: layer_bytes + blob_bytes,
                inodes_used: layer_inodes + blob_inodes,
            },
            container: FsUsage {
                mountpoint: self.root.join("containers"),
                used_bytes: cb,
                inodes_used: ci,
            },
        }
    }
}

/// Registers a running pull for [`Store::progress`]; unregisters on drop.
struct PullRegistration<'a> {
    store: &'a Store,
    key: String,
}

impl<'a> PullRegistration<'a> {
    fn new(store: &'a Store, key: String, t: Arc<Tracker>) -> Self {
        store
            .pulls
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key.clone(), t);
        PullRegistration { store, key }
    }
}

impl Drop for PullRegistration<'_> {
    fn drop(&mut self) {
        self.store
            .pulls
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&self.key);
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

/// Feeds bytes from the async download to the blocking unpacker.
struct ChannelReader<'a> {
    rx: &'a mut tokio::sync::mpsc::Receiver<std::io::Result<bytes::Bytes>>,
    cur: bytes::Bytes,
}

impl Read for ChannelReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        while self.cur.is_empty() {
            match self.rx.blocking_recv() {
                Some(Ok(b)) => self.cur = b,
                Some(Err(e)) => return Err(e),
                None => return Ok(0),
            }
        }
        let n = buf.len().min(self.cur.len());
        buf[..n].copy_from_slice(&self.cur[..n]);
        bytes::Buf::advance(&mut self.cur, n);
        Ok(n)
    }
}

/// At most this much may follow a tar's end marker (real archives pad to a
/// 10 KiB record); more is refused rather than hashed forever.
const MAX_TRAILING: u64 = 1 << 20;

/// Decompresses, hashes and unpacks one layer into `layers/.tmp-*`,
/// verifying the blob digest (if given) and the diff_id. Returns the temp
/// directory, ready to be renamed into place; on error nothing is left.
pub(crate) fn unpack_layer_blocking<R: Read>(
    src: R,
    layers_dir: &Path,
    want: &LayerSource,
    limits: Limits,
) -> Result<(PathBuf, LayerStats), Error> {
    let tmp = layers_dir.join(format!(".tmp-{}", random_hex()));
    let fs_dir = tmp.join("fs");
    std::fs::create_dir_all(&fs_dir).ctx(|| format!("creating {}", fs_dir.display()))?;
    let res = || -> Result<LayerStats, Error> {
        let mut compressed = HashingReader::new(src);
        let (stats, diff_id) = {
            let dec = digest::decompress(&mut compressed).ctx(|| "reading layer".into())?;
            let mut plain = HashingReader::new(dec);
            let stats = unpack::unpack(&mut plain, &fs_dir, limits)?;
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

fn build_layer_tar(files: &[(String, Vec<u8>, u32)]) -> Result<Vec<u8>, Error> {
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

#[cfg(test)]
mod tests {
    use super::*;

    async fn store() -> (tempfile::TempDir, Arc<Store>) {
        let tmp = tempfile::tempdir().unwrap();
        let s = Store::open(&tmp.path().join("root"), RegistryConfig::default())
            .await
            .unwrap();
        (tmp, s)
    }

    fn files(marker: &str) -> Vec<(String, Vec<u8>, u32)> {
        vec![
            (
                "etc/passwd".into(),
                b"root:x:0:0::/root:/bin/sh\nu:x:1000:100::/home/u:/bin/sh\n".to_vec(),
                0o644,
            ),
            (
                "etc/group".into(),
                b"root:x:0:\nusers:x:100:\nextra:x:7:u\n".to_vec(),
                0o644,
            ),
            ("marker".into(), marker.as_bytes().to_vec(), 0o600),
        ]
    }

    /// The daemon calls these from tonic handlers, which need Send futures.
    #[allow(dead_code)]
    fn futures_are_send(s: Arc<Store>, p: &Path) {
        fn send<T: Send>(_: T) {}
        send(s.pull("x", None));
        send(s.import(p));
        send(s.remove("x"));
        send(s.untag("x"));
        send(s.add_local_image("x", &[], ImageConfig::default()));
        send(s.create_rootfs("x", "c", p, false));
        send(s.remove_rootfs("c", p));
        send(s.config_json("x"));
        send(Store::open(p, RegistryConfig::default()));
        fn sync<T: Send + Sync>(_: &T) {}
        sync(&s);
    }

    #[tokio::test]
    async fn resolve_by_everything() {
        let (_t, s) = store().await;
        let a = s
            .add_local_image("busybox:a", &files("a"), ImageConfig::default())
            .await
            .unwrap();
        let b = s
            .add_local_image("example.com/x/y:1", &files("b"), ImageConfig::default())
            .await
            .unwrap();
        assert_ne!(a.id, b.id);
        assert_eq!(a.repo_tags, vec!["docker.io/library/busybox:a"]);
        let id_of = |r: &str| s.resolve(r).map(|i| i.id);
        assert_eq!(id_of("busybox:a").as_deref(), Some(a.id.as_str()));
        assert_eq!(
            id_of("docker.io/library/busybox:a").as_deref(),
            Some(a.id.as_str())
        );
        assert_eq!(id_of(&a.id).as_deref(), Some(a.id.as_str()));
        assert_eq!(id_of(hex_of(&a.id)).as_deref(), Some(a.id.as_str()));
        assert_eq!(id_of(&hex_of(&b.id)[..12]).as_deref(), Some(b.id.as_str()));
        assert_eq!(
            id_of(&format!("sha256:{}", &hex_of(&b.id)[..8])).as_deref(),
            Some(b.id.as_str())
        );
        assert_eq!(id_of("example.com/x/y:1").as_deref(), Some(b.id.as_str()));
        assert_eq!(id_of("busybox"), None, "no :latest tag");
        assert_eq!(id_of(""), None);
        assert_eq!(id_of("sha256:"), None, "empty prefix is ambiguous");
        // A repo digest resolves too.
        let d = digest::sha256_digest(b"manifest");
        s.inner()
            .images
            .get_mut(&a.id)
            .unwrap()
            .repo_digests
            .push(format!("docker.io/library/busybox@{d}"));
        assert_eq!(
            id_of(&format!("busybox@{d}")).as_deref(),
            Some(a.id.as_str())
        );
        // An ambiguous prefix resolves to nothing: find the longest common prefix.
        let (ha, hb) = (hex_of(&a.id), hex_of(&b.id));
        let common = ha
            .chars()
            .zip(hb.chars())
            .take_while(|(x, y)| x == y)
            .count();
        if common > 0 {
            assert_eq!(id_of(&ha[..common]), None);
        }
    }

    #[tokio::test]
    async fn tags_move_and_remove_semantics() {
        let (_t, s) = store().await;
        let a = s
            .add_local_image("img:v1", &files("a"), ImageConfig::default())
            .await
            .unwrap();
        let a2 = s
            .add_local_image("img:latest", &files("a"), ImageConfig::default())
            .await
            .unwrap();
        assert_eq!(a.id, a2.id, "same content, same id");
        assert_eq!(s.resolve(&a.id).unwrap().repo_tags.len(), 2);
        // the tag moves to another image
        let b = s
            .add_local_image("img:v1", &files("b"), ImageConfig::default())
            .await
            .unwrap();
        assert_eq!(
            s.resolve(&a.id).unwrap().repo_tags,
            vec!["docker.io/library/img:latest"]
        );
        assert_eq!(s.resolve("img:v1").unwrap().id, b.id);
        // untag removes one name; the image goes with its last one
        s.add_local_image("img:v2", &files("b"), ImageConfig::default())
            .await
            .unwrap();
        s.untag("img:v1").await.unwrap();
        assert!(s.resolve(&b.id).is_some());
        s.untag("img:v2").await.unwrap();
        assert!(s.resolve(&b.id).is_none());
        // remove by tag removes the whole image, all tags
        s.add_local_image("img:other", &files("a"), ImageConfig::default())
            .await
            .unwrap();
        s.remove("img:latest").await.unwrap();
        assert!(s.resolve(&a.id).is_none());
        assert!(s.resolve("img:other").is_none());
        s.remove("img:latest").await.unwrap();
        s.remove("nothing-here").await.unwrap();
        assert!(s.list().is_empty());
        assert!(
            s.inner().layers.is_empty(),
            "unreferenced layers are collected"
        );
    }

    #[tokio::test]
    async fn state_survives_reopen() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("root");
        let id = {
            let s = Store::open(&root, RegistryConfig::default()).await.unwrap();
            assert!(
                Store::open(&root, RegistryConfig::default()).await.is_err(),
                "second opener is refused"
            );
            let cfg = ImageConfig {
                user: "u".into(),
                env: vec!["A=1".into()],
                cmd: vec!["sh".into()],
                ..Default::default()
            };
            let img = s
                .add_local_image("pause:3.10", &files("p"), cfg)
                .await
                .unwrap();
            s.set_pinned("pause:3.10", true).await.unwrap();
            img.id
        };
        let s = Store::open(&root, RegistryConfig::default()).await.unwrap();
        let img = s.resolve("pause:3.10").unwrap();
        assert_eq!(img.id, id);
        assert!(img.pinned);
        assert_eq!(img.config.user, "u");
        assert_eq!(img.config.cmd, vec!["sh"]);
        let info = s.fs_info();
        assert!(info.image.used_bytes > 0 && info.image.inodes_used > 0);
        let cfg: serde_json::Value =
            serde_json::from_slice(&s.config_json("pause:3.10").await.unwrap()).unwrap();
        assert_eq!(cfg["config"]["User"], "u");
        assert_eq!(s.layers(&id).unwrap().len(), 1);
    }
}
