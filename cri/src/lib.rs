//! peapod, the daemon: a Kubernetes CRI v1 runtime.
//!
//! A CRI call goes `server/` (decode, check required fields, run in a span, map the error to a
//! status) -> one service of the [`daemon::Daemon`] -> the side effects behind narrow traits.
//! Any call's code is found from its name: `server/<group>.rs` for the gRPC side, then
//! `sandbox/<call>.rs`, `container/<call>.rs` or `exec/<call>.rs` for the work.
//!
//! Modules, one line each:
//! - `server/`: the CRI gRPC services (one file per group of calls) and `serve`;
//! - `daemon`: builds the services from the config and holds them;
//! - `detached`: lifecycle work that finishes even when its caller's future is dropped;
//! - `recovery`: recovery at start (its header states the invariants);
//! - `sandbox/`: pod sandboxes — `SandboxService`, one file per call (run, stop, remove,
//!   status, list), the pause's spec and image, watching pause exits;
//! - `container/`: app containers — `ContainerService`, one file per call (create, start,
//!   stop, remove, status, list, update_resources, reopen_log), exits, the kept process specs;
//! - `exec/`: ExecSync and the streaming server's exec, attach and port-forward sessions;
//! - `stats/`: container and pod stats from cgroups, `/proc` and the image store;
//! - `events`: the GetContainerEvents publisher;
//! - `failpoint`: named crash points of the lifecycle (test builds only);
//! - `store/`: persisted records of sandboxes and containers, their shared tables, name
//!   reservation, and their CRI messages (`to_cri`);
//! - `shim`: the per-pod shim as the daemon uses it (`Shim`, `Shims`) and its ttrpc client;
//! - `nri/`: NRI plugins told of pod and container events, their adjustments applied;
//! - `network/`: the pod network (`PodNetwork`: CNI ADD/DEL), netns pinning, resolv.conf/hosts;
//! - `host_ops`: host operations that need root (`HostOps`: netns pin/unpin, /dev/shm mounts);
//! - `images`: the image store as the lifecycle uses it (`Images`: resolve, rootfs);
//! - `runtime_spec`: runtime-spec pieces for the pause, and the one config.json writer;
//! - `pause`: the built-in pause binary and its root filesystem;
//! - `cgroups`: a pod's or container's `cgroupsPath` per cgroup driver;
//! - `oom_score`: the oom_score_adj floor without CAP_SYS_RESOURCE;
//! - `paths`: where things go under the root and state directories;
//! - `ids`: object ids and their unique prefixes;
//! - `error`: the one error type (a gRPC code, a message, the cause);
//! - `config`: the TOML configuration; `client`: a CRI client over a unix socket; `cli/`:
//!   the `peapod` command's client verbs;
//! - `testing` (tests only): fakes of every side-effect trait and a harness over them.

pub mod cgroups;
pub mod client;
pub mod config;
pub mod container;
pub mod daemon;
pub mod detached;
pub mod error;
pub mod events;
pub mod exec;
pub mod failpoint;
pub mod host_ops;
pub mod ids;
pub mod images;
pub mod network;
pub mod nri;
pub mod oom_score;
pub mod paths;
pub mod pause;
pub mod recovery;
pub mod runtime_spec;
pub mod sandbox;
pub mod server;
pub mod shim;
pub mod stats;
pub mod store;
#[cfg(test)]
pub mod testing;

pub use error::{Error, Result};
