//! A table of live objects (sandboxes or containers): records behind locks, an id index for
//! prefix lookups, name reservations, and the two orders the list calls answer in (every
//! object newest first; a parent's objects — a pod's containers — newest first), kept as
//! objects come and go so that a list call walks only what it returns.
//!
//! An entry holds its record as an `Arc`, swapped whole by every update: readers take a
//! [`Entry::snapshot`] (a reference count, no copy of the record) and the status calls build
//! their answers from it. The list calls answer with [`Entry::list_item`]: the record's list
//! message, encoded at the first list after each update and shared until the next, since the
//! kubelet lists every object every second and most of them have not changed since.

use super::names::NameIndex;
use super::Durability;
use crate::error::{Error, Result};
use crate::ids::{IdIndex, Lookup};
use peapod_host::sync::{LockUnpoisoned, RwLockUnpoisoned};
use prost::bytes::Bytes;
use serde::{de::DeserializeOwned, Serialize};
use std::cmp::Reverse;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock, RwLock, RwLockReadGuard, RwLockWriteGuard};

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
    /// When it was made (ns): the list order, newest first. Fixed for the record's life (the
    /// table orders by the value it had when inserted).
    fn created_at_ns(&self) -> i64 {
        0
    }
    /// The object it belongs to (a container's pod), if any. Fixed for the record's life.
    fn parent_id(&self) -> Option<&str> {
        None
    }
}

/// The [`Record`] accessors of a record with the usual fields (`id`, `name`, `request_digest`,
/// `created_at_ns`), written once for sandboxes and containers.
macro_rules! usual_record_fields {
    () => {
        fn id(&self) -> &str {
            &self.id
        }

        fn name(&self) -> &str {
            &self.name
        }

        fn digest(&self) -> u64 {
            self.request_digest
        }

        fn created_at_ns(&self) -> i64 {
            self.created_at_ns
        }
    };
}
pub(crate) use usual_record_fields;

/// Where an entry sits in the list order: newest first, then by id.
type OrderKey = (Reverse<i64>, String);

/// An entry's record as it is now, and its list item once a list call has encoded it.
struct Current<R> {
    record: Arc<R>,
    /// Made from `record` alone, so it is right for as long as `record` is: an update replaces
    /// both.
    list_item: OnceLock<Bytes>,
}

impl<R> Current<R> {
    fn new(record: R) -> Current<R> {
        Current {
            record: Arc::new(record),
            list_item: OnceLock::new(),
        }
    }
}

