//! The host operations of the sandbox lifecycle that need root: pinning network namespaces
//! (with the pod's user namespace when it has one) and mounting a pod's /dev/shm. Behind a
//! trait so that the lifecycle's unit tests run without root against a fake
//! (`crate::testing`).
//!
//! The trait is synchronous (its callers hold no locks across it and its fakes are plain),
//! but the real operations are system calls that can block — a mount or unmount waits on the
//! kernel's mount lock, an unmount of a busy overlay on its writeback — so `RealHostOps` runs
//! each through [`off_runtime`], which moves the waiting off the async worker threads.

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
        off_runtime(|| match userns {
            Some(u) => netns::create_in_userns(dir, name, u),
            None => netns::create(dir, name),
        })
    }

    fn unpin_netns(&self, path: &Path) -> Result<()> {
        off_runtime(|| netns::remove(path))
    }

    fn mount_shm(&self, path: &Path) -> Result<()> {
        off_runtime(|| {
            std::fs::create_dir_all(path).map_err(|e| Error::path("create", path, e))?;
            mount(
                Some("shm"),
                path,
                Some("tmpfs"),
                MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
                Some(format!("mode=1777,size={SHM_SIZE}").as_str()),
            )
            .map_err(|e| Error::path("mount the pod's /dev/shm at", path, e.into()))
        })
    }

    fn unmount(&self, path: &Path) -> Result<()> {
        off_runtime(|| {
            peapod_host::mount::detach(path)
                .map(drop)
                .map_err(|e| Error::path("unmount", path, e))
        })
    }
}

/// Runs blocking host work called from synchronous code on an async worker thread: on the
/// daemon's multi-threaded runtime, `block_in_place` hands this worker's other tasks to
/// another thread first, so a slow mount never stalls unrelated RPCs (Version, List*). Outside
/// a runtime, or on a current-thread one (where `block_in_place` is not allowed), it just runs.
pub fn off_runtime<T>(work: impl FnOnce() -> T) -> T {
    match tokio::runtime::Handle::try_current() {
        Ok(h) if h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(work)
        }
        _ => work(),
    }
}

/// The image's `/etc/passwd` and `/etc/group` inside a container's root filesystem, read on
/// the blocking pool: the reader resolves inside the root, never opens a FIFO or a device
/// (see `peapod_host::rootfs`), and is bounded; running it off the async workers means even a
/// slow disk cannot stall the daemon. Either file may be absent (`None`); one that exists but
/// is not a regular file is InvalidArgument naming it.
pub async fn read_image_accounts(rootfs: &Path) -> Result<(Option<String>, Option<String>)> {
    let root = rootfs.to_path_buf();
    let read = move || -> Result<(Option<String>, Option<String>)> {
        let one = |rel: &str| {
            peapod_host::rootfs::read_account_file(&root, rel).map_err(|e| {
                if e.kind() == std::io::ErrorKind::InvalidData {
                    Error::invalid(format!("image: its /{rel} cannot be used: {e}"))
                } else {
                    Error::io(format!("read the image's /{rel}"), e)
                }
            })
        };
        Ok((one("etc/passwd")?, one("etc/group")?))
    };
    tokio::task::spawn_blocking(read)
        .await
        .map_err(|e| Error::internal(format!("reading the image's accounts: {e}")))?
}
