//! Restoring a checkpoint: a CreateContainer whose `config.image.image` is the path of a
//! checkpoint archive (the form CRI-O accepts; no image reference starts with `/`), and the
//! StartContainer of what it made.
//!
//! - The create unpacks and checks the archive before anything is made (a bad one is
//!   InvalidArgument naming the entry, and nothing is left), then makes the container as any
//!   other, from the config the checkpointed one was created with, merged with the request's
//!   pod-specific parts ([`merged_config`]); on its new root filesystem it applies the
//!   archive's changes, and it keeps CRIU's images in the container's directory
//!   ([`images_dir`]). No runtime task is made: the record is `Created` with no pid.
//! - The start finds those images and has the shim restore the processes from them (`runc
//!   restore`) instead of starting the command; the images go once they are restored.

use super::ContainerService;
use crate::checkpoint::{archive, rootfs_diff, ArchiveError, Restorable};
use crate::error::{Code, Error, Result};
use crate::store::container::ContainerRecord;
use peapod_proto::v1::{ContainerConfig, ImageSpec, LinuxContainerConfig};
use std::path::{Path, PathBuf};

/// runc's annotation naming a CRIU configuration file for the container's dump and restore.
const CRIU_CONFIG_ANNOTATION: &str = "org.criu.config";
/// The restored container's CRIU configuration, in its bundle.
const CRIU_CONF: &str = "criu-restore.conf";

/// The archive a CreateContainer names, if its image is a path.
pub(super) fn archive_of(config: &ContainerConfig) -> Option<&str> {
    config
        .image
        .as_ref()
        .map(|i| i.image.as_str())
        .filter(|i| i.starts_with('/'))
}

/// Where a restored container's CRIU images wait for its start.
pub(super) fn images_dir(container_root_dir: &Path) -> PathBuf {
    container_root_dir.join("checkpoint")
}

/// A checkpoint archive unpacked for a create; the unpacked copy goes when this drops (by
/// then its images were moved into the container's directory, or the create failed).
pub(super) struct Restore {
    pub archive: PathBuf,
    staging: PathBuf,
    pub restorable: Restorable,
}

impl Drop for Restore {
    fn drop(&mut self) {
        let _ = peapod_host::fs::remove_dir_all_if_exists(&self.staging);
    }
}

/// Where archives are unpacked (under the root directory: the images are then moved, not
/// copied, into the container's directory). Emptied at each start of the daemon.
pub fn staging_root(root: &Path) -> PathBuf {
    root.join("restoring")
}

fn archive_error(archive: &Path, err: ArchiveError) -> Error {
    let code = match err {
        ArchiveError::Io { .. } => Code::Internal,
        _ => Code::InvalidArgument,
    };
    Error::new(
        code,
        format!("config.image.image {}: {err}", archive.display()),
    )
}

impl ContainerService {
    /// Unpacks and checks the archive a create names, and the config the container is to be
    /// made from. Nothing stays if this fails.
    pub(super) fn prepare_restore(
        &self,
        archive: &str,
        request: &ContainerConfig,
    ) -> Result<(Restore, ContainerConfig)> {
        let path = PathBuf::from(archive);
        if !std::fs::metadata(&path).is_ok_and(|m| m.is_file()) {
            return Err(Error::invalid(format!(
                "config.image.image {archive:?} is a path but no checkpoint archive (no such file)"
            )));
        }
        self.criu_usable()?;
        let staging = staging_root(self.paths.root()).join(format!(
            "{}-{}",
            std::process::id(),
            peapod_host::timefmt::now_ns()
        ));
        std::fs::create_dir_all(&staging).map_err(|e| Error::path("create", &staging, e))?;
        let mut restore = Restore {
            archive: path,
            staging,
            restorable: Restorable::default(),
        };
        crate::blocking::off_runtime(|| {
            archive::unpack(&restore.archive, &restore.staging)?;
            restore.restorable = Restorable::read(&restore.staging)?;
            Ok::<_, ArchiveError>(())
        })
        .map_err(|e| archive_error(&restore.archive, e))?;
        let config = merged_config(request, &restore.restorable)
            .map_err(|why| Error::invalid(format!("config.mounts: restoring {archive}: {why}")))?;
        Ok((restore, config))
    }

