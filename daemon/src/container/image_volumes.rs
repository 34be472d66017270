//! Image volumes (KEP-4639): a CRI mount whose `image` is set mounts that image's root
//! filesystem read-only into the container, or a directory of it (`image_sub_path`).
//!
//! Each volume is a read-only rootfs from the image store (an overlay of the image's layers
//! with no upper layer) under the container's bundle, registered in the store under
//! `<container id>-iv<n>`: the store then counts the image as in use (RemoveImage refuses it)
//! and its layers are kept, exactly as for a container's own rootfs. The mount handed to the
//! spec generator is a read-only bind of that directory.

use super::ContainerService;
use crate::error::{Error, Result};
use crate::store::container::ImageVolume;
use peapod_image::RootfsRequest;
use peapod_proto::v1::ContainerConfig;
use std::path::{Component, Path, PathBuf};

/// The host directory to bind for `sub` inside the volume root `root`: relative, no `..`,
/// existing, a directory, and still inside `root` once symlinks are followed.
pub(super) fn sub_path_source(root: &Path, sub: &str, field: &str) -> Result<PathBuf> {
    if sub.is_empty() {
        return Ok(root.to_path_buf());
    }
    let rel = Path::new(sub);
    if rel.is_absolute() || rel.components().any(|c| !matches!(c, Component::Normal(_))) {
        return Err(Error::invalid(format!(
            "{field} {sub:?} must be a relative path inside the image, without . or .."
        )));
    }
    let base = root
        .canonicalize()
        .map_err(|e| Error::path("resolve", root, e))?;
    let path = match root.join(rel).canonicalize() {
        Ok(p) => p,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(Error::not_found(format!(
                "{field} {sub:?} does not exist in the image"
            )))
        }
        Err(e) => return Err(Error::path("resolve", &root.join(rel), e)),
    };
    if !path.starts_with(&base) {
        return Err(Error::invalid(format!(
            "{field} {sub:?} leads outside the image (through a symlink)"
        )));
    }
    if !path.is_dir() {
        return Err(Error::invalid(format!(
            "{field} {sub:?} is not a directory"
        )));
    }
    Ok(path)
}

/// Checks what can be checked before anything is made.
pub(super) fn validate(config: &ContainerConfig) -> Result<()> {
    for (i, m) in config.mounts.iter().enumerate() {
        if m.image.as_ref().is_none_or(|img| img.image.is_empty()) {
            if !m.image_sub_path.is_empty() {
                return Err(Error::invalid(format!(
                    "config.mounts[{i}].image_sub_path is only valid with config.mounts[{i}].image"
                )));
            }
            continue;
        }
        if !m.readonly {
            return Err(Error::invalid(format!(
                "config.mounts[{i}].readonly must be true: image volumes are read-only"
            )));
        }
        if !m.host_path.is_empty() {
            return Err(Error::invalid(format!(
                "config.mounts[{i}]: host_path and image are exclusive"
            )));
        }
    }
    Ok(())
}

impl ContainerService {
    /// Mounts the image volumes of `config` under `bundle`, records them in `made` as they are
    /// made (so that the failure path releases them), fills each mount's `image.image_ref`
    /// (ContainerStatus reports it), and returns the config the spec is generated from, where
    /// each image volume is a read-only bind of its directory. In a pod with its own user
    /// namespace (`userns`) the image's layers are idmapped like the container's own root,
    /// which is what the pod's mapping the kubelet puts on the mount asks for: the mapping is
    /// then done and cleared from the spec's copy.
    pub(super) async fn prepare_image_volumes(
        &self,
        id: &str,
        bundle: &Path,
        config: &mut ContainerConfig,
        made: &mut Vec<ImageVolume>,
        userns: Option<&peapod_host::userns::PinnedUserns>,
    ) -> Result<ContainerConfig> {
        let mut for_spec = config.clone();
        for (i, m) in config.mounts.iter_mut().enumerate() {
            let Some(spec) = m.image.as_mut().filter(|img| !img.image.is_empty()) else {
                continue;
            };
            let image = self.images.resolve(&spec.image).ok_or_else(|| {
                Error::not_found(format!(
                    "config.mounts[{i}].image {:?} not found; pull it first",
                    spec.image
                ))
            })?;
            let rootfs_id = format!("{id}-iv{i}");
            let target = bundle.join("image-volumes").join(i.to_string());
            std::fs::create_dir_all(&target).map_err(|e| Error::path("create", &target, e))?;
            self.images
                .create_rootfs(&RootfsRequest {
                    image_id: &image.id,
                    container_id: &rootfs_id,
                    target: &target,
                    readonly: true,
                    userns,
                })
                .await?;
            made.push(ImageVolume {
                rootfs_id,
                target: target.clone(),
            });
            let field = format!("config.mounts[{i}].image_sub_path");
            let source = sub_path_source(&target, &m.image_sub_path, &field)?;
            spec.image_ref = image.id.clone();
            let out = &mut for_spec.mounts[i];
            out.host_path = source.to_string_lossy().into_owned();
            out.image = None;
            out.image_sub_path.clear();
            out.readonly = true;
            if userns.is_some() {
                out.uid_mappings.clear();
                out.gid_mappings.clear();
            }
        }
        Ok(for_spec)
    }

