//! The archive's entries and metadata, and what a restore reads from an unpacked one. Pure:
//! files in, values or an error naming the entry out.

use peapod_proto::v1::ContainerConfig;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// CRIU's images.
pub const CHECKPOINT_DIR: &str = "checkpoint";
pub const CONFIG_DUMP: &str = "config.dump";
pub const SPEC_DUMP: &str = "spec.dump";
pub const ROOTFS_DIFF: &str = "rootfs-diff.tar";
pub const DELETED_FILES: &str = "deleted.files";
pub const DUMP_LOG: &str = "dump.log";
/// peapod's own: the CRI config the container was created with.
pub const CONTAINER_CONFIG: &str = "container-config.dump";

/// What CRIU always writes first; a `checkpoint/` without it holds no dump.
const CRIU_INVENTORY: &str = "inventory.img";

/// Largest metadata file read (they are a few KiB; a hostile archive gets no more memory).
const MAX_METADATA: u64 = 4 << 20;

/// Go's zero `time.Time` as JSON: what an unset time reads as to checkpointctl.
pub const ZERO_TIME: &str = "0001-01-01T00:00:00Z";

/// `config.dump`, with the field names checkpointctl and CRI-O use.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct ConfigDump {
    pub id: String,
    pub name: String,
    /// The image as the user named it.
    #[serde(rename = "rootfsImage", default)]
    pub rootfs_image: String,
    /// The image's id, what the restore makes the root filesystem from.
    #[serde(rename = "rootfsImageRef", default)]
    pub rootfs_image_ref: String,
    #[serde(rename = "rootfsImageName", default)]
    pub rootfs_image_name: String,
    #[serde(rename = "runtime", default)]
    pub runtime: String,
    #[serde(rename = "createdTime", default)]
    pub created_time: String,
    #[serde(rename = "checkpointedTime", default)]
    pub checkpointed_time: String,
    #[serde(rename = "restoredTime", default)]
    pub restored_time: String,
    #[serde(default)]
    pub restored: bool,
}

