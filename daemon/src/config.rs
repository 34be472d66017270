//! The daemon's configuration: one TOML file (default /etc/peapod/config.toml), every key
//! optional, command-line flags override it. `peapod config default` prints [`default_toml`]:
//! [`DEFAULT_TOML`] with this host's cgroup driver; `--portable` prints [`portable_toml`],
//! which leaves the driver to the host the file is read on (the Debian package's conffile).

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

pub const DEFAULT_CONFIG_PATH: &str = "/etc/peapod/config.toml";

/// The full default configuration, with a comment per key, for a host without systemd
/// ([`default_toml`] gives this host's). A unit test keeps it equal to `Config::default()`
/// there.
pub const DEFAULT_TOML: &str = r#"# peapod configuration. Every key is optional; command-line flags override this file.

# Persistent state: records of pods and containers, images, unpacked layers.
root = "/var/lib/peapod"
# Runtime files: sockets, pinned network namespaces, bundles. Lost on reboot, as are the pods.
state = "/run/peapod"
# The CRI socket (mode 0660). Point crictl and the kubelet at unix://<this>.
socket = "/run/peapod/peapod.sock"
# Log filter for the daemon (tracing EnvFilter syntax); RUST_LOG overrides it.
log_level = "info"
# At start-up, how long to wait for what another process still holds (the image store's lock,
# a fixed streaming or metrics port): a daemon killed a moment ago releases them as it dies.
startup_wait_seconds = 30
# The CRI's Stream* list calls (StreamPodSandboxes, StreamContainers, StreamContainerStats,
# StreamPodSandboxStats, StreamPodSandboxMetrics, StreamImages: the kubelet's CRIListStreaming)
# send at most this many items per message, and past the first about 2 MiB of them at most.
stream_batch_items = 200

[runtime]
# The OCI runtime CLI: "runc", "crun", "youki" or a full path.
path = "runc"
# The per-pod shim; empty means peapod-shim next to the peapod binary, else from PATH.
shim_path = ""
# How ExecSync and Exec start their process: "native" (the shim joins the container itself,
# a few milliseconds; the OCI runtime still does what the shim cannot: a terminal, an enforced
# AppArmor or SELinux label, a seccomp notify listener) or "runc" (always `<runtime> exec`).
exec = "native"
# How app containers are created: "native" (the shim makes the container itself, a few
# milliseconds, where the spec allows: runc as the runtime, `exec = "native"`, a cgroup v1 or
# hybrid host, no user namespace, hooks or terminal) or "runc" (always `<runtime> create`).
# CheckpointContainer needs "runc": `runc checkpoint` dumps only what runc created (CRIU is
# found on PATH and asked once, `criu check`, whether it works on this host).
create = "native"

# Further runtime handlers: a pod chooses one by name through RunPodSandbox's runtime_handler
# (a RuntimeClass's `handler`); Status lists them. The default handler (no name, or the file
# name of runtime.path) is runtime.path. Names are DNS labels. Each has:
#   path: its OCI runtime CLI (required). With runc, crun and youki the shim may make pauses
#     and containers itself (sandbox.native_pause, runtime.create); execs it may start itself
#     (runtime.exec) with any runtime that is not sandboxed.
#   sandboxed: whether the runtime makes its own sandbox per pod (gVisor's runsc, a VM
#     runtime; the pause is annotated io.kubernetes.cri.container-type = "sandbox", as
#     containerd and CRI-O do, and the pod's containers join it): nothing of its pods is
#     native, its containers' pid file names the sandbox, so their exits come from the
#     runtime's `wait`, and their stdio goes to `start`. Default: true where the file name
#     of path is "runsc", else false.
#   args: flags given to the runtime before every command, after the --root, --log and
#     --systemd-cgroup peapod gives it (containerd's per-runtime options); e.g. runsc's
#     platform and network. Each must be a flag ("--name" or "--name=value").
# e.g.
# [runtime.handlers.test-handler]
# path = "runc"
# [runtime.handlers.gvisor]
# path = "/usr/local/bin/runsc"
# args = ["--platform=systrap"]
[runtime.handlers]

[cgroup]
# "cgroupfs" (cgroupsPath <parent>/<id>) or "systemd" (slice:prefix:name: each container a
# scope unit in its pod's slice, made by systemd). The default is "systemd" where systemd is
# the init system (as CRI-O's; kubeadm configures the kubelet so), else "cgroupfs". The
# kubelet learns it from RuntimeConfig.
driver = "cgroupfs"
# Parent cgroup for pods whose config names none.
default_parent = "/peapod"

[apparmor]
# On a host whose kernel enforces AppArmor, containers that ask for RuntimeDefault (or for
# nothing, the kubelet's default) run confined by peapod's profile "peapod-default", which the
# daemon generates and loads with apparmor_parser at start (and refuses to start if it
# cannot); Localhost profiles must already be loaded. false: AppArmor is not used even where
# the kernel has it (containerd's disable_apparmor): RuntimeDefault means unconfined and a
# Localhost profile is refused.
enabled = true

[sandbox]
# The pod infra image. When the image store does not have it, peapod's built-in pause
# binary is used and registered under this name: no pull, so air-gapped machines work.
image = "registry.k8s.io/pause:3.10"
# Start each pod's pause without the OCI runtime: the shim's helper makes its namespaces and
# cgroup and execs the pause binary chrooted in its root, unprivileged (a few milliseconds,
# where `<runtime> run` takes tens). Pods it cannot start so (their own user namespace, the
# systemd cgroup driver, a runtime other than runc, crun or youki) use the runtime anyway;
# false: always the runtime.
native_pause = true

