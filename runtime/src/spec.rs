//! The one reader of the OCI runtime spec in this crate: a bundle's `config.json`, an exec's
//! process (`process.json`: the container's own process with other arguments) and the
//! resources of an update, as the runtime-spec names their fields. The shim's choice of a
//! backend and the three helpers read the same types, so what is checked is what is done.
//!
//! Fields this module does not name are not read. Anything that changes what a container or a
//! process becomes and that the native paths do not do is named here all the same, so that it
//! can be refused (`pause::unsupported`, `create::unsupported`, `resident::unsupported`) and
//! the container or exec left to the OCI runtime CLI.
//!
//! Why not `oci-spec`'s types, which `peapod-spec` writes the spec with: the shim is one
//! statically linked process per pod and reads specs in the shim itself, and `oci-spec`'s
//! deserializers (the whole spec, and the `regex` crate its Process validates
//! `execCPUAffinity` with) grew the release shim from 4.66 to 6.29 MB (text 3.51 to 4.79 MB).
//! A test reads a spec `oci-spec` writes (`tests`), so that the two keep agreeing.

use serde::Deserialize;
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

/// A container's `config.json`, as far as the native paths read it.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Spec {
    pub root: Option<Root>,
    pub hostname: Option<String>,
    pub domainname: Option<String>,
    pub process: Option<Process>,
    #[serde(default)]
    pub mounts: Vec<Mount>,
    pub hooks: Option<Hooks>,
    #[serde(default)]
    pub linux: Linux,
    /// Their names only: the systemd driver refuses `org.systemd.property.*` (runc makes
    /// them unit properties).
    #[serde(default)]
    pub annotations: BTreeMap<String, serde::de::IgnoredAny>,
}

#[derive(Debug, Default, Deserialize)]
pub struct Root {
    pub path: PathBuf,
    #[serde(default)]
    pub readonly: bool,
}

/// Any hooks at all keep a container from a native create; a poststop hook keeps a container
/// runc created from the shim's own delete (runc runs those at its delete).
#[derive(Debug, Default, Deserialize)]
pub struct Hooks {
    #[serde(default)]
    pub poststop: Vec<Value>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Process {
    #[serde(default)]
    pub terminal: bool,
    #[serde(default)]
    pub user: User,
    #[serde(default)]
    pub args: Vec<String>,
    #[serde(default)]
    pub env: Vec<String>,
    #[serde(default)]
    pub cwd: String,
    pub capabilities: Option<Capabilities>,
    #[serde(default)]
    pub rlimits: Vec<Rlimit>,
    #[serde(default)]
    pub no_new_privileges: bool,
    #[serde(default)]
    pub apparmor_profile: String,
    pub oom_score_adj: Option<i32>,
    #[serde(default)]
    pub selinux_label: String,
    /// Set by a newer spec: an exec's own scheduler or I/O priority, CPU affinity.
    pub scheduler: Option<Value>,
    pub io_priority: Option<Value>,
    #[serde(rename = "execCPUAffinity")]
    pub exec_cpu_affinity: Option<Value>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct User {
    #[serde(default)]
    pub uid: u32,
    #[serde(default)]
    pub gid: u32,
    #[serde(default)]
    pub additional_gids: Vec<u32>,
    /// Only a native create reads it: it refuses a process that sets one.
    pub umask: Option<u32>,
}

#[derive(Debug, Default, Deserialize)]
pub struct Capabilities {
    #[serde(default)]
    pub bounding: Vec<String>,
    #[serde(default)]
    pub effective: Vec<String>,
    #[serde(default)]
    pub inheritable: Vec<String>,
    #[serde(default)]
    pub permitted: Vec<String>,
    #[serde(default)]
    pub ambient: Vec<String>,
}

#[derive(Debug, Deserialize)]
pub struct Rlimit {
    #[serde(rename = "type")]
    pub kind: String,
    pub hard: u64,
    pub soft: u64,
}

/// One mount of the spec.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Mount {
    pub destination: String,
    #[serde(default, rename = "type")]
    pub kind: String,
    #[serde(default)]
    pub source: String,
    #[serde(default)]
    pub options: Vec<String>,
    pub uid_mappings: Option<Value>,
    pub gid_mappings: Option<Value>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Linux {
    #[serde(default)]
    pub namespaces: Vec<Namespace>,
    #[serde(default)]
    pub sysctl: HashMap<String, String>,
    #[serde(default)]
    pub cgroups_path: String,
    pub resources: Option<Resources>,
    #[serde(default)]
    pub devices: Vec<Device>,
    #[serde(default)]
    pub masked_paths: Vec<String>,
    #[serde(default)]
    pub readonly_paths: Vec<String>,
    #[serde(default)]
    pub rootfs_propagation: String,
    #[serde(default)]
    pub mount_label: String,
    pub seccomp: Option<Seccomp>,
    pub uid_mappings: Option<Value>,
    pub gid_mappings: Option<Value>,
    /// A container whose processes run with a personality: left to the runtime.
    pub personality: Option<Value>,
    pub intel_rdt: Option<Value>,
    pub time_offsets: Option<Value>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct Namespace {
    #[serde(rename = "type")]
    pub kind: String,
    pub path: Option<PathBuf>,
}

/// The spec's `linux.devices[]` entry: a node made in the container's `/dev`.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Device {
    pub path: String,
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default)]
    pub major: i64,
    #[serde(default)]
    pub minor: i64,
    pub file_mode: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
}

