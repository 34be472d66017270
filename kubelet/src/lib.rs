//! peapod's own kubelet: the kubelet's pod logic as a CRI client, behind `peapod apply`
//! (issue 9, daemon half).
//!
//! It runs inside `peapod serve`, drives the daemon's own RuntimeService/ImageService over
//! the CRI socket (through [`cri::CriApi`], so it would drive any CRI runtime the same way),
//! and is served as `peapod.pods.v1.Pods` on that socket ([`service`]).
//!
//! Modules, one job each: [`manifest`] (YAML/JSON, strict), [`defaults`], [`validate`],
//! [`quantity`], [`resources`] (QoS, cgroup values, oom_score_adj, pod requests),
//! [`admission`], [`cgroup`] (the pod cgroup: cgroupfs v1 and v2, or systemd slices), [`volumes`], [`mod@env`],
//! [`cri_config`] (sandbox and container configs), [`probe`] and [`grpc_health`],
//! [`record`] (per-pod state and events), [`status`] (phase, conditions, container states),
//! [`store`] (atomic persistence), [`termination`] (termination messages), [`supervisor`]
//! (one task per pod), [`manager`] (apply, get, list, delete, events, re-adoption).
//!
//! ## The Pod JSON, where Kubernetes leaves a choice
//!
//! - `metadata.uid` is a random UUID made at creation; `creationTimestamp` and
//!   `status.startTime` are the admission time. `metadata.deletionTimestamp` and
//!   `deletionGracePeriodSeconds` appear while a graceful delete runs.
//! - `spec` is the manifest as applied with the API server's defaults (restartPolicy Always,
//!   terminationGracePeriodSeconds 30, dnsPolicy ClusterFirst, imagePullPolicy Always for
//!   `:latest`/untagged images else IfNotPresent, probe timeouts/periods/thresholds, requests
//!   copied from limits) and `spec.nodeName` set to this node (`[pods] node_name`).
//! - `status.hostIP` is the first IPv4 address of an interface that is up and not loopback
//!   (127.0.0.1 when there is none). `podIP` is the sandbox's CNI address.
//! - Container ids are `peapod://<CRI container id>`; `imageID` is the runtime's image
//!   reference (`repo@sha256:...`). The previous attempt of each container is kept (not
//!   removed) until the next restart, and `lastState.terminated.containerID` names it.
//! - Terminated reasons: `Completed` (exit 0), `Error`, or the runtime's `OOMKilled`.
//!   Waiting reasons: `ContainerCreating`, `PodInitializing`, `CrashLoopBackOff` (message
//!   `back-off 10s restarting failed container=NAME pod=NAME_NS(UID)`), `ErrImagePull`,
//!   `ImagePullBackOff`, `ErrImageNeverPull`, `CreateContainerError`, `RunContainerError`.
//! - A pod refused by admission is `phase: Failed` with `reason` `OutOfcpu`, `OutOfmemory`
//!   or `NodeAffinity` and the kubelet's message; nothing of it is created, and it stays
//!   listed (as in a cluster) until deleted.
//! - Events are core/v1 Events with `source.component: kubelet`, `reportingComponent:
//!   kubelet` and `involvedObject.fieldPath` `spec.containers{NAME}` or
//!   `spec.initContainers{NAME}`; repeats of the latest identical event bump `count` and
//!   `lastTimestamp`. At most 500 are kept per pod.
//! - Container logs are `<root>/pods/<uid>/logs/<container>/<attempt>.log` (CRI format).
//!
//! ## Kubelet rules implemented
//!
//! - Admission: effective requests (app containers summed, restartable init containers added,
//!   each other init container with the sidecars before it as a floor, plus overhead) against
//!   allocatable less admitted pods (`OutOfcpu`/`OutOfmemory`); nodeSelector and required
//!   node affinity (In, NotIn, Exists, DoesNotExist, Gt, Lt; matchFields) (`NodeAffinity`).
//! - QoS class from every container (init ones included); the pod cgroup
//!   `kubepods[/burstable|/besteffort]/pod<uid>` with ResourceConfigForPod's values; container
//!   cpu shares/quota/period and memory limit (calculateLinuxResources); oom_score_adj by QoS,
//!   raised to the daemon's own without CAP_SYS_RESOURCE; `kubepods` holds the node's
//!   allocatable (cpu shares, memory limit); the Burstable QoS cgroup the sum of its pods'
//!   cpu requests, the BestEffort one the minimum shares.
//! - Init containers one at a time, each to exit 0; restartable init containers (sidecars)
//!   started in order and waited for (startup probe), kept running, stopped after the app
//!   containers; app containers together.
//! - restartPolicy Always/OnFailure/Never for app and init containers; back-off 10 s doubling
//!   to 5 min (configurable base), reset after 10 min running; CrashLoopBackOff; a liveness or
//!   startup failure restarts unless Never. Failed CreateContainer/StartContainer and
//!   RunPodSandbox back off too.
//! - Probes: startup (gating liveness, readiness and `started`), liveness, readiness; exec
//!   (ExecSync), httpGet (200–399), tcpSocket, grpc (grpc.health.v1); initialDelaySeconds,
//!   periodSeconds, timeoutSeconds, successThreshold, failureThreshold; a probe's
//!   terminationGracePeriodSeconds.
//! - imagePullPolicy Always/IfNotPresent/Never, ErrImagePull, ImagePullBackOff,
//!   ErrImageNeverPull.
//! - postStart (a failure kills the container) and preStop hooks (exec, httpGet, sleep);
//!   graceful deletion with the grace period (minimum 2 s per container).
//! - getPhase and the conditions PodScheduled, PodReadyToStartContainers, Initialized,
//!   ContainersReady, Ready; activeDeadlineSeconds (Failed, DeadlineExceeded).
//! - A sandbox that dies is re-created and the pod runs again in it (init containers too);
//!   volumes: emptyDir (Memory: tmpfs with sizeLimit), hostPath with type checks; termination
//!   messages (terminationMessagePath, FallbackToLogsOnError); env value
//!   with `$(VAR)` expansion and fieldRef; hostPort port mappings; namespaces options.
//!
//! ## Kubelet rules left out
//!
//! Ephemeral containers, in-place resize, readiness gates, HTTPS probes,
//! configMap/secret/projected/PVC volumes and envFrom (refused: there is no API server), hugepages and
//! ephemeral-storage accounting, system-reserved/kube-reserved, and garbage collection of exited
//! containers beyond the one previous attempt kept per container.

pub mod admission;
pub mod cgroup;
pub mod cri;
pub mod cri_config;
pub mod defaults;
pub mod env;
pub mod grpc_health;
pub mod manager;
pub mod manifest;
pub mod probe;
pub mod quantity;
pub mod record;
pub mod resources;
pub mod service;
pub mod settings;
pub mod status;
pub mod store;
pub mod supervisor;
pub mod termination;
pub mod validate;
pub mod volumes;

#[cfg(test)]
mod fake_cri;
#[cfg(test)]
mod tests;
