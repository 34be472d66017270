//! RunPodSandbox: the pod's network namespace, CNI, its shim and pause container, with
//! everything made so far removed again if a step fails.

use super::spec::{self, namespace_modes, PauseInputs};
use super::SandboxService;
use crate::cgroups;
use crate::error::{Error, Result};
use crate::host_ops::userns;
use crate::network::files;
use crate::shim::{NewTask, Shim};
use crate::store::names::{self, Claim};
use crate::store::sandbox::{Sandbox, SandboxRecord, SandboxState};
use peapod_host::timefmt;
use peapod_proto::v1::{ContainerEventType, NamespaceMode, PodSandboxConfig};
use peapod_shim::protocol::CreateOptions;
use std::sync::Arc;

/// Checks a sandbox config; errors name the field.
fn validate(config: &PodSandboxConfig) -> Result<()> {
    let m = config
        .metadata
        .as_ref()
        .ok_or_else(|| Error::invalid("config.metadata is required"))?;
    for (field, value) in [
        ("name", &m.name),
        ("namespace", &m.namespace),
        ("uid", &m.uid),
    ] {
        if value.is_empty() {
            return Err(Error::invalid(format!(
                "config.metadata.{field} is required"
            )));
        }
    }
    let (net, _, _) = namespace_modes(config);
    if net == NamespaceMode::Container || net == NamespaceMode::Target {
        return Err(Error::invalid(
            "config.linux.security_context.namespace_options.network must be POD or NODE",
        ));
    }
    if config.hostname.len() > 64 {
        return Err(Error::invalid(
            "config.hostname is longer than 64 characters",
        ));
    }
    let security = config
        .linux
        .as_ref()
        .and_then(|l| l.security_context.as_ref());
    if let Some(s) = security {
        if s.run_as_group.is_some() && s.run_as_user.is_none() {
            return Err(Error::invalid(
                "config.linux.security_context.run_as_group requires run_as_user",
            ));
        }
    }
    if let Some(linux) = &config.linux {
        for key in linux.sysctls.keys() {
            let well_formed = !key.is_empty()
                && key
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "._/-".contains(c));
            if !well_formed {
                return Err(Error::invalid(format!(
                    "config.linux.sysctls has an invalid key {key:?}"
                )));
            }
            if net == NamespaceMode::Node && key.starts_with("net.") {
                return Err(Error::invalid(format!(
                    "config.linux.sysctls: {key} cannot be set for a pod in the host network"
                )));
            }
        }
    }
    Ok(())
}

impl SandboxService {
    /// RunPodSandbox. On any failure everything made so far is removed and the name released.
    /// The work runs to its end even if the caller goes away; an identical retry (same
    /// config, same handler) gets the first call's sandbox. `made` gets the new sandbox once
    /// it is listed (`crate::pod_lifecycle` starts its watch there), also when the caller is gone.
    pub async fn run_pod_sandbox(
        self: &Arc<Self>,
        config: PodSandboxConfig,
        runtime_handler: String,
        made: impl FnOnce(Arc<Sandbox>) + Send + 'static,
    ) -> Result<String> {
        validate(&config)?;
        let handler = self.settings.handlers.resolve(&runtime_handler)?;
        if self.settings.handlers.runs_default_runtime(handler) {
            spec::check_user_namespace(&config, &self.settings.user_namespaces)?;
        } else {
            // User namespaces were probed with the default runtime only.
            let why = format!(
                "runtime handler {runtime_handler:?} ({}) is not the runtime user namespaces were checked with",
                handler.path
            );
            spec::check_user_namespace(&config, &Err(why))?;
        }
        let name = SandboxRecord::name_of(&config);
        let digest = names::digest(&(&config, &runtime_handler));
        loop {
            let (id, claim) = {
                let mut table = self.sandboxes.write();
                let id = table.ids.generate_unique(&Default::default());
                let claim = table.names.claim(&name, &id, digest, "pod sandbox")?;
                (id, claim)
            };
            match claim {
                Claim::Same { id, settled } => {
                    names::settled(settled).await;
                    if self.sandboxes.read().by_id.contains_key(&id) {
                        tracing::info!(sandbox = %id, "an identical RunPodSandbox: its sandbox");
                        return Ok(id);
                    }
                    // The first call failed and freed the name: this one makes the sandbox.
                }
                Claim::New(settle) => {
                    let rt = self.clone();
                    let (config, handler) = (config.clone(), runtime_handler.clone());
                    return crate::detached::run_to_completion(async move {
                        let result = rt
                            .run_reserved(id, name, digest, config, handler, made)
                            .await;
                        drop(settle);
                        result
                    })
                    .await;
                }
            }
        }
    }