/// One object while the daemon runs.
pub struct Entry<R: Record> {
    pub id: String,
    /// The record's `created_at_ns` and `parent_id` when the entry was made: its place in
    /// the table's orders.
    created_at_ns: i64,
    parent: Option<String>,
    /// Where the record is persisted.
    file: PathBuf,
    /// Replaced whole (a new `Arc`, and no list item yet) by every update, never changed in
    /// place: a snapshot a reader holds stays what it was.
    record: RwLock<Current<R>>,
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
            created_at_ns: record.created_at_ns(),
            parent: record.parent_id().map(str::to_string),
            file: R::path(root, record.id()),
            record: RwLock::new(Current::new(record)),
            persist: std::sync::Mutex::new(()),
            op: tokio::sync::Mutex::new(()),
            members: tokio::sync::RwLock::new(()),
        })
    }

    /// A copy of the record (to change, or to keep past other updates).
    pub fn get(&self) -> R {
        R::clone(&self.snapshot())
    }

    /// The record as it is now, shared: no copy is made. Later updates replace the entry's
    /// record and leave this one as it was.
    pub fn snapshot(&self) -> Arc<R> {
        self.current().record.clone()
    }

    /// The record's list item when `keep` holds for the record as it is now: `encode`'s bytes,
    /// made at the first call after each update and then shared (a reference count) by every
    /// call until the next update. `encode` must depend on the record alone.
    pub fn list_item(
        &self,
        keep: impl FnOnce(&R) -> bool,
        encode: impl FnOnce(&R) -> Vec<u8>,
    ) -> Option<Bytes> {
        let current = self.current();
        if !keep(&current.record) {
            return None;
        }
        let item = current
            .list_item
            .get_or_init(|| Bytes::from(encode(&current.record)));
        Some(item.clone())
    }

    fn current(&self) -> RwLockReadGuard<'_, Current<R>> {
        self.record.read_unpoisoned()
    }

    fn order_key(&self) -> OrderKey {
        (Reverse(self.created_at_ns), self.id.clone())
    }

    /// Like [`Entry::update`], but only when `pred` holds, checked under the same lock (for
    /// state transitions two tasks may race to make). Returns whether it applied.
    pub fn update_if(&self, pred: impl FnOnce(&R) -> bool, f: impl FnOnce(&mut R)) -> Result<bool> {
        self.update_if_with(Durability::Durable, pred, f)
    }

    /// [`Entry::update_if`] for a [`Durability::Step`].
    pub fn update_step_if(
        &self,
        pred: impl FnOnce(&R) -> bool,
        f: impl FnOnce(&mut R),
    ) -> Result<bool> {
        self.update_if_with(Durability::Step, pred, f)
    }

    fn update_if_with(
        &self,
        durability: Durability,
        pred: impl FnOnce(&R) -> bool,
        f: impl FnOnce(&mut R),
    ) -> Result<bool> {
        let _writer = self.persist.lock_unpoisoned();
        let mut next = self.get();
        if !pred(&next) {
            return Ok(false);
        }
        f(&mut next);
        self.persist_and_swap_with(next, durability)?;
        Ok(true)
    }

    /// Like [`Entry::update_if`] for a fact kept durably elsewhere (an exit: the shim's exit
    /// record): the change is made in memory even when the record cannot be written (a full
    /// disk), so that the daemon does not answer with a state it knows is over; the write
    /// error is returned beside whether it applied. The next update, or recovery from the
    /// shim's record after a restart, persists it.
    pub fn update_if_in_memory_first(
        &self,
        pred: impl FnOnce(&R) -> bool,
        f: impl FnOnce(&mut R),
    ) -> (bool, Option<Error>) {
        let _writer = self.persist.lock_unpoisoned();
        let mut next = self.get();
        if !pred(&next) {
            return (false, None);
        }
        f(&mut next);
        let written = crate::blocking::off_runtime(|| {
            super::write_record(&self.file, &next, Durability::Durable)
        });
        *self.record.write_unpoisoned() = Current::new(next);
        (true, written.err())
    }

    /// Applies `f` to the record and persists it; the in-memory record changes only if the
    /// write succeeded. Readers keep reading the old record while the file is written.
    pub fn update(&self, f: impl FnOnce(&mut R)) -> Result<R> {
        self.update_with(Durability::Durable, f)
    }

    /// [`Entry::update`] for a step on the way to a state a call answers with
    /// ([`Durability::Step`]: no fsync).
    pub fn update_step(&self, f: impl FnOnce(&mut R)) -> Result<R> {
        self.update_with(Durability::Step, f)
    }

    fn update_with(&self, durability: Durability, f: impl FnOnce(&mut R)) -> Result<R> {
        let _writer = self.persist.lock_unpoisoned();
        let mut next = self.get();
        f(&mut next);
        self.persist_and_swap_with(next.clone(), durability)?;
        Ok(next)
    }

    /// Writes `next` (the caller holds `persist`), then swaps it in. The write (an fsync, if
    /// durable) runs off the async workers: other tasks of this worker move to another thread
    /// first.
    fn persist_and_swap_with(&self, next: R, durability: Durability) -> Result<()> {
        crate::blocking::off_runtime(|| super::write_record(&self.file, &next, durability))?;
        *self.record.write_unpoisoned() = Current::new(next);
        Ok(())
    }

    /// Persists a new object's record for the first time, durably, making its directory.
    pub fn create_file(&self) -> Result<()> {
        self.create_file_with(|_| {})
    }

    /// [`Entry::create_file`] with `f` applied to the record first: the intents known
    /// before anything is made, in the same write.
    pub fn create_file_with(&self, f: impl FnOnce(&mut R)) -> Result<()> {
        self.create_dir()?;
        self.update(f).map(drop)
    }

    /// [`Entry::create_file`] as a [`Durability::Step`]: for an object whose first record
    /// names nothing a reboot leaves behind but its directories, which recovery sweeps when
    /// no record claims them.
    pub fn create_file_step(&self) -> Result<()> {
        self.create_dir()?;
        self.update_step(|_| {}).map(drop)
    }

    fn create_dir(&self) -> Result<()> {
        match self.file.parent() {
            Some(dir) => crate::blocking::off_runtime(|| std::fs::create_dir_all(dir))
                .map_err(|e| Error::path("create", dir, e)),
            None => Ok(()),
        }
    }
}

