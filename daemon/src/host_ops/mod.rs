//! The host operations of the lifecycle that need root: pinning network namespaces (with the
//! pod's user namespace when it has one), mounting a pod's /dev/shm, and what a pod with its
//! own user namespace needs (files given to its root, idmapped binds: `userns` says when).
//! Behind a trait so that the lifecycle's unit tests run without root against a fake that
//! can fail (`crate::testing`).
//!
//! The trait is synchronous (its callers hold no locks across it and its fakes are plain),
//! but the real operations are system calls that can block — a mount or unmount waits on the
//! kernel's mount lock, an unmount of a busy overlay on its writeback — so `RealHostOps` runs
//! each through [`off_runtime`], which moves the waiting off the async worker threads.
//!
//! `netns` holds the namespace pinning itself (and running code in a pinned namespace).

pub mod netns;
pub mod userns;

use crate::blocking::off_runtime;
use crate::error::{Error, Result};
use nix::mount::{mount, MsFlags};
use peapod_host::userns::IdmappedBind;
use std::path::{Path, PathBuf};

/// Size of a pod's /dev/shm (containerd's and Docker's default).
const SHM_SIZE: &str = "65536k";

/// How long a systemd call may take (connecting, and a scope's stop job; systemd's own
/// default stop timeout is longer, but a scope's processes are SIGKILLed at once).
const SYSTEMD_CALL_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

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
    /// Puts addresses back on the interfaces of the namespace pinned at `netns`
    /// ([`netns::give_back_addresses`]: what gVisor took, for CNI DEL to find).
    fn give_back_addresses(
        &self,
        netns: &Path,
        addresses: Vec<netns::InterfaceAddress>,
    ) -> Result<()>;
    /// Mounts a pod's /dev/shm tmpfs at `path` (made if missing).
    fn mount_shm(&self, path: &Path) -> Result<()>;
    /// Detaches the mount at `path`; nothing mounted there is fine.
    fn unmount(&self, path: &Path) -> Result<()>;
    /// Gives `path` (not what is below it) to `uid`:`gid`.
    fn chown(&self, path: &Path, uid: u32, gid: u32) -> Result<()>;
    /// Binds `bind.source` at `bind.target` (an existing mount point) idmapped through the
    /// user namespace pinned at `userns`: what host root owns appears owned by the namespace's
    /// root (`mount_setattr(MOUNT_ATTR_IDMAP)`; runc 1.1 cannot make these itself).
    fn idmapped_bind(&self, bind: &IdmappedBind<'_>, userns: &Path) -> Result<()>;
    /// Removes the cgroup of an object whose runtime `create` may have been cut short (killed
    /// with a dead daemon, or by recovery): its processes are killed and its directories
    /// removed in every hierarchy. `cgroups_path` is the runtime spec's; for a systemd-driver
    /// path (`slice:prefix:name`) its scope is stopped, which kills what still runs there
    /// (the shim's native pause or container, which no OCI runtime knows, would otherwise
    /// keep it), and systemd removes its directory.
    fn remove_cgroup(&self, cgroups_path: &str) -> Result<()>;
    /// Called a few milliseconds before a process will be moved into a cgroup (the pause
    /// helper's join, `runc create`'s): starts, in the background, the kernel's wait that the
    /// first such move after a quiet spell pays (`peapod_host::cgroup::rejoin_own_cgroup`),
    /// so that it overlaps the mover's start. Best effort: it never fails a call.
    fn warm_cgroup_moves(&self);
}

/// The real host.
pub struct RealHostOps;

/// Whether a [`HostOps::warm_cgroup_moves`] is under way: one wait serves every move that
/// comes during it, so calls meanwhile start nothing more.
static WARMING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

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

    fn give_back_addresses(
        &self,
        netns: &Path,
        addresses: Vec<netns::InterfaceAddress>,
    ) -> Result<()> {
        off_runtime(|| netns::give_back_addresses(netns, addresses))
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

    fn chown(&self, path: &Path, uid: u32, gid: u32) -> Result<()> {
        std::os::unix::fs::chown(path, Some(uid), Some(gid))
            .map_err(|e| Error::path("chown to the pod's user namespace root", path, e))
    }

    fn idmapped_bind(&self, bind: &IdmappedBind<'_>, userns: &Path) -> Result<()> {
        off_runtime(|| peapod_host::userns::idmapped_bind(bind, userns))
            .map_err(|e| Error::path("idmapped mount of", bind.source, e))
    }

    fn remove_cgroup(&self, cgroups_path: &str) -> Result<()> {
        if cgroups_path.is_empty() {
            return Ok(());
        }
        if let Some((unit, _)) = peapod_host::systemd::scope_of(cgroups_path) {
            return off_runtime(move || {
                peapod_host::systemd::Systemd::connect(SYSTEMD_CALL_TIMEOUT)
                    .and_then(|mut systemd| systemd.stop_unit(&unit))
                    .map_err(|e| {
                        Error::io(
                            format_args!("stop the scope {unit}"),
                            std::io::Error::other(e),
                        )
                    })
            });
        }
        if cgroups_path.contains(':') {
            return Ok(()); // not a cgroupfs path, nor a scope of ours
        }
        let root = Path::new(peapod_host::cgroup::DEFAULT_ROOT);
        off_runtime(|| peapod_host::cgroup::remove(root, cgroups_path)).map_err(|e| {
            Error::path(
                "remove the cgroup",
                &root.join(cgroups_path.trim_start_matches('/')),
                e,
            )
        })
    }

    fn warm_cgroup_moves(&self) {
        use std::sync::atomic::Ordering;
        if WARMING.swap(true, Ordering::AcqRel) {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            WARMING.store(false, Ordering::Release);
            return;
        };
        // Blocks for a grace period by design: on the blocking pool, not awaited.
        runtime.spawn_blocking(|| {
            let root = Path::new(peapod_host::cgroup::DEFAULT_ROOT);
            if let Err(e) = peapod_host::cgroup::rejoin_own_cgroup(root) {
                tracing::debug!(error = %e, "warming cgroup moves");
            }
            WARMING.store(false, Ordering::Release);
        });
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