    /// On the new container's root filesystem: the archive's changes; beside its record: the
    /// images its start restores from.
    pub(super) fn apply_restore(
        &self,
        restore: &Restore,
        rootfs: &Path,
        container_root_dir: &Path,
    ) -> Result<()> {
        let r = &restore.restorable;
        crate::blocking::off_runtime(|| {
            rootfs_diff::apply(rootfs, r.rootfs_diff.as_deref(), &r.deleted)
                .map_err(|e| archive_error(&restore.archive, e))?;
            let images = images_dir(container_root_dir);
            std::fs::rename(&r.images, &images).map_err(|e| Error::path("move", &images, e))
        })
    }

    /// Points CRIU, through runc's `org.criu.config` annotation, at a configuration file in
    /// the bundle that restores the processes into this container's cgroup. runc 1.1 (Debian
    /// 12's) leaves them in the checkpointed container's cgroup path, made again, where
    /// neither its `kill --all` nor the systemd scope finds them; CRIU's `cgroup-root` moves
    /// them. (Clients cannot set `org.criu.*` annotations: peapod-spec drops them.)
    pub(super) fn point_criu_at_cgroup(
        &self,
        spec: &mut oci_spec::runtime::Spec,
        bundle: &Path,
        cgroups_path: &str,
    ) -> Result<()> {
        let dir =
            crate::cgroups::cgroup_dir(self.cgroup_driver, cgroups_path).ok_or_else(|| {
                Error::internal(format!(
                    "no cgroup directory for cgroupsPath {cgroups_path:?}"
                ))
            })?;
        let conf = bundle.join(CRIU_CONF);
        std::fs::write(&conf, format!("cgroup-root {dir}\n"))
            .map_err(|e| Error::path("write", &conf, e))?;
        let mut annotations = spec.annotations().clone().unwrap_or_default();
        annotations.insert(
            CRIU_CONFIG_ANNOTATION.into(),
            conf.to_string_lossy().into_owned(),
        );
        spec.set_annotations(Some(annotations));
        Ok(())
    }

    /// The images a created container is to be restored from, if it is a restore.
    pub(super) fn pending_restore(&self, rec: &ContainerRecord) -> Option<PathBuf> {
        let images = images_dir(&self.paths.container_root_dir(&rec.id));
        (rec.pid == 0 && images.is_dir()).then_some(images)
    }
}