/// The live objects of one kind. `by_id`, `ids`, `newest_first` and `by_parent` hold the
/// same entries: change them only through [`Table::insert`] and [`Table::remove`].
pub struct Table<R: Record> {
    pub by_id: HashMap<String, Arc<Entry<R>>>,
    pub ids: IdIndex,
    pub names: NameIndex,
    /// Every entry, newest first.
    newest_first: BTreeMap<OrderKey, Arc<Entry<R>>>,
    /// The entries of each parent (a pod's containers), newest first.
    by_parent: HashMap<String, BTreeMap<OrderKey, Arc<Entry<R>>>>,
}

impl<R: Record> Default for Table<R> {
    fn default() -> Self {
        Table {
            by_id: HashMap::new(),
            ids: IdIndex::default(),
            names: NameIndex::default(),
            newest_first: BTreeMap::new(),
            by_parent: HashMap::new(),
        }
    }
}

impl<R: Record> Table<R> {
    /// Adds `entry`, or puts it in place of the entry of the same id.
    pub fn insert(&mut self, entry: Arc<Entry<R>>) {
        if let Some(old) = self.by_id.get(&entry.id).cloned() {
            self.unindex(&old);
        }
        self.ids.insert(&entry.id);
        self.newest_first.insert(entry.order_key(), entry.clone());
        if let Some(parent) = &entry.parent {
            self.by_parent
                .entry(parent.clone())
                .or_default()
                .insert(entry.order_key(), entry.clone());
        }
        self.by_id.insert(entry.id.clone(), entry);
    }

    pub fn remove(&mut self, id: &str) -> Option<Arc<Entry<R>>> {
        self.ids.remove(id);
        let entry = self.by_id.remove(id)?;
        self.unindex(&entry);
        self.names.release(entry.snapshot().name(), id);
        Some(entry)
    }

    /// Takes `entry` out of the two orders.
    fn unindex(&mut self, entry: &Entry<R>) {
        let key = entry.order_key();
        self.newest_first.remove(&key);
        if let Some(parent) = &entry.parent {
            if let Some(members) = self.by_parent.get_mut(parent) {
                members.remove(&key);
                if members.is_empty() {
                    self.by_parent.remove(parent);
                }
            }
        }
    }

    /// Every entry, newest first (then by id).
    pub fn newest_first(&self) -> impl Iterator<Item = &Arc<Entry<R>>> {
        self.newest_first.values()
    }

    /// The entries whose parent is `parent` (a pod's containers), newest first.
    pub fn of_parent(&self, parent: &str) -> impl Iterator<Item = &Arc<Entry<R>>> {
        self.by_parent
            .get(parent)
            .into_iter()
            .flat_map(|members| members.values())
    }

