//! The image store as the pod and container lifecycle uses it: finding an image, preparing
//! and releasing a root filesystem, registering the built-in pause image. Behind a trait so
//! that the lifecycle's unit tests run against a fake (`crate::testing`); the image RPCs use
//! the store itself.

use crate::error::Result;
use async_trait::async_trait;
use peapod_image::{Image, ImageConfig, RootfsRequest};
use std::path::Path;

#[async_trait]
pub trait Images: Send + Sync {
    /// The image a reference (name, digest, id or id prefix) names, if the store has it.
    fn resolve(&self, reference: &str) -> Option<Image>;
    /// Mounts (or copies) the image's root filesystem for `req.container_id` (its owner) at
    /// `req.target`; for an owner in a pod's user namespace (`req.userns`), idmapped so that
    /// the image's files show as owned by their own ids inside.
    async fn create_rootfs(&self, req: &RootfsRequest<'_>) -> Result<()>;
    /// Releases what `create_rootfs` made for `owner_id`; an unknown owner is fine.
    async fn remove_rootfs(&self, owner_id: &str, target: &Path) -> Result<()>;
    /// The owners that have a root filesystem (for the start-up sweep of orphans).
    fn rootfs_ids(&self) -> Vec<String>;
    /// The writable directory of `owner_id`'s root filesystem (what it changed in its
    /// image), if it has one; a checkpoint archives it.
    fn upper_dir(&self, _owner_id: &str) -> Option<std::path::PathBuf> {
        None
    }
    /// Registers an image made of `files` (path, bytes, mode) under `name`, pinned.
    async fn add_pinned_local_image(
        &self,
        name: &str,
        files: &[(String, Vec<u8>, u32)],
        config: ImageConfig,
    ) -> Result<()>;
}

#[async_trait]
impl Images for peapod_image::Store {
    fn resolve(&self, reference: &str) -> Option<Image> {
        peapod_image::Store::resolve(self, reference)
    }

    async fn create_rootfs(&self, req: &RootfsRequest<'_>) -> Result<()> {
        self.mount_rootfs(req).await?;
        Ok(())
    }

    async fn remove_rootfs(&self, owner_id: &str, target: &Path) -> Result<()> {
        Ok(peapod_image::Store::remove_rootfs(self, owner_id, target).await?)
    }

    fn upper_dir(&self, owner_id: &str) -> Option<std::path::PathBuf> {
        peapod_image::Store::upper_dir(self, owner_id)
    }

    fn rootfs_ids(&self) -> Vec<String> {
        peapod_image::Store::rootfs_ids(self)
    }

    async fn add_pinned_local_image(
        &self,
        name: &str,
        files: &[(String, Vec<u8>, u32)],
        config: ImageConfig,
    ) -> Result<()> {
        self.add_local_image(name, files, config).await?;
        self.set_pinned(name, true).await?;
        Ok(())
    }
}
