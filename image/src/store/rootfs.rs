//! Container root filesystems: overlay mounts of an image's layers with a writable layer.

use super::types::{Rootfs, RootfsRequest};
use super::{join_err, validate_container_id, ContainerRecord, Store};
use crate::error::IoContext;
use crate::fsutil::{self};
use crate::Error;
use std::path::{Path, PathBuf};

impl Store {
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
        let req = RootfsRequest {
            image_id,
            container_id,
            target,
            readonly,
            userns: None,
        };
        self.mount_rootfs(&req).await
    }

    /// [`Store::create_rootfs`] with all its options. For a container in a pod's user
    /// namespace (`req.userns`) the image layers go in through idmapped mounts, so that the
    /// image's files show as owned by their ids inside the namespace (root as root) and the
    /// shared layers are not chowned; the writable layer belongs to the namespace's root.
    /// Removed by [`Store::remove_rootfs`] like any other.
    pub async fn mount_rootfs(&self, req: &RootfsRequest<'_>) -> Result<Rootfs, Error> {
        let RootfsRequest {
            image_id,
            container_id,
            target,
            readonly,
            userns,
        } = *req;
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
        let userns = userns.cloned();
        let res = tokio::task::spawn_blocking(move || -> Result<Option<PathBuf>, Error> {
            std::fs::create_dir_all(&cdir2).ctx(|| format!("creating {}", cdir2.display()))?;
            let meta = serde_json::to_vec(&record)
                .map_err(|e| Error::json("serialising container record", e))?;
            // Atomic, not synced: the container's record is made durable once its create
            // is done; a reboot before that finds this directory with a meta.json (torn,
            // lost or whole) that recovery sets aside or sweeps as no record's.
            peapod_host::fs::write_atomic(
                &cdir2.join("meta.json"),
                &meta,
                peapod_host::fs::Durability::AtomicOnly,
            )
            .ctx(|| format!("writing {}", cdir2.join("meta.json").display()))?;
            std::fs::create_dir_all(&target_p)
                .ctx(|| format!("creating rootfs target {}", target_p.display()))?;
            let mut lowers = lowers2;
            if lowers.is_empty() {
                // An image without layers (FROM scratch, nothing added).
                let empty = cdir2.join("empty");
                std::fs::create_dir_all(&empty).ctx(|| format!("creating {}", empty.display()))?;
                crate::fsutil::chmod(&empty, 0o755)?;
                lowers.push(empty);
            }
            if let Some(ns) = &userns {
                let rw = if readonly {
                    None
                } else {
                    for d in ["upper", "work"] {
                        let p = cdir2.join(d);
                        std::fs::create_dir_all(&p).ctx(|| format!("creating {}", p.display()))?;
                    }
                    Some(cdir2.as_path())
                };
                crate::mount::mount_overlay_idmapped(
                    &lowers,
                    rw,
                    &target_p,
                    readonly,
                    ns,
                    &cdir2.join("idmapped"),
                )?;
                Ok(rw.map(|d| d.join("upper")))
            } else if readonly {
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
                // The upper directory's mode is the mode of the container's `/`: 0755 whatever
                // the daemon's umask (0700 would shut out a container running as non-root).
                // Its parent, the container's directory, stays 0700.
                crate::fsutil::chmod(&upper, 0o755)?;
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

    /// The owners (container ids) that have a root filesystem here, for the daemon's
    /// start-up sweep of ones no record claims.
    pub fn rootfs_ids(&self) -> Vec<String> {
        self.inner().containers.keys().cloned().collect()
    }

    /// The writable (upper) directory of container `container_id`'s root filesystem: what
    /// the container changed in its image. None for an unknown owner, a read-only root
    /// filesystem, or one without a directory of its own.
    pub fn upper_dir(&self, container_id: &str) -> Option<PathBuf> {
        validate_container_id(container_id).ok()?;
        if self
            .inner()
            .containers
            .get(container_id)
            .is_none_or(|c| c.readonly)
        {
            return None;
        }
        let upper = self
            .root
            .join("containers")
            .join(container_id)
            .join("upper");
        upper.is_dir().then_some(upper)
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
}
