//! Where the daemon keeps things: records and per-object files under the root directory
//! (persistent), bundles, sockets and namespace pins under the state directory (runtime).

use std::path::{Path, PathBuf};

#[derive(Debug, Clone)]
pub struct Paths {
    pub root: PathBuf,
    pub state: PathBuf,
}

impl Paths {
    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn sandbox_root_dir(&self, id: &str) -> PathBuf {
        self.root.join("sandboxes").join(id)
    }

    pub fn sandbox_state_dir(&self, id: &str) -> PathBuf {
        self.state.join("sandboxes").join(id)
    }

    pub fn netns_dir(&self) -> PathBuf {
        self.state.join("netns")
    }

    pub fn container_root_dir(&self, id: &str) -> PathBuf {
        self.root.join("containers").join(id)
    }

    pub fn container_state_dir(&self, id: &str) -> PathBuf {
        self.state.join("containers").join(id)
    }
}
