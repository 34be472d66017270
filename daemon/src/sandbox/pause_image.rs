//! The pause container's image: the configured sandbox image when the store has a real one,
//! else the built-in pause binary (registered in the store under the configured name).

use super::SandboxService;
use crate::error::{Error, Result};
use crate::pause::{PAUSE_BINARY, PAUSE_USER};
use peapod_host::userns::IdmappedBind;
use peapod_image::RootfsRequest;
use std::path::{Path, PathBuf};

/// A label that marks the image peapod registers for its built-in pause.
pub const BUILTIN_LABEL: &str = "dev.peapod.builtin-pause";

/// The root filesystem and process of a sandbox's pause container.
#[derive(Debug, Clone)]
pub struct PauseImage {
    pub rootfs: PathBuf,
    pub args: Vec<String>,
    /// A per-sandbox rootfs mount from the image store (to remove with the sandbox).
    pub mounted: bool,
}

impl SandboxService {
    /// The configured sandbox image when the store has a real one (its rootfs mounted
    /// read-only at `target`); otherwise the built-in pause, registered in the store under
    /// the configured name so that it lists, with no pull and no mount.
    ///
    /// In a pod with its own user namespace (`userns`) the root filesystem is an
    /// idmapped one at `target` in both cases: runc, running as root of the pod, must be able
    /// to make its mount points in it (/proc, /dev, /sys), which it could not in files owned
    /// by an unmapped host root.
    pub async fn pause_image(
        &self,
        sandbox_id: &str,
        target: &Path,
        userns: Option<&peapod_host::userns::PinnedUserns>,
    ) -> Result<PauseImage> {
        let name = &self.settings.sandbox_image;
        let builtin = || -> Result<PauseImage> {
            let Some(ns) = userns else {
                return Ok(PauseImage {
                    rootfs: self.settings.pause_rootfs.clone(),
                    args: vec!["/pause".into()],
                    mounted: false,
                });
            };
            std::fs::create_dir_all(target).map_err(|e| Error::path("create", target, e))?;
            // Read-only: the mount points are there (crate::pause), and a removal that went
            // through this bind could not touch the root every pod shares.
            let bind = IdmappedBind {
                source: &self.settings.pause_rootfs,
                target,
                readonly: true,
            };
            self.host.idmapped_bind(&bind, &ns.path)?;
            Ok(PauseImage {
                rootfs: target.to_path_buf(),
                args: vec!["/pause".into()],
                // Unmounted by the image store's rootfs removal, which unmounts whatever is at
                // the target.
                mounted: true,
            })
        };
        match self.images.resolve(name) {
            Some(img) if img.config.labels.contains_key(BUILTIN_LABEL) => builtin(),
            Some(img) => {
                self.images
                    .create_rootfs(&RootfsRequest {
                        image_id: &img.id,
                        container_id: sandbox_id,
                        target,
                        readonly: true,
                        userns,
                    })
                    .await?;
                let mut args = img.config.entrypoint.clone();
                args.extend(img.config.cmd.iter().cloned());
                if args.is_empty() {
                    args.push("/pause".into());
                }
                Ok(PauseImage {
                    rootfs: target.to_path_buf(),
                    args,
                    mounted: true,
                })
            }
            None => {
                let config = peapod_image::ImageConfig {
                    user: format!("{PAUSE_USER}:{PAUSE_USER}"),
                    entrypoint: vec!["/pause".into()],
                    labels: [(
                        BUILTIN_LABEL.to_string(),
                        env!("CARGO_PKG_VERSION").to_string(),
                    )]
                    .into(),
                    ..Default::default()
                };
                let files = [("pause".to_string(), PAUSE_BINARY.to_vec(), 0o755)];
                // Listing it is a convenience; the pod does not need it.
                if let Err(e) = self
                    .images
                    .add_pinned_local_image(name, &files, config)
                    .await
                {
                    tracing::warn!(image = %name, error = %e, "registering the built-in pause image")
                }
                builtin()
            }
        }
    }
}
