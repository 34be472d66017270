//! Host helpers shared by peapod's crates: the few filesystem, mount and cgroup operations that
//! the daemon, the shim and the image store each need, written once.
//!
//! - [`fs`]: atomic file replacement (temp file in the same directory, fsync, rename, fsync of
//!   the directory) and removal where "already gone" is success;
//! - [`mount`]: unmount where "not mounted" or "missing" is success;
//! - [`cgroup`]: a process's cgroups from `/proc/<pid>/cgroup`, the host's cgroup layout (v1,
//!   hybrid, v2) and where a controller's directory is under the cgroup mount;
//! - [`rootfs`]: reading a file of a container's root filesystem (an image's `/etc/passwd`)
//!   without leaving it and without opening FIFOs or devices;
//! - [`userns`]: a pod's user namespace (and its network namespace owned by it) pinned on
//!   files, idmapped mounts of root filesystems, and the probe that says whether this host can.
//!
//! Parsing `/etc/passwd` and `/etc/group` is not here: it is pure text work and lives with the
//! user resolution that uses it, in `peapod-spec` (`peapod_spec::user`). This crate only reads
//! the files.
//!
//! Functions return `std::io::Error` and leave the context (which record, which container) to
//! the caller, who knows it.
//!
//! Copies in the daemon that should call this crate (to be switched by the daemon's owners):
//! - `cri/src/store/mod.rs` `write_record` should call [`fs::write_file_atomic`] (it calls the
//!   shim's re-export today);
//! - `cri/src/sandbox/teardown.rs` `unmount` and `cri/src/network/netns.rs` `remove` should call
//!   [`mount::detach`], and their "remove, NotFound is fine" [`fs::remove_dir_all_if_exists`] /
//!   [`fs::remove_file_if_exists`]; so should `cri/src/container/lifecycle.rs` (container dirs);
//! - `cri/src/stats/cgroup.rs` `parse_proc_cgroup`/`v1_dir` and `cri/src/cgroups.rs`
//!   `is_unified` should use [`cgroup::ProcCgroups`], [`cgroup::Layout`] and
//!   [`cgroup::v1_dir`];
//! - `cri/src/container/rootfs_files.rs` `read_in_root` should be replaced by
//!   [`rootfs::read_file_in_root`] (which also refuses FIFOs and devices).

pub mod cgroup;
pub mod fs;
pub mod mount;
pub mod rootfs;
pub mod userns;
