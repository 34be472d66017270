//! The host operations of the sandbox lifecycle that need root: pinning network namespaces
//! (with the pod's user namespace when it has one) and mounting a pod's /dev/shm. Behind a trait so that the lifecycle's unit tests run
//! without root against a fake (`crate::testing`).

use crate::error::{Error, Result};
use crate::network::netns;
use nix::mount::{mount, MsFlags};
use std::path::{Path, PathBuf};

/// Size of a pod's /dev/shm (containerd's and Docker's default).
const SHM_SIZE: &str = "65536k";

pub trait HostOps: Send + Sync {
    /// Creates a new network namespace pinned at `dir/name`. With `userns` (a pod with its own
    /// user namespace), the user namespace is made too, pinned at
    /// [`netns::userns_pin`]`(dir/name)`, and owns the network namespace.
    fn pin_netns(
        &self,
        dir: &Path,
        name: &str,
        userns: Option<&peapod_spec::PodUserNamespace>,
    ) -> Result<PathBuf>;
    /// Unpins and removes a namespace file (and the user namespace pinned with it); a missing
    /// one is fine.
    fn unpin_netns(&self, path: &Path) -> Result<()>;
    /// Mounts a pod's /dev/shm tmpfs at `path` (made if missing).
    fn mount_shm(&self, path: &Path) -> Result<()>;
    /// Detaches the mount at `path`; nothing mounted there is fine.
    fn unmount(&self, path: &Path) -> Result<()>;
}

/// The real host.
pub struct RealHostOps;

impl HostOps for RealHostOps {
    fn pin_netns(
        &self,
        dir: &Path,
        name: &str,
        userns: Option<&peapod_spec::PodUserNamespace>,
    ) -> Result<PathBuf> {
        match userns {
            Some(u) => netns::create_in_userns(dir, name, u),
            None => netns::create(dir, name),
        }
    }

    fn unpin_netns(&self, path: &Path) -> Result<()> {
        netns::remove(path)
    }

    fn mount_shm(&self, path: &Path) -> Result<()> {
        std::fs::create_dir_all(path).map_err(|e| Error::path("create", path, e))?;
        mount(
            Some("shm"),
            path,
            Some("tmpfs"),
            MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
            Some(format!("mode=1777,size={SHM_SIZE}").as_str()),
        )
        .map_err(|e| Error::path("mount the pod's /dev/shm at", path, e.into()))
    }

    fn unmount(&self, path: &Path) -> Result<()> {
        peapod_host::mount::detach(path)
            .map(drop)
            .map_err(|e| Error::path("unmount", path, e))
    }
}
