//! A table of live objects (sandboxes or containers): records behind locks, an id index for
//! prefix lookups, and name reservations.

use super::names::NameIndex;
use crate::error::{Error, Result};
use crate::ids::{IdIndex, Lookup};
use serde::{de::DeserializeOwned, Serialize};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// What a persisted record must tell the table.
pub trait Record: Clone + Serialize + DeserializeOwned + Send + Sync + 'static {
    /// "pod sandbox" or "container", for messages.
    const KIND: &'static str;
    /// The request field that carries the id, for messages.
    const ID_FIELD: &'static str;
    fn id(&self) -> &str;
    /// The reserved name.
    fn name(&self) -> &str;
    /// The digest of the request that made it (0: unknown), for identical retries.
    fn digest(&self) -> u64 {
        0
    }
    /// The record's file under the daemon root.
    fn path(root: &Path, id: &str) -> PathBuf;
}

/// One object while the daemon runs.
pub struct Entry<R: Record> {
    pub id: String,
    /// Where the record is persisted.
    file: PathBuf,
    record: RwLock<R>,
    /// Serializes writers of the record (held across the file write); readers only ever
    /// take `record`, which is never held across disk I/O.
    persist: std::sync::Mutex<()>,
    /// Serializes lifecycle operations on this object.
    pub op: tokio::sync::Mutex<()>,
    /// For a pod: held shared by calls that add to it (CreateContainer), exclusively by the
    /// calls that end it (Stop/RemovePodSandbox), so that no container is made in a pod
    /// being stopped or removed.
    pub members: tokio::sync::RwLock<()>,
}

impl<R: Record> Entry<R> {
    /// An entry whose record lives under the daemon root `root`.
    pub fn new(root: &Path, record: R) -> Arc<Entry<R>> {
        Arc::new(Entry {
            id: record.id().to_string(),
            file: R::path(root, record.id()),
            record: RwLock::new(record),
            persist: std::sync::Mutex::new(()),
            op: tokio::sync::Mutex::new(()),
            members: tokio::sync::RwLock::new(()),
        })
    }

    pub fn get(&self) -> R {
        self.record
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Like [`Entry::update`], but only when `pred` holds, checked under the same lock (for
    /// state transitions two tasks may race to make). Returns whether it applied.
    pub fn update_if(&self, pred: impl FnOnce(&R) -> bool, f: impl FnOnce(&mut R)) -> Result<bool> {
        let _writer = self.persist.lock().unwrap_or_else(|p| p.into_inner());
        let mut next = self.get();
        if !pred(&next) {
            return Ok(false);
        }
        f(&mut next);
        self.persist_and_swap(next)?;
        Ok(true)
    }

    /// Applies `f` to the record and persists it; the in-memory record changes only if the
    /// write succeeded. Readers keep reading the old record while the file is written.
    pub fn update(&self, f: impl FnOnce(&mut R)) -> Result<R> {
        let _writer = self.persist.lock().unwrap_or_else(|p| p.into_inner());
        let mut next = self.get();
        f(&mut next);
        self.persist_and_swap(next.clone())?;
        Ok(next)
    }

    /// Writes `next` (the caller holds `persist`), then swaps it in. The write (an fsync) runs
    /// off the async workers: other tasks of this worker move to another thread first.
    fn persist_and_swap(&self, next: R) -> Result<()> {
        crate::host_ops::off_runtime(|| super::write_record(&self.file, &next))?;
        *self.record.write().unwrap_or_else(|p| p.into_inner()) = next;
        Ok(())
    }

    /// Persists a new object's record for the first time, making its directory.
    pub fn create_file(&self) -> Result<()> {
        if let Some(dir) = self.file.parent() {
            crate::host_ops::off_runtime(|| std::fs::create_dir_all(dir))
                .map_err(|e| Error::path("create", dir, e))?;
        }
        self.update(|_| {}).map(drop)
    }
}

pub struct Table<R: Record> {
    pub by_id: HashMap<String, Arc<Entry<R>>>,
    pub ids: IdIndex,
    pub names: NameIndex,
}

impl<R: Record> Default for Table<R> {
    fn default() -> Self {
        Table {
            by_id: HashMap::new(),
            ids: IdIndex::default(),
            names: NameIndex::default(),
        }
    }
}

impl<R: Record> Table<R> {
    pub fn insert(&mut self, entry: Arc<Entry<R>>) {
        self.ids.insert(&entry.id);
        self.by_id.insert(entry.id.clone(), entry);
    }

    pub fn remove(&mut self, id: &str) -> Option<Arc<Entry<R>>> {
        self.ids.remove(id);
        let entry = self.by_id.remove(id)?;
        self.names.release(entry.get().name(), id);
        Some(entry)
    }

    /// Resolves an id or unique prefix.
    pub fn resolve(&self, id: &str) -> Result<Arc<Entry<R>>> {
        let not_found = || Error::not_found(format!("{} {id:?} not found", R::KIND));
        match self.ids.lookup(id) {
            Lookup::Found(full) => self.by_id.get(&full).cloned().ok_or_else(not_found),
            Lookup::NotFound => Err(not_found()),
            Lookup::Ambiguous => Err(Error::invalid(format!(
                "{} {id:?} is an ambiguous id prefix",
                R::ID_FIELD
            ))),
        }
    }

    pub fn all(&self) -> Vec<Arc<Entry<R>>> {
        self.by_id.values().cloned().collect()
    }

    /// Loads every record under `<root>/<dir>/*/`, reserving their names.
    pub fn load(&mut self, root: &Path, dir: &str) -> Result<()> {
        let base = root.join(dir);
        let entries = std::fs::read_dir(&base).map_err(|e| Error::path("read", &base, e))?;
        for entry in entries.flatten() {
            let id = entry.file_name().to_string_lossy().into_owned();
            match super::read_record::<R>(&R::path(root, &id)) {
                Ok(Some(record)) => {
                    if let Err(e) = self
                        .names
                        .reserve(record.name(), &id, record.digest(), R::KIND)
                    {
                        tracing::warn!(id = %id, error = %e, "duplicate name in records");
                    }
                    self.insert(Entry::new(root, record));
                }
                Ok(None) => {}
                Err(e) => tracing::warn!(id = %id, error = %e, "skipping an unreadable record"),
            }
        }
        Ok(())
    }
}

/// A table shared by the services that read or change it, with the daemon root its records
/// are persisted under.
pub struct Records<R: Record> {
    root: PathBuf,
    table: RwLock<Table<R>>,
}

impl<R: Record> Records<R> {
    /// The records persisted under `<root>/<dir>/*/`.
    pub fn load(root: &Path, dir: &str) -> Result<Records<R>> {
        let mut table = Table::default();
        table.load(root, dir)?;
        Ok(Records {
            root: root.to_path_buf(),
            table: RwLock::new(table),
        })
    }

    pub fn read(&self) -> RwLockReadGuard<'_, Table<R>> {
        self.table.read().unwrap_or_else(|p| p.into_inner())
    }

    pub fn write(&self) -> RwLockWriteGuard<'_, Table<R>> {
        self.table.write().unwrap_or_else(|p| p.into_inner())
    }

