//! peapod, the daemon: a Kubernetes CRI v1 runtime, as a library (the `peapod` binary of
//! `cli/` runs it with `peapod serve`).
//!
//! Layers, each using only those below it (`tools/layers` fails CI on an import circle):
//!
//! 1. `serve` — running the daemon (`peapod serve`, and the test daemon `peapod-failpoints`):
//!    the process set-up, the daemon assembled and recovered, the socket bound, `/metrics`
//!    and the pod supervisor started, until a signal;
//! 2. `server/` — the CRI gRPC services: routing, required fields, spans, errors to statuses;
//! 3. `daemon` — the assembled daemon: the services and the pods over them, and the streaming
//!    server;
//! 4. `pod_lifecycle/` — the coordinators: what spans a pod and its containers (Run/Stop/
//!    RemovePodSandbox, the pods' watch and dead shims, recovery at start);
//! 5. services — `sandbox/` (`SandboxService`: a sandbox's own pieces, one file per call),
//!    `container/` (`ContainerService`, one file per call, exits, NRI's updates), `exec/`
//!    (ExecSync, Exec, Attach, PortForward, one file per RPC), `stats/` (stats and CRI
//!    metrics from cgroups, `/proc` and the image store);
//! 6. effects, each behind a narrow trait with a fake in `testing/` — `shim/` (the per-pod
//!    shim: `Shim`, `Shims`, their ttrpc client), `network/` (`PodNetwork`: CNI ADD/DEL;
//!    resolv.conf/hosts), `host_ops/` (`HostOps`: netns pinning, /dev/shm, a pod user
//!    namespace's ownership and idmapped binds), `nri/` (`Nri`: the NRI plugins), `images`
//!    (`Images`: the image store as the lifecycle uses it), `stats::ProcessStats`,
//!    `checkpoint/` (checkpoint archives: their layout, writing and safe unpacking, the root
//!    filesystem's changes, and `CriuCheck`: whether CRIU works here); and what
//!    they keep: `store/` (persisted records of sandboxes and containers, their tables, name
//!    reservation, their CRI messages), `events` (the GetContainerEvents publisher), `cdi`
//!    (the CDI spec files of `[cdi] spec_dirs`, read for a create that asks for devices);
//! 7. shared below all: `error` (the one error type: a gRPC code, a message, the cause),
//!    `config` (the TOML configuration), `format` (the on-disk format's version, checked at
//!    start), `apparmor` (whether containers' AppArmor profiles
//!    apply, and the default profile loaded, decided at start), `runtime_handlers` (the runtime handlers pods
//!    choose by name, each an OCI runtime and its root), `paths`, `ids`, `cgroups` (a `cgroupsPath` per
//!    driver), `oom_score`, `runtime_spec` (runtime-spec pieces and the config.json writer),
//!    `pause` (the built-in pause and its root filesystem), `blocking` (blocking work off the
//!    async workers), `detached` (work that finishes when its caller goes away),
//!    `orphan_helpers` (CNI plugins and runtime creates a dead daemon left running, killed
//!    before recovery rolls back), `failpoint` (named crash points, armed only by the test
//!    daemon), `otel` (with `[tracing]` on, the spans exported by OTLP and each call's span
//!    made the child of its caller's W3C trace context).
//!
//! `testing` (tests only): fakes of every side-effect trait and a harness over them.
//!
//! Where each RPC's code is (`server/<file>` routes it; the work is in the files after it):
//!
//! | RPC | server/ | the work |
//! | --- | --- | --- |
//! | Version, Status, RuntimeConfig, UpdateRuntimeConfig | `runtime_info.rs` | there; `network/` (pod CIDR) |
//! | RunPodSandbox | `sandbox.rs` | `pod_lifecycle/run.rs`, `sandbox/run.rs` (+ `spec.rs`, `pause_image.rs`) |
//! | StopPodSandbox | `sandbox.rs` | `pod_lifecycle/stop.rs`: `container/stop.rs`, then `sandbox/stop.rs` |
//! | RemovePodSandbox | `sandbox.rs` | `pod_lifecycle/remove.rs`: `container/remove.rs`, then `sandbox/remove.rs` |
//! | PodSandboxStatus, ListPodSandbox | `sandbox.rs` | `sandbox/status.rs`, `sandbox/list.rs` |
//! | UpdatePodSandboxResources | `sandbox.rs` | `sandbox/update_resources.rs` |
//! | CreateContainer | `container.rs` | `container/create.rs` (+ `image_volumes.rs`, `idmapped_mounts.rs`; `cdi.rs`) |
//! | StartContainer, StopContainer, RemoveContainer | `container.rs` | `container/start.rs`, `stop.rs`, `remove.rs` |
//! | ContainerStatus, ListContainers | `container.rs` | `container/status.rs`, `container/list.rs` |
//! | UpdateContainerResources, ReopenContainerLog | `container.rs` | `container/update_resources.rs`, `reopen_log.rs` |
//! | ExecSync, Exec, Attach, PortForward | `exec.rs` | `exec/exec_sync.rs`, `exec.rs`, `attach.rs`, `port_forward.rs` |
//! | ContainerStats, ListContainerStats, PodSandboxStats, ListPodSandboxStats | `stats.rs` | `stats/mod.rs` (+ `cgroup.rs`) |
//! | ListMetricDescriptors, ListPodSandboxMetrics | `stats.rs` | `stats/cri_metrics.rs` (+ `cadvisor.rs`) |
//! | GetContainerEvents | `events.rs` | there; `events.rs` (the publisher) |
//! | CheckpointContainer | `container.rs` | `container/checkpoint.rs` (+ `checkpoint/`: the archive, the rootfs diff, `criu check`) |
//! | (restore) | `container.rs` | CreateContainer of an archive's path: `container/restore.rs`, then StartContainer |
//! | CheckpointPod, RestorePod | `unimplemented.rs` | UNIMPLEMENTED |
//! | ListImages, ImageStatus, PullImage, RemoveImage, ImageFsInfo | `image.rs` | there, over `peapod-image` |
//! | StreamPodSandboxes, StreamContainers, StreamImages | `sandbox.rs`, `container.rs`, `image.rs` | the List call's, then `list_stream.rs` (batches) |
//! | StreamContainerStats, StreamPodSandboxStats, StreamPodSandboxMetrics | `stats.rs` | the List call's, then `list_stream.rs` |
//!
//! A container's exit is followed in `container/exit.rs`; a pod's shim and pause in
//! `pod_lifecycle/watch.rs`; recovery's invariants are stated in `pod_lifecycle/recovery.rs`.

pub mod apparmor;
pub mod blocking;
pub mod cdi;
pub mod cgroups;
pub mod checkpoint;
pub mod config;
pub mod container;
pub mod daemon;
pub mod detached;
pub mod error;
pub mod events;
pub mod exec;
pub mod failpoint;
pub mod format;
pub mod host_ops;
pub mod ids;
pub mod images;
pub mod network;
pub mod nri;
pub mod oom_score;
pub mod orphan_helpers;
pub mod otel;
pub mod paths;
pub mod pause;
pub mod pod_lifecycle;
pub mod runtime_handlers;
pub mod runtime_spec;
pub mod sandbox;
pub mod serve;
pub mod server;
pub mod shim;
pub mod stats;
pub mod store;
#[cfg(test)]
pub mod testing;

pub use error::{Error, Result};
