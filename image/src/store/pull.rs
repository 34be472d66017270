//! Pulls from a registry: manifests, configs and layers fetched, verified and committed.

use super::layers::{unpack_layer_blocking, LayerSource};
use super::types::Image;
use super::{join_err, ImageRecord, Store};
use crate::digest::{self};
use crate::manifest::{self, AnyManifest, ConfigFile, Descriptor};
use crate::policy::Policy;
use crate::progress::{self, LayerProgress, LayerStatus, PullProgress, Tracker};
use crate::reference::{validate_digest, Reference};
use crate::registry::{Credentials, Session};
use crate::Error;
use futures_util::StreamExt;
use peapod_host::sync::LockUnpoisoned;
use std::io::Read;
use std::sync::{Arc, Mutex};

impl Store {
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
        let work = tracing::Instrument::instrument(self.pull_inner(&r, creds), span);
        // The overall deadline: the client's idle timeout alone lets a registry that trickles
        // a byte a minute hold a pull (and its lock on this reference) for ever. Dropping
        // `pull_inner` is safe: what it committed is collected below like any failure's.
        let res = match self.cfg.pull_timeout {
            Some(limit) => tokio::time::timeout(limit, work).await.unwrap_or_else(|_| {
                Err(Error::PullTimeout {
                    reference: name.clone(),
                    limit,
                })
            }),
            None => work.await,
        };
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

    pub(super) async fn pull_inner(
        &self,
        r: &Reference,
        creds: Option<&Credentials>,
    ) -> Result<Image, Error> {
        // The signature policy is read at every pull, as CRI-O reads it; what it refuses is
        // refused before anything is stored.
        let policy = match &self.cfg.signature_policy {
            Some(p) => Some(Policy::load(p)?),
            None => None,
        };
        let decision = policy.as_ref().map(|p| p.decide(r));
        if let Some(d) = &decision {
            d.check_early(r)?;
        }
        let session = Session::new(self.client.clone(), &self.cfg, &self.tls_clients, r, creds)?;
        let (top, top_ct, ep) = session.manifest(r.manifest_ref()).await?;
        let top_digest = digest::sha256_digest(&top);
        if let Some(d) = &decision {
            d.check_signed(&session, r, &top_digest).await?;
        }
        let mut blobs = vec![(top_digest.clone(), top.clone())];

        let mut doc = top;
        let mut ct = top_ct;
        // An index may point at another index (rare, but legal): follow at most a few.
        for depth in 0.. {
            let parsed: AnyManifest = serde_json::from_slice(&doc)
                .map_err(|e| Error::json(format!("parsing manifest of {r}"), e))?;
            if let Some(mt) = ct.as_deref().or(parsed.media_type.as_deref()) {
                if mt == manifest::DOCKER_SCHEMA1
                    || mt == manifest::DOCKER_SCHEMA1_SIGNED
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
            let want = manifest::host_platform();
            let pick = manifest::select_platform(parsed.manifests.as_deref().unwrap_or(&[]), &want)
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
        if super::artifact::is_artifact(&manifest) {
            let resolved = super::artifact::Resolved {
                manifest: &manifest,
                digest: digest::sha256_digest(&doc),
                top_digest: &top_digest,
                blobs,
            };
            return self.pull_artifact(&session, ep, r, resolved).await;
        }
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
            .read_blob(&config_desc.digest, manifest::MAX_CONFIG_BYTES)
            .await
        {
            Some(b) => b,
            None => {
                session
                    .small_blob(&config_desc.digest, ep, manifest::MAX_CONFIG_BYTES)
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
            config: super::types::image_config(&config),
            pinned: false,
            layers: diff_ids,
            blobs: all_blobs,
            artifact_type: None,
        };
        let img = tracing::Instrument::instrument(
            self.commit_image(record),
            tracing::debug_span!("commit"),
        )
        .await?;
        Ok(img)
    }

    /// Makes sure one layer is present: fetched once even when several pulls want it.
    #[tracing::instrument(level = "debug", name = "layer", skip_all, fields(digest = %desc.digest, size = desc.size))]
    pub(super) async fn ensure_layer(
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
        let pump_err = super::download::pump_blob(session, ep, desc, tracker, idx, &tx)
            .await
            .err();
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
}

/// Registers a running pull for [`Store::progress`]; unregisters on drop.
struct PullRegistration<'a> {
    store: &'a Store,
    key: String,
}

impl<'a> PullRegistration<'a> {
    pub(super) fn new(store: &'a Store, key: String, t: Arc<Tracker>) -> Self {
        store.pulls.lock_unpoisoned().insert(key.clone(), t);
        PullRegistration { store, key }
    }
}

impl Drop for PullRegistration<'_> {
    fn drop(&mut self) {
        self.store.pulls.lock_unpoisoned().remove(&self.key);
    }
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
