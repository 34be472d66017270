//! The built-in pause root filesystem: one static binary, embedded in the daemon.

use crate::error::{Error, Result};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// The static pause binary built by build.rs from `pause/pause.rs`.
pub const PAUSE_BINARY: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/pause"));

/// The uid/gid pause runs as (the pause image's `65535:65535`).
pub const PAUSE_USER: u32 = 65535;

/// Writes `<dir>/rootfs/pause` if it is missing or differs, and returns the rootfs path.
pub fn materialize(dir: &Path) -> Result<PathBuf> {
    let rootfs = dir.join("rootfs");
    let binary = rootfs.join("pause");
    if std::fs::read(&binary).ok().as_deref() == Some(PAUSE_BINARY) {
        return Ok(rootfs);
    }
    std::fs::create_dir_all(&rootfs).map_err(|e| Error::path("create", &rootfs, e))?;
    let tmp = rootfs.join(".pause.tmp");
    std::fs::write(&tmp, PAUSE_BINARY).map_err(|e| Error::path("write", &tmp, e))?;
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o755))
        .map_err(|e| Error::path("chmod", &tmp, e))?;
    std::fs::rename(&tmp, &binary).map_err(|e| Error::path("install", &binary, e))?;
    Ok(rootfs)
}

/// A label that marks the image peapod registers for its built-in pause.
pub const BUILTIN_LABEL: &str = "dev.peapod.builtin-pause";

/// The root filesystem and process of a sandbox's pause container.
#[derive(Debug, Clone)]
pub struct PauseImage {
    pub rootfs: PathBuf,
    pub args: Vec<String>,
    /// `uid[:gid]` from the image config, if numeric.
    pub user: Option<(u32, u32)>,
    /// A per-sandbox rootfs mount from the image store (to remove with the sandbox).
    pub mounted: bool,
}

fn numeric_user(user: &str) -> Option<(u32, u32)> {
    let (u, g) = user.split_once(':').unwrap_or((user, ""));
    let uid = u.parse().ok()?;
    let gid = if g.is_empty() { uid } else { g.parse().ok()? };
    Some((uid, gid))
}

impl crate::runtime::Runtime {
    /// The configured sandbox image when the store has a real one (its rootfs mounted
    /// read-only at `target`); otherwise the built-in pause, registered in the store under
    /// the configured name so that it lists, with no pull and no mount.
    pub async fn pause_image(&self, sandbox_id: &str, target: &Path) -> Result<PauseImage> {
        let name = &self.config.sandbox.image;
        let builtin = || PauseImage {
            rootfs: self.pause_rootfs.clone(),
            args: vec!["/pause".into()],
            user: Some((PAUSE_USER, PAUSE_USER)),
            mounted: false,
        };
        match self.image_ops.resolve(name) {
            Some(img) if img.config.labels.contains_key(BUILTIN_LABEL) => Ok(builtin()),
            Some(img) => {
                self.image_ops
                    .create_rootfs(&img.id, sandbox_id, target, true)
                    .await?;
                let mut args = img.config.entrypoint.clone();
                args.extend(img.config.cmd.iter().cloned());
                if args.is_empty() {
                    args.push("/pause".into());
                }
                Ok(PauseImage {
                    rootfs: target.to_path_buf(),
                    args,
                    user: numeric_user(&img.config.user),
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
                    .image_ops
                    .add_pinned_local_image(name, &files, config)
                    .await
                {
                    tracing::warn!(image = %name, error = %e, "registering the built-in pause image")
                }
                Ok(builtin())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn numeric_users() {
        assert_eq!(super::numeric_user("65535:65535"), Some((65535, 65535)));
        assert_eq!(super::numeric_user("1000"), Some((1000, 1000)));
        assert_eq!(super::numeric_user("nobody"), None);
        assert_eq!(super::numeric_user(""), None);
    }
}
