//! peapod's own OCI runtime: what the shim does instead of the runtime CLI where a spec lets
//! it (its native paths), like youki's libcontainer: a pod's pause started, app containers
//! created, execs joined to a running container; namespaces, mounts and `pivot_root`,
//! devices, seccomp, capabilities, cgroups. It runs in helper processes the shim starts
//! (`peapod-shim nsexec ...`, the shim's own program), never in the shim itself, which reads
//! the same spec here to choose ([`pause::unsupported`], [`create::unsupported`],
//! [`resident::unsupported`]) and drives what the helpers made by pidfd and cgroup (the
//! shim's `backend/`).
//!
//! Layers, each using only those below it (`tools/layers` fails CI on an import circle):
//!
//! 1. `helper` — the helpers' command line, built by the shim and parsed by the helper, run
//!    from `program` (the shim's executable through a view no container can write);
//! 2. the helpers — `pause` (`runc run` of a pod's pause), `create` (`runc create` of an app
//!    container, which waits for its start), `resident` (`runc exec`, one helper per
//!    container that forks every exec); `started` (how the first two tell the shim what they
//!    started: the pid file, or why);
//! 3. `process` — a process made in the container: prepared from the spec's process, cloned
//!    as the shim's child, becoming it (user, capabilities, rlimits, seccomp) and exec'd;
//! 4. the pieces a process is made of — `rootfs` (the root's mounts, devices, `pivot_root`,
//!    masked and read-only paths), `namespaces` (joined by path, made, or an init's joined),
//!    `caps`, `seccomp` (a profile compiled by libseccomp, linked in statically), `host`
//!    (what this host lets the native paths do: its LSMs and its cgroups, read once);
//! 5. `cgroups/` — `Cgroups`, one type chosen per host and cgroup driver: cgroup v1 (`v1`),
//!    the unified hierarchy (`v2`, the device rules as a BPF program: `device_filter`) and
//!    the systemd driver's scopes (`systemd`, over D-Bus), each written as runc 1.1's
//!    managers write them; `devices` (the rules as runc's emulator folds them) and
//!    `hierarchies` (what every layout does alike);
//! 6. shared below all: `program` (the shim's executable as helpers are run from it: a view
//!    no container can write), `spec` (the one reader of the OCI runtime spec: `config.json`, an
//!    exec's process, an update's resources), `pidfd` (a process held by a pidfd: no reused
//!    pid is ever signalled), `wire` (the shim's and a resident helper's messages).
//!
//! Errors are strings: each is what a helper writes to the shim (its stderr, or a `failed`
//! reply), worded as runc's where runc has words for it, so that the shim and the daemon
//! handle a helper's failure as they handle runc's.

pub mod caps;
pub mod cgroups;
pub mod create;
pub mod helper;
pub mod host;
pub mod namespaces;
pub mod pause;
pub mod pidfd;
pub mod process;
pub mod program;
pub mod resident;
pub mod rootfs;
pub mod seccomp;
pub mod spec;
pub mod started;
pub mod wire;

pub use host::{Host, Lsm};
