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
use crate::host_ops::HostOps;
use peapod_host::userns::{IdmappedBind, PinnedUserns};
use peapod_proto::v1::{ContainerConfig, PodSandboxConfig};
use peapod_spec::HostPaths;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The staged idmapped mounts of one create; detached (and their directory removed) on drop.
#[must_use = "dropping it detaches the staged mounts"]
pub struct Staged {
    host: Arc<dyn HostOps>,
    dir: PathBuf,
    mounts: Vec<PathBuf>,
}

impl Drop for Staged {
    fn drop(&mut self) {
        if self.mounts.is_empty() {
            return;
        }
        if let Err(e) = release(self.host.as_ref(), &self.dir) {
            tracing::warn!(path = %self.dir.display(), error = %e, "releasing staged idmapped mounts");
        }
    }
}

/// Detaches every staged mount under `dir` (a bundle's `idmapped-mounts`) and removes the
/// mount points and `dir`, never recursively: a staged mount is a user's volume, and a
/// recursive removal through one that is still mounted would delete the volume's files. For
/// the guard, and for removing a container whose create a crash cut short between staging
/// and the runtime's create ([`release_leftovers`]). Nothing there is fine.
fn release(host: &dyn HostOps, dir: &Path) -> Result<()> {
    let io = |e| Error::path("release staged idmapped mounts in", dir, e);
    let entries = match std::fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io(e)),
    };
    for entry in entries {
        let path = entry.map_err(io)?.path();
        host.unmount(&path)?;
        match std::fs::remove_dir(&path) {
            Err(e) if e.raw_os_error() == Some(libc::ENOTDIR) => {
                std::fs::remove_file(&path).map_err(io)?
            }
            other => other.map_err(io)?,
        }
    }
    std::fs::remove_dir(dir).map_err(io)
}

/// Before a container's directories are removed: the staged idmapped mounts a crash may have
/// left in its bundle are detached (see [`release`]), so that the recursive removal of the
/// bundle cannot reach into a volume. An error means the bundle must not be removed.
pub fn release_leftovers(host: &dyn HostOps, bundle: &Path) -> Result<()> {
    release(host, &bundle.join("idmapped-mounts"))
}

/// Replaces each mount of `config` that carries uid/gid mappings by an idmapped bind staged
/// under `bundle/idmapped-mounts`, with the mappings cleared (what is left is a plain bind
/// for the spec). Only the pod's own mapping is supported (what the kubelet sends); mappings
/// in a pod without a user namespace, or other mappings, are refused naming the field. In a
/// pod with a user namespace, the bundle's mount directories are given to the pod's root (as
/// the bundle is, see `crate::host_ops::userns::give_to_pod_root`): the runtime mounts from
/// them as that root, which a host-root-owned 0700 directory would shut out.
pub fn stage(
    host: &Arc<dyn HostOps>,
    config: &mut ContainerConfig,
    bundle: &Path,
    sandbox: &PodSandboxConfig,
    userns: Option<&PinnedUserns>,
) -> Result<Staged> {
    let dir = bundle.join("idmapped-mounts");
    let mut staged = Staged {
        host: host.clone(),
        dir: dir.clone(),
        mounts: Vec::new(),
    };
    if let Some(u) = userns {
        let image_volumes = bundle.join("image-volumes");
        if image_volumes.exists() {
            host.chown(&image_volumes, u.root_uid, u.root_gid)?;
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
        host.chown(&dir, userns.root_uid, userns.root_gid)?;
        // Recorded before mounting, so that the guard also cleans a half-made one.
        staged.mounts.push(target.clone());
        let bind = IdmappedBind {
            source: &source,
            target: &target,
            readonly: m.readonly,
        };
        host.idmapped_bind(&bind, &userns.path)
            .map_err(|e| e.reworded(|m| format!("{field}: {m}")))?;
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

#[cfg(test)]
mod tests {
    use super::*;

    fn bind(src: &Path, dst: &Path) {
        nix::mount::mount(
            Some(src),
            dst,
            None::<&str>,
            nix::mount::MsFlags::MS_BIND,
            None::<&str>,
        )
        .expect("bind mount (the daemon's tests run as root)");
    }

    /// A bundle a crash left with staged mounts of a volume (a directory and a file): released
    /// without touching the volume's content, and nothing stays mounted.
    #[test]
    fn leftover_staged_mounts_are_detached_not_emptied() {
        let tmp = tempfile::tempdir().unwrap();
        let volume = tmp.path().join("volume");
        std::fs::create_dir_all(&volume).unwrap();
        std::fs::write(volume.join("precious"), "keep me").unwrap();
        let file = tmp.path().join("file");
        std::fs::write(&file, "keep me too").unwrap();
        let bundle = tmp.path().join("bundle");
        let staged = bundle.join("idmapped-mounts");
        make_target(&volume, &staged.join("0")).unwrap();
        make_target(&file, &staged.join("1")).unwrap();
        bind(&volume, &staged.join("0"));
        bind(&file, &staged.join("1"));

        let host = crate::host_ops::RealHostOps;
        release_leftovers(&host, &bundle).unwrap();
        assert!(!staged.exists());
        assert_eq!(
            std::fs::read_to_string(volume.join("precious")).unwrap(),
            "keep me"
        );
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "keep me too");
        let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
        assert!(!mounts.contains(&bundle.display().to_string()));
        // Nothing staged: fine, and again.
        release_leftovers(&host, &bundle).unwrap();
    }

    #[test]
    fn mappings_need_the_pods_user_namespace_and_its_mapping() {
        let tmp = tempfile::tempdir().unwrap();
        let map = peapod_proto::v1::IdMapping {
            container_id: 0,
            host_id: 100000,
            length: 65536,
        };
        let mut config = ContainerConfig {
            mounts: vec![peapod_proto::v1::Mount {
                container_path: "/v".into(),
                host_path: tmp.path().display().to_string(),
                uid_mappings: vec![map],
                gid_mappings: vec![map],
                ..Default::default()
            }],
            ..Default::default()
        };
        // A pod in the host's user namespace: refused naming the mount.
        let host: Arc<dyn HostOps> = Arc::new(crate::host_ops::RealHostOps);
        let err = stage(
            &host,
            &mut config,
            tmp.path(),
            &PodSandboxConfig::default(),
            None,
        )
        .err()
        .expect("refused");
        assert!(err.to_string().contains("config.mounts[0]"), "{err}");
        // Another mapping than the pod's: refused too.
        let mut pod = PodSandboxConfig::default();
        let other = peapod_proto::v1::IdMapping {
            host_id: 300000,
            ..map
        };
        pod.linux = Some(peapod_proto::v1::LinuxPodSandboxConfig {
            security_context: Some(peapod_proto::v1::LinuxSandboxSecurityContext {
                namespace_options: Some(peapod_proto::v1::NamespaceOption {
                    userns_options: Some(peapod_proto::v1::UserNamespace {
                        mode: peapod_proto::v1::NamespaceMode::Pod as i32,
                        uids: vec![other],
                        gids: vec![other],
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        });
        let pinned = PinnedUserns {
            path: tmp.path().join("userns"),
            root_uid: 300000,
            root_gid: 300000,
        };
        let err = stage(&host, &mut config, tmp.path(), &pod, Some(&pinned))
            .err()
            .expect("refused");
        assert!(err.to_string().contains("the pod's own mapping"), "{err}");
        assert!(!tmp.path().join("idmapped-mounts").exists());
    }
}
