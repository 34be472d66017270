//! The daemon: it builds the services from the configuration and holds them; the gRPC layer
//! (`server/`) calls them. Each service owns its state and gets what it uses, so nothing here
//! has behaviour of its own beyond assembly and the streaming server's start.

use crate::config::Config;
use crate::container::{ContainerDeps, ContainerService, NriUpdates};
use crate::error::{Error, Result};
use crate::events::Events;
use crate::exec::ExecService;
use crate::host_ops::{HostOps, RealHostOps};
use crate::images::Images;
use crate::network::{Network, PodNetwork};
use crate::nri::{Nri, NriRuntime};
use crate::paths::Paths;
use crate::pod_lifecycle::PodLifecycle;
use crate::runtime_handlers::RuntimeHandlers;
use crate::sandbox::{SandboxDeps, SandboxService, SandboxSettings};
use crate::shim::{ShimManager, Shims};
use crate::stats::{HostProcessStats, ProcessStats, StatsService};
use crate::store::container::ContainerRecords;
use crate::store::sandbox::SandboxRecords;
use std::path::Path;
use std::sync::Arc;

/// The side effects the pod and container lifecycle has, each behind a narrow trait: real
/// ones in the daemon, fakes in unit tests.
#[derive(Clone)]
pub struct Effects {
    pub shims: Arc<dyn Shims>,
    pub pod_network: Arc<dyn PodNetwork>,
    pub host: Arc<dyn HostOps>,
    pub images: Arc<dyn Images>,
    /// What the stats read about processes (cgroups, /proc).
    pub process_stats: Arc<dyn ProcessStats>,
    /// Whether the OCI runtime CLI knows recursive read-only mounts ("rro" in `<runtime>
    /// features`); the kernel check is peapod-spec's.
    pub runtime_rro: bool,
    /// Whether containers' AppArmor profiles apply here ([`crate::apparmor::prepare`]: the
    /// kernel enforces AppArmor and peapod's default profile is loaded).
    pub apparmor: bool,
    /// NRI plugins (a no-op when `[nri]` is disabled).
    pub nri: Arc<dyn Nri>,
    /// Whether pods can have their own user namespace here (`peapod_host::userns::probe`:
    /// a user namespace owning a network namespace, an overlay of idmapped layers), or why not.
    pub user_namespaces: std::result::Result<(), String>,
    /// Whether CRIU works here (checked at the first checkpoint or restore).
    pub criu: Arc<dyn crate::checkpoint::CriuCheck>,
}

pub struct Daemon {
    pub config: Config,
    /// The image store, for the image calls.
    pub images: Arc<peapod_image::Store>,
    /// The configured network, for Status and UpdateRuntimeConfig.
    pub network: Arc<Network>,
    pub sandboxes: Arc<SandboxService>,
    pub containers: Arc<ContainerService>,
    /// What spans a pod and its containers: Run/Stop/RemovePodSandbox, the pods' watch,
    /// recovery.
    pub pods: Arc<PodLifecycle>,
    pub exec: Arc<ExecService>,
    pub stats: StatsService,
    /// Lifecycle events for GetContainerEvents.
    pub events: Arc<Events>,
    /// NRI: closed when the daemon stops.
    pub nri: Arc<dyn Nri>,
    /// The exec/attach/port-forward server (started right after the services).
    streaming: std::sync::OnceLock<peapod_streaming::Server>,
}

fn mkdir(path: &Path, mode: u32) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(path).map_err(|e| Error::path("create", path, e))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .map_err(|e| Error::path("chmod", path, e))
}