/// The config the restored container is made from: the checkpointed one's (command,
/// environment, user, devices, terminal: what its processes were made with), with the
/// request's name, labels, log path and Linux settings, the archive's image, its annotations
/// under the request's, and each of its mounts where the request mounts the same path (a
/// mount it had and the request lacks fails: CRIU finds every mount the processes had, or
/// fails).
pub fn merged_config(
    request: &ContainerConfig,
    archive: &Restorable,
) -> std::result::Result<ContainerConfig, String> {
    let original = &archive.container_config;
    let mut config = original.clone();
    config.metadata = request.metadata.clone();
    config.labels = request.labels.clone();
    config.log_path = request.log_path.clone();
    config.annotations.extend(request.annotations.clone());
    let dump = &archive.config_dump;
    let shown = [&dump.rootfs_image_name, &dump.rootfs_image]
        .into_iter()
        .find(|n| !n.is_empty())
        .cloned()
        .unwrap_or_default();
    config.image = Some(ImageSpec {
        image: archive.image().to_string(),
        user_specified_image: shown,
        ..Default::default()
    });
    if let Some(linux) = &request.linux {
        let merged = config
            .linux
            .get_or_insert_with(LinuxContainerConfig::default);
        if linux.resources.is_some() {
            merged.resources = linux.resources.clone();
        }
        if linux.security_context.is_some() {
            merged.security_context = linux.security_context.clone();
        }
    }
    let mut missing = Vec::new();
    config.mounts = original
        .mounts
        .iter()
        .filter_map(|m| {
            let found = request
                .mounts
                .iter()
                .find(|r| r.container_path == m.container_path);
            if found.is_none() {
                missing.push(m.container_path.clone());
            }
            found.cloned()
        })
        .collect();
    if !missing.is_empty() {
        return Err(format!(
            "the checkpointed container had mounts at {missing:?}; the request must mount each"
        ));
    }
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;
    use peapod_proto::v1::{ContainerMetadata, Mount};

    fn restorable(original: ContainerConfig) -> Restorable {
        Restorable {
            config_dump: crate::checkpoint::ConfigDump {
                rootfs_image_ref: "sha256:abc".into(),
                rootfs_image_name: "busybox:latest".into(),
                ..Default::default()
            },
            container_config: original,
            images: PathBuf::new(),
            rootfs_diff: None,
            deleted: Vec::new(),
        }
    }

    fn mount(path: &str, host: &str) -> Mount {
        Mount {
            container_path: path.into(),
            host_path: host.into(),
            ..Default::default()
        }
    }

    #[test]
    fn the_restored_config_is_the_originals_with_the_requests_pod_parts() {
        let original = ContainerConfig {
            metadata: Some(ContainerMetadata {
                name: "old".into(),
                attempt: 0,
            }),
            command: vec!["sh".into(), "-c".into(), "count".into()],
            log_path: "old.log".into(),
            mounts: vec![mount("/data", "/old/pod/data")],
            annotations: [
                ("a".to_string(), "old".to_string()),
                ("b".into(), "kept".into()),
            ]
            .into(),
            ..Default::default()
        };
        let request = ContainerConfig {
            metadata: Some(ContainerMetadata {
                name: "new".into(),
                attempt: 2,
            }),
            image: Some(ImageSpec {
                image: "/tmp/c.tar".into(),
                ..Default::default()
            }),
            log_path: "new.log".into(),
            mounts: vec![mount("/data", "/new/pod/data"), mount("/extra", "/x")],
            annotations: [("a".to_string(), "new".to_string())].into(),
            ..Default::default()
        };
        let merged = merged_config(&request, &restorable(original)).unwrap();
        assert_eq!(merged.metadata.as_ref().unwrap().name, "new");
        assert_eq!(merged.command, vec!["sh", "-c", "count"]);
        assert_eq!(merged.log_path, "new.log");
        let image = merged.image.unwrap();
        assert_eq!(
            (image.image.as_str(), image.user_specified_image.as_str()),
            ("sha256:abc", "busybox:latest")
        );
        // The original's mounts, from the request's host paths; the request's others not.
        assert_eq!(merged.mounts, vec![mount("/data", "/new/pod/data")]);
        assert_eq!(merged.annotations["a"], "new");
        assert_eq!(merged.annotations["b"], "kept");
    }

    #[test]
    fn a_mount_the_request_lacks_is_named() {
        let original = ContainerConfig {
            mounts: vec![mount("/data", "/old")],
            ..Default::default()
        };
        let err = merged_config(&ContainerConfig::default(), &restorable(original)).unwrap_err();
        assert!(err.contains("/data"), "{err}");
    }

    #[test]
    fn only_absolute_paths_are_archives() {
        let with = |image: &str| ContainerConfig {
            image: Some(ImageSpec {
                image: image.into(),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(archive_of(&with("/var/c.tar")), Some("/var/c.tar"));
        assert_eq!(archive_of(&with("busybox:latest")), None);
        assert_eq!(archive_of(&ContainerConfig::default()), None);
    }
}
