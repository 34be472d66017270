//! The store's public types: images, their config, root filesystems, usage.

use crate::manifest::{self, ConfigFile};
use peapod_host::userns::PinnedUserns;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

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
    /// Set for an OCI artifact (its `artifactType`, else its config's media type): files for
    /// image volumes, never a container's root filesystem.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub artifact_type: Option<String>,
}

/// The config an image is recorded with: the spec crate's type, which containers are made from.
pub use peapod_spec::ImageConfig;

/// What the store records of an image's config blob.
pub(super) fn image_config(c: &ConfigFile) -> ImageConfig {
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

/// The config blob's `config` for an image built here from `c`.
pub(crate) fn runtime_config(c: &ImageConfig) -> manifest::RuntimeConfig {
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
    manifest::RuntimeConfig {
        user: opt_str(&c.user),
        env: opt_vec(&c.env),
        entrypoint: opt_vec(&c.entrypoint),
        cmd: opt_vec(&c.cmd),
        working_dir: opt_str(&c.working_dir),
        stop_signal: opt_str(&c.stop_signal),
        labels: if c.labels.is_empty() {
            None
        } else {
            Some(
                c.labels
                    .iter()
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect(),
            )
        },
        exposed_ports: set(&c.exposed_ports),
        volumes: set(&c.volumes),
    }
}

/// A container root filesystem to mount ([`crate::Store::mount_rootfs`]): one value that the
/// daemon's lifecycle hands through to the store as it is.
#[derive(Debug, Clone, Copy)]
pub struct RootfsRequest<'a> {
    /// Any reference [`crate::Store::resolve`] accepts.
    pub image_id: &'a str,
    /// The owner (a container, a pod's pause, an image volume): what the rootfs is released by.
    pub container_id: &'a str,
    /// Where it is mounted; created if missing.
    pub target: &'a Path,
    /// No writable layer.
    pub readonly: bool,
    /// For an owner in a pod's own user namespace: the layers go in idmapped through it.
    pub userns: Option<&'a PinnedUserns>,
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
