//! Pod records on disk: `<root>/pods/<namespace>/<name>/record.json`, written atomically
//! (temporary file, fsync, rename, fsync of the directory) so a `kill -9` leaves either the
//! old record or the new one.

use crate::record::PodRecord;
use std::io::Write;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone)]
pub struct Store {
    dir: PathBuf,
}

const RECORD: &str = "record.json";

impl Store {
    pub fn new(pods_dir: impl Into<PathBuf>) -> Store {
        Store {
            dir: pods_dir.into(),
        }
    }

    fn pod_dir(&self, namespace: &str, name: &str) -> PathBuf {
        self.dir.join(namespace).join(name)
    }

    pub fn save(&self, rec: &PodRecord) -> std::io::Result<()> {
        let dir = self.pod_dir(rec.namespace(), rec.name());
        std::fs::create_dir_all(&dir)?;
        let data = serde_json::to_vec(rec).map_err(std::io::Error::other)?;
        write_atomic(&dir, RECORD, &data)
    }

    pub fn remove(&self, namespace: &str, name: &str) -> std::io::Result<()> {
        match std::fs::remove_dir_all(self.pod_dir(namespace, name)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
        // The namespace directory goes with its last pod.
        let _ = std::fs::remove_dir(self.dir.join(namespace));
        Ok(())
    }

    /// Every stored record; unreadable ones are logged and skipped.
    pub fn load_all(&self) -> Vec<PodRecord> {
        let mut out = Vec::new();
        let Ok(namespaces) = std::fs::read_dir(&self.dir) else {
            return out;
        };
        for ns in namespaces.flatten() {
            let Ok(pods) = std::fs::read_dir(ns.path()) else {
                continue;
            };
            for p in pods.flatten() {
                let file = p.path().join(RECORD);
                if !file.is_file() {
                    continue;
                }
                match std::fs::read(&file)
                    .map_err(|e| e.to_string())
                    .and_then(|b| {
                        serde_json::from_slice::<PodRecord>(&b).map_err(|e| e.to_string())
                    }) {
                    Ok(r) => out.push(r),
                    Err(e) => {
                        tracing::warn!(file = %file.display(), error = %e, "skipping unreadable pod record")
                    }
                }
            }
        }
        out
    }
}

fn write_atomic(dir: &Path, name: &str, data: &[u8]) -> std::io::Result<()> {
    let tmp = dir.join(format!(".{name}.tmp"));
    {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(data)?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, dir.join(name))?;
    std::fs::File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn save_load_remove() {
        let t = tempfile::tempdir().unwrap();
        let s = Store::new(t.path());
        let mut r = PodRecord::default();
        r.pod.metadata.name = Some("p".into());
        r.pod.metadata.namespace = Some("ns".into());
        r.pod.metadata.uid = Some("u".into());
        r.sandbox_id = Some("sb".into());
        s.save(&r).unwrap();
        s.save(&r).unwrap();
        // A uid directory beside the namespaces (volumes, logs) is not a record.
        std::fs::create_dir_all(t.path().join("u/volumes")).unwrap();
        let all = s.load_all();
        assert_eq!(all.len(), 1);
        assert_eq!(all[0].sandbox_id.as_deref(), Some("sb"));
        s.remove("ns", "p").unwrap();
        assert!(s.load_all().is_empty());
        assert!(!t.path().join("ns").exists());
    }
}
