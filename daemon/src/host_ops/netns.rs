//! Network namespaces pinned by a bind mount, so that they outlive any process in them.
//!
//! The namespace is made on a throw-away thread (`unshare(CLONE_NEWNET)` changes only the
//! calling thread), then its `/proc/<tid>/ns/net` is bind-mounted on a file under the state
//! directory. CNI plugins and the pause container get that path.
//!
//! A new namespace gets its loopback up here, as CRI-O's ocicni does, rather than through the
//! CNI loopback plugin that containerd runs: the kernel gives `lo` 127.0.0.1/8 (and ::1) when
//! it goes up, which is all the plugin's ADD does, and its DEL (link down) is moot for a
//! namespace about to go. That is a Go program's start less on each of RunPodSandbox's and
//! StopPodSandbox's paths (the loopback ADD ran before the pod network's ADD).

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
        loopback_up()?;
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
    if let Err(e) = in_netns(&path, loopback_up) {
        let _ = remove(&path);
        return Err(e);
    }
    Ok(path)
}

/// Brings up `lo` in the calling thread's network namespace.
fn loopback_up() -> std::io::Result<()> {
    const IFNAMSIZ: usize = 16;
    /// `struct ifreq` with its flags member (SIOCGIFFLAGS / SIOCSIFFLAGS).
    #[repr(C)]
    struct IfreqFlags {
        name: [libc::c_char; IFNAMSIZ],
        flags: libc::c_short,
        _pad: [u8; 22],
    }
    // SAFETY: a socket of our own, closed by OwnedFd.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: fd is a new descriptor nothing else owns.
    let sock = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) };
    let mut req = IfreqFlags {
        name: [0; IFNAMSIZ],
        flags: 0,
        _pad: [0; 22],
    };
    for (dst, src) in req.name.iter_mut().zip(b"lo") {
        *dst = *src as libc::c_char;
    }
    use std::os::fd::AsRawFd;
    // SAFETY: both ioctls read and write a `struct ifreq`, which `req` is laid out as (40
    // bytes), and it lives across the calls.
    unsafe {
        if libc::ioctl(sock.as_raw_fd(), libc::SIOCGIFFLAGS, &mut req) < 0 {
            return Err(std::io::Error::last_os_error());
        }
        req.flags |= libc::IFF_UP as libc::c_short;
        if libc::ioctl(sock.as_raw_fd(), libc::SIOCSIFFLAGS, &req) < 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// An interface's address, as a CNI result gives it (`10.244.1.7/24`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InterfaceAddress {
    pub interface: String,
    pub address: std::net::IpAddr,
    pub prefix: u8,
}

/// Puts `addresses` back on their interfaces in the namespace at `path` (one already there is
/// fine). A runtime with a network stack of its own (gVisor's runsc) takes the pod
/// interface's addresses off it when its sandbox starts, and the CNI bridge plugin's DEL
/// removes the masquerade rules of the addresses it finds on the interface: without them
/// back, those rules outlive the pod.
pub fn give_back_addresses(path: &Path, addresses: Vec<InterfaceAddress>) -> Result<()> {
    in_netns(path, move || {
        for a in &addresses {
            set_address(a).map_err(|e| {
                std::io::Error::new(
                    e.kind(),
                    format!("{}/{} on {}: {e}", a.address, a.prefix, a.interface),
                )
            })?;
        }
        Ok(())
    })
}

/// `ip address add` by the old ioctls: SIOCSIFADDR (and SIOCSIFNETMASK) with a `struct
/// ifreq` for IPv4, with a `struct in6_ifreq` for IPv6.
fn set_address(a: &InterfaceAddress) -> std::io::Result<()> {
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    const IFNAMSIZ: usize = 16;
    let name = std::ffi::CString::new(a.interface.as_str()).map_err(std::io::Error::other)?;
    if name.as_bytes().len() >= IFNAMSIZ {
        return Err(std::io::Error::other("interface name too long"));
    }
    let family = match a.address {
        std::net::IpAddr::V4(_) => libc::AF_INET,
        std::net::IpAddr::V6(_) => libc::AF_INET6,
    };
    // SAFETY: a socket of our own, closed by OwnedFd.
    let fd = unsafe { libc::socket(family, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: fd is a new descriptor nothing else owns.
    let sock = unsafe { OwnedFd::from_raw_fd(fd) };
    let done = |rc: libc::c_int| match rc {
        0 => Ok(()),
        _ => match std::io::Error::last_os_error() {
            e if e.raw_os_error() == Some(libc::EEXIST) => Ok(()),
            e => Err(e),
        },
    };
    match a.address {
        std::net::IpAddr::V4(ip) => {
            /// `struct ifreq` with a `struct sockaddr_in` member.
            #[repr(C)]
            struct IfreqAddr {
                name: [libc::c_char; IFNAMSIZ],
                addr: libc::sockaddr_in,
                _pad: [u8; 8],
            }
            let sockaddr = |v4: std::net::Ipv4Addr| libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: 0,
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(v4.octets()),
                },
                sin_zero: [0; 8],
            };
            let mut req = IfreqAddr {
                name: [0; IFNAMSIZ],
                addr: sockaddr(ip),
                _pad: [0; 8],
            };
            for (dst, src) in req.name.iter_mut().zip(name.as_bytes()) {
                *dst = *src as libc::c_char;
            }
            let mask = u32::MAX
                .checked_shl(32 - u32::from(a.prefix.min(32)))
                .unwrap_or(0);
            // SAFETY: both ioctls read a `struct ifreq` (40 bytes), which `req` is laid out
            // as, alive across the calls.
            unsafe {
                done(libc::ioctl(sock.as_raw_fd(), libc::SIOCSIFADDR, &req))?;
                req.addr = sockaddr(std::net::Ipv4Addr::from(mask));
                done(libc::ioctl(sock.as_raw_fd(), libc::SIOCSIFNETMASK, &req))
            }
        }
        std::net::IpAddr::V6(ip) => {
            /// `struct in6_ifreq`.
            #[repr(C)]
            struct In6Ifreq {
                addr: libc::in6_addr,
                prefixlen: u32,
                ifindex: libc::c_int,
            }
            // SAFETY: a NUL-terminated name.
            let ifindex = unsafe { libc::if_nametoindex(name.as_ptr()) };
            if ifindex == 0 {
                return Err(std::io::Error::last_os_error());
            }
            let req = In6Ifreq {
                addr: libc::in6_addr {
                    s6_addr: ip.octets(),
                },
                prefixlen: u32::from(a.prefix),
                ifindex: ifindex as libc::c_int,
            };
            // SAFETY: SIOCSIFADDR on an AF_INET6 socket reads a `struct in6_ifreq`, which
            // `req` is laid out as.
            unsafe { done(libc::ioctl(sock.as_raw_fd(), libc::SIOCSIFADDR, &req)) }
        }
    }
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
    crate::blocking::off_runtime(|| in_netns(path, f))
}

/// [`run_in`] on the calling thread, which waits.
fn in_netns<T: Send + 'static>(
    path: &Path,
    f: impl FnOnce() -> std::io::Result<T> + Send + 'static,
) -> Result<T> {
    let file = std::fs::File::open(path).map_err(|e| Error::path("open netns", path, e))?;
    std::thread::spawn(move || -> std::io::Result<T> {
        nix::sched::setns(&file, CloneFlags::CLONE_NEWNET).map_err(std::io::Error::from)?;
        f()
    })
    .join()
    .map_err(|_| Error::internal("the netns thread panicked"))?
    .map_err(|e| Error::io("in the pod network namespace", e))
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