[cni]
# The first *.conflist, *.conf or *.json here (by name) is the pod network. When there is
# none, a built-in bridge network is used (bridge peapod0, 10.88.0.0/16, host-local, portmap).
conf_dir = "/etc/cni/net.d"
# Where plugin binaries are looked up, in order.
bin_dirs = ["/opt/cni/bin", "/usr/lib/cni"]
# Longest a single plugin invocation may take.
plugin_timeout_seconds = 30
# The built-in network (used only when conf_dir has no configuration).
default_bridge = "peapod0"
default_subnet = "10.88.0.0/16"

[registry]
# host[:port] spoken to over plain HTTP (localhost and loopback IPs, 127.0.0.0/8 and ::1,
# always are; a host name that merely starts with "127." is not).
insecure = []
# Registry host configuration as containerd's config_path: a directory with one directory per
# registry host ("<host>", or "<host>_<port>_" for host:port, or "_default" for every other
# host) holding a hosts.toml in containerd's format: server, [host."https://mirror"] tables
# tried first with capabilities = ["pull", "resolve"], ca, client = [["cert", "key"]] or
# client = "both.pem", skip_verify, header, override_path, dial_timeout; or, without one,
# Docker's certificate files (*.crt, *.cert with its *.key). Read at every pull, checked whole
# at start. A host with a directory here uses it instead of [registry.mirrors] (containerd 2.x
# deprecates those mirrors in favour of hosts.toml). Empty: not used.
config_path = "/etc/peapod/certs.d"
# Signed images: a policy.json as CRI-O reads it (containers-policy.json(5), transport
# "docker"), checked before a pull stores anything. Per registry, namespace, repository or
# reference: insecureAcceptAnything, reject, or sigstoreSigned with a public key (keyPath,
# keyPaths, keyData, keyDatas: ECDSA P-256, cosign's default) and a signedIdentity (cosign
# signs the repository: "matchRepository"). The signature is the one cosign puts in the
# registry (the sha256-<digest>.sig tag). Keyless (fulcio) and Rekor are refused as not yet
# supported. Read at every pull, checked at start. Empty: every image is accepted.
signature_policy = ""
# The longest a whole pull may take; 0: no overall bound.
pull_timeout_seconds = 1800
# The longest a registry may send nothing while a pull waits for it.
idle_timeout_seconds = 120

# Mirrors per registry host, tried in order before the registry itself (for hosts without a
# directory under config_path; a hosts.toml says the same with capabilities and TLS), e.g.
# [registry.mirrors."registry.k8s.io"]
# endpoints = ["http://127.0.0.1:5055"]
[registry.mirrors]

[streaming]
# Listen address of the exec/attach/port-forward server; port 0 picks a free port.
address = "127.0.0.1:0"
# TLS certificate and key (PEM); both empty: plain HTTP.
tls_cert = ""
tls_key = ""

[metrics]
# Prometheus metrics listen address; empty turns metrics off.
address = ""

# NRI (Node Resource Interface): external plugins (CPU/memory/device managers, policy
# agents) connect to this socket, are told of every pod and container event and may adjust a
# container before it is created. On by default, as in containerd 2.x and CRI-O, at the path
# plugins look for. When another runtime already serves that socket (a containerd 2.x on the
# same host), peapod runs without NRI and logs a warning: give it a socket_path of its own.
# Off: no socket, nothing paid per call.
[nri]
enabled = true
socket_path = "/var/run/nri/nri.sock"
# How long a connected plugin has to register and synchronise, and to answer any one event
# (a plugin that does not answer in time is disconnected; the call goes on without it).
plugin_registration_timeout_ms = 5000
plugin_request_timeout_ms = 2000

# Tracing: each CRI call a span (named as gRPC names it, runtime.v1.RuntimeService/RunPodSandbox)
# with its steps as child spans (CNI, the shim's calls, the pause and the container's runtime
# create and start, an image's manifest and layers), exported by OTLP/gRPC (plaintext) to a
# collector (the OpenTelemetry Collector, Jaeger, ...). A call whose gRPC metadata carries a W3C
# trace context (traceparent, tracestate: the kubelet sends it with its tracing configured) is
# a span of the caller's trace. Off by default: an empty endpoint means no exporter, no
# connection and no work per call.
[tracing]
# The collector's OTLP/gRPC address, "host:port" as the kubelet's tracing.endpoint (or
# "http://host:port"); e.g. "127.0.0.1:4317". Empty: tracing off.
endpoint = ""
# Of the calls that come with no trace context (or with one that does not say), how many in a
# million start a trace of their own, as the kubelet's samplingRatePerMillion; 0 to 1000000.
# A caller's sampling decision is always followed: with 0, peapod traces exactly the calls its
# caller traces.
sampling_rate_per_million = 0
# The service.name of peapod's spans.
service_name = "peapod"

# CDI (Container Device Interface): devices a container asks for by name, such as
# "vendor.com/gpu=0" (CreateContainer's cdi_devices, which the kubelet fills from device
# plugins and DRA drivers, and cdi.k8s.io/* annotations), as the vendors' CDI spec files
# (*.json, *.yaml) in spec_dirs describe them. The directories are read at each create that asks
# for a device; a device defined in two of them is the later one's. Disabled, a container that
# asks for a CDI device is refused.
[cdi]
enabled = true
spec_dirs = ["/etc/cdi", "/var/run/cdi"]

