//! CreateContainer.

use super::name_of;
use super::{host_facts, ContainerService};
use crate::cgroups;
use crate::error::{Error, Optional, Result};
use crate::host_ops::userns;
use crate::nri::NewContainer;
use crate::shim::NewTask;
use crate::store::container::{Container, ContainerRecord, ContainerState};
use crate::store::names::{self, Claim};
use crate::store::sandbox::{Sandbox, SandboxRecord, SandboxState};
use peapod_host::timefmt;
use peapod_image::RootfsRequest;
use peapod_proto::v1::{ContainerConfig, ContainerEventType, NamespaceMode, PodSandboxConfig};
use peapod_shim::protocol::CreateOptions;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;
use tracing::Instrument;

/// A CreateContainer request, after the gRPC layer took it apart.
pub struct CreateContainer {
    pub sandbox_id: String,
    pub config: ContainerConfig,
    pub sandbox_config: Option<PodSandboxConfig>,
}

/// What a create makes the container from: the config, and the checkpoint it restores.
struct ToMake {
    config: ContainerConfig,
    restore: Option<super::restore::Restore>,
}

/// What a create has made so far, for the failure path.
#[derive(Default)]
struct Made {
    /// The record, written (state `Creating`) before anything else is made.
    entry: Option<Arc<Container>>,
    rootfs: Option<PathBuf>,
    image_volumes: Vec<crate::store::container::ImageVolume>,
    shim_task: bool,
}

fn validate(config: &ContainerConfig) -> Result<()> {
    super::image_volumes::validate(config)?;
    let m = config
        .metadata
        .as_ref()
        .ok_or_else(|| Error::invalid("config.metadata is required"))?;
    if m.name.is_empty() {
        return Err(Error::invalid("config.metadata.name is required"));
    }
    if config.image.as_ref().is_none_or(|i| i.image.is_empty()) {
        return Err(Error::invalid("config.image.image is required"));
    }
    let log = Path::new(&config.log_path);
    if log.is_absolute() || log.components().any(|c| matches!(c, Component::ParentDir)) {
        return Err(Error::invalid(format!(
            "config.log_path {:?} must be relative to the sandbox's log_directory, without ..",
            config.log_path
        )));
    }
    for (i, m) in config.mounts.iter().enumerate() {
        if !Path::new(&m.container_path).is_absolute() {
            return Err(Error::invalid(format!(
                "config.mounts[{i}].container_path {:?} must be absolute",
                m.container_path
            )));
        }
        // Here too, not only in the spec: before an image volume or the rootfs is made.
        peapod_spec::mount_options(i, m).map_err(Error::from)?;
    }
    Ok(())
}

fn remove_dir(path: &Path) -> Result<()> {
    peapod_host::fs::remove_dir_all_if_exists(path).map_err(|e| Error::path("remove", path, e))
}

fn ready(srec: &SandboxRecord) -> Result<()> {
    if srec.state != SandboxState::Ready {
        return Err(Error::failed_precondition(format!(
            "pod sandbox {} is not ready",
            srec.id
        )));
    }
    Ok(())
}

