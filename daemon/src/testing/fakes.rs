//! Fakes of the lifecycle's side effects. Each keeps what it has made (live shims and their
//! tasks, CNI attachments, pinned namespaces and mounts, root filesystems) so that a test can
//! check that a failure path removed it all, and each call can be told to fail.

use crate::error::{Error, Result};
use crate::host_ops::HostOps;
use crate::images::Images;
use crate::network::PodNetwork;
use crate::shim::{ExecIo, Exit, NewTask, ProcessState, Shim, Shims};
use crate::store::sandbox::CniAttachment;
use async_trait::async_trait;
use containerd_shim_protos::types::task::Status;
use peapod_host::sync::LockUnpoisoned;
use peapod_image::{Image, ImageConfig};
use peapod_proto::v1::PodSandboxConfig;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock_unpoisoned()
}

/// The calls the fakes saw, and the ones they are told to fail. Call names are
/// `<fake>.<call>`: `shim.start`, `shim.create`, `cni.plan`, `cni.add`, `netns.pin`,
/// `rootfs.create`, …
#[derive(Default)]
pub struct Faults {
    failing: Mutex<HashSet<String>>,
    calls: Mutex<Vec<String>>,
    /// Calls held at a gate until it opens (to make a call slow at a chosen step).
    gates: Mutex<HashMap<String, tokio::sync::watch::Sender<bool>>>,
}

impl Faults {
    /// Makes every later call named `call` fail (with Internal).
    pub fn fail(&self, call: &str) {
        lock(&self.failing).insert(call.to_string());
    }

    pub fn heal(&self, call: &str) {
        lock(&self.failing).remove(call);
    }

    /// How many times `call` was made.
    pub fn count(&self, call: &str) -> usize {
        lock(&self.calls).iter().filter(|c| *c == call).count()
    }

    /// Makes every later call named `call` wait (after it is counted) until [`Faults::open`].
    pub fn hold(&self, call: &str) {
        lock(&self.gates).insert(call.to_string(), tokio::sync::watch::channel(false).0);
    }

    /// Lets the calls held at `call`'s gate (and every later one) through.
    pub fn open(&self, call: &str) {
        if let Some(gate) = lock(&self.gates).remove(call) {
            gate.send_replace(true);
        }
    }

