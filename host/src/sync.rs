//! A lock's guard whatever a panicking holder left: every lock in peapod guards state that a
//! panic mid-update leaves usable (maps and counters whose every step is whole), and a
//! daemon or shim that stopped serving because one request panicked would be worse than the
//! state it protects. So poisoning is recovered from, in one place.

use std::sync::{Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// [`Mutex::lock`] that takes the guard back from a poisoned mutex.
pub trait LockUnpoisoned<T: ?Sized> {
    fn lock_unpoisoned(&self) -> MutexGuard<'_, T>;
}

impl<T: ?Sized> LockUnpoisoned<T> for Mutex<T> {
    fn lock_unpoisoned(&self) -> MutexGuard<'_, T> {
        self.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// [`RwLock::read`] and [`RwLock::write`] that take the guard back from a poisoned lock.
pub trait RwLockUnpoisoned<T: ?Sized> {
    fn read_unpoisoned(&self) -> RwLockReadGuard<'_, T>;
    fn write_unpoisoned(&self) -> RwLockWriteGuard<'_, T>;
}

impl<T: ?Sized> RwLockUnpoisoned<T> for RwLock<T> {
    fn read_unpoisoned(&self) -> RwLockReadGuard<'_, T> {
        self.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write_unpoisoned(&self) -> RwLockWriteGuard<'_, T> {
        self.write().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_poisoned_lock_still_gives_its_guard() {
        let m = std::sync::Arc::new(Mutex::new(1));
        let rw = std::sync::Arc::new(RwLock::new(1));
        let (held, held_rw) = (m.clone(), rw.clone());
        let _ = std::thread::spawn(move || {
            let _guard = held.lock().unwrap();
            let _write = held_rw.write().unwrap();
            panic!("poison both");
        })
        .join();
        assert!(m.is_poisoned() && rw.is_poisoned());
        *m.lock_unpoisoned() += 1;
        assert_eq!(*m.lock_unpoisoned(), 2);
        *rw.write_unpoisoned() += 1;
        assert_eq!(*rw.read_unpoisoned(), 2);
    }
}