    /// RunPodSandbox once the name is reserved for `id`.
    async fn run_reserved(
        self: &Arc<Self>,
        id: String,
        name: String,
        digest: u64,
        config: PodSandboxConfig,
        runtime_handler: String,
        made: impl FnOnce(Arc<Sandbox>),
    ) -> Result<String> {
        // The call's span (server::rpc) has a field for the id it did not know yet.
        tracing::Span::current().record("sandbox", id.as_str());
        let (net, _, ipc) = namespace_modes(&config);
        let parent = config
            .linux
            .as_ref()
            .map(|l| l.cgroup_parent.clone())
            .filter(|p| !p.is_empty())
            .unwrap_or_else(|| self.settings.default_cgroup_parent.clone());
        let dir = self.paths.sandbox_state_dir(&id);
        let record = SandboxRecord {
            id: id.clone(),
            name: name.clone(),
            cgroups_path: cgroups::cgroups_path(self.settings.cgroup_driver, &parent, &id),
            cgroup_parent: parent,
            config,
            runtime_handler,
            created_at_ns: timefmt::now_ns(),
            state: SandboxState::Creating,
            netns: None,
            ips: Vec::new(),
            cni: None,
            shim_socket: self.shims.socket_path(&id),
            pause_pid: 0,
            shm: (ipc != NamespaceMode::Node).then(|| dir.join("shm")),
            dir,
            rootfs_mounted: false,
            request_digest: digest,
            pause_create_sent: false,
        };
        let sandbox = self.sandboxes.entry(record);
        match self.create_sandbox(&sandbox, net).await {
            Ok(()) => {
                self.sandboxes.write().insert(sandbox.clone());
                made(sandbox);
                self.events
                    .emit(&id, &id, ContainerEventType::ContainerCreatedEvent);
                self.events
                    .emit(&id, &id, ContainerEventType::ContainerStartedEvent);
                Ok(id)
            }
            Err(err) => {
                tracing::warn!(error = %err, "RunPodSandbox failed; removing what it made");
                match self.destroy(&sandbox).await {
                    Ok(()) => {
                        self.sandboxes.write().names.release(&name, &id);
                        Err(err)
                    }
                    Err(cleanup) => Err(self.keep_half_made(&sandbox, err, cleanup)),
                }
            }
        }
    }

    /// A failed RunPodSandbox whose cleanup failed too: the sandbox stays listed (NOTREADY,
    /// its name still reserved to it) so that RemovePodSandbox retries the cleanup, and the
    /// error names both failures.
    fn keep_half_made(&self, sandbox: &Arc<Sandbox>, err: Error, cleanup: Error) -> Error {
        tracing::error!(error = %cleanup, "cleaning up a failed sandbox; it stays for RemovePodSandbox");
        if let Err(e) = sandbox.update(|r| r.state = SandboxState::NotReady) {
            tracing::error!(error = %e, "persisting a half-made sandbox as not ready");
        }
        self.sandboxes.write().insert(sandbox.clone());
        Error::new(
            err.code(),
            format!(
                "{err}; cleaning up failed too ({cleanup}): pod sandbox {} is kept NOTREADY for RemovePodSandbox",
                sandbox.id
            ),
        )
    }