    pub fn len(&self) -> usize {
        self.by_id.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_id.is_empty()
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

    /// Loads every record under `<root>/<dir>/*/`, reserving their names. A record that
    /// cannot be read (cut short by a power loss, garbage from a bad disk) is set aside as
    /// `<file>.torn` with a log line naming it, and its id returned: the daemon starts, and
    /// its owner (recovery) puts a placeholder in its place so that what the object holds on
    /// the host is found and removable.
    pub fn load(&mut self, root: &Path, dir: &str) -> Result<Vec<String>> {
        let base = root.join(dir);
        let entries = std::fs::read_dir(&base).map_err(|e| Error::path("read", &base, e))?;
        let mut torn = Vec::new();
        for entry in entries.flatten() {
            let id = entry.file_name().to_string_lossy().into_owned();
            let file = R::path(root, &id);
            match super::read_record::<R>(&file) {
                Ok(Some(record)) if record.id() == id => {
                    if let Err(e) = self
                        .names
                        .reserve(record.name(), &id, record.digest(), R::KIND)
                    {
                        tracing::warn!(id = %id, error = %e, "duplicate name in records");
                    }
                    self.insert(Entry::new(root, record));
                }
                Ok(None) => {}
                Ok(Some(other)) => {
                    set_aside(&file, &format!("it names another id, {:?}", other.id()));
                    torn.push(id);
                }
                Err(e) => {
                    set_aside(&file, &e.to_string());
                    torn.push(id);
                }
            }
        }
        Ok(torn)
    }
}

/// Moves an unreadable record out of the way (kept for a post-mortem, never read again).
fn set_aside(file: &Path, why: &str) {
    let mut aside = file.as_os_str().to_owned();
    aside.push(".torn");
    let aside = PathBuf::from(aside);
    match std::fs::rename(file, &aside) {
        Ok(()) => tracing::error!(
            record = %file.display(),
            set_aside_as = %aside.display(),
            reason = why,
            "a record file cannot be read (torn or corrupt); set aside, its object is recovered from what the host still has"
        ),
        Err(e) => tracing::error!(
            record = %file.display(),
            reason = why,
            error = %e,
            "a record file cannot be read, nor set aside"
        ),
    }
}

/// A table shared by the services that read or change it, with the daemon root its records
/// are persisted under.
pub struct Records<R: Record> {
    root: PathBuf,
    table: RwLock<Table<R>>,
    /// Ids whose record could not be read at load, for recovery.
    torn: std::sync::Mutex<Vec<String>>,
}

impl<R: Record> Records<R> {
    /// The records persisted under `<root>/<dir>/*/`; unreadable ones are set aside and their
    /// ids kept for [`Records::take_torn`].
    pub fn load(root: &Path, dir: &str) -> Result<Records<R>> {
        let mut table = Table::default();
        let torn = table.load(root, dir)?;
        Ok(Records {
            root: root.to_path_buf(),
            table: RwLock::new(table),
            torn: std::sync::Mutex::new(torn),
        })
    }

    /// The ids whose record files could not be read at load (once).
    pub fn take_torn(&self) -> Vec<String> {
        std::mem::take(&mut *self.torn.lock_unpoisoned())
    }

    pub fn read(&self) -> RwLockReadGuard<'_, Table<R>> {
        self.table.read_unpoisoned()
    }