# The pod supervisor behind `peapod apply`: the kubelet's part, run inside the daemon.
[pods]
# This node's name (spec.nodeName, kubernetes.io/hostname); empty: the machine's hostname.
node_name = ""
# Allocatable CPU and memory as Kubernetes quantities ("2", "1500m", "4Gi"); empty: the
# machine's. Admission refuses pods whose requests do not fit (OutOfcpu/OutOfmemory).
allocatable_cpu = ""
allocatable_memory = ""
# Parent of the QoS cgroups kubepods[/burstable|/besteffort]/pod<uid> (absolute cgroup path).
cgroup_parent = "/kubepods"
# First restart back-off in seconds; it doubles up to 30 times this (10 s to 5 min).
restart_backoff_base_seconds = 10
# How often each pod is reconciled when nothing else wakes its supervisor.
sync_period_ms = 1000

# Node labels that nodeSelector is matched against. kubernetes.io/hostname, kubernetes.io/os
# and kubernetes.io/arch are always present.
[pods.node_labels]
"#;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    pub root: PathBuf,
    pub state: PathBuf,
    pub socket: PathBuf,
    pub log_level: String,
    pub startup_wait_seconds: u64,
    pub stream_batch_items: usize,
    pub runtime: RuntimeConfig,
    pub cgroup: CgroupConfig,
    pub apparmor: AppArmorConfig,
    pub sandbox: SandboxConfig,
    pub cni: CniConfig,
    pub registry: RegistryConfig,
    pub streaming: StreamingConfig,
    pub metrics: MetricsConfig,
    pub nri: NriConfig,
    pub cdi: CdiConfig,
    pub tracing: TracingConfig,
    pub pods: PodsConfig,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RuntimeConfig {
    pub path: String,
    pub shim_path: String,
    pub exec: ExecMode,
    pub create: CreateMode,
    pub handlers: BTreeMap<String, RuntimeHandlerConfig>,
}

/// How app containers are created (the shim's `--create`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CreateMode {
    /// The shim creates the container itself where it can (with runc, and `exec = "native"`).
    Native,
    /// Always the OCI runtime's `create`.
    Runc,
}

impl CreateMode {
    /// The shim's `--create` value.
    pub fn as_str(self) -> &'static str {
        match self {
            CreateMode::Native => "native",
            CreateMode::Runc => "runc",
        }
    }
}

/// How execs start (the shim's `--exec`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ExecMode {
    /// The shim joins the container and starts the process itself where it can.
    Native,
    /// Always the OCI runtime's `exec`.
    Runc,
}

impl ExecMode {
    /// The shim's `--exec` value.
    pub fn as_str(self) -> &'static str {
        match self {
            ExecMode::Native => "native",
            ExecMode::Runc => "runc",
        }
    }
}

/// `[runtime.handlers.NAME]`: a runtime handler pods may ask for by name.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RuntimeHandlerConfig {
    /// The OCI runtime CLI of this handler: "runc", "crun", "youki" or a full path.
    pub path: String,
    /// Flags for the runtime before every command (runsc's `--platform=systrap`).
    pub args: Vec<String>,
    /// Whether the runtime makes its own sandbox per pod; unset: its file name is "runsc".
    pub sandboxed: Option<bool>,
}

impl RuntimeHandlerConfig {
    /// `sandboxed`, or what the runtime's name says.
    pub fn is_sandboxed(&self) -> bool {
        self.sandboxed.unwrap_or_else(|| {
            std::path::Path::new(&self.path)
                .file_name()
                .is_some_and(|n| n == "runsc")
        })
    }
}

/// Flags peapod gives every runtime itself: a handler's `args` must not set them again (a
/// second `--root` would put its containers where peapod never looks).
const RUNTIME_FLAGS_OF_PEAPOD: [&str; 4] = ["--root", "--log", "--log-format", "--systemd-cgroup"];

