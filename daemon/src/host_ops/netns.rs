//! Network namespaces pinned by a bind mount, so that they outlive any process in them.
//!
//! The namespace is made on a throw-away thread (`unshare(CLONE_NEWNET)` changes only the
//! calling thread), then its `/proc/<tid>/ns/net` is bind-mounted on a file under the state
//! directory. CNI plugins and the pause container get that path.

use crate::error::{Error, Result};
use nix::mount::{mount, MsFlags};
use nix::sched::{unshare, CloneFlags};
use std::path::{Path, PathBuf};

/// Creates a new network namespace pinned at `dir/name`.
pub fn create(dir: &Path, name: &str) -> Result<PathBuf> {
    std::fs::create_dir_all(dir).map_err(|e| Error::path("create", dir, e))?;
    let path = dir.join(name);
    std::fs::File::create(&path).map_err(|e| Error::path("create netns file", &path, e))?;
    let target = path.clone();
    let pinned = std::thread::spawn(move || -> std::io::Result<()> {
        unshare(CloneFlags::CLONE_NEWNET).map_err(std::io::Error::from)?;
        // SAFETY: gettid has no preconditions.
        let tid = unsafe { libc::syscall(libc::SYS_gettid) };
        let source = format!("/proc/self/task/{tid}/ns/net");
        mount(
            Some(source.as_str()),
            &target,
            None::<&str>,
            MsFlags::MS_BIND,
            None::<&str>,
        )
        .map_err(std::io::Error::from)
    })
    .join()
    .map_err(|_| Error::internal("the netns thread panicked"))?;
    if let Err(e) = pinned {
        let _ = std::fs::remove_file(&path);
        return Err(Error::path("pin network namespace at", &path, e));
    }
    Ok(path)
}

/// Where the user namespace of a pod with its own (CRI NamespaceMode POD) is pinned: beside
/// its network namespace, which it owns and which is made with it ([`create_in_userns`]).
pub fn userns_pin(netns: &Path) -> PathBuf {
    let mut p = netns.as_os_str().to_owned();
    p.push(".userns");
    PathBuf::from(p)
}

/// Creates a new user namespace with the pod's mappings and a new network namespace owned by
/// it, pinned at [`userns_pin`]`(dir/name)` and `dir/name`; returns the network namespace's
/// path. [`remove`] of that path removes both.
pub fn create_in_userns(
    dir: &Path,
    name: &str,
    userns: &peapod_spec::PodUserNamespace,
) -> Result<PathBuf> {
    std::fs::create_dir_all(dir).map_err(|e| Error::path("create", dir, e))?;
    let path = dir.join(name);
    let map = |m: &peapod_proto::v1::IdMapping| peapod_host::userns::IdMap {
        container_id: m.container_id,
        host_id: m.host_id,
        size: m.length,
    };
    peapod_host::userns::pin_namespaces(
        &map(&userns.uids),
        &map(&userns.gids),
        &userns_pin(&path),
        Some(&path),
    )
    .map_err(|e| Error::path("pin the pod's user and network namespaces at", &path, e))?;
    Ok(path)
}

/// Unpins and removes a namespace file, and the pod's user namespace pinned beside it if
/// there is one; missing ones are fine.
pub fn remove(path: &Path) -> Result<()> {
    peapod_host::mount::detach(path).map_err(|e| Error::path("unmount netns", path, e))?;
    peapod_host::fs::remove_file_if_exists(path)
        .map_err(|e| Error::path("remove netns file", path, e))?;
    let userns = userns_pin(path);
    peapod_host::userns::unpin(&userns).map_err(|e| Error::path("unpin user namespace", &userns, e))
}

/// Runs `f` on a thread that has entered the namespace at `path` (e.g. to open a socket
/// there: a socket stays in the namespace it was created in).
pub fn run_in<T: Send + 'static>(
    path: &Path,
    f: impl FnOnce() -> std::io::Result<T> + Send + 'static,
) -> Result<T> {
    // The join waits for the thread: not on an async worker.
    crate::blocking::off_runtime(|| {
        let file = std::fs::File::open(path).map_err(|e| Error::path("open netns", path, e))?;
        std::thread::spawn(move || -> std::io::Result<T> {
            nix::sched::setns(&file, CloneFlags::CLONE_NEWNET).map_err(std::io::Error::from)?;
            f()
        })
        .join()
        .map_err(|_| Error::internal("the netns thread panicked"))?
        .map_err(|e| Error::io("in the pod network namespace", e))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_user_namespace_is_pinned_beside_its_network_namespace() {
        let netns = Path::new("/run/peapod/netns/abc");
        assert_eq!(userns_pin(netns), Path::new("/run/peapod/netns/abc.userns"));
    }
}
