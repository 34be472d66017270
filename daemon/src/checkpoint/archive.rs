//! The archive file: written whole or not at all at the caller's location, and unpacked with
//! the image store's safe unpacker (an archive is client input: no entry may land outside the
//! directory it is unpacked into).

use super::layout::ArchiveError;
use std::fs::File;
use std::path::{Path, PathBuf};

/// A file that is removed when dropped, unless kept: the temporary archive of a write that
/// did not finish.
struct Partial(Option<PathBuf>);

impl Drop for Partial {
    fn drop(&mut self) {
        if let Some(p) = self.0.take() {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// Writes every entry of `staging` (files and directories, at the archive's top level, in
/// name order) as a tar at `location`: into a temporary file beside it, synced, then renamed,
/// so that `location` is either the whole archive or untouched.
pub fn write(location: &Path, staging: &Path) -> std::io::Result<()> {
    let parent = location.parent().unwrap_or(Path::new("/"));
    let name = location
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = parent.join(format!(".{name}.peapod-{}.tmp", std::process::id()));
    let mut partial = Partial(Some(tmp.clone()));
    let file = File::create(&tmp)?;
    let mut tar = tar::Builder::new(file);
    tar.follow_symlinks(false);
    let mut entries: Vec<_> = std::fs::read_dir(staging)?.collect::<Result<_, _>>()?;
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        let path = entry.path();
        let name = entry.file_name();
        if entry.file_type()?.is_dir() {
            tar.append_dir_all(&name, &path)?;
        } else {
            tar.append_path_with_name(&path, &name)?;
        }
    }
    let file = tar.into_inner()?;
    file.sync_all()?;
    std::fs::rename(&tmp, location)?;
    partial.0 = None;
    Ok(())
}

/// Unpacks the archive at `archive` into `dest` (an existing, empty directory).
pub fn unpack(archive: &Path, dest: &Path) -> Result<(), ArchiveError> {
    let mut file = File::open(archive)
        .map_err(|e| ArchiveError::io(format!("opening {}", archive.display()), e))?;
    peapod_image::unpack::unpack(&mut file, dest, Default::default()).map_err(|e| {
        ArchiveError::Malformed {
            entry: "tar stream",
            reason: e.to_string(),
        }
    })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_archive_round_trips_and_a_failed_write_leaves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let staging = dir.path().join("staging");
        std::fs::create_dir_all(staging.join("checkpoint")).unwrap();
        std::fs::write(staging.join("checkpoint/pages-1.img"), b"pages").unwrap();
        std::fs::write(staging.join("config.dump"), b"{}").unwrap();
        let location = dir.path().join("out.tar");
        write(&location, &staging).unwrap();
        let back = dir.path().join("back");
        std::fs::create_dir(&back).unwrap();
        unpack(&location, &back).unwrap();
        assert_eq!(
            std::fs::read(back.join("checkpoint/pages-1.img")).unwrap(),
            b"pages"
        );
        assert_eq!(std::fs::read(back.join("config.dump")).unwrap(), b"{}");

        // A staging directory that cannot be read: no archive, no temporary file.
        let missing = dir.path().join("missing.tar");
        assert!(write(&missing, &dir.path().join("nowhere")).is_err());
        let left: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert!(!left.iter().any(|n| n.contains("missing")), "{left:?}");
    }

    #[test]
    fn garbage_is_a_malformed_archive() {
        let dir = tempfile::tempdir().unwrap();
        let bad = dir.path().join("bad.tar");
        std::fs::write(&bad, vec![7u8; 1024]).unwrap();
        let dest = dir.path().join("dest");
        std::fs::create_dir(&dest).unwrap();
        let err = unpack(&bad, &dest).unwrap_err();
        assert!(matches!(err, ArchiveError::Malformed { .. }), "{err}");
    }
}