    pub fn write(&self) -> RwLockWriteGuard<'_, Table<R>> {
        self.table.write_unpoisoned()
    }

    /// The object an id or unique prefix names.
    pub fn resolve(&self, id: &str) -> Result<Arc<Entry<R>>> {
        self.read().resolve(id)
    }

    pub fn all(&self) -> Vec<Arc<Entry<R>>> {
        self.read().all()
    }

    /// The entries whose parent is `parent` (a pod's containers), newest first.
    pub fn of_parent(&self, parent: &str) -> Vec<Arc<Entry<R>>> {
        self.read().of_parent(parent).cloned().collect()
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
        #[serde(default)]
        created: i64,
        #[serde(default)]
        parent: Option<String>,
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
        fn created_at_ns(&self) -> i64 {
            self.created
        }
        fn parent_id(&self) -> Option<&str> {
            self.parent.as_deref()
        }
    }

    fn thing(id: &str, name: &str) -> Thing {
        Thing {
            id: id.into(),
            name: name.into(),
            n: 0,
            created: 0,
            parent: None,
        }
    }

    fn member(id: &str, created: i64, parent: &str) -> Thing {
        Thing {
            created,
            parent: Some(parent.into()),
            ..thing(id, id)
        }
    }

    fn order(t: &Table<Thing>) -> Vec<String> {
        t.newest_first().map(|e| e.id.clone()).collect()
    }

    fn members(t: &Table<Thing>, parent: &str) -> Vec<String> {
        t.of_parent(parent).map(|e| e.id.clone()).collect()
    }

    #[test]
    fn the_orders_follow_inserts_and_removals() {
        let dir = tempfile::tempdir().unwrap();
        let r = records(dir.path());
        for (id, created, parent) in [
            ("c1", 10, "p1"),
            ("c2", 30, "p2"),
            ("c3", 20, "p1"),
            ("c4", 20, "p2"),
            ("c0", 20, "p1"),
        ] {
            r.write().insert(r.entry(member(id, created, parent)));
        }
        let t = r.read();
        // Newest first; equal times by id.
        assert_eq!(order(&t), ["c2", "c0", "c3", "c4", "c1"]);
        assert_eq!(members(&t, "p1"), ["c0", "c3", "c1"]);
        assert_eq!(members(&t, "p2"), ["c2", "c4"]);
        assert!(members(&t, "p3").is_empty());
        assert_eq!(t.len(), 5);
        drop(t);

        r.write().remove("c3");
        r.write().remove("c2");
        r.write().remove("c4");
        assert!(
            r.write().remove("c4").is_none(),
            "a second removal finds nothing"
        );
        let t = r.read();
        assert_eq!(order(&t), ["c0", "c1"]);
        assert_eq!(members(&t, "p1"), ["c0", "c1"]);
        assert!(members(&t, "p2").is_empty());
        assert!(
            !t.by_parent.contains_key("p2"),
            "an empty parent is dropped"
        );
        assert_eq!(r.of_parent("p1").len(), 2);
    }

    #[test]
    fn inserting_an_id_again_replaces_it_in_every_order() {
        let dir = tempfile::tempdir().unwrap();
        let r = records(dir.path());
        r.write().insert(r.entry(member("a", 1, "p1")));
        r.write().insert(r.entry(member("b", 2, "p1")));
        // The same id again (a placeholder replaced, say), made at another time.
        r.write().insert(r.entry(member("a", 3, "p1")));
        let t = r.read();
        assert_eq!(order(&t), ["a", "b"]);
        assert_eq!(members(&t, "p1"), ["a", "b"]);
        assert_eq!(t.len(), 2);
    }

    #[test]
    fn a_snapshot_stays_as_it_was_and_updates_are_seen_by_the_next() {
        let dir = tempfile::tempdir().unwrap();
        let r = records(dir.path());
        let e = r.entry(member("a", 5, "p"));
        e.create_file().unwrap();
        r.write().insert(e.clone());
        let before = e.snapshot();
        e.update(|t| t.n = 9).unwrap();
        assert_eq!(before.n, 0, "a snapshot is never changed in place");
        assert_eq!(e.snapshot().n, 9);
        assert_eq!(r.read().newest_first().next().unwrap().snapshot().n, 9);
        assert_eq!(r.of_parent("p")[0].snapshot().n, 9);
        // A failed write changes neither the record nor what the orders hand out.
        std::fs::remove_dir_all(dir.path().join("things").join("a")).unwrap();
        assert!(e.update(|t| t.n = 10).is_err());
        assert_eq!(r.read().newest_first().next().unwrap().snapshot().n, 9);
    }

    #[test]
    fn a_reload_rebuilds_the_orders_from_the_records() {
        let dir = tempfile::tempdir().unwrap();
        let r = records(dir.path());
        for (id, created, parent) in [("x", 1, "p1"), ("y", 3, "p2"), ("z", 2, "p1")] {
            let e = r.entry(member(id, created, parent));
            e.create_file().unwrap();
            r.write().insert(e);
        }
        r.resolve("z").unwrap().update(|t| t.n = 4).unwrap();
        let again = records(dir.path());
        let t = again.read();
        assert_eq!(order(&t), ["y", "z", "x"]);
        assert_eq!(members(&t, "p1"), ["z", "x"]);
        assert_eq!(members(&t, "p2"), ["y"]);
        assert_eq!(t.of_parent("p1").next().unwrap().snapshot().n, 4);
    }

    #[test]
    fn steps_are_read_back_by_a_restarted_daemon_and_fail_like_updates() {
        let dir = tempfile::tempdir().unwrap();
        let r = records(dir.path());
        let e = r.entry(member("s", 1, "p"));
        e.create_file_step().unwrap();
        r.write().insert(e.clone());
        e.update_step(|t| t.n = 3).unwrap();
        assert!(!e.update_step_if(|t| t.n == 0, |t| t.n = 4).unwrap());
        assert!(e.update_step_if(|t| t.n == 3, |t| t.n = 5).unwrap());
        // What a daemon started after kill -9 reads: the last step, whole, and no temporary
        // file beside it.
        let again = records(dir.path());
        assert_eq!(again.resolve("s").unwrap().snapshot().n, 5);
        let files: Vec<_> = std::fs::read_dir(dir.path().join("things").join("s"))
            .unwrap()
            .map(|f| f.unwrap().file_name().into_string().unwrap())
            .collect();
        assert_eq!(files, ["thing.json"]);
        // A step that cannot be written changes nothing, as an update.
        std::fs::remove_dir_all(dir.path().join("things").join("s")).unwrap();
        assert!(e.update_step(|t| t.n = 6).is_err());
        assert_eq!(e.snapshot().n, 5);
    }

    #[test]
    fn a_fact_kept_elsewhere_is_applied_in_memory_when_its_record_cannot_be_written() {
        let dir = tempfile::tempdir().unwrap();
        // No directory for the record: every write fails.
        let e = Entry::new(dir.path(), thing("a", "x"));
        assert!(e.update(|t| t.n = 1).is_err());
        assert_eq!(
            e.get().n,
            0,
            "an ordinary update changes nothing when it cannot persist"
        );
        let (applied, err) = e.update_if_in_memory_first(|t| t.n == 0, |t| t.n = 2);
        assert!(applied && err.is_some());
        assert_eq!(e.get().n, 2);
        let (applied, err) = e.update_if_in_memory_first(|t| t.n == 0, |t| t.n = 3);
        assert!(!applied && err.is_none(), "the predicate still decides");
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
    fn a_list_item_is_encoded_once_per_update_and_only_when_kept() {
        let dir = tempfile::tempdir().unwrap();
        let r = records(dir.path());
        let e = r.entry(thing("abc", "one"));
        e.create_file().unwrap();
        let encodings = std::cell::Cell::new(0);
        let item = |keep: bool| {
            e.list_item(
                |_| keep,
                |t| {
                    encodings.set(encodings.get() + 1);
                    format!("{}={}", t.name, t.n).into_bytes()
                },
            )
        };
        assert_eq!(item(false), None);
        assert_eq!(encodings.get(), 0, "nothing encoded for a record not kept");
        assert_eq!(item(true).as_deref(), Some(&b"one=0"[..]));
        assert_eq!(item(true).as_deref(), Some(&b"one=0"[..]));
        assert_eq!(
            encodings.get(),
            1,
            "the second list shares the first's bytes"
        );
        e.update(|t| t.n = 7).unwrap();
        assert_eq!(item(true).as_deref(), Some(&b"one=7"[..]));
        assert_eq!(encodings.get(), 2, "an update makes the item again");
        // A write that fails changes neither the record nor its item.
        std::fs::remove_dir_all(dir.path().join("things").join("abc")).unwrap();
        std::fs::write(dir.path().join("things").join("abc"), "").unwrap();
        assert!(e.update(|t| t.n = 8).is_err());
        assert_eq!(item(true).as_deref(), Some(&b"one=7"[..]));
        assert_eq!(encodings.get(), 2);
        // An exit recorded in memory first (its write failing) is listed at once.
        let (applied, error) = e.update_if_in_memory_first(|_| true, |t| t.n = 9);
        assert!(applied && error.is_some());
        assert_eq!(item(true).as_deref(), Some(&b"one=9"[..]));
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