/// The daemon's directories under its root (persistent) and state (runtime) directories.
///
/// Modes are set, not left to the umask, so that directories an older version made are closed
/// too. `image/` (layers with setuid binaries and device nodes, upper directories) is 0700; the
/// per-object directories below `containers/` and `sandboxes/` (bundles, whose `rootfs` is the
/// container's mounted root filesystem) are made under the daemon's umask (0o077), so 0700.
fn prepare_dirs(config: &Config) -> Result<()> {
    // Before anything is made or read: a newer release's directories are refused unchanged.
    let root_format = crate::format::check(&config.root, "root")?;
    let state_format = crate::format::check(&config.state, "state")?;
    mkdir(&config.root, 0o711)?;
    mkdir(&config.state, 0o711)?;
    // Stamped where new or older; a stamp already ours is not written (and synced) again.
    for (dir, found) in [(&config.root, root_format), (&config.state, state_format)] {
        if found != Some(crate::format::FORMAT) {
            crate::format::record(dir)?;
        }
    }
    for dir in ["sandboxes", "containers", "image"] {
        mkdir(&config.root.join(dir), 0o700)?;
    }
    for dir in ["sandboxes", "containers", "netns", "s", "runc"] {
        mkdir(&config.state.join(dir), 0o711)?;
    }
    // Checkpoint archives a daemon that died mid-restore had unpacked: no create wants them.
    let restoring = crate::container::restore_staging_root(&config.root);
    peapod_host::fs::remove_dir_all_if_exists(&restoring)
        .map_err(|e| Error::path("remove", &restoring, e))?;
    Ok(())
}

/// Tries, once at start, what a pod with its own user namespace needs from this host (see
/// `peapod_host::userns::probe`), in a scratch directory on the filesystem of the layers.
async fn probe_user_namespaces(root: &Path) -> std::result::Result<(), String> {
    let scratch = root.join("userns-probe");
    let res = tokio::task::spawn_blocking(move || peapod_host::userns::probe(&scratch))
        .await
        .map_err(|e| e.to_string())
        .and_then(|r| r.map_err(|e| e.to_string()));
    match &res {
        Ok(()) => tracing::info!("user namespaces for pods: supported (idmapped layers)"),
        Err(why) => tracing::warn!(reason = %why, "user namespaces for pods: not supported here"),
    }
    res
}

/// Asks the OCI runtime (`<runtime> features`, runc >= 1.1) whether it knows "rro"; a runtime
/// without the subcommand, or none at all, does not.
async fn runtime_supports_rro(runtime: &str) -> bool {
    let out = tokio::process::Command::new(runtime)
        .arg("features")
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .output();
    match tokio::time::timeout(std::time::Duration::from_secs(10), out).await {
        Ok(Ok(o)) if o.status.success() => peapod_spec::runtime_supports_rro(&o.stdout),
        _ => false,
    }
}

impl Daemon {
    /// Prepares the directories, opens the image store and loads the persisted records.
    pub async fn new(config: Config) -> Result<Arc<Daemon>> {
        prepare_dirs(&config)?;
        let registry = config.registry.to_store();
        let images = peapod_image::Store::open_waiting(
            &config.root.join("image"),
            registry,
            config.startup_wait(),
        )
        .await?;
        let network = Arc::new(Network::new(
            &config.cni,
            &config.root.join("cni").join("networks"),
        ));
        let effects = Effects {
            shims: Arc::new(
                ShimManager::new(
                    ShimManager::find_binary(&config.runtime.shim_path),
                    &RuntimeHandlers::new(&config),
                    config.state.join("s"),
                )
                .with_exec(config.runtime.exec.as_str())
                .with_create(config.runtime.create.as_str())
                .with_cgroup_driver(config.cgroup.driver.as_str()),
            ),
            pod_network: network.clone(),
            host: Arc::new(RealHostOps),
            images: images.clone(),
            process_stats: Arc::new(HostProcessStats),
            runtime_rro: runtime_supports_rro(&config.runtime.path).await,
            apparmor: {
                let (cfg, state) = (config.apparmor.clone(), config.state.clone());
                tokio::task::spawn_blocking(move || crate::apparmor::prepare(&cfg, &state))
                    .await
                    .map_err(|e| Error::internal(format!("AppArmor set-up: {e}")))?
                    .map_err(|e| Error::failed_precondition(e.to_string()))?
            },
            nri: NriRuntime::start(&config.nri)?,
            user_namespaces: probe_user_namespaces(&config.root).await,
            criu: Arc::new(crate::checkpoint::Criu::new("criu")),
        };
        let daemon = Daemon::assemble(config, images, network, effects)?;
        daemon.pods.recover().await;
        daemon
            .nri
            .restore(daemon.sandboxes.records(), daemon.containers.records())
            .await;
        daemon
            .nri
            .serve_updates(Arc::new(NriUpdates::new(&daemon.containers)));
        daemon.start_streaming().await?;
        Ok(daemon)
    }

