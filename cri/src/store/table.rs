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
    /// The record's file under the daemon root.
    fn path(root: &Path, id: &str) -> PathBuf;
}

/// One object while the daemon runs.
pub struct Entry<R: Record> {
    pub id: String,
    /// Where the record is persisted.
    file: PathBuf,
    record: RwLock<R>,
    /// Serializes lifecycle operations on this object.
    pub op: tokio::sync::Mutex<()>,
}

impl<R: Record> Entry<R> {
    /// An entry whose record lives under the daemon root `root`.
    pub fn new(root: &Path, record: R) -> Arc<Entry<R>> {
        Arc::new(Entry {
            id: record.id().to_string(),
            file: R::path(root, record.id()),
            record: RwLock::new(record),
            op: tokio::sync::Mutex::new(()),
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
        let mut guard = self.record.write().unwrap_or_else(|p| p.into_inner());
        if !pred(&guard) {
            return Ok(false);
        }
        let mut next = guard.clone();
        f(&mut next);
        super::write_record(&self.file, &next)?;
        *guard = next;
        Ok(true)
    }

    /// Applies `f` to the record and persists it; the in-memory record changes only if the
    /// write succeeded.
    pub fn update(&self, f: impl FnOnce(&mut R)) -> Result<R> {
        let mut guard = self.record.write().unwrap_or_else(|p| p.into_inner());
        let mut next = guard.clone();
        f(&mut next);
        super::write_record(&self.file, &next)?;
        *guard = next.clone();
        Ok(next)
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
                    if let Err(e) = self.names.reserve(record.name(), &id, R::KIND) {
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