/// A checkpoint archive that cannot be restored (or read), by the entry at fault.
#[derive(Debug, thiserror::Error)]
pub enum ArchiveError {
    #[error("the checkpoint archive has no {0}")]
    Missing(&'static str),
    #[error("the checkpoint archive's {entry} is malformed: {reason}")]
    Malformed { entry: &'static str, reason: String },
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
}

impl ArchiveError {
    pub fn io(context: impl Into<String>, source: std::io::Error) -> ArchiveError {
        ArchiveError::Io {
            context: context.into(),
            source,
        }
    }

    fn malformed(entry: &'static str, reason: impl std::fmt::Display) -> ArchiveError {
        ArchiveError::Malformed {
            entry,
            reason: reason.to_string(),
        }
    }
}

/// What a restore takes from an unpacked archive.
#[derive(Debug, Clone, Default)]
pub struct Restorable {
    pub config_dump: ConfigDump,
    /// The CRI config the checkpointed container was created with.
    pub container_config: ContainerConfig,
    /// CRIU's images.
    pub images: PathBuf,
    /// `rootfs-diff.tar`, if the container changed any file.
    pub rootfs_diff: Option<PathBuf>,
    /// The image's paths the container removed.
    pub deleted: Vec<String>,
}

impl Restorable {
    /// Reads and checks the archive unpacked at `dir`: every entry a restore needs is there
    /// and parses; the first that does not is named.
    pub fn read(dir: &Path) -> Result<Restorable, ArchiveError> {
        let images = dir.join(CHECKPOINT_DIR);
        if !images.is_dir() {
            return Err(ArchiveError::Missing(
                "checkpoint/ directory (CRIU's images)",
            ));
        }
        if !images.join(CRIU_INVENTORY).is_file() {
            return Err(ArchiveError::malformed(
                "checkpoint/ directory",
                format!("no {CRIU_INVENTORY}: it holds no CRIU dump"),
            ));
        }
        let config_dump: ConfigDump = read_json(dir, CONFIG_DUMP)?;
        if config_dump.rootfs_image_ref.is_empty() && config_dump.rootfs_image_name.is_empty() {
            return Err(ArchiveError::malformed(
                CONFIG_DUMP,
                "names no image (rootfsImageRef and rootfsImageName are empty)",
            ));
        }
        let container_config: ContainerConfig = read_json(dir, CONTAINER_CONFIG)?;
        let diff = dir.join(ROOTFS_DIFF);
        let rootfs_diff = match std::fs::symlink_metadata(&diff) {
            Ok(m) if m.is_file() => Some(diff),
            Ok(_) => return Err(ArchiveError::malformed(ROOTFS_DIFF, "not a regular file")),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(ArchiveError::io(format!("reading {ROOTFS_DIFF}"), e)),
        };
        let deleted = if dir.join(DELETED_FILES).exists() {
            let deleted: Vec<String> = read_json(dir, DELETED_FILES)?;
            for path in &deleted {
                check_relative(path).map_err(|why| ArchiveError::malformed(DELETED_FILES, why))?;
            }
            deleted
        } else {
            Vec::new()
        };
        Ok(Restorable {
            config_dump,
            container_config,
            images,
            rootfs_diff,
            deleted,
        })
    }

    /// The image the restored container's root filesystem is made from: its id where the
    /// archive has it, else its name.
    pub fn image(&self) -> &str {
        if self.config_dump.rootfs_image_ref.is_empty() {
            &self.config_dump.rootfs_image_name
        } else {
            &self.config_dump.rootfs_image_ref
        }
    }
}

/// A `deleted.files` path: inside the root filesystem, without `..`, not the root itself.
pub fn check_relative(path: &str) -> Result<(), String> {
    let p = Path::new(path);
    let mut normal = 0;
    for c in p.components() {
        match c {
            std::path::Component::RootDir | std::path::Component::CurDir => {}
            std::path::Component::Normal(_) => normal += 1,
            _ => return Err(format!("{path:?} leaves the root filesystem")),
        }
    }
    if normal == 0 {
        return Err(format!("{path:?} names the root itself"));
    }
    Ok(())
}

fn read_json<T: serde::de::DeserializeOwned>(
    dir: &Path,
    entry: &'static str,
) -> Result<T, ArchiveError> {
    let path = dir.join(entry);
    let meta = match std::fs::symlink_metadata(&path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(ArchiveError::Missing(entry))
        }
        Err(e) => return Err(ArchiveError::io(format!("reading {entry}"), e)),
    };
    if !meta.is_file() {
        return Err(ArchiveError::malformed(entry, "not a regular file"));
    }
    if meta.len() > MAX_METADATA {
        return Err(ArchiveError::malformed(
            entry,
            format!("{} bytes, more than {MAX_METADATA}", meta.len()),
        ));
    }
    let bytes =
        std::fs::read(&path).map_err(|e| ArchiveError::io(format!("reading {entry}"), e))?;
    serde_json::from_slice(&bytes).map_err(|e| ArchiveError::malformed(entry, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A complete unpacked archive in `dir`.
    fn write_complete(dir: &Path) {
        std::fs::create_dir_all(dir.join(CHECKPOINT_DIR)).unwrap();
        std::fs::write(dir.join(CHECKPOINT_DIR).join(CRIU_INVENTORY), "x").unwrap();
        let dump = ConfigDump {
            id: "c1".into(),
            name: "counter".into(),
            rootfs_image_ref: "sha256:abc".into(),
            ..Default::default()
        };
        std::fs::write(dir.join(CONFIG_DUMP), serde_json::to_vec(&dump).unwrap()).unwrap();
        let config = ContainerConfig {
            command: vec!["sh".into()],
            ..Default::default()
        };
        std::fs::write(
            dir.join(CONTAINER_CONFIG),
            serde_json::to_vec(&config).unwrap(),
        )
        .unwrap();
        std::fs::write(dir.join(DELETED_FILES), r#"["/etc/motd","var/x"]"#).unwrap();
    }

    #[test]
    fn a_complete_archive_reads_back() {
        let dir = tempfile::tempdir().unwrap();
        write_complete(dir.path());
        let r = Restorable::read(dir.path()).unwrap();
        assert_eq!(r.image(), "sha256:abc");
        assert_eq!(r.container_config.command, vec!["sh".to_string()]);
        assert_eq!(r.deleted, vec!["/etc/motd", "var/x"]);
        assert!(r.rootfs_diff.is_none());
        assert_eq!(r.images, dir.path().join(CHECKPOINT_DIR));
    }

    #[test]
    fn each_bad_entry_is_named() {
        type Spoil = Box<dyn Fn(&Path)>;
        let cases: Vec<(&str, Spoil)> = vec![
            (
                "checkpoint/",
                Box::new(|d: &Path| std::fs::remove_dir_all(d.join(CHECKPOINT_DIR)).unwrap()),
            ),
            (
                "inventory.img",
                Box::new(|d: &Path| {
                    std::fs::remove_file(d.join(CHECKPOINT_DIR).join(CRIU_INVENTORY)).unwrap()
                }),
            ),
            (
                CONFIG_DUMP,
                Box::new(|d: &Path| std::fs::write(d.join(CONFIG_DUMP), "{not json").unwrap()),
            ),
            (
                CONFIG_DUMP,
                Box::new(|d: &Path| std::fs::write(d.join(CONFIG_DUMP), r#"{"id":"x"}"#).unwrap()),
            ),
            (
                CONTAINER_CONFIG,
                Box::new(|d: &Path| std::fs::remove_file(d.join(CONTAINER_CONFIG)).unwrap()),
            ),
            (
                DELETED_FILES,
                Box::new(|d: &Path| {
                    std::fs::write(d.join(DELETED_FILES), r#"["../../etc/passwd"]"#).unwrap()
                }),
            ),
            (
                DELETED_FILES,
                Box::new(|d: &Path| std::fs::write(d.join(DELETED_FILES), r#"["/"]"#).unwrap()),
            ),
            (
                ROOTFS_DIFF,
                Box::new(|d: &Path| std::fs::create_dir(d.join(ROOTFS_DIFF)).unwrap()),
            ),
        ];
        for (entry, spoil) in cases {
            let dir = tempfile::tempdir().unwrap();
            write_complete(dir.path());
            spoil(dir.path());
            let err = Restorable::read(dir.path()).unwrap_err();
            assert!(err.to_string().contains(entry), "{entry}: {err}");
        }
    }

    #[test]
    fn config_dump_uses_checkpointctls_names() {
        let dump = ConfigDump {
            rootfs_image_ref: "sha256:abc".into(),
            checkpointed_time: "2026-01-01T00:00:00Z".into(),
            ..Default::default()
        };
        let v: serde_json::Value = serde_json::to_value(&dump).unwrap();
        for key in [
            "id",
            "name",
            "rootfsImage",
            "rootfsImageRef",
            "rootfsImageName",
            "runtime",
            "createdTime",
            "checkpointedTime",
            "restoredTime",
            "restored",
        ] {
            assert!(v.get(key).is_some(), "{key} in {v}");
        }
    }
}