impl ContainerService {
    /// CreateContainer. On failure nothing of the container is left and its name is free.
    /// The work runs to its end even if the caller goes away; an identical retry (same pod,
    /// same config) gets the first call's container.
    pub async fn create_container(self: &Arc<Self>, req: CreateContainer) -> Result<String> {
        validate(&req.config)?;
        let sandbox = self.sandboxes.read().resolve(&req.sandbox_id)?;
        let srec = sandbox.get();
        ready(&srec)?;
        // A checkpoint archive for an image: unpacked and checked before anything is made,
        // and the container made from the config it was checkpointed with.
        let (restore, made_from) = match super::restore::archive_of(&req.config) {
            Some(archive) => {
                let (restore, config) = self.prepare_restore(archive, &req.config)?;
                (Some(restore), config)
            }
            None => (None, req.config.clone()),
        };
        let name = name_of(&req.config, &srec.config);
        let digest = names::digest(&(&srec.id, &req.config));
        loop {
            let (id, claim) = {
                // Lock order: the sandbox table before the container table.
                let sandboxes = self.sandboxes.read();
                let mut containers = self.containers.write();
                let id = containers.ids.generate_unique(&sandboxes.ids);
                let claim = containers.names.claim(&name, &id, digest, "container")?;
                (id, claim)
            };
            match claim {
                Claim::Same { id, settled } => {
                    names::settled(settled).await;
                    if self.containers.read().by_id.contains_key(&id) {
                        tracing::info!(container = %id, "an identical CreateContainer: its container");
                        return Ok(id);
                    }
                }
                Claim::New(settle) => {
                    let rt = self.clone();
                    let (sandbox, config) = (sandbox.clone(), made_from);
                    return crate::detached::run_to_completion(async move {
                        // Shared with other creates, exclusive with Stop/RemovePodSandbox: a
                        // create racing a removal of its pod cannot leave a container behind.
                        let _pod = sandbox.members.read().await;
                        let result = match rt.sandbox_still_ready(&sandbox) {
                            Ok(srec) => {
                                let to_make = ToMake { config, restore };
                                rt.create_reserved(&id, &name, digest, &srec, to_make).await
                            }
                            Err(e) => {
                                rt.containers.write().names.release(&name, &id);
                                Err(e)
                            }
                        };
                        drop(settle);
                        result
                    })
                    .await;
                }
            }
        }
    }

    /// The pod, if it is still there and ready once its membership lock is held.
    fn sandbox_still_ready(&self, sandbox: &Arc<Sandbox>) -> Result<SandboxRecord> {
        if !self.sandboxes.read().by_id.contains_key(&sandbox.id) {
            return Err(Error::not_found(format!(
                "pod sandbox {} was removed",
                sandbox.id
            )));
        }
        let srec = sandbox.get();
        ready(&srec)?;
        Ok(srec)
    }

    /// CreateContainer once the name is reserved for `id`.
    async fn create_reserved(
        self: &Arc<Self>,
        id: &str,
        name: &str,
        digest: u64,
        srec: &SandboxRecord,
        to_make: ToMake,
    ) -> Result<String> {
        // The call's span (server::rpc) has a field for the id it did not know yet.
        tracing::Span::current().record("container", id);
        let started = std::time::Instant::now();
        let mut made = Made::default();
        match self
            .make_container(id, name, digest, srec, to_make, &mut made)
            .await
        {
            Ok((entry, runtime_create)) => {
                self.containers.write().insert(entry);
                self.nri.post_create_container(id).await;
                self.events
                    .emit(id, &srec.id, ContainerEventType::ContainerCreatedEvent);
                tracing::info!(
                    total_ms = started.elapsed().as_millis() as u64,
                    runtime_ms = runtime_create.as_millis() as u64,
                    "container created"
                );
                Ok(id.to_string())
            }
            Err(err) => {
                tracing::warn!(error = %err, "CreateContainer failed; removing what it made");
                self.nri.undo_create_container(id).await;
                match self.unmake_container(id, srec, &made).await {
                    Ok(()) => {
                        self.containers.write().names.release(name, id);
                        Err(err)
                    }
                    Err(cleanup) => Err(self.keep_half_made(made.entry, err, cleanup)),
                }
            }
        }
    }

    /// A failed create whose cleanup failed too: the container stays listed (EXITED, its name
    /// still reserved to it) so that RemoveContainer retries, and the error names both.
    fn keep_half_made(&self, entry: Option<Arc<Container>>, err: Error, cleanup: Error) -> Error {
        tracing::error!(error = %cleanup, "cleaning up a failed container; it stays for RemoveContainer");
        let message = format!("{err}; cleaning up failed too ({cleanup})");
        if let Some(entry) = entry {
            let why = message.clone();
            if let Err(e) = entry.update(|r| {
                r.state = ContainerState::Exited;
                r.exit_code = 128;
                r.reason = "CreateError".into();
                r.message = why;
                r.finished_at_ns = timefmt::now_ns();
            }) {
                tracing::error!(error = %e, "persisting a half-made container as exited");
            }
            self.containers.write().insert(entry);
        }
        Error::new(err.code(), message)
    }