/// `linux.resources`, at create, and the whole of an update's file. Numbers the runtime-spec
/// gives as unsigned are read signed, as runc's cgroupfs manager compares them (`-1`: no
/// limit; zero: not set).
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Resources {
    pub memory: Option<Memory>,
    pub cpu: Option<Cpu>,
    pub pids: Option<Pids>,
    #[serde(default)]
    pub hugepage_limits: Vec<HugepageLimit>,
    #[serde(rename = "blockIO")]
    pub block_io: Option<BlockIo>,
    #[serde(default)]
    pub devices: Vec<DeviceRule>,
    /// Every other key, as given (`unified`, `network`, `rdma`, and any this reader does not
    /// know), so that what is not written is refused, not dropped.
    #[serde(flatten)]
    pub others: BTreeMap<String, Value>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Memory {
    pub limit: Option<i64>,
    pub reservation: Option<i64>,
    pub swap: Option<i64>,
    pub swappiness: Option<i64>,
    #[serde(rename = "disableOOMKiller")]
    pub disable_oom_killer: Option<bool>,
    /// Refused: runc reads the usage before it lowers a limit.
    pub check_before_update: Option<Value>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Cpu {
    pub shares: Option<i64>,
    pub quota: Option<i64>,
    pub period: Option<i64>,
    pub realtime_runtime: Option<i64>,
    pub realtime_period: Option<i64>,
    pub cpus: Option<String>,
    pub mems: Option<String>,
    /// Refused: `cpu.idle` is cgroup v2's.
    pub idle: Option<Value>,
}

#[derive(Debug, Default, Deserialize)]
pub struct Pids {
    pub limit: Option<i64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HugepageLimit {
    #[serde(default)]
    pub page_size: String,
    #[serde(default)]
    pub limit: u64,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BlockIo {
    pub weight: Option<i64>,
    pub leaf_weight: Option<i64>,
    #[serde(default)]
    pub weight_device: Vec<WeightDevice>,
    #[serde(default)]
    pub throttle_read_bps_device: Vec<ThrottleDevice>,
    #[serde(default)]
    pub throttle_write_bps_device: Vec<ThrottleDevice>,
    #[serde(default, rename = "throttleReadIOPSDevice")]
    pub throttle_read_iops_device: Vec<ThrottleDevice>,
    #[serde(default, rename = "throttleWriteIOPSDevice")]
    pub throttle_write_iops_device: Vec<ThrottleDevice>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WeightDevice {
    #[serde(default)]
    pub major: i64,
    #[serde(default)]
    pub minor: i64,
    pub weight: Option<i64>,
    pub leaf_weight: Option<i64>,
}

#[derive(Debug, Default, Deserialize)]
pub struct ThrottleDevice {
    #[serde(default)]
    pub major: i64,
    #[serde(default)]
    pub minor: i64,
    #[serde(default)]
    pub rate: u64,
}

/// One rule of `linux.resources.devices`: the cgroup's device access, not a node.
#[derive(Debug, Default, Clone, Deserialize)]
pub struct DeviceRule {
    #[serde(default)]
    pub allow: bool,
    #[serde(rename = "type")]
    pub kind: Option<String>,
    pub major: Option<i64>,
    pub minor: Option<i64>,
    pub access: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Seccomp {
    #[serde(default)]
    pub default_action: String,
    pub default_errno_ret: Option<u32>,
    #[serde(default)]
    pub architectures: Vec<String>,
    #[serde(default)]
    pub flags: Vec<String>,
    #[serde(default)]
    pub listener_path: String,
    #[serde(default)]
    pub syscalls: Vec<Syscall>,
}

impl Seccomp {
    /// Whether the profile hands syscalls to a listener (`SCMP_ACT_NOTIFY`): runc's seccomp
    /// agent protocol, which the native paths do not speak.
    pub fn notifies(&self) -> bool {
        !self.listener_path.is_empty()
            || self.default_action == "SCMP_ACT_NOTIFY"
            || self.syscalls.iter().any(|c| c.action == "SCMP_ACT_NOTIFY")
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Syscall {
    #[serde(default)]
    pub names: Vec<String>,
    pub action: String,
    pub errno_ret: Option<u32>,
    #[serde(default)]
    pub args: Vec<SyscallArg>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SyscallArg {
    pub index: u32,
    pub value: u64,
    #[serde(default)]
    pub value_two: u64,
    pub op: String,
}

/// Reads a JSON document of the spec (`config.json`, a process, resources).
pub fn read<T: for<'de> Deserialize<'de>>(path: &Path) -> Result<T, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("read {}: {e}", path.display()))?;
    serde_json::from_slice(&bytes).map_err(|e| format!("parse {}: {e}", path.display()))
}

/// The bundle's `config.json`.
pub fn of_bundle(bundle: &Path) -> Result<Spec, String> {
    read(&bundle.join("config.json"))
}

#[cfg(test)]
#[path = "spec_tests.rs"]
mod tests;