    /// Unmounts and releases image volumes; the first failure is returned after trying all.
    pub(super) async fn release_image_volumes(&self, volumes: &[ImageVolume]) -> Result<()> {
        let mut first = Ok(());
        for v in volumes {
            if let Err(e) = self.images.remove_rootfs(&v.rootfs_id, &v.target).await {
                tracing::warn!(volume = %v.rootfs_id, error = %e, "releasing an image volume");
                if first.is_ok() {
                    first = Err(e);
                }
            }
        }
        first
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use peapod_proto::v1 as cri;

    #[test]
    fn sub_paths_stay_inside_the_image() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        std::fs::create_dir_all(root.join("etc/ssl")).unwrap();
        std::fs::write(root.join("etc/hostname"), "x").unwrap();
        std::os::unix::fs::symlink("/etc", root.join("escape")).unwrap();
        std::os::unix::fs::symlink("etc/ssl", root.join("inside")).unwrap();
        let f = "config.mounts[0].image_sub_path";
        assert_eq!(sub_path_source(&root, "", f).unwrap(), root);
        assert!(sub_path_source(&root, "etc/ssl", f)
            .unwrap()
            .ends_with("etc/ssl"));
        assert!(sub_path_source(&root, "inside", f)
            .unwrap()
            .ends_with("etc/ssl"));
        for bad in [
            "../x",
            "/etc",
            "etc/../..",
            "./etc",
            "escape",
            "etc/hostname",
        ] {
            let e = sub_path_source(&root, bad, f).unwrap_err();
            assert_eq!(e.code(), crate::error::Code::InvalidArgument, "{bad}: {e}");
            assert!(e.to_string().contains(f), "{e}");
        }
        let e = sub_path_source(&root, "not-existing", f).unwrap_err();
        assert_eq!(e.code(), crate::error::Code::NotFound, "{e}");
    }

    #[test]
    fn image_volumes_must_be_read_only_and_without_host_path() {
        let image = Some(cri::ImageSpec {
            image: "busybox".into(),
            ..Default::default()
        });
        let with = |m: cri::Mount| ContainerConfig {
            mounts: vec![m],
            ..Default::default()
        };
        let ok = cri::Mount {
            container_path: "/mnt".into(),
            readonly: true,
            image: image.clone(),
            ..Default::default()
        };
        validate(&with(ok.clone())).unwrap();
        let rw = cri::Mount {
            readonly: false,
            ..ok.clone()
        };
        assert!(validate(&with(rw))
            .unwrap_err()
            .to_string()
            .contains("readonly"));
        let both = cri::Mount {
            host_path: "/tmp".into(),
            ..ok.clone()
        };
        assert!(validate(&with(both))
            .unwrap_err()
            .to_string()
            .contains("exclusive"));
        let sub_alone = cri::Mount {
            image: None,
            image_sub_path: "etc".into(),
            host_path: "/tmp".into(),
            ..ok
        };
        assert!(validate(&with(sub_alone))
            .unwrap_err()
            .to_string()
            .contains("image_sub_path"));
    }
}
