//! The containers of the pod as the shim holds them: the backend that runs each (chosen at
//! its create), an init process, the execs, and the peapod options it was created with.
//! Lookups that fail say which container or exec is missing, in one place.

use crate::backend::Backend;
use crate::error::{Result, ShimError};
use crate::process::{ExecProcess, InitProcess};
use crate::stdio::IoHandle;
use peapod_host::sync::LockUnpoisoned;
use peapod_shim::protocol::CreateOptions;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::sync::watch;

pub struct Container {
    pub id: String,
    pub bundle: PathBuf,
    /// How it is run: every call on it goes through this backend (`backend::Backends`).
    pub backend: Arc<Backend>,
    pub options: CreateOptions,
    pub init: InitProcess,
    /// Stops the attach socket's server.
    pub stop_attach: watch::Sender<bool>,
    pub execs: HashMap<String, ExecProcess>,
}

impl Container {
    pub fn exec(&self, exec_id: &str) -> Result<&ExecProcess> {
        let id = &self.id;
        self.execs
            .get(exec_id)
            .ok_or_else(|| exec_not_found(id, exec_id))
    }

    pub fn exec_mut(&mut self, exec_id: &str) -> Result<&mut ExecProcess> {
        let id = &self.id;
        self.execs
            .get_mut(exec_id)
            .ok_or_else(|| exec_not_found(id, exec_id))
    }

    pub fn remove_exec(&mut self, exec_id: &str) -> Result<ExecProcess> {
        let id = &self.id;
        self.execs
            .remove(exec_id)
            .ok_or_else(|| exec_not_found(id, exec_id))
    }

    /// The stdio of the init (empty `exec_id`) or of a started exec.
    pub fn io(&self, exec_id: &str) -> Result<Arc<IoHandle>> {
        if exec_id.is_empty() {
            return Ok(self.init.io.clone());
        }
        self.exec(exec_id)?
            .io
            .clone()
            .ok_or_else(|| ShimError::NoStdio {
                id: self.id.clone(),
                exec_id: exec_id.to_string(),
            })
    }

    /// Whether the container's init has not exited yet.
    pub fn is_running(&self) -> bool {
        self.init.exited().is_none()
    }

    /// Stops serving attach sessions and ends output copying: the container is being removed.
    pub fn close(&self) {
        let _ = self.stop_attach.send(true);
        self.init.io.close_output();
    }
}

/// The one "exec … not found".
fn exec_not_found(id: &str, exec_id: &str) -> ShimError {
    ShimError::ExecNotFound {
        id: id.to_string(),
        exec_id: exec_id.to_string(),
    }
}

/// The containers by id.
#[derive(Default)]
pub struct Containers {
    map: Mutex<HashMap<String, Container>>,
}

impl Containers {
    pub fn lock(&self) -> MutexGuard<'_, HashMap<String, Container>> {
        self.map.lock_unpoisoned()
    }

    /// Runs `f` on container `id` under the lock; NotFound when there is no such container.
    pub fn with<T>(&self, id: &str, f: impl FnOnce(&mut Container) -> Result<T>) -> Result<T> {
        let mut map = self.lock();
        let c = map
            .get_mut(id)
            .ok_or_else(|| ShimError::ContainerNotFound { id: id.to_string() })?;
        f(c)
    }

    pub fn contains(&self, id: &str) -> bool {
        self.lock().contains_key(id)
    }

    pub fn insert(&self, c: Container) {
        self.lock().insert(c.id.clone(), c);
    }

    pub fn remove(&self, id: &str) -> Option<Container> {
        self.lock().remove(id)
    }

    pub fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }
}