    /// Waits until `call` has been made `n` times (at most 10 s).
    pub async fn reached(&self, call: &str, n: usize) {
        for _ in 0..10_000 {
            if self.count(call) >= n {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
        panic!("{call} was not made {n} times within 10 s");
    }

    /// Records a call, waits at its gate if it is held, then fails it if told to.
    async fn pass(&self, call: &str) -> Result<()> {
        let gate = lock(&self.gates).get(call).map(|g| g.subscribe());
        lock(&self.calls).push(call.to_string());
        if let Some(mut gate) = gate {
            let _ = gate.wait_for(|open| *open).await;
        }
        if lock(&self.failing).contains(call) {
            return Err(Error::internal(format!("injected failure of {call}")));
        }
        Ok(())
    }

    /// Records a call; fails it if told to.
    fn check(&self, call: &str) -> Result<()> {
        lock(&self.calls).push(call.to_string());
        if lock(&self.failing).contains(call) {
            return Err(Error::internal(format!("injected failure of {call}")));
        }
        Ok(())
    }
}

/// A task (container or exec) in a fake shim.
#[derive(Debug, Clone)]
struct Task {
    pid: u32,
    status: Status,
    exit: Option<Exit>,
}

/// One pod's fake shim: tasks that run until killed.
pub struct FakeShim {
    faults: Arc<Faults>,
    sandbox_id: String,
    /// The pool it is in while it runs.
    live: LiveShims,
    tasks: Mutex<HashMap<(String, String), Task>>,
    exited: tokio::sync::watch::Sender<u64>,
    /// True once the shim "died" ([`FakeShims::crash`]).
    dead: tokio::sync::watch::Sender<bool>,
    next_pid: Mutex<u32>,
}

impl FakeShim {
    fn new(faults: Arc<Faults>, sandbox_id: &str, live: LiveShims) -> FakeShim {
        FakeShim {
            faults,
            sandbox_id: sandbox_id.to_string(),
            live,
            tasks: Mutex::new(HashMap::new()),
            exited: tokio::sync::watch::channel(0).0,
            dead: tokio::sync::watch::channel(false).0,
            next_pid: Mutex::new(1000),
        }
    }

    /// A call to this shim: fails as a closed connection once it died.
    /// Like [`FakeShim::check`], but waits at the call's gate if it is held.
    async fn pass(&self, call: &str) -> Result<()> {
        self.check_alive(call)?;
        self.faults.pass(call).await
    }

    fn check_alive(&self, call: &str) -> Result<()> {
        if *self.dead.borrow() {
            return Err(Error::internal(format!(
                "shim: {call}: the connection is closed"
            )));
        }
        Ok(())
    }

    fn check(&self, call: &str) -> Result<()> {
        if *self.dead.borrow() {
            return Err(Error::internal(format!(
                "shim: {call}: the connection is closed"
            )));
        }
        self.faults.check(call)
    }

    fn key(id: &str, exec_id: &str) -> (String, String) {
        (id.to_string(), exec_id.to_string())
    }

    fn not_found(id: &str, exec_id: &str) -> Error {
        Error::not_found(format!("task {id}/{exec_id} not found"))
    }

    /// Ids of the containers (not execs) this shim holds.
    pub fn task_ids(&self) -> BTreeSet<String> {
        lock(&self.tasks)
            .keys()
            .filter(|(_, e)| e.is_empty())
            .map(|(id, _)| id.clone())
            .collect()
    }

    /// The exec ids (of any container) this shim holds.
    pub fn exec_ids(&self) -> BTreeSet<String> {
        lock(&self.tasks)
            .keys()
            .filter(|(_, e)| !e.is_empty())
            .map(|(_, e)| e.clone())
            .collect()
    }

    /// Every exec'd process that runs exits with `code` (as if the command ended).
    pub fn exit_execs(&self, code: u32) {
        for ((_, exec_id), task) in lock(&self.tasks).iter_mut() {
            if !exec_id.is_empty() && task.status == Status::RUNNING {
                task.status = Status::STOPPED;
                task.exit = Some(Exit {
                    code,
                    at_ns: peapod_host::timefmt::now_ns(),
                });
            }
        }
        self.exited.send_modify(|n| *n += 1);
    }

    fn set_running(&self, id: &str, exec_id: &str) -> Result<u32> {
        let mut tasks = lock(&self.tasks);
        let task = tasks
            .get_mut(&Self::key(id, exec_id))
            .ok_or_else(|| Self::not_found(id, exec_id))?;
        task.status = Status::RUNNING;
        Ok(task.pid)
    }

    fn add_task(&self, id: &str, exec_id: &str) -> Result<u32> {
        let pid = {
            let mut next = lock(&self.next_pid);
            *next += 1;
            *next
        };
        let mut tasks = lock(&self.tasks);
        if tasks.contains_key(&Self::key(id, exec_id)) {
            return Err(Error::already_exists(format!("task {id}/{exec_id} exists")));
        }
        tasks.insert(
            Self::key(id, exec_id),
            Task {
                pid,
                status: Status::CREATED,
                exit: None,
            },
        );
        Ok(pid)
    }
}

#[async_trait]
impl Shim for FakeShim {
    async fn create(&self, task: &NewTask<'_>) -> Result<u32> {
        self.pass("shim.create").await?;
        if !task.options.restore.is_empty() {
            // A restore: `shim.restore` too, from images that must be there.
            self.pass("shim.restore").await?;
            if !Path::new(&task.options.restore)
                .join("inventory.img")
                .is_file()
            {
                return Err(Error::internal("restore: no CRIU images"));
            }
        }
        let pid = self.add_task(task.id, "")?;
        if task.options.start {
            self.set_running(task.id, "")?;
        }
        Ok(pid)
    }

    async fn start(&self, id: &str, exec_id: &str) -> Result<u32> {
        self.pass("shim.start_task").await?;
        self.set_running(id, exec_id)
    }

    async fn kill(&self, id: &str, exec_id: &str, signal: u32, _all: bool) -> Result<()> {
        self.pass("shim.kill").await?;
        {
            let mut tasks = lock(&self.tasks);
            let task = tasks
                .get_mut(&Self::key(id, exec_id))
                .ok_or_else(|| Self::not_found(id, exec_id))?;
            if task.status == Status::RUNNING {
                task.status = Status::STOPPED;
                task.exit = Some(Exit {
                    code: 128 + signal,
                    at_ns: peapod_host::timefmt::now_ns(),
                });
            }
        }
        self.exited.send_modify(|n| *n += 1);
        Ok(())
    }

    async fn delete(&self, id: &str, exec_id: &str) -> Result<Exit> {
        self.pass("shim.delete").await?;
        let task = lock(&self.tasks)
            .remove(&Self::key(id, exec_id))
            .ok_or_else(|| Self::not_found(id, exec_id))?;
        Ok(task.exit.unwrap_or(Exit { code: 0, at_ns: 0 }))
    }

    async fn wait(&self, id: &str, exec_id: &str) -> Result<Exit> {
        self.check("shim.wait")?;
        let mut exited = self.exited.subscribe();
        loop {
            {
                let tasks = lock(&self.tasks);
                let task = tasks
                    .get(&Self::key(id, exec_id))
                    .ok_or_else(|| Self::not_found(id, exec_id))?;
                if let Some(exit) = task.exit {
                    return Ok(exit);
                }
            }
            if *self.dead.borrow() {
                return Err(Error::internal("shim: wait: the connection is closed"));
            }
            exited
                .changed()
                .await
                .map_err(|_| Error::internal("fake shim dropped"))?;
        }
    }

    async fn state(&self, id: &str, exec_id: &str) -> Result<ProcessState> {
        self.check("shim.state")?;
        let tasks = lock(&self.tasks);
        let task = tasks
            .get(&Self::key(id, exec_id))
            .ok_or_else(|| Self::not_found(id, exec_id))?;
        Ok(ProcessState {
            pid: task.pid,
            status: task.status,
            exit: task.exit,
        })
    }

    async fn exec(
        &self,
        id: &str,
        exec_id: &str,
        _process_json: Vec<u8>,
        _io: &ExecIo,
    ) -> Result<()> {
        self.check("shim.exec")?;
        self.add_task(id, exec_id).map(drop)
    }

    async fn update(&self, id: &str, _resources_json: Vec<u8>) -> Result<()> {
        self.check("shim.update")?;
        self.state(id, "").await.map(drop)
    }

    async fn resize(&self, _id: &str, _exec_id: &str, _w: u32, _h: u32) -> Result<()> {
        self.check("shim.resize")
    }

    /// A running task's "dump": one image file, as CRIU's inventory, in `dump.images`.
    async fn checkpoint(&self, id: &str, dump: &crate::shim::Dump<'_>) -> Result<()> {
        self.pass("shim.checkpoint").await?;
        let state = self.state(id, "").await?;
        if state.status != Status::RUNNING {
            return Err(Error::failed_precondition(format!(
                "task {id} is not running"
            )));
        }
        std::fs::create_dir_all(dump.images)
            .and_then(|()| std::fs::write(dump.images.join("inventory.img"), id))
            .map_err(|e| Error::path("write", dump.images, e))
    }

    async fn reopen_log(&self, id: &str) -> Result<()> {
        self.check("shim.reopen_log")?;
        self.state(id, "").await.map(drop)
    }

    async fn shutdown_and_wait(&self) -> Result<()> {
        self.check("shim.shutdown")?;
        lock(&self.live).remove(&self.sandbox_id);
        self.dead.send_replace(true);
        Ok(())
    }

    async fn gone(&self) {
        let mut dead = self.dead.subscribe();
        let _ = dead.wait_for(|d| *d).await;
    }

    fn alive(&self) -> bool {
        !*self.dead.borrow()
    }
}

type LiveShims = Arc<Mutex<HashMap<String, Arc<FakeShim>>>>;

/// Fake shims, one per pod, "running" from `start` until a successful shutdown.
pub struct FakeShims {
    faults: Arc<Faults>,
    dir: PathBuf,
    live: LiveShims,
    /// Containers whose shim crashed, until `reap_orphans` removes them.
    orphans: Mutex<BTreeSet<String>>,
    /// The runtime handler each pod's shim was started with.
    handlers: Mutex<BTreeMap<String, crate::runtime_handlers::RuntimeHandler>>,
}

impl FakeShims {
    pub fn new(faults: Arc<Faults>, dir: &Path) -> FakeShims {
        FakeShims {
            faults,
            dir: dir.to_path_buf(),
            live: Arc::default(),
            orphans: Mutex::default(),
            handlers: Mutex::default(),
        }
    }

    /// The pods whose shim runs.
    pub fn live(&self) -> BTreeSet<String> {
        lock(&self.live).keys().cloned().collect()
    }

    pub fn shim(&self, sandbox_id: &str) -> Option<Arc<FakeShim>> {
        lock(&self.live).get(sandbox_id).cloned()
    }

    /// Every shim dies at once (a reboot), its tasks orphans.
    pub fn vanish_all(&self) {
        for id in self.live() {
            self.crash(&id);
        }
    }

    /// The pod's shim dies (as if killed): it stops serving and its tasks are orphans.
    pub fn crash(&self, sandbox_id: &str) {
        if let Some(shim) = lock(&self.live).remove(sandbox_id) {
            lock(&self.orphans).extend(shim.task_ids());
            shim.dead.send_replace(true);
            // Waiters see the connection close.
            shim.exited.send_modify(|n| *n += 1);
        }
    }

    /// The runtime handler the pod's shim was started with.
    pub fn handler_of(&self, sandbox_id: &str) -> Option<crate::runtime_handlers::RuntimeHandler> {
        lock(&self.handlers).get(sandbox_id).cloned()
    }

    /// Containers of dead shims not yet reaped through the OCI runtime.
    pub fn orphans(&self) -> BTreeSet<String> {
        lock(&self.orphans).clone()
    }
}

#[async_trait]
impl Shims for FakeShims {
    async fn start(
        &self,
        sandbox_id: &str,
        handler: &crate::runtime_handlers::RuntimeHandler,
        _log: &Path,
    ) -> Result<Arc<dyn Shim>> {
        self.faults.pass("shim.start").await?;
        lock(&self.handlers).insert(sandbox_id.to_string(), handler.clone());
        let shim = Arc::new(FakeShim::new(
            self.faults.clone(),
            sandbox_id,
            self.live.clone(),
        ));
        lock(&self.live).insert(sandbox_id.to_string(), shim.clone());
        Ok(shim)
    }

    async fn get(&self, sandbox_id: &str) -> Result<Arc<dyn Shim>> {
        self.faults.check("shim.get")?;
        let shim = self.shim(sandbox_id).ok_or_else(|| {
            Error::internal(format!("shim: connect: no shim for pod {sandbox_id}"))
        })?;
        Ok(shim)
    }

    fn forget(&self, _sandbox_id: &str) {}

    fn socket_path(&self, sandbox_id: &str) -> PathBuf {
        self.dir.join(crate::ids::short(sandbox_id))
    }

    fn attach_socket_path(&self, container_id: &str) -> PathBuf {
        self.dir
            .join(format!("{}.a", crate::ids::short(container_id)))
    }

    async fn release_idle_runtime(
        &self,
        _handler: &crate::runtime_handlers::RuntimeHandler,
    ) -> Result<()> {
        Ok(())
    }

    async fn reap_orphans(&self, container_ids: &[String]) -> Result<()> {
        self.faults.check("shim.reap_orphans")?;
        let mut orphans = lock(&self.orphans);
        for id in container_ids {
            orphans.remove(id);
        }
        Ok(())
    }
}

/// A fake CNI: the pods it has attached.
pub struct FakeNetwork {
    faults: Arc<Faults>,
    attached: Mutex<BTreeSet<String>>,
}

impl FakeNetwork {
    pub fn new(faults: Arc<Faults>) -> FakeNetwork {
        FakeNetwork {
            faults,
            attached: Mutex::default(),
        }
    }

    pub fn attached(&self) -> BTreeSet<String> {
        lock(&self.attached).clone()
    }
}

/// The IP every fake attachment gets.
pub const POD_IP: &str = "10.88.0.7";

#[async_trait]
impl PodNetwork for FakeNetwork {
    fn plan(&self, _sandbox_id: &str, _config: &PodSandboxConfig) -> Result<CniAttachment> {
        self.faults.check("cni.plan")?;
        Ok(CniAttachment {
            network: serde_json::json!({"name": "fake", "cniVersion": "1.0.0", "plugins": []}),
            result: serde_json::Value::Null,
            ifname: "eth0".into(),
            args: Vec::new(),
            runtime_config: serde_json::Value::Null,
            deleted: false,
        })
    }

    async fn setup(
        &self,
        sandbox_id: &str,
        _netns: &Path,
        _plan: &CniAttachment,
    ) -> Result<serde_json::Value> {
        self.faults.pass("cni.add").await?;
        lock(&self.attached).insert(sandbox_id.to_string());
        Ok(serde_json::json!({"ips": [{"address": format!("{POD_IP}/16")}]}))
    }

    async fn teardown(&self, sandbox_id: &str, _netns: &Path, _cni: &CniAttachment) -> Result<()> {
        self.faults.pass("cni.del").await?;
        lock(&self.attached).remove(sandbox_id);
        Ok(())
    }
}

/// A fake host: the namespaces pinned and the /dev/shm mounts made (as plain files and
/// directories, so the code around them sees them), the idmapped binds made and the owners
/// given (only noted: nothing is chowned or mounted).
pub struct FakeHost {
    faults: Arc<Faults>,
    pinned: Mutex<BTreeSet<PathBuf>>,
    mounts: Mutex<BTreeSet<PathBuf>>,
    idmapped: Mutex<BTreeSet<PathBuf>>,
    owners: Mutex<BTreeMap<PathBuf, (u32, u32)>>,
    cgroups_removed: Mutex<Vec<String>>,
    /// How many times a cgroup move was announced (`warm_cgroup_moves`).
    warmed: std::sync::atomic::AtomicUsize,
}

impl FakeHost {
    pub fn new(faults: Arc<Faults>) -> FakeHost {
        FakeHost {
            faults,
            pinned: Mutex::default(),
            mounts: Mutex::default(),
            idmapped: Mutex::default(),
            owners: Mutex::default(),
            warmed: Default::default(),
            cgroups_removed: Mutex::default(),
        }
    }

    /// The cgroups paths `remove_cgroup` was called with, in order.
    pub fn cgroups_removed(&self) -> Vec<String> {
        lock(&self.cgroups_removed).clone()
    }

    /// The targets of idmapped binds still mounted.
    pub fn idmapped(&self) -> BTreeSet<PathBuf> {
        lock(&self.idmapped).clone()
    }

    /// Who each path was given to (`chown`).
    pub fn owner(&self, path: &Path) -> Option<(u32, u32)> {
        lock(&self.owners).get(path).copied()
    }

    /// How many times a cgroup move was announced (`warm_cgroup_moves`).
    pub fn warmed(&self) -> usize {
        self.warmed.load(std::sync::atomic::Ordering::Relaxed)
    }

    pub fn pinned(&self) -> BTreeSet<PathBuf> {
        lock(&self.pinned).clone()
    }

    pub fn mounts(&self) -> BTreeSet<PathBuf> {
        lock(&self.mounts).clone()
    }
}

impl HostOps for FakeHost {
    fn pin_netns(
        &self,
        dir: &Path,
        name: &str,
        _userns: Option<&peapod_spec::PodUserNamespace>,
    ) -> Result<PathBuf> {
        self.faults.check("netns.pin")?;
        let path = dir.join(name);
        lock(&self.pinned).insert(path.clone());
        Ok(path)
    }

    fn give_back_addresses(
        &self,
        _netns: &Path,
        _addresses: Vec<crate::host_ops::netns::InterfaceAddress>,
    ) -> Result<()> {
        Ok(())
    }

    fn unpin_netns(&self, path: &Path) -> Result<()> {
        self.faults.check("netns.unpin")?;
        lock(&self.pinned).remove(path);
        Ok(())
    }

    fn mount_shm(&self, path: &Path) -> Result<()> {
        self.faults.check("shm.mount")?;
        std::fs::create_dir_all(path).map_err(|e| Error::path("create", path, e))?;
        lock(&self.mounts).insert(path.to_path_buf());
        Ok(())
    }

    fn unmount(&self, path: &Path) -> Result<()> {
        self.faults.check("unmount")?;
        lock(&self.mounts).remove(path);
        lock(&self.idmapped).remove(path);
        Ok(())
    }

    fn chown(&self, path: &Path, uid: u32, gid: u32) -> Result<()> {
        self.faults.check("host.chown")?;
        lock(&self.owners).insert(path.to_path_buf(), (uid, gid));
        Ok(())
    }

    fn warm_cgroup_moves(&self) {
        self.warmed
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    fn idmapped_bind(&self, bind: &peapod_host::userns::IdmappedBind<'_>, _: &Path) -> Result<()> {
        self.faults.check("host.idmapped_bind")?;
        lock(&self.idmapped).insert(bind.target.to_path_buf());
        Ok(())
    }

    fn remove_cgroup(&self, cgroups_path: &str) -> Result<()> {
        self.faults.check("host.remove_cgroup")?;
        lock(&self.cgroups_removed).push(cgroups_path.to_string());
        Ok(())
    }
}

/// A fake image store: images by reference, and the root filesystems made from them (plain
/// directories holding an /etc/passwd).
pub struct FakeImages {
    faults: Arc<Faults>,
    images: Mutex<HashMap<String, Image>>,
    rootfs: Mutex<HashMap<String, PathBuf>>,
}

/// CRIU as the tests want it: usable, unless `criu.check` is told to fail.
pub struct FakeCriu(pub Arc<Faults>);

impl crate::checkpoint::CriuCheck for FakeCriu {
    fn usable(&self) -> std::result::Result<(), String> {
        self.0.check("criu.check").map_err(|e| e.to_string())
    }
}

impl FakeImages {
    /// The faults its calls obey (shared by every fake of one harness).
    pub fn faults(&self) -> Arc<Faults> {
        self.faults.clone()
    }
}

/// The image every fake store has.
pub const IMAGE: &str = "busybox:latest";

impl FakeImages {
    pub fn new(faults: Arc<Faults>) -> FakeImages {
        let image = Image {
            id: format!("sha256:{}", "ab".repeat(32)),
            repo_tags: vec![IMAGE.into()],
            repo_digests: Vec::new(),
            size: 1,
            config: ImageConfig {
                cmd: vec!["sh".into()],
                ..Default::default()
            },
            pinned: false,
            artifact_type: None,
        };
        FakeImages {
            faults,
            images: Mutex::new(HashMap::from([(IMAGE.to_string(), image)])),
            rootfs: Mutex::default(),
        }
    }

    /// Adds image `name` with `config` (its id made from the name).
    pub fn add(&self, name: &str, config: ImageConfig) {
        let hex: String = name.bytes().map(|b| format!("{b:02x}")).collect();
        let image = Image {
            id: format!("sha256:{hex:0>64.64}"),
            repo_tags: vec![name.into()],
            repo_digests: Vec::new(),
            size: 1,
            config,
            pinned: false,
            artifact_type: None,
        };
        lock(&self.images).insert(name.to_string(), image);
    }

    /// The owners (sandbox or container ids) that have a root filesystem.
    pub fn rootfs_owners(&self) -> BTreeSet<String> {
        lock(&self.rootfs).keys().cloned().collect()
    }
}

#[async_trait]
impl Images for FakeImages {
    fn resolve(&self, reference: &str) -> Option<Image> {
        let images = lock(&self.images);
        images
            .get(reference)
            .or_else(|| images.values().find(|i| i.id == reference))
            .cloned()
    }

    async fn create_rootfs(&self, req: &peapod_image::RootfsRequest<'_>) -> Result<()> {
        self.faults.pass("rootfs.create").await?;
        let etc = req.target.join("etc");
        std::fs::create_dir_all(&etc).map_err(|e| Error::path("create", &etc, e))?;
        std::fs::write(etc.join("passwd"), "root:x:0:0:root:/root:/bin/sh\n")
            .map_err(|e| Error::path("write", &etc, e))?;
        lock(&self.rootfs).insert(req.container_id.to_string(), req.target.to_path_buf());
        Ok(())
    }

    async fn remove_rootfs(&self, owner_id: &str, target: &Path) -> Result<()> {
        self.faults.pass("rootfs.remove").await?;
        if lock(&self.rootfs).remove(owner_id).is_some() {
            std::fs::remove_dir_all(target).map_err(|e| Error::path("remove", target, e))?;
        }
        Ok(())
    }

    fn rootfs_ids(&self) -> Vec<String> {
        self.rootfs_owners().into_iter().collect()
    }

    /// The fake root filesystem is a plain directory: all of it is the container's writing.
    fn upper_dir(&self, owner_id: &str) -> Option<PathBuf> {
        lock(&self.rootfs).get(owner_id).cloned()
    }

    async fn add_pinned_local_image(
        &self,
        name: &str,
        _files: &[(String, Vec<u8>, u32)],
        config: ImageConfig,
    ) -> Result<()> {
        self.faults.check("image.add_local")?;
        let image = Image {
            id: format!("sha256:{}", "cd".repeat(32)),
            repo_tags: vec![name.to_string()],
            repo_digests: Vec::new(),
            size: 1,
            config,
            pinned: true,
            artifact_type: None,
        };
        lock(&self.images).insert(name.to_string(), image);
        Ok(())
    }
}

/// Fake process figures: what a test set for each pid (nothing for the others).
#[derive(Default)]
pub struct FakeProcessStats {
    samples: Mutex<HashMap<u32, crate::stats::Sample>>,
    net_dev: Mutex<HashMap<u32, String>>,
    parent_pressure: Mutex<HashMap<u32, crate::stats::cgroup::Pressure>>,
    parent_usage: Mutex<HashMap<u32, crate::stats::cgroup::Usage>>,
}

impl FakeProcessStats {
    /// `pid`'s cgroups have used `cpu_ns` of CPU and `memory` bytes, with `processes` in them.
    pub fn set(&self, pid: u32, cpu_ns: u64, memory: u64, processes: u64) {
        let sample = crate::stats::Sample {
            usage: crate::stats::cgroup::Usage {
                cpu_ns: Some(cpu_ns),
                memory_usage: Some(memory),
                working_set: Some(memory),
                ..Default::default()
            },
            processes,
            pressure: Default::default(),
        };
        lock(&self.samples).insert(pid, sample);
    }

    /// `pid`'s own cgroup reports `pressure` (after `set`).
    pub fn set_pressure(&self, pid: u32, pressure: crate::stats::cgroup::Pressure) {
        lock(&self.samples).entry(pid).or_default().pressure = pressure;
    }

    /// The parent of `pid`'s cgroup (a pod's cgroup, for its pause) reports `pressure`.
    pub fn set_parent_pressure(&self, pid: u32, pressure: crate::stats::cgroup::Pressure) {
        lock(&self.parent_pressure).insert(pid, pressure);
    }

    /// The parent of `pid`'s cgroup (a pod's cgroup, for its pause) reports `usage`.
    pub fn set_parent_usage(&self, pid: u32, usage: crate::stats::cgroup::Usage) {
        lock(&self.parent_usage).insert(pid, usage);
    }

    pub fn set_net_dev(&self, pid: u32, text: &str) {
        lock(&self.net_dev).insert(pid, text.to_string());
    }
}

impl crate::stats::ProcessStats for FakeProcessStats {
    fn sample(&self, pid: u32) -> crate::stats::Sample {
        lock(&self.samples).get(&pid).copied().unwrap_or_default()
    }

    fn net_dev(&self, pid: u32) -> Option<String> {
        lock(&self.net_dev).get(&pid).cloned()
    }

    fn parent_pressure(&self, pid: u32) -> crate::stats::cgroup::Pressure {
        lock(&self.parent_pressure)
            .get(&pid)
            .copied()
            .unwrap_or_default()
    }

    fn parent_usage(&self, pid: u32) -> Option<crate::stats::cgroup::Usage> {
        lock(&self.parent_usage).get(&pid).copied()
    }
}

/// Fake NRI plugins: every event the lifecycle sends, in order (`RunPodSandbox <pod>`,
/// `CreateContainer <id>`, `UndoCreateContainer <id>`, …), and refusals on demand: a fault on
/// `nri.run_pod_sandbox`, `nri.create_container`, `nri.start_container` or
/// `nri.update_container` makes that hook answer as a refusing plugin does
/// (FailedPrecondition). `adjust_env` is an adjustment every create gets.
#[derive(Default)]
pub struct FakeNri {
    faults: Arc<Faults>,
    events: Mutex<Vec<String>>,
    env: Mutex<Vec<String>>,
}

impl FakeNri {
    pub fn new(faults: Arc<Faults>) -> FakeNri {
        FakeNri {
            faults,
            ..Default::default()
        }
    }

    /// The events so far.
    pub fn events(&self) -> Vec<String> {
        lock(&self.events).clone()
    }

    /// The events about `id` (a pod or a container), by name.
    pub fn events_of(&self, id: &str) -> Vec<String> {
        lock(&self.events)
            .iter()
            .filter_map(|e| e.strip_suffix(&format!(" {id}")).map(str::to_string))
            .collect()
    }

    /// Every later create gets `KEY=VALUE` added to its process's environment.
    pub fn adjust_env(&self, kv: &str) {
        lock(&self.env).push(kv.to_string());
    }

    fn note(&self, event: &str, id: &str) {
        lock(&self.events).push(format!("{event} {id}"));
    }

    /// StopContainer reaches the plugins once per container, however many saw its exit
    /// (StopContainer and the exit watcher both do), as `peapod_nri::Runtime` ensures.
    fn stopped(&self, id: &str) {
        let event = format!("StopContainer {id}");
        let mut events = lock(&self.events);
        if !events.contains(&event) {
            events.push(event);
        }
    }

    /// A hook a plugin may refuse: noted, then refused if told to.
    fn ask(&self, event: &str, call: &str, id: &str) -> Result<()> {
        self.note(event, id);
        self.faults.check(call).map_err(|_| {
            Error::failed_precondition(format!("NRI plugin \"fake\" refused {event} of {id}"))
        })
    }
}

#[async_trait]
impl crate::nri::Nri for FakeNri {
    async fn restore(
        &self,
        _sandboxes: &crate::store::sandbox::SandboxRecords,
        _containers: &crate::store::container::ContainerRecords,
    ) {
    }
    fn serve_updates(&self, _updater: Arc<dyn peapod_nri::Updater>) {}
    async fn shutdown(&self) {}
    async fn run_pod_sandbox(&self, rec: &crate::store::sandbox::SandboxRecord) -> Result<()> {
        self.ask("RunPodSandbox", "nri.run_pod_sandbox", &rec.id)
    }
    async fn stop_pod_sandbox(&self, id: &str) {
        self.note("StopPodSandbox", id);
    }
    async fn remove_pod_sandbox(&self, id: &str) {
        self.note("RemovePodSandbox", id);
    }
    async fn create_container(
        &self,
        new: crate::nri::NewContainer<'_>,
        spec: &mut oci_spec::runtime::Spec,
    ) -> Result<()> {
        self.ask("CreateContainer", "nri.create_container", new.id)?;
        let env = lock(&self.env).clone();
        if let Some(process) = spec.process_mut() {
            let mut all = process.env().clone().unwrap_or_default();
            all.extend(env);
            process.set_env(Some(all));
        }
        Ok(())
    }
    async fn post_create_container(&self, id: &str) {
        self.note("PostCreateContainer", id);
    }
    async fn undo_create_container(&self, id: &str) {
        self.note("UndoCreateContainer", id);
    }
    async fn start_container(&self, id: &str) -> Result<()> {
        self.ask("StartContainer", "nri.start_container", id)
    }
    async fn post_start_container(&self, id: &str, _pid: u32, _started_at_ns: i64) {
        self.note("PostStartContainer", id);
    }
    async fn update_container(
        &self,
        id: &str,
        resources: peapod_proto::v1::LinuxContainerResources,
    ) -> Result<peapod_proto::v1::LinuxContainerResources> {
        self.ask("UpdateContainer", "nri.update_container", id)?;
        Ok(resources)
    }
    async fn post_update_container(&self, id: &str) {
        self.note("PostUpdateContainer", id);
    }
    async fn container_stopped(&self, rec: &crate::store::container::ContainerRecord) {
        if rec.state == crate::store::container::ContainerState::Exited {
            self.stopped(&rec.id);
        }
    }
    fn container_exited(&self, id: &str, _exit_code: i32, _finished_at_ns: i64) {
        self.stopped(id);
    }
    async fn remove_container(&self, id: &str) {
        self.note("RemoveContainer", id);
    }
}