    /// The object an id or unique prefix names.
    pub fn resolve(&self, id: &str) -> Result<Arc<Entry<R>>> {
        self.read().resolve(id)
    }

    pub fn all(&self) -> Vec<Arc<Entry<R>>> {
        self.read().all()
    }

    /// A new entry for `record` (not yet in the table, not yet persisted).
    pub fn entry(&self, record: R) -> Arc<Entry<R>> {
        Entry::new(&self.root, record)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    struct Thing {
        id: String,
        name: String,
        n: u32,
    }

    impl Record for Thing {
        const KIND: &'static str = "thing";
        const ID_FIELD: &'static str = "thing_id";
        fn id(&self) -> &str {
            &self.id
        }
        fn name(&self) -> &str {
            &self.name
        }
        fn path(root: &Path, id: &str) -> PathBuf {
            root.join("things").join(id).join("thing.json")
        }
    }

    fn thing(id: &str, name: &str) -> Thing {
        Thing {
            id: id.into(),
            name: name.into(),
            n: 0,
        }
    }

    fn records(root: &Path) -> Records<Thing> {
        std::fs::create_dir_all(root.join("things")).unwrap();
        Records::load(root, "things").unwrap()
    }

    #[test]
    fn updates_persist_and_a_reload_restores_records_and_names() {
        let dir = tempfile::tempdir().unwrap();
        let r = records(dir.path());
        let e = r.entry(thing("abc123", "one"));
        e.create_file().unwrap();
        e.update(|t| t.n = 7).unwrap();
        r.write()
            .names
            .reserve("one", "abc123", 0, "thing")
            .unwrap();
        r.write().insert(e);

        let again = records(dir.path());
        assert_eq!(again.resolve("abc").unwrap().get().n, 7);
        let err = again
            .write()
            .names
            .reserve("one", "other", 0, "thing")
            .unwrap_err();
        assert_eq!(err.code(), crate::error::Code::AlreadyExists);
    }

    #[test]
    fn update_if_applies_only_when_the_predicate_holds() {
        let dir = tempfile::tempdir().unwrap();
        let r = records(dir.path());
        let e = r.entry(thing("abc", "one"));
        e.create_file().unwrap();
        assert!(e.update_if(|t| t.n == 0, |t| t.n = 1).unwrap());
        assert!(!e.update_if(|t| t.n == 0, |t| t.n = 2).unwrap());
        assert_eq!(e.get().n, 1);
    }

    #[test]
    fn a_failed_write_leaves_the_record_unchanged() {
        let dir = tempfile::tempdir().unwrap();
        let r = records(dir.path());
        let e = r.entry(thing("abc", "one"));
        // A file where the record's directory must go: the write cannot succeed.
        std::fs::write(dir.path().join("things").join("abc"), "").unwrap();
        assert!(e.update(|t| t.n = 5).is_err());
        assert_eq!(e.get().n, 0);
    }

    #[test]
    fn lookups_by_prefix_and_removal_frees_the_name() {
        let dir = tempfile::tempdir().unwrap();
        let r = records(dir.path());
        for (id, name) in [("abc1", "a"), ("abd2", "b")] {
            r.write().names.reserve(name, id, 0, "thing").unwrap();
            r.write().insert(r.entry(thing(id, name)));
        }
        let err = r.resolve("ab").map(drop).unwrap_err();
        assert_eq!(err.code(), crate::error::Code::InvalidArgument);
        assert!(err.message().contains("thing_id"), "{err}");
        assert_eq!(
            r.resolve("zz").map(drop).unwrap_err().code(),
            crate::error::Code::NotFound
        );
        assert_eq!(r.resolve("abd").unwrap().id, "abd2");

        r.write().remove("abd2");
        assert_eq!(r.all().len(), 1);
        r.write().names.reserve("b", "new", 0, "thing").unwrap();
    }
}