    /// Removes what a failed create made, in the reverse order of making; stops at the first
    /// failure (a directory is not removed while a mount in it may still be there).
    async fn unmake_container(&self, id: &str, srec: &SandboxRecord, made: &Made) -> Result<()> {
        self.processes.forget(id);
        if made.shim_task {
            // The dead-shim path (deleting through the OCI runtime directly) goes here when
            // the shim cannot be reached.
            let shim = self.shims.get(&srec.id).await?;
            shim.delete(id, "").await.optional()?;
        }
        self.release_image_volumes(&made.image_volumes).await?;
        if let Some(rootfs) = &made.rootfs {
            self.images.remove_rootfs(id, rootfs).await?;
        }
        super::idmapped_mounts::release_leftovers(
            self.host.as_ref(),
            &self.paths.container_state_dir(id),
        )?;
        remove_dir(&self.paths.container_state_dir(id))?;
        remove_dir(&self.paths.container_root_dir(id))
    }

    /// Makes the container's pieces in order, each written down in its record before it is
    /// made (intent before side effect): the record says what a crash at any point left.
    /// Also returns how long the runtime's create took (the log line's `runtime_ms`).
    async fn make_container(
        self: &Arc<Self>,
        id: &str,
        name: &str,
        digest: u64,
        srec: &SandboxRecord,
        to_make: ToMake,
        made: &mut Made,
    ) -> Result<(Arc<Container>, std::time::Duration)> {
        let ToMake {
            mut config,
            restore,
        } = to_make;
        // The runtime's create moves the container's init into its cgroup 8-12 ms from here
        // (the shim's helper 1-2 ms after its start, after the rootfs, spec and records
        // below; `runc create` about 10 ms after its own). The kernel's wait before the first
        // move after a quiet spell (one RCU grace period, 5-15 ms, with the cgroup mutex
        // held, so that even a mkdir of a cgroup waits for it) passes meanwhile; a move
        // finds the way clear for about a grace period after the previous one.
        self.host.warm_cgroup_moves();
        let image_ref = config
            .image
            .as_ref()
            .map(|i| i.image.clone())
            .unwrap_or_default();
        let image = self.images.resolve(&image_ref).ok_or_else(|| {
            Error::not_found(format!("image {image_ref:?} not found; pull it first"))
        })?;
        if let Some(kind) = &image.artifact_type {
            return Err(Error::invalid(format!(
                "config.image {image_ref:?} is an OCI artifact ({kind}), not a container image: mount it as an image volume"
            )));
        }
        let img_cfg = &image.config;
        // Before anything is made: a bad config.stop_signal changes nothing.
        let stop_signal = peapod_spec::stop_signal(&config, img_cfg).map_err(Error::from)?;
        let user_req = peapod_spec::user_to_resolve(&config, img_cfg).map_err(Error::from)?;

        let bundle = self.paths.container_state_dir(id);
        let root_dir = self.paths.container_root_dir(id);
        let rootfs = bundle.join("rootfs");
        let exit_file = root_dir.join("exit");
        // In a pod with its own user namespace, an idmapped rootfs (runc 1.1 cannot make one).
        let userns = userns::pinned_user_namespace(&srec.config, srec.netns.as_deref())?;
        let log_path = if srec.config.log_directory.is_empty() || config.log_path.is_empty() {
            String::new()
        } else {
            let p = Path::new(&srec.config.log_directory).join(&config.log_path);
            p.to_string_lossy().into_owned()
        };
        // The name ContainerStatus and ListContainers report: the image as the user named it
        // when the client says (the kubelet creates with the image's id and puts the pod
        // spec's image in user_specified_image; it shows ContainerStatus.image as the pod's
        // status.containerStatuses[].image, which specs compare with the spec's image).
        let shown_image = config
            .image
            .as_ref()
            .map(|i| i.user_specified_image.clone())
            .filter(|u| !u.is_empty())
            .unwrap_or_else(|| image_ref.clone());
        let record = ContainerRecord {
            id: id.to_string(),
            sandbox_id: srec.id.clone(),
            name: name.to_string(),
            image_name: shown_image,
            image_id: image.id.clone(),
            image_ref: image
                .repo_digests
                .first()
                .cloned()
                .unwrap_or_else(|| image.id.clone()),
            state: ContainerState::Creating,
            created_at_ns: timefmt::now_ns(),
            started_at_ns: 0,
            finished_at_ns: 0,
            exit_code: 0,
            reason: String::new(),
            message: String::new(),
            pid: 0,
            log_path: log_path.clone(),
            bundle: bundle.clone(),
            rootfs: rootfs.clone(),
            exit_file: exit_file.clone(),
            stop_signal: stop_signal.number,
            stop_signal_cri: stop_signal.cri as i32,
            resources: config.linux.as_ref().and_then(|l| l.resources.clone()),
            uid: 0,
            gid: 0,
            supplemental_groups: Vec::new(),
            image_volumes: Vec::new(),
            config: config.clone(),
            request_digest: digest,
            runtime_create_sent: false,
        };
        // The intent: directories, the rootfs mount target and the runtime's container id.
        let entry = self.containers.entry(record);
        // A step: what it announces is swept after a reboot when no record claims it.
        entry.create_file_step()?;
        made.entry = Some(entry.clone());
        crate::failpoint::hit("container.create.after-record").await;

        for dir in [&bundle, &root_dir] {
            std::fs::create_dir_all(dir).map_err(|e| Error::path("create", dir, e))?;
        }
        userns::give_to_pod_root(self.host.as_ref(), &bundle, &srec.config)?;
        self.images
            .create_rootfs(&RootfsRequest {
                image_id: &image.id,
                container_id: id,
                target: &rootfs,
                readonly: false,
                userns: userns.as_ref(),
            })
            .instrument(tracing::debug_span!("rootfs", image = %image.id))
            .await?;
        made.rootfs = Some(rootfs.clone());
        if let Some(restore) = &restore {
            self.apply_restore(restore, &rootfs, &root_dir)?;
        }
        crate::failpoint::hit("container.create.after-rootfs").await;
        let mut spec_config = self
            .prepare_image_volumes(
                id,
                &bundle,
                &mut config,
                &mut made.image_volumes,
                userns.as_ref(),
            )
            .await?;
        if !made.image_volumes.is_empty() {
            let volumes = made.image_volumes.clone();
            entry.update_step(|r| r.image_volumes = volumes)?;
        }
        // Volumes with the pod's id mapping: staged idmapped binds, detached when this drops
        // (after the runtime's create, which gives the container its own copies).
        let _idmapped = crate::blocking::off_runtime(|| {
            super::idmapped_mounts::stage(
                &self.host,
                &mut spec_config,
                &bundle,
                &srec.config,
                userns.as_ref(),
            )
        })?;

        let (passwd, group) = crate::host_ops::read_image_accounts(&rootfs).await?;
        let user = peapod_spec::resolve_user(&user_req, passwd.as_deref(), group.as_deref())
            .map_err(Error::from)?;

        if let Some(dir) = Path::new(&log_path)
            .parent()
            .filter(|_| !log_path.is_empty())
        {
            std::fs::create_dir_all(dir)
                .map_err(|e| Error::path("create log directory", dir, e))?;
        }

        let target_pid = self.target_pid(&config, srec)?;
        let cgroups_path = cgroups::cgroups_path(self.cgroup_driver, &srec.cgroup_parent, id);
        let host = host_facts(
            self.runtime_rro && self.runs_default_runtime(&srec.runtime_handler),
            self.apparmor,
        );
        // The CDI devices it asks for are resolved in the spec files there are now (a device
        // plugin may have written its file a moment ago); a bad one fails here, after the
        // rootfs was made, so the failure path below removes it.
        let cdi = self.cdi.registry_for(&spec_config)?;
        let mut spec = peapod_spec::container_spec(&peapod_spec::ContainerInputs {
            id,
            config: &spec_config,
            sandbox: peapod_spec::SandboxRef {
                id: &srec.id,
                config: &srec.config,
                pause_pid: srec.pause_pid,
                netns: srec.netns.as_deref(),
                dir: &srec.dir,
                shm: srec.shm.as_deref(),
            },
            image: img_cfg,
            user: &user,
            rootfs: &rootfs,
            cgroups_path: &cgroups_path,
            target_pid,
            host: &host,
            paths: &peapod_spec::RealHost,
            cdi: &cdi,
        })
        .map_err(Error::from)?;
        let new = NewContainer {
            pod: srec,
            id,
            config: &config,
        };
        self.nri.create_container(new, &mut spec).await?;
        if restore.is_some() {
            self.point_criu_at_cgroup(&mut spec, &bundle, &cgroups_path)?;
        }
        crate::runtime_spec::write_config(&bundle, &spec)?;
        self.processes.remember(id, &spec);

        // What the process really gets (primary gid, image memberships unless the Strict
        // policy, the CRI supplemental groups), as ContainerStatus.user must report it.
        let supplemental_groups = spec
            .process()
            .as_ref()
            .and_then(|p| p.user().additional_gids().clone())
            .unwrap_or_else(|| user.additional_gids.clone());
        let shim = self.shims.get(&srec.id).await?;
        // A restore's task is made by its start (`runc restore` runs the processes at once).
        let runtime_create = restore.is_none();
        // What ContainerStatus reports, and the intent (a record in `Creating` may have a task
        // in the runtime: the cleanup deletes it), in one write.
        made.shim_task = runtime_create;
        entry.update_step(|r| {
            r.uid = user.uid;
            r.gid = user.gid;
            r.supplemental_groups = supplemental_groups;
            r.config = config;
            r.runtime_create_sent = runtime_create;
        })?;
        if !runtime_create {
            entry.update(|r| r.state = ContainerState::Created)?;
            return Ok((entry, std::time::Duration::ZERO));
        }
        let rec = entry.get();
        // The kubelet starts containers with StartContainer, in its own order.
        let task = self.init_task(&rec, None);
        let runtime_started = std::time::Instant::now();
        let pid = shim.create(&task).await?;
        let runtime_create = runtime_started.elapsed();
        crate::failpoint::hit("container.create.after-runtime-create").await;
        entry.update(|r| {
            r.pid = pid;
            r.state = ContainerState::Created;
        })?;
        Ok((entry, runtime_create))
    }