/// Why a handler's runtime flag is refused, if it is: each is one flag, `--name` or
/// `--name=value` (a separate value would be taken for the command), and not one peapod sets.
fn handler_arg_refused(arg: &str) -> Option<String> {
    let name = arg.split('=').next().unwrap_or_default();
    if !arg.starts_with('-') || name.trim_start_matches('-').is_empty() {
        return Some("each is one flag, \"--name\" or \"--name=value\"".into());
    }
    if arg.contains(char::is_whitespace) && !arg.contains('=') {
        return Some("a flag and its value are one \"--name=value\"".into());
    }
    let long = format!("--{}", name.trim_start_matches('-'));
    RUNTIME_FLAGS_OF_PEAPOD
        .contains(&long.as_str())
        .then(|| format!("peapod gives {long} itself"))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CgroupDriver {
    Cgroupfs,
    Systemd,
}

impl CgroupDriver {
    /// As in the configuration (and the shim's `--cgroup-driver`).
    pub fn as_str(self) -> &'static str {
        match self {
            CgroupDriver::Cgroupfs => "cgroupfs",
            CgroupDriver::Systemd => "systemd",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CgroupConfig {
    pub driver: CgroupDriver,
    pub default_parent: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AppArmorConfig {
    /// Use AppArmor where the kernel enforces it (`crate::apparmor`).
    pub enabled: bool,
}

impl Default for AppArmorConfig {
    fn default() -> Self {
        AppArmorConfig { enabled: true }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SandboxConfig {
    pub image: String,
    /// The shim starts the pause itself where it can (`peapod-shim nsexec --pause`).
    pub native_pause: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CniConfig {
    pub conf_dir: PathBuf,
    pub bin_dirs: Vec<PathBuf>,
    pub plugin_timeout_seconds: u64,
    pub default_bridge: String,
    pub default_subnet: String,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Mirror {
    pub endpoints: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RegistryConfig {
    pub insecure: Vec<String>,
    /// containerd's `config_path`: `<host>/hosts.toml` per registry host; empty: none.
    pub config_path: PathBuf,
    /// containers-policy.json(5); empty: every image is accepted.
    pub signature_policy: PathBuf,
    pub pull_timeout_seconds: u64,
    pub idle_timeout_seconds: u64,
    pub mirrors: BTreeMap<String, Mirror>,
}

impl Default for RegistryConfig {
    fn default() -> Self {
        RegistryConfig {
            insecure: Vec::new(),
            config_path: "/etc/peapod/certs.d".into(),
            signature_policy: PathBuf::new(),
            pull_timeout_seconds: 1800,
            idle_timeout_seconds: 120,
            mirrors: BTreeMap::new(),
        }
    }
}

impl RegistryConfig {
    /// The image store's view of `[registry]`.
    pub fn to_store(&self) -> peapod_image::RegistryConfig {
        use std::time::Duration;
        peapod_image::RegistryConfig {
            insecure: self.insecure.clone(),
            mirrors: self
                .mirrors
                .iter()
                .map(|(host, m)| (host.clone(), m.endpoints.clone()))
                .collect(),
            config_path: (!self.config_path.as_os_str().is_empty())
                .then(|| self.config_path.clone()),
            signature_policy: (!self.signature_policy.as_os_str().is_empty())
                .then(|| self.signature_policy.clone()),
            pull_timeout: (self.pull_timeout_seconds > 0)
                .then(|| Duration::from_secs(self.pull_timeout_seconds)),
            idle_timeout: Duration::from_secs(self.idle_timeout_seconds),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StreamingConfig {
    pub address: String,
    pub tls_cert: String,
    pub tls_key: String,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MetricsConfig {
    pub address: String,
}

/// `[nri]`: the NRI plugin socket (see DEFAULT_TOML).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NriConfig {
    pub enabled: bool,
    pub socket_path: PathBuf,
    pub plugin_registration_timeout_ms: u64,
    pub plugin_request_timeout_ms: u64,
}

impl Default for NriConfig {
    fn default() -> Self {
        NriConfig {
            enabled: true,
            socket_path: "/var/run/nri/nri.sock".into(),
            plugin_registration_timeout_ms: 5000,
            plugin_request_timeout_ms: 2000,
        }
    }
}

/// `[cdi]`: CDI devices and where their spec files are (see DEFAULT_TOML).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CdiConfig {
    pub enabled: bool,
    /// In rising priority: for a device defined in two, the later directory's wins.
    pub spec_dirs: Vec<PathBuf>,
}

impl Default for CdiConfig {
    /// containerd 2.x's defaults (`enable_cdi`, `cdi_spec_dirs`): on, static specs in
    /// /etc/cdi, generated ones (device plugins write theirs there) in /var/run/cdi.
    fn default() -> Self {
        CdiConfig {
            enabled: true,
            spec_dirs: vec!["/etc/cdi".into(), "/var/run/cdi".into()],
        }
    }
}

/// `[tracing]`: OpenTelemetry traces exported by OTLP/gRPC (see DEFAULT_TOML; `crate::otel`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TracingConfig {
    /// The collector, `host:port` or `http://host:port`; empty: tracing off.
    pub endpoint: String,
    /// Root spans sampled per million (a caller's decision is always followed).
    pub sampling_rate_per_million: i64,
    pub service_name: String,
}

impl Default for TracingConfig {
    fn default() -> Self {
        TracingConfig {
            endpoint: String::new(),
            sampling_rate_per_million: 0,
            service_name: "peapod".into(),
        }
    }
}

/// The largest `tracing.sampling_rate_per_million`: every trace.
pub const SAMPLING_RATE_MAX: i64 = 1_000_000;

impl TracingConfig {
    /// Whether traces are exported.
    pub fn enabled(&self) -> bool {
        !self.endpoint.is_empty()
    }

    /// The collector's URI for the gRPC client (`http://host:port`), or an error naming the
    /// field and what is wrong with it.
    pub fn collector_uri(&self) -> Result<String, ConfigError> {
        let bad = |why: &str| {
            ConfigError::Invalid(format!(
                "tracing.endpoint {:?}: {why}; expected \"host:port\" (or \"http://host:port\") of an OTLP/gRPC collector",
                self.endpoint
            ))
        };
        let rest = match self.endpoint.split_once("://") {
            Some(("http", rest)) => rest,
            Some((scheme, _)) => {
                return Err(bad(&format!(
                    "scheme {scheme:?} is not supported (plaintext OTLP/gRPC only)"
                )))
            }
            None => self.endpoint.as_str(),
        };
        let (host, port) = rest.rsplit_once(':').ok_or_else(|| bad("no port"))?;
        let port: u16 = port
            .parse()
            .ok()
            .filter(|p| *p > 0)
            .ok_or_else(|| bad("the port is not a number from 1 to 65535"))?;
        let host_ok = if let Some(v6) = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
            v6.parse::<std::net::Ipv6Addr>().is_ok()
        } else {
            !host.is_empty()
                && host.len() <= 253
                && host
                    .bytes()
                    .all(|c| c.is_ascii_alphanumeric() || c == b'.' || c == b'-' || c == b'_')
        };
        if !host_ok {
            return Err(bad("the host is not an IP address or a DNS name"));
        }
        Ok(format!("http://{host}:{port}"))
    }

    /// Checks the table (whether or not tracing is on: a bad value is refused either way).
    pub fn validate(&self) -> Result<(), ConfigError> {
        if !(0..=SAMPLING_RATE_MAX).contains(&self.sampling_rate_per_million) {
            return Err(ConfigError::Invalid(format!(
                "tracing.sampling_rate_per_million {} is out of range: 0 to {SAMPLING_RATE_MAX}",
                self.sampling_rate_per_million
            )));
        }
        if self.service_name.trim().is_empty() {
            return Err(ConfigError::Invalid("tracing.service_name is empty".into()));
        }
        if self.enabled() {
            self.collector_uri()?;
        }
        Ok(())
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            root: "/var/lib/peapod".into(),
            state: "/run/peapod".into(),
            socket: "/run/peapod/peapod.sock".into(),
            log_level: "info".into(),
            startup_wait_seconds: 30,
            stream_batch_items: 200,
            runtime: RuntimeConfig::default(),
            cgroup: CgroupConfig::default(),
            apparmor: AppArmorConfig::default(),
            sandbox: SandboxConfig::default(),
            cni: CniConfig::default(),
            registry: RegistryConfig::default(),
            streaming: StreamingConfig::default(),
            metrics: MetricsConfig::default(),
            nri: NriConfig::default(),
            cdi: CdiConfig::default(),
            tracing: TracingConfig::default(),
            pods: PodsConfig::default(),
        }
    }
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        RuntimeConfig {
            path: "runc".into(),
            shim_path: String::new(),
            exec: ExecMode::Native,
            create: CreateMode::Native,
            handlers: BTreeMap::new(),
        }
    }
}

/// The configuration text of [`DEFAULT_TOML`] with this host's default cgroup driver.
pub fn default_toml() -> String {
    DEFAULT_TOML.replacen(
        "\ndriver = \"cgroupfs\"\n",
        &format!("\ndriver = \"{}\"\n", CgroupDriver::host_default().as_str()),
        1,
    )
}

/// The default configuration for a file made on one host and read on others (the Debian
/// package's /etc/peapod/config.toml, built on a machine without systemd): the cgroup driver,
/// whose default depends on the host, is commented out, so that the daemon picks it where it
/// runs.
pub fn portable_toml() -> String {
    DEFAULT_TOML.replacen(
        "\ndriver = \"cgroupfs\"\n",
        "\n# driver = \"systemd\"   # unset: the default above, decided where the daemon runs\n",
        1,
    )
}

impl CgroupDriver {
    /// systemd where it is the init system (it owns the cgroup tree there), else cgroupfs.
    pub fn host_default() -> CgroupDriver {
        if peapod_host::systemd::booted() {
            CgroupDriver::Systemd
        } else {
            CgroupDriver::Cgroupfs
        }
    }
}

impl Default for CgroupConfig {
    fn default() -> Self {
        CgroupConfig {
            driver: CgroupDriver::host_default(),
            default_parent: "/peapod".into(),
        }
    }
}

impl Default for SandboxConfig {
    fn default() -> Self {
        SandboxConfig {
            image: "registry.k8s.io/pause:3.10".into(),
            native_pause: true,
        }
    }
}

impl Default for CniConfig {
    fn default() -> Self {
        CniConfig {
            conf_dir: "/etc/cni/net.d".into(),
            bin_dirs: vec!["/opt/cni/bin".into(), "/usr/lib/cni".into()],
            plugin_timeout_seconds: 30,
            default_bridge: "peapod0".into(),
            default_subnet: "10.88.0.0/16".into(),
        }
    }
}

impl Default for StreamingConfig {
    fn default() -> Self {
        StreamingConfig {
            address: "127.0.0.1:0".into(),
            tls_cert: String::new(),
            tls_key: String::new(),
        }
    }
}

/// `[pods]`: the pod supervisor (see DEFAULT_TOML for each key).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PodsConfig {
    pub node_name: String,
    pub allocatable_cpu: String,
    pub allocatable_memory: String,
    pub cgroup_parent: String,
    pub restart_backoff_base_seconds: u64,
    pub sync_period_ms: u64,
    pub node_labels: BTreeMap<String, String>,
}

impl Default for PodsConfig {
    fn default() -> Self {
        PodsConfig {
            node_name: String::new(),
            allocatable_cpu: String::new(),
            allocatable_memory: String::new(),
            cgroup_parent: "/kubepods".into(),
            restart_backoff_base_seconds: 10,
            sync_period_ms: 1000,
            node_labels: BTreeMap::new(),
        }
    }
}

impl PodsConfig {
    /// The supervisor's settings, with the machine's values where the file leaves them empty.
    pub fn settings(
        &self,
        root: &Path,
        driver: CgroupDriver,
    ) -> Result<peapod_kubelet::settings::Settings, ConfigError> {
        use peapod_kubelet::{quantity, settings as s};
        let node_name = if self.node_name.is_empty() {
            s::hostname()
        } else {
            self.node_name.clone()
        };
        let cpu = match self.allocatable_cpu.as_str() {
            "" => s::machine_cpu_milli(),
            q => quantity::milli_value(q)
                .map_err(|e| ConfigError::Invalid(format!("pods.allocatable_cpu {q:?}: {e}")))?,
        };
        let machine_memory = s::machine_memory();
        let memory = match self.allocatable_memory.as_str() {
            "" => machine_memory,
            q => quantity::value(q)
                .map_err(|e| ConfigError::Invalid(format!("pods.allocatable_memory {q:?}: {e}")))?,
        };
        Ok(s::Settings {
            pods_dir: root.join("pods"),
            node_labels: s::Settings::node_labels(&node_name, &self.node_labels),
            node_name,
            allocatable: peapod_kubelet::resources::Amounts {
                cpu_milli: cpu,
                memory,
            },
            memory_capacity: machine_memory,
            cgroup_parent: self.cgroup_parent.clone(),
            cgroups: match driver {
                CgroupDriver::Cgroupfs => peapod_kubelet::cgroup::PodCgroups::Fs {
                    root: peapod_host::cgroup::DEFAULT_ROOT.into(),
                },
                CgroupDriver::Systemd => peapod_kubelet::cgroup::PodCgroups::Systemd,
            },
            backoff_base: std::time::Duration::from_secs(self.restart_backoff_base_seconds.max(1)),
            sync_period: std::time::Duration::from_millis(self.sync_period_ms.max(100)),
            oom_score_adj_floor: s::oom_score_adj_floor(),
            host_ip: s::host_ip(),
        })
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("parse {path}: {source}")]
    Parse {
        path: PathBuf,
        source: Box<toml::de::Error>,
    },
    #[error("invalid configuration: {0}")]
    Invalid(String),
}

impl Config {
    /// How long start-up waits for what another process still holds.
    pub fn startup_wait(&self) -> std::time::Duration {
        std::time::Duration::from_secs(self.startup_wait_seconds)
    }

    /// Loads `path`; a missing file is the default configuration only when `required` is false
    /// (the default path may be absent, a path the user named may not).
    pub fn load(path: &Path, required: bool) -> Result<Config, ConfigError> {
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && !required => {
                return Ok(Config::default())
            }
            Err(source) => {
                return Err(ConfigError::Read {
                    path: path.into(),
                    source,
                })
            }
        };
        Config::parse(&text).map_err(|source| ConfigError::Parse {
            path: path.into(),
            source: Box::new(source),
        })
    }

    pub fn parse(text: &str) -> Result<Config, toml::de::Error> {
        toml::from_str(text)
    }

    /// Checks what the daemon relies on.
    pub fn validate(&self) -> Result<(), ConfigError> {
        // Sockets live under `state` and a unix socket path is at most 107 bytes.
        if self.state.as_os_str().len() > 64 {
            return Err(ConfigError::Invalid(format!(
                "state directory {} is longer than 64 bytes; unix socket paths under it would not fit",
                self.state.display()
            )));
        }
        if self.nri.enabled {
            let n = &self.nri;
            if !n.socket_path.is_absolute() || n.socket_path.as_os_str().len() > 107 {
                return Err(ConfigError::Invalid(format!(
                    "nri.socket_path {} must be an absolute path of at most 107 bytes",
                    n.socket_path.display()
                )));
            }
            if n.plugin_registration_timeout_ms == 0 || n.plugin_request_timeout_ms == 0 {
                return Err(ConfigError::Invalid(
                    "nri.plugin_registration_timeout_ms and nri.plugin_request_timeout_ms must be over 0".into(),
                ));
            }
        }
        if self.socket.as_os_str().len() > 107 {
            return Err(ConfigError::Invalid(format!(
                "socket path {} is longer than 107 bytes",
                self.socket.display()
            )));
        }
        if self.runtime.path.is_empty() {
            return Err(ConfigError::Invalid("runtime.path is empty".into()));
        }
        for (name, handler) in &self.runtime.handlers {
            if !is_dns_label(name) {
                return Err(ConfigError::Invalid(format!(
                    "runtime.handlers.{name:?}: a handler's name must be a DNS label (lower-case letters, digits and '-', at most 63, starting and ending with a letter or digit), as a RuntimeClass's handler is"
                )));
            }
            if handler.path.is_empty() {
                return Err(ConfigError::Invalid(format!(
                    "runtime.handlers.{name}.path is empty"
                )));
            }
            for (i, arg) in handler.args.iter().enumerate() {
                if let Some(why) = handler_arg_refused(arg) {
                    return Err(ConfigError::Invalid(format!(
                        "runtime.handlers.{name}.args[{i}] {arg:?}: {why}"
                    )));
                }
            }
        }
        if self.stream_batch_items == 0 {
            return Err(ConfigError::Invalid(
                "stream_batch_items must be at least 1".into(),
            ));
        }
        for (key, q) in [
            ("pods.allocatable_cpu", &self.pods.allocatable_cpu),
            ("pods.allocatable_memory", &self.pods.allocatable_memory),
        ] {
            if !q.is_empty() {
                peapod_kubelet::quantity::validate(q)
                    .map_err(|e| ConfigError::Invalid(format!("{key} {q:?}: {e}")))?;
            }
        }
        if !self.pods.cgroup_parent.starts_with('/') {
            return Err(ConfigError::Invalid(
                "pods.cgroup_parent must be an absolute cgroup path".into(),
            ));
        }
        if self.registry.idle_timeout_seconds == 0 {
            return Err(ConfigError::Invalid(
                "registry.idle_timeout_seconds must be at least 1".into(),
            ));
        }
        if let Some(dir) = self.cdi.spec_dirs.iter().find(|d| !d.is_absolute()) {
            return Err(ConfigError::Invalid(format!(
                "cdi.spec_dirs: {} is not an absolute path",
                dir.display()
            )));
        }
        if !self.cgroup.default_parent.starts_with('/') {
            return Err(ConfigError::Invalid(
                "cgroup.default_parent must be an absolute cgroup path".into(),
            ));
        }
        self.tracing.validate()?;
        Ok(())
    }
}

/// RFC 1123 label: what the API server accepts as a RuntimeClass's handler.
fn is_dns_label(s: &str) -> bool {
    let b = s.as_bytes();
    let alnum = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    !b.is_empty()
        && b.len() <= 63
        && b.iter().all(|c| alnum(c) || *c == b'-')
        && b.first().is_some_and(alnum)
        && b.last().is_some_and(alnum)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runtime_handlers_are_read_and_checked() {
        let c = Config::parse(
            "[runtime.handlers.test-handler]\npath = \"runc\"\n[runtime.handlers.kata]\npath = \"/usr/bin/crun\"\n\
             [runtime.handlers.gvisor]\npath = \"runsc\"\nargs = [\"--platform=systrap\", \"--debug\"]\n",
        )
        .unwrap();
        assert_eq!(c.runtime.handlers["test-handler"].path, "runc");
        assert!(c.runtime.handlers["test-handler"].args.is_empty());
        assert_eq!(c.runtime.handlers["kata"].path, "/usr/bin/crun");
        assert_eq!(
            c.runtime.handlers["gvisor"].args,
            ["--platform=systrap", "--debug"]
        );
        assert!(c.runtime.handlers["gvisor"].is_sandboxed());
        assert!(!c.runtime.handlers["kata"].is_sandboxed());
        let named = Config::parse(
            "[runtime.handlers.a]\npath = \"/opt/gvisor/runsc\"\n\
             [runtime.handlers.b]\npath = \"/opt/vm-runtime\"\nsandboxed = true\n\
             [runtime.handlers.c]\npath = \"runsc\"\nsandboxed = false\n",
        )
        .unwrap();
        let sandboxed = |n: &str| named.runtime.handlers[n].is_sandboxed();
        assert_eq!(
            (sandboxed("a"), sandboxed("b"), sandboxed("c")),
            (true, true, false)
        );
        c.validate().unwrap();
        for (toml, complaint) in [
            ("[runtime.handlers.Test]\npath = \"runc\"\n", "DNS label"),
            ("[runtime.handlers.\"-x\"]\npath = \"runc\"\n", "DNS label"),
            ("[runtime.handlers.\"\"]\npath = \"runc\"\n", "DNS label"),
            ("[runtime.handlers.x]\n", "runtime.handlers.x.path is empty"),
            (
                "[runtime.handlers.g]\npath = \"runsc\"\nargs = [\"systrap\"]\n",
                "runtime.handlers.g.args[0] \"systrap\": each is one flag",
            ),
            (
                "[runtime.handlers.g]\npath = \"runsc\"\nargs = [\"--debug\", \"--root=/x\"]\n",
                "runtime.handlers.g.args[1] \"--root=/x\": peapod gives --root itself",
            ),
            (
                "[runtime.handlers.g]\npath = \"runsc\"\nargs = [\"-log\"]\n",
                "peapod gives --log itself",
            ),
            (
                "[runtime.handlers.g]\npath = \"runsc\"\nargs = [\"--\"]\n",
                "each is one flag",
            ),
        ] {
            let err = Config::parse(toml)
                .unwrap()
                .validate()
                .unwrap_err()
                .to_string();
            assert!(err.contains(complaint), "{toml}: {err}");
        }
        assert!(Config::parse("[runtime.handlers.x]\nroot = \"/r\"\n").is_err());
    }

    #[test]
    fn default_toml_is_the_default_config() {
        assert_eq!(Config::parse(&default_toml()).unwrap(), Config::default());
        assert!(default_toml().contains(&format!(
            "\ndriver = \"{}\"\n",
            CgroupDriver::host_default().as_str()
        )));
    }

    #[test]
    fn the_portable_default_leaves_the_driver_to_the_host() {
        let text = portable_toml();
        assert_ne!(text, DEFAULT_TOML, "the driver line was not found");
        assert!(!text.lines().any(|l| l.starts_with("driver")), "{text}");
        assert_eq!(Config::parse(&text).unwrap(), Config::default());
    }

    #[test]
    fn partial_files_keep_defaults_and_unknown_keys_are_refused() {
        let c = Config::parse(
            "[runtime]\npath = \"crun\"\n[registry.mirrors.\"registry.k8s.io\"]\nendpoints = [\"http://127.0.0.1:5055\"]\n",
        )
        .unwrap();
        assert_eq!(c.runtime.path, "crun");
        assert_eq!(c.cni, CniConfig::default());
        assert_eq!(
            c.registry.mirrors["registry.k8s.io"].endpoints,
            vec!["http://127.0.0.1:5055".to_string()]
        );
        assert!(Config::parse("[runtime]\npth = \"x\"\n").is_err());
        assert!(Config::parse("[cgroup]\ndriver = \"nope\"\n").is_err());
    }

    #[test]
    fn pods_table_resolves_to_settings() {
        let c = Config::parse(
            "[pods]\nnode_name = \"n1\"\nallocatable_cpu = \"1500m\"\nallocatable_memory = \"2Gi\"\nrestart_backoff_base_seconds = 1\n[pods.node_labels]\ndisk = \"ssd\"\n",
        )
        .unwrap();
        let s = c
            .pods
            .settings(Path::new("/r"), CgroupDriver::Cgroupfs)
            .unwrap();
        assert_eq!(s.node_name, "n1");
        assert_eq!(s.allocatable.cpu_milli, 1500);
        assert_eq!(s.allocatable.memory, 2 << 30);
        assert_eq!(s.node_labels["disk"], "ssd");
        assert_eq!(s.node_labels["kubernetes.io/hostname"], "n1");
        assert_eq!(s.backoff_base, std::time::Duration::from_secs(1));
        assert_eq!(s.pods_dir, Path::new("/r/pods"));
        let bad = Config::parse("[pods]\nallocatable_cpu = \"lots\"\n").unwrap();
        assert!(bad
            .pods
            .settings(Path::new("/r"), CgroupDriver::Cgroupfs)
            .is_err());
        assert!(bad
            .validate()
            .unwrap_err()
            .to_string()
            .contains("pods.allocatable_cpu"));
    }

    #[test]
    fn registry_trust_keys_reach_the_image_store() {
        let d = Config::default().registry.to_store();
        assert_eq!(
            d.config_path.as_deref(),
            Some(Path::new("/etc/peapod/certs.d"))
        );
        assert_eq!(d.signature_policy, None);
        let c = Config::parse(
            "[registry]\nconfig_path = \"\"\nsignature_policy = \"/etc/containers/policy.json\"\n",
        )
        .unwrap()
        .registry
        .to_store();
        assert_eq!(c.config_path, None);
        assert_eq!(
            c.signature_policy.as_deref(),
            Some(Path::new("/etc/containers/policy.json"))
        );
        assert!(Config::parse("[registry]\npolicy = \"x\"\n").is_err());
    }

    #[test]
    fn cdi_table() {
        let c = Config::default();
        assert!(c.cdi.enabled);
        assert_eq!(
            c.cdi.spec_dirs,
            [Path::new("/etc/cdi"), Path::new("/var/run/cdi")]
        );
        let c = Config::parse("[cdi]\nenabled = false\nspec_dirs = [\"/opt/cdi\"]\n").unwrap();
        assert!(!c.cdi.enabled);
        assert_eq!(c.cdi.spec_dirs, [Path::new("/opt/cdi")]);
        c.validate().unwrap();
        let err = Config::parse("[cdi]\nspec_dirs = [\"cdi\"]\n")
            .unwrap()
            .validate()
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("cdi.spec_dirs: cdi is not an absolute path"),
            "{err}"
        );
        assert!(Config::parse("[cdi]\nenable_cdi = true\n").is_err());
    }

    #[test]
    fn tracing_table() {
        let c = Config::default();
        assert!(!c.tracing.enabled());
        assert_eq!(c.tracing.sampling_rate_per_million, 0);
        assert_eq!(c.tracing.service_name, "peapod");
        for (endpoint, uri) in [
            ("127.0.0.1:4317", "http://127.0.0.1:4317"),
            (
                "http://collector.example:4317",
                "http://collector.example:4317",
            ),
            ("[::1]:4317", "http://[::1]:4317"),
            ("localhost:1", "http://localhost:1"),
        ] {
            let c = Config::parse(&format!(
                "[tracing]\nendpoint = \"{endpoint}\"\nsampling_rate_per_million = 1000000\n"
            ))
            .unwrap();
            c.validate().unwrap();
            assert!(c.tracing.enabled());
            assert_eq!(c.tracing.collector_uri().unwrap(), uri);
        }
        for (toml, complaint) in [
            (
                "endpoint = \"127.0.0.1\"",
                "tracing.endpoint \"127.0.0.1\": no port",
            ),
            (
                "endpoint = \"127.0.0.1:0\"",
                "tracing.endpoint \"127.0.0.1:0\": the port",
            ),
            ("endpoint = \"127.0.0.1:99999\"", "the port is not a number"),
            (
                "endpoint = \"https://c:4317\"",
                "scheme \"https\" is not supported",
            ),
            ("endpoint = \"grpc://c:4317\"", "scheme \"grpc\""),
            ("endpoint = \"a b:4317\"", "the host is not"),
            ("endpoint = \":4317\"", "the host is not"),
            ("endpoint = \"[zz]:4317\"", "the host is not"),
            ("endpoint = \"c:4317/v1/traces\"", "the port"),
            (
                "sampling_rate_per_million = 1000001",
                "tracing.sampling_rate_per_million 1000001 is out of range",
            ),
            (
                "sampling_rate_per_million = -1",
                "tracing.sampling_rate_per_million -1 is out of range",
            ),
            ("service_name = \" \"", "tracing.service_name is empty"),
        ] {
            let err = Config::parse(&format!("[tracing]\n{toml}\n"))
                .unwrap()
                .validate()
                .unwrap_err()
                .to_string();
            assert!(err.contains(complaint), "{toml}: {err}");
        }
        assert!(Config::parse("[tracing]\nsampling_ratio = 1.0\n").is_err());
    }

    #[test]
    fn missing_default_file_is_default_but_missing_named_file_is_an_error() {
        let p = Path::new("/nonexistent/peapod.toml");
        assert_eq!(Config::load(p, false).unwrap(), Config::default());
        assert!(Config::load(p, true).is_err());
    }
}