    pub(super) async fn create_sandbox(
        self: &Arc<Self>,
        sandbox: &Arc<Sandbox>,
        net: NamespaceMode,
    ) -> Result<()> {
        let id = sandbox.id.clone();
        let rec = sandbox.get();
        std::fs::create_dir_all(&rec.dir).map_err(|e| Error::path("create", &rec.dir, e))?;
        userns::give_to_pod_root(self.host.as_ref(), &rec.dir, &rec.config)?;
        // Persisted first, with the intents it can name already: the namespace's path and the
        // CNI plan (everything DEL needs), so that a crash half-way leaves a record to clean
        // up from and neither the pin nor ADD waits for a write of its own. A DEL whose ADD
        // never ran finds nothing to remove, and CNI plugins must accept it.
        let planned_netns = (net != NamespaceMode::Node).then(|| self.paths.netns_dir().join(&id));
        let plan = match &planned_netns {
            Some(_) => Some(self.network.plan(&id, &rec.config)?),
            None => None,
        };
        sandbox.create_file_with(|r| {
            r.netns = planned_netns.clone();
            r.cni = plan;
        })?;
        crate::failpoint::hit("sandbox.run.after-record").await;
        // The pause joins its cgroup in about 10 ms, after the shim's start.
        self.host.warm_cgroup_moves();

        let started = std::time::Instant::now();
        // The pause container needs only the namespace to exist, not the network in it: CNI
        // runs while the shim and the pause container start.
        if let Some(planned) = &planned_netns {
            let userns = peapod_spec::pod_user_namespace(&rec.config)?;
            let path = tracing::debug_span!("netns.pin").in_scope(|| {
                self.host
                    .pin_netns(&self.paths.netns_dir(), &id, userns.as_ref())
            })?;
            if &path != planned {
                sandbox.update_step(|r| r.netns = Some(path))?;
            }
            crate::failpoint::hit("sandbox.run.after-netns").await;
        }
        let rec = sandbox.get();
        let network = async {
            if let (Some(path), Some(plan)) = (&rec.netns, &rec.cni) {
                let result = self.network.setup(&id, path, plan).await?;
                crate::failpoint::hit("sandbox.run.after-cni-add").await;
                let ips = crate::network::cni::result_ips(&result);
                // A step (the result is for DEL, which also runs from the plan alone); the
                // Ready state below is durable with it.
                sandbox.update_step(|r| {
                    if let Some(c) = r.cni.as_mut() {
                        c.result = result;
                    }
                    r.ips = ips;
                })?;
            }
            Ok::<_, Error>(started.elapsed())
        };
        let pause = async {
            let handler = self.settings.handlers.resolve(&rec.runtime_handler)?;
            let shim = self
                .shims
                .start(&id, handler, &rec.dir.join("shim.log"))
                .await?;
            crate::failpoint::hit("sandbox.run.after-shim-start").await;
            let shim_time = started.elapsed();
            let pid = self.start_pause(sandbox, shim.as_ref()).await?;
            crate::failpoint::hit("sandbox.run.after-pause-start").await;
            Ok::<_, Error>((pid, shim_time, started.elapsed()))
        };
        let (network, pause) = tokio::join!(network, pause);
        let network_time = network?;
        let (pid, shim_time, pause_time) = pause?;
        let rec = sandbox.get();
        files::write_sandbox_files(
            &rec.dir,
            &rec.config.hostname,
            &rec.ips,
            rec.config.dns_config.as_ref(),
            net == NamespaceMode::Node,
        )?;
        sandbox.update(|r| {
            r.pause_pid = pid;
            r.state = SandboxState::Ready;
        })?;
        tracing::info!(
            total_ms = started.elapsed().as_millis() as u64,
            network_ms = network_time.as_millis() as u64,
            shim_ms = shim_time.as_millis() as u64,
            pause_ms = pause_time.as_millis() as u64,
            "pod sandbox ready"
        );
        self.nri.run_pod_sandbox(&sandbox.get()).await?;
        Ok(())
    }

    /// The pod's /dev/shm, the pause rootfs and the pause container itself; returns its pid.
    #[tracing::instrument(level = "debug", name = "pause.start", skip_all)]
    pub(super) async fn start_pause(&self, sandbox: &Arc<Sandbox>, shim: &dyn Shim) -> Result<u32> {
        let id = &sandbox.id;
        let rec = sandbox.get();
        if let Some(shm) = &rec.shm {
            self.host.mount_shm(shm)?;
        }
        let userns = userns::pinned_user_namespace(&rec.config, rec.netns.as_deref())?;
        if userns.is_some() {
            // Intent before side effect: the pause's idmapped root is mounted in the sandbox
            // directory, so a crash must leave a record that unmounts it before the directory
            // goes (removing a target with nothing mounted is fine).
            sandbox.update_step(|r| r.rootfs_mounted = true)?;
        }
        let pause = self
            .pause_image(id, &rec.dir.join("rootfs"), userns.as_ref())
            .await?;
        if pause.mounted {
            sandbox.update_step(|r| r.rootfs_mounted = true)?;
        }
        let bundle = rec.dir.join("bundle");
        std::fs::create_dir_all(&bundle).map_err(|e| Error::path("create", &bundle, e))?;
        let spec = spec::pause_spec(
            &rec.config,
            &PauseInputs {
                id,
                rootfs: &pause.rootfs,
                args: &pause.args,
                netns: rec.netns.as_deref(),
                shm: rec.shm.as_deref(),
                cgroups_path: &rec.cgroups_path,
                userns: userns.as_ref().map(|u| u.path.as_path()),
            },
        )?;
        crate::runtime_spec::write_config(&bundle, &spec)?;
        let task = NewTask {
            id,
            bundle: &bundle,
            terminal: false,
            options: CreateOptions {
                // Nothing happens between create and start of a pause: one runtime call, or
                // none where the shim can start it itself.
                start: true,
                native: self.settings.native_pause,
                ..Default::default()
            },
        };
        // Steps, as each of the intents above: a reboot ends the mount and the pause alike.
        sandbox.update_step(|r| r.pause_create_sent = true)?;
        shim.create(&task).await
    }
}