    /// The Task API create of a container's own process: created for StartContainer to
    /// start, or, with `restore` (CRIU's images), restored and running at once.
    pub(super) fn init_task<'a>(
        &self,
        rec: &'a ContainerRecord,
        restore: Option<&Path>,
    ) -> NewTask<'a> {
        NewTask {
            id: &rec.id,
            bundle: &rec.bundle,
            terminal: rec.config.tty,
            options: CreateOptions {
                log_path: rec.log_path.clone(),
                stdin: rec.config.stdin,
                stdin_once: rec.config.stdin_once,
                exit_file: rec.exit_file.to_string_lossy().into_owned(),
                attach_socket: self
                    .shims
                    .attach_socket_path(&rec.id)
                    .to_string_lossy()
                    .into_owned(),
                start: restore.is_some(),
                native: false,
                restore: restore
                    .map(|p| p.to_string_lossy().into_owned())
                    .unwrap_or_default(),
            },
        }
    }

    /// For PID namespace TARGET: the target container's pid (it must be in the same pod).
    fn target_pid(&self, config: &ContainerConfig, srec: &SandboxRecord) -> Result<Option<u32>> {
        let ns = config
            .linux
            .as_ref()
            .and_then(|l| l.security_context.as_ref())
            .and_then(|s| s.namespace_options.as_ref());
        let Some(ns) = ns.filter(|n| n.pid == NamespaceMode::Target as i32) else {
            return Ok(None);
        };
        let field = "config.linux.security_context.namespace_options.target_id";
        if ns.target_id.is_empty() {
            return Err(Error::invalid(format!(
                "{field} is required for PID namespace TARGET"
            )));
        }
        let target = self
            .containers
            .resolve(&ns.target_id)
            .map_err(|_| {
                Error::invalid(format!("{field}: container {:?} not found", ns.target_id))
            })?
            .get();
        if target.sandbox_id != srec.id || target.pid == 0 {
            return Err(Error::invalid(format!(
                "{field}: container {:?} is not a live container of this pod",
                ns.target_id
            )));
        }
        Ok(Some(target.pid))
    }
}
