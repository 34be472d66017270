//! Host helpers shared by peapod's crates: the few filesystem, mount and cgroup operations that
//! the daemon, the shim and the image store each need, written once.
//!
//! - [`apparmor`]: whether the kernel enforces AppArmor, its loaded profiles, peapod's default
//!   profile and loading it with `apparmor_parser`;
//! - [`dbus`], [`systemd`]: just enough D-Bus for systemd's private socket, and the slices
//!   and scopes of the systemd cgroup driver (their cgroup paths; transient units started,
//!   changed, stopped);
//! - [`fs`]: atomic file replacement (temp file in the same directory, fsync, rename, fsync of
//!   the directory) and removal where "already gone" is success;
//! - [`mount`]: unmount where "not mounted" or "missing" is success, and the new mount API
//!   (a filesystem configured and mounted detached: [`mount::FsContext`]);
//! - [`heap`]: one malloc arena for the whole process (the daemon's and the shims' memory);
//! - [`held`]: start-up waiting, bounded, for a lock or port a dying predecessor still holds;
//! - [`cgroup`]: a process's cgroups from `/proc/<pid>/cgroup`, the host's cgroup layout (v1,
//!   hybrid, v2), where a controller's directory is under the cgroup mount, and the removal
//!   of a cgroup with what still runs in it (making, limiting and joining a container's
//!   cgroups is `peapod-runtime`'s);
//! - [`capability`]: capability names in kernel bit order, for the spec builder and the
//!   native paths alike;
//! - [`rootfs`]: reading a file of a container's root filesystem (an image's `/etc/passwd`)
//!   without leaving it and without opening FIFOs or devices;
//! - [`userns`]: a pod's user namespace (and its network namespace owned by it) pinned on
//!   files, idmapped mounts of root filesystems, and the probe that says whether this host can;
//! - [`libm_pow`]: `pow`, the one function of libm the programs call, so that they do not load
//!   libm;
//! - [`sync`]: a mutex's guard whatever a panicking holder left ([`sync::LockUnpoisoned`]);
//! - [`timefmt`]: the workspace's clock: nanoseconds since the epoch and RFC 3339 timestamps
//!   with nanoseconds (CRI log lines, records, events), for the daemon and the shim alike.
//!
//! Parsing `/etc/passwd` and `/etc/group` is not here: it is pure text work and lives with the
//! user resolution that uses it, in `peapod-spec` (`peapod_spec::user`). This crate only reads
//! the files.
//!
//! Functions return `std::io::Error` (the clock, plain values) and leave the context (which record, which container) to
//! the caller, who knows it.

pub mod apparmor;
pub mod capability;
pub mod cgroup;
pub mod dbus;
pub mod duration;
pub mod fs;
pub mod heap;
pub mod held;
pub mod libm_pow;
pub mod mount;
pub mod rootfs;
pub mod sync;
pub mod systemd;
pub mod timefmt;
pub mod userns;
