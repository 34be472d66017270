//! CRI mounts with uid/gid mappings. The kubelet sets the pod's mapping on every volume of a
//! pod with its own user namespace, so that files the kubelet wrote as host root appear owned
//! by root inside. runc 1.1 cannot make idmapped mounts (runc 1.2 can), so the daemon makes
//! each one itself: an idmapped bind of the host path, seen through the pod's pinned user
//! namespace, staged under the container's bundle; the runtime spec binds the staged path.
//!
//! Once the runtime has created the container, its mount namespace holds its own copies of
//! those binds, so the staged ones are detached when the [`Staged`] guard drops (after the
//! runtime's create, or on a failed create): nothing stays mounted on the host.

use crate::error::{Error, Result};
use peapod_host::userns::PinnedUserns;
use peapod_proto::v1::{ContainerConfig, PodSandboxConfig};
use peapod_spec::HostPaths;
use std::path::{Path, PathBuf};

/// The staged idmapped mounts of one create; detached (and their directory removed) on drop.
#[must_use = "dropping it detaches the staged mounts"]
pub struct Staged {
    dir: PathBuf,
    mounts: Vec<PathBuf>,
}

impl Drop for Staged {
    fn drop(&mut self) {
        for m in &self.mounts {
            if let Err(e) = peapod_host::mount::detach(m) {
                tracing::warn!(path = %m.display(), error = %e, "detaching a staged idmapped mount");
            }
        }
        if !self.mounts.is_empty() {
            if let Err(e) = peapod_host::fs::remove_dir_all_if_exists(&self.dir) {
                tracing::warn!(path = %self.dir.display(), error = %e, "removing staged idmapped mounts");
            }
        }
    }
}

/// Replaces each mount of `config` that carries uid/gid mappings by an idmapped bind staged
/// under `bundle/idmapped-mounts`, with the mappings cleared (what is left is a plain bind
/// for the spec). Only the pod's own mapping is supported (what the kubelet sends); mappings
/// in a pod without a user namespace, or other mappings, are refused naming the field. In a
/// pod with a user namespace, the bundle and its mount directories are opened for search, as
/// root of the pod's namespace mounts from them.
pub fn stage(
    config: &mut ContainerConfig,
    bundle: &Path,
    sandbox: &PodSandboxConfig,
    userns: Option<&PinnedUserns>,
) -> Result<Staged> {
    let dir = bundle.join("idmapped-mounts");
    let mut staged = Staged {
        dir: dir.clone(),
        mounts: Vec::new(),
    };
    if userns.is_some() {
        for d in [bundle.to_path_buf(), bundle.join("image-volumes")] {
            if d.exists() {
                peapod_host::userns::open_for_search(&d)
                    .map_err(|e| Error::path("chmod", &d, e))?;
            }
        }
    }
    let pod = peapod_spec::pod_user_namespace(sandbox)?;
    for (i, m) in config.mounts.iter_mut().enumerate() {
        if m.uid_mappings.is_empty() && m.gid_mappings.is_empty() {
            continue;
        }
        let field = format!("config.mounts[{i}].uid_mappings/gid_mappings");
        let (Some(pod), Some(userns)) = (pod.as_ref(), userns) else {
            return Err(Error::invalid(format!(
                "{field}: idmapped mounts need a pod with its own user namespace \
                 (namespace_options.userns_options mode POD)"
            )));
        };
        if m.uid_mappings != [pod.uids] || m.gid_mappings != [pod.gids] {
            return Err(Error::invalid(format!(
                "{field}: only the pod's own mapping is supported for idmapped mounts"
            )));
        }
        let source = peapod_spec::RealHost
            .mount_source(Path::new(&m.host_path))
            .map_err(|e| Error::path(&format!("{field}: host_path"), Path::new(&m.host_path), e))?;
        let target = dir.join(i.to_string());
        make_target(&source, &target)?;
        peapod_host::userns::open_for_search(&dir).map_err(|e| Error::path("chmod", &dir, e))?;
        // Recorded before mounting, so that the guard also cleans a half-made one.
        staged.mounts.push(target.clone());
        peapod_host::userns::idmapped_bind(&source, &target, &userns.path, m.readonly)
            .map_err(|e| Error::path(&format!("{field}: idmapped mount of"), &source, e))?;
        m.host_path = target.to_string_lossy().into_owned();
        m.uid_mappings.clear();
        m.gid_mappings.clear();
    }
    Ok(staged)
}

/// A mount point like the source: a directory, or an empty file for a file.
fn make_target(source: &Path, target: &Path) -> Result<()> {
    let parent = target.parent().unwrap_or(target);
    std::fs::create_dir_all(parent).map_err(|e| Error::path("create", parent, e))?;
    let made = if source.is_dir() {
        std::fs::create_dir(target)
    } else {
        std::fs::File::create(target).map(drop)
    };
    made.map_err(|e| Error::path("create", target, e))
}
