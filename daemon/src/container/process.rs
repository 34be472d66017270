//! The process spec of each container as created, kept in memory for exec: an exec probe runs
//! every few seconds per container, and must not re-read and re-parse the container's
//! config.json each time. Filled by CreateContainer, rebuilt from the bundles when the daemon
//! starts, dropped with the container.

use super::ContainerService;
use crate::error::{Error, Result};
use crate::store::container::ContainerRecord;
use oci_spec::runtime::{Process, Spec};
use peapod_host::sync::LockUnpoisoned;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Container id -> its process spec (a runtime spec holding only the process, which is all
/// `peapod_spec::exec_process` reads).
#[derive(Default)]
pub(super) struct Processes {
    by_id: Mutex<HashMap<String, Arc<Spec>>>,
}

fn only_process(process: Option<Process>) -> Spec {
    let mut spec = Spec::default();
    spec.set_process(process);
    spec
}

impl Processes {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Spec>>> {
        self.by_id.lock_unpoisoned()
    }

    pub(super) fn remember(&self, id: &str, spec: &Spec) {
        let base = Arc::new(only_process(spec.process().clone()));
        self.lock().insert(id.to_string(), base);
    }

    pub(super) fn forget(&self, id: &str) {
        self.lock().remove(id);
    }

    /// The container's process spec, read from its bundle if not known yet.
    fn base(&self, rec: &ContainerRecord) -> Result<Arc<Spec>> {
        if let Some(base) = self.lock().get(&rec.id) {
            return Ok(base.clone());
        }
        let path = rec.bundle.join("config.json");
        let spec = Spec::load(&path).map_err(|e| {
            Error::caused(
                crate::error::Code::Internal,
                format_args!("read {}", path.display()),
                e,
            )
        })?;
        let base = Arc::new(only_process(spec.process().clone()));
        self.lock().insert(rec.id.clone(), base.clone());
        Ok(base)
    }
}

impl ContainerService {
    /// The OCI process for `cmd` in a container: its own process with the args replaced, as
    /// the JSON the shim takes.
    pub fn exec_process_json(
        &self,
        rec: &ContainerRecord,
        cmd: &[String],
        tty: bool,
    ) -> Result<Vec<u8>> {
        let base = self.processes.base(rec)?;
        let process = peapod_spec::exec_process(&base, cmd, tty)?;
        serde_json::to_vec(&process)
            .map_err(|e| Error::caused(crate::error::Code::Internal, "encode exec process", e))
    }

    /// Reads the process spec of every container that can be exec'd into, once, after a
    /// daemon restart.
    pub(super) fn reload_processes(&self) {
        for c in self.containers.all() {
            let rec = c.get();
            if let Err(e) = self.processes.base(&rec) {
                tracing::debug!(container = %rec.id, error = %e, "no process spec to keep");
            }
        }
    }
}