    /// The services over the given parts, with their records loaded; no background work
    /// started (no watches, no streaming server). Unit tests build it with fakes.
    pub fn assemble(
        config: Config,
        images: Arc<peapod_image::Store>,
        network: Arc<Network>,
        effects: Effects,
    ) -> Result<Arc<Daemon>> {
        prepare_dirs(&config)?;
        let pause_rootfs = crate::pause::materialize(&config.root.join("pause"))?;
        // Records a crash left half-made are loaded too: `recovery` rolls them back.
        let sandbox_records = Arc::new(SandboxRecords::load(&config.root, "sandboxes")?);
        let container_records = Arc::new(ContainerRecords::load(&config.root, "containers")?);
        let events = Arc::new(Events::new(
            sandbox_records.clone(),
            container_records.clone(),
        ));
        let paths = Paths {
            root: config.root.clone(),
            state: config.state.clone(),
        };
        let handlers = Arc::new(RuntimeHandlers::new(&config));
        let containers = Arc::new(ContainerService::new(ContainerDeps {
            containers: container_records,
            sandboxes: sandbox_records.clone(),
            shims: effects.shims.clone(),
            images: effects.images.clone(),
            host: effects.host.clone(),
            events: events.clone(),
            paths: paths.clone(),
            cgroup_driver: config.cgroup.driver,
            runtime_rro: effects.runtime_rro,
            apparmor: effects.apparmor,
            nri: effects.nri.clone(),
            handlers: handlers.clone(),
            cdi: crate::cdi::CdiDirs::new(&config.cdi),
            criu: effects.criu.clone(),
        }));
        let sandboxes = Arc::new(SandboxService::new(SandboxDeps {
            sandboxes: sandbox_records,
            shims: effects.shims.clone(),
            network: effects.pod_network,
            host: effects.host,
            images: effects.images,
            events: events.clone(),
            nri: effects.nri.clone(),
            paths,
            settings: SandboxSettings {
                cgroup_driver: config.cgroup.driver,
                default_cgroup_parent: config.cgroup.default_parent.clone(),
                handlers,
                sandbox_image: config.sandbox.image.clone(),
                pause_rootfs,
                native_pause: config.sandbox.native_pause,
                user_namespaces: effects.user_namespaces,
            },
        }));
        let pods = PodLifecycle::new(sandboxes.clone(), containers.clone(), effects.shims.clone());
        let exec = Arc::new(ExecService::new(
            containers.clone(),
            sandboxes.clone(),
            effects.shims,
        ));
        let stats = StatsService::new(
            containers.clone(),
            sandboxes.clone(),
            images.clone(),
            effects.process_stats,
        );
        Ok(Arc::new(Daemon {
            config,
            images,
            network,
            sandboxes,
            containers,
            pods,
            exec,
            stats,
            events,
            nri: effects.nri,
            streaming: std::sync::OnceLock::new(),
        }))
    }

    async fn start_streaming(self: &Arc<Self>) -> Result<()> {
        let cfg = &self.config.streaming;
        let tls = match (cfg.tls_cert.is_empty(), cfg.tls_key.is_empty()) {
            (true, true) => None,
            (false, false) => Some(peapod_streaming::TlsConfig {
                cert_file: cfg.tls_cert.clone().into(),
                key_file: cfg.tls_key.clone().into(),
            }),
            _ => {
                return Err(Error::invalid(
                    "streaming.tls_cert and streaming.tls_key must be given together",
                ))
            }
        };
        let config = peapod_streaming::Config {
            address: cfg.address.clone(),
            tls,
            bind_wait: self.config.startup_wait(),
            ..Default::default()
        };
        let backend = Arc::new(crate::exec::streaming_backend::StreamingBackend {
            exec: self.exec.clone(),
        });
        let server = peapod_streaming::Server::start(config, backend)
            .await
            .map_err(|e| {
                Error::internal(format!(
                    "start the streaming server on {}: {e}",
                    cfg.address
                ))
            })?;
        tracing::info!(url = %server.base_url(), "streaming server listening");
        let _ = self.streaming.set(server);
        Ok(())
    }

    pub fn streaming(&self) -> Result<&peapod_streaming::Server> {
        self.streaming
            .get()
            .ok_or_else(|| Error::unavailable("the streaming server is not running"))
    }
}
