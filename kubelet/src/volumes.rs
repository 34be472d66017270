//! Pod volumes on the host: emptyDir (a directory under `<pods_dir>/<uid>/volumes/`, or a
//! tmpfs honouring sizeLimit for `medium: Memory`) and hostPath (with its `type` checks).

use crate::quantity;
use k8s_openapi::api::core::v1::{PodSpec, Volume};
use std::collections::BTreeMap;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
#[error("MountVolume.SetUp failed for volume {volume:?} : {message}")]
pub struct VolumeError {
    pub volume: String,
    pub message: String,
}

fn err(v: &Volume, message: impl Into<String>) -> VolumeError {
    VolumeError {
        volume: v.name.clone(),
        message: message.into(),
    }
}

/// Where the pod's emptyDirs live.
pub fn empty_dir_root(pod_dir: &Path) -> PathBuf {
    pod_dir.join("volumes").join("kubernetes.io~empty-dir")
}

/// Makes every volume ready; returns volume name → host path.
pub fn set_up(spec: &PodSpec, pod_dir: &Path) -> Result<BTreeMap<String, PathBuf>, VolumeError> {
    let mut out = BTreeMap::new();
    for v in spec.volumes.iter().flatten() {
        let path = if let Some(ed) = &v.empty_dir {
            let d = empty_dir_root(pod_dir).join(&v.name);
            let existed = d.is_dir();
            std::fs::create_dir_all(&d)
                .map_err(|e| err(v, format!("mkdir {}: {e}", d.display())))?;
            // World-writable like the kubelet's, so non-root containers can share it.
            std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o777))
                .map_err(|e| err(v, format!("chmod {}: {e}", d.display())))?;
            if ed.medium.as_deref() == Some("Memory") && !(existed && is_mountpoint(&d)) {
                mount_tmpfs(&d, ed.size_limit.as_ref().map(|q| q.0.as_str()))
                    .map_err(|m| err(v, m))?;
            }
            d
        } else if let Some(hp) = &v.host_path {
            check_host_path(&hp.path, hp.type_.as_deref().unwrap_or("")).map_err(|m| err(v, m))?;
            PathBuf::from(&hp.path)
        } else {
            return Err(err(v, "unsupported volume source"));
        };
        out.insert(v.name.clone(), path);
    }
    Ok(out)
}

fn is_mountpoint(d: &Path) -> bool {
    let Ok(mounts) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return false;
    };
    let want = d.to_string_lossy();
    mounts
        .lines()
        .any(|l| l.split_whitespace().nth(4) == Some(want.as_ref()))
}

fn mount_tmpfs(d: &Path, size: Option<&str>) -> Result<(), String> {
    let mut data = String::from("mode=0777");
    if let Some(s) = size {
        let bytes = quantity::value(s).map_err(|e| format!("sizeLimit {s:?}: {e}"))?;
        if bytes > 0 {
            data.push_str(&format!(",size={bytes}"));
        }
    }
    nix::mount::mount(
        Some("tmpfs"),
        d,
        Some("tmpfs"),
        nix::mount::MsFlags::MS_NOSUID | nix::mount::MsFlags::MS_NODEV,
        Some(data.as_str()),
    )
    .map_err(|e| format!("mount tmpfs on {}: {e}", d.display()))
}

/// The hostPath `type` checks (pkg/volume/hostpath).
pub fn check_host_path(path: &str, type_: &str) -> Result<(), String> {
    let p = Path::new(path);
    let meta = std::fs::metadata(p);
    let fail = |what: &str| {
        Err(format!(
            "hostPath type check failed: {path} is not a {what}"
        ))
    };
    match type_ {
        "" => Ok(()),
        "DirectoryOrCreate" => {
            if meta.is_err() {
                std::fs::create_dir_all(p).map_err(|e| format!("create {path}: {e}"))?;
                std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755))
                    .map_err(|e| format!("chmod {path}: {e}"))?;
                return Ok(());
            }
            if meta.as_ref().is_ok_and(|m| m.is_dir()) {
                Ok(())
            } else {
                fail("directory")
            }
        }
        "Directory" => match meta {
            Ok(m) if m.is_dir() => Ok(()),
            Ok(_) => fail("directory"),
            Err(_) => Err(format!("hostPath type check failed: {path} does not exist")),
        },
        "FileOrCreate" => {
            if meta.is_err() {
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(p)
                    .map_err(|e| format!("create {path}: {e}"))?;
                return Ok(());
            }
            if meta.as_ref().is_ok_and(|m| m.is_file()) {
                Ok(())
            } else {
                fail("file")
            }
        }
        "File" => match meta {
            Ok(m) if m.is_file() => Ok(()),
            Ok(_) => fail("file"),
            Err(_) => Err(format!("hostPath type check failed: {path} does not exist")),
        },
        "Socket" => match meta {
            Ok(m) if m.file_type().is_socket() => Ok(()),
            _ => fail("socket file"),
        },
        "CharDevice" => match meta {
            Ok(m) if m.file_type().is_char_device() => Ok(()),
            _ => fail("character device"),
        },
        "BlockDevice" => match meta {
            Ok(m) if m.file_type().is_block_device() => Ok(()),
            _ => fail("block device"),
        },
        other => Err(format!("unsupported hostPath type {other:?}")),
    }
}

/// Unmounts memory-backed emptyDirs and removes the pod's directory.
pub fn tear_down(pod_dir: &Path) -> std::io::Result<()> {
    if let Ok(entries) = std::fs::read_dir(empty_dir_root(pod_dir)) {
        for e in entries.flatten() {
            let p = e.path();
            if is_mountpoint(&p) {
                nix::mount::umount2(&p, nix::mount::MntFlags::MNT_DETACH)
                    .map_err(|e| std::io::Error::other(format!("unmount {}: {e}", p.display())))?;
            }
        }
    }
    match std::fs::remove_dir_all(pod_dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        r => r,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_path_types() {
        let t = tempfile::tempdir().unwrap();
        let dir = t.path().join("d");
        let file = t.path().join("f");
        let ds = dir.to_str().unwrap();
        let fs_ = file.to_str().unwrap();
        assert!(check_host_path(ds, "Directory")
            .unwrap_err()
            .contains("does not exist"));
        check_host_path(ds, "DirectoryOrCreate").unwrap();
        assert!(dir.is_dir());
        check_host_path(ds, "Directory").unwrap();
        assert!(check_host_path(ds, "File")
            .unwrap_err()
            .contains("is not a file"));
        check_host_path(fs_, "FileOrCreate").unwrap();
        check_host_path(fs_, "File").unwrap();
        assert!(check_host_path(fs_, "Directory")
            .unwrap_err()
            .contains("is not a directory"));
        assert!(check_host_path(fs_, "Socket").is_err());
        check_host_path("/nonexistent/x", "").unwrap();
        assert!(check_host_path("/dev/null", "CharDevice").is_ok());
    }

    #[test]
    fn empty_dirs_are_made_and_removed() {
        let t = tempfile::tempdir().unwrap();
        let spec: PodSpec = serde_json::from_value(serde_json::json!({
            "containers": [], "volumes": [{"name": "w", "emptyDir": {}}]
        }))
        .unwrap();
        let pod_dir = t.path().join("uid1");
        let m = set_up(&spec, &pod_dir).unwrap();
        assert!(m["w"].is_dir());
        assert!(m["w"].starts_with(pod_dir.join("volumes")));
        tear_down(&pod_dir).unwrap();
        assert!(!pod_dir.exists());
    }
}
