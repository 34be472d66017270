//! Faults end to end: a client deadline that expires mid-call, the daemon killed (as by
//! kill -9, through a failpoint's `exit`) at each step of the lifecycle, and a simulated
//! reboot. After each: every object is wholly there or wholly gone, pods that were up are
//! still up with the same started_at, and after removal nothing is left on the machine (no
//! mounts, netns, veths, IPAM reservations, cgroups, shims, runc state or directories).

use e2e::pods::{busybox, run_pod_with_app, sh, Images, Pod};
use e2e::{host, TestDaemon};
use peapod_proto::v1 as cri;
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(20);

/// A daemon with a pulled busybox and a pod that is up (with a running container) before
/// the fault, to show it is untouched by it.
struct Scene {
    d: TestDaemon,
    image: String,
    _images: Images,
    survivor: Pod,
    survivor_app: String,
    survivor_started_at: i64,
}

impl Scene {
    async fn new(name: &str) -> Scene {
        let mut d = TestDaemon::start(name).await;
        let images = Images::start();
        let image = images.push("busybox:faults", &busybox());
        d.pull(&image).await;
        let survivor = d.run_pod("survivor").await;
        let survivor_app = d
            .run_container(&survivor, sh("app", &image, "sleep 3600"))
            .await;
        let survivor_started_at = d.container_status(&survivor_app).await.started_at;
        Scene {
            d,
            image,
            _images: images,
            survivor,
            survivor_app,
            survivor_started_at,
        }
    }

    /// Restarts the daemon with `failpoint` set to exit the process at once.
    async fn arm(&mut self, failpoint: &str) {
        self.d.failpoints = Some(format!("{failpoint}=exit"));
        self.d.restart().await;
    }

    /// The call the failpoint is in has been made (and failed: the daemon died in it). Waits
    /// for the death, starts the daemon again without failpoints and checks the survivor.
    async fn after_crash<T: std::fmt::Debug>(&mut self, call: Result<T, tonic::Status>) {
        assert!(
            call.is_err(),
            "the call should have died with the daemon: {call:?}"
        );
        assert!(
            self.d.wait_daemon_exit(WAIT),
            "the daemon did not exit at the failpoint; log:\n{}",
            self.d.log()
        );
        self.d.failpoints = None;
        self.d.restart().await;
        assert_eq!(
            self.pod_state(&self.survivor.id.clone()).await,
            Some(cri::PodSandboxState::SandboxReady),
            "the pod that was up is still up; log:\n{}",
            self.d.log()
        );
        let app = self.survivor_app.clone();
        let st = self.d.container_status(&app).await;
        assert_eq!(st.state, cri::ContainerState::ContainerRunning as i32);
        assert_eq!(st.started_at, self.survivor_started_at, "same started_at");
    }

    async fn pod_state(&mut self, id: &str) -> Option<cri::PodSandboxState> {
        let items = self
            .d
            .cri
            .runtime
            .list_pod_sandbox(cri::ListPodSandboxRequest { filter: None })
            .await
            .expect("ListPodSandbox")
            .into_inner()
            .items;
        items
            .iter()
            .find(|p| p.id == id)
            .map(|p| cri::PodSandboxState::try_from(p.state).expect("a known state"))
    }

    async fn pods(&mut self) -> Vec<(String, String)> {
        let items = self
            .d
            .cri
            .runtime
            .list_pod_sandbox(cri::ListPodSandboxRequest { filter: None })
            .await
            .expect("ListPodSandbox")
            .into_inner()
            .items;
        items
            .into_iter()
            .map(|p| (p.metadata.unwrap_or_default().name, p.id))
            .collect()
    }

    async fn containers(&mut self) -> Vec<(String, i32)> {
        let items = self
            .d
            .cri
            .runtime
            .list_containers(cri::ListContainersRequest { filter: None })
            .await
            .expect("ListContainers")
            .into_inner()
            .containers;
        items.into_iter().map(|c| (c.id, c.state)).collect()
    }

    async fn run_pod(&mut self, name: &str) -> Result<String, tonic::Status> {
        let mut config = e2e::fixtures::sandbox_config(name, &self.d.cgroup_parent);
        config.log_directory = self.d.dir.join("logs").join(name).display().to_string();
        self.d
            .cri
            .runtime
            .run_pod_sandbox(cri::RunPodSandboxRequest {
                config: Some(config),
                runtime_handler: String::new(),
            })
            .await
            .map(|r| r.into_inner().pod_sandbox_id)
    }

    fn app(&self, name: &str) -> cri::ContainerConfig {
        sh(name, &self.image, "sleep 3600")
    }

    async fn stop_container(&mut self, id: &str) -> Result<(), tonic::Status> {
        self.d
            .cri
            .runtime
            .stop_container(cri::StopContainerRequest {
                container_id: id.into(),
                timeout: 0,
            })
            .await
            .map(drop)
    }

    async fn remove_container(&mut self, id: &str) -> Result<(), tonic::Status> {
        self.d
            .cri
            .runtime
            .remove_container(cri::RemoveContainerRequest {
                container_id: id.into(),
            })
            .await
            .map(drop)
    }

    async fn stop_pod(&mut self, id: &str) -> Result<(), tonic::Status> {
        self.d
            .cri
            .runtime
            .stop_pod_sandbox(cri::StopPodSandboxRequest {
                pod_sandbox_id: id.into(),
            })
            .await
            .map(drop)
    }

    async fn remove_pod(&mut self, id: &str) -> Result<(), tonic::Status> {
        self.d
            .cri
            .runtime
            .remove_pod_sandbox(cri::RemovePodSandboxRequest {
                pod_sandbox_id: id.into(),
            })
            .await
            .map(drop)
    }

    /// The host-local IPAM reservations (one file per IP) of this daemon's network.
    fn ip_reservations(&self) -> usize {
        let mut n = 0;
        if let Ok(d) = std::fs::read_dir(self.d.dir.join("ipam")) {
            for net in d.flatten() {
                if let Ok(files) = std::fs::read_dir(net.path()) {
                    n += files
                        .flatten()
                        .filter(|f| {
                            let f = f.file_name().to_string_lossy().into_owned();
                            f != "lock" && !f.starts_with("last_reserved_ip")
                        })
                        .count();
                }
            }
        }
        n
    }

    /// Only the survivor's network is left: one veth on the bridge, one IP reserved, one
    /// pinned namespace.
    fn only_the_survivor_is_networked(&self) {
        assert_eq!(host::bridge_ports(&self.d.bridge).len(), 1, "veths");
        assert_eq!(self.ip_reservations(), 1, "IPAM reservations");
        let netns = std::fs::read_dir(self.d.state.join("netns"))
            .map(|d| d.count())
            .unwrap_or(0);
        assert_eq!(netns, 1, "pinned namespaces");
    }

    /// Removes every pod; nothing may be left.
    async fn finish(mut self) {
        for (_, id) in self.pods().await {
            let stopped = self.stop_pod(&id).await;
            assert!(
                stopped.is_ok(),
                "StopPodSandbox {id}: {stopped:?}\n{}",
                self.d.log()
            );
            let removed = self.remove_pod(&id).await;
            assert!(
                removed.is_ok(),
                "RemovePodSandbox {id}: {removed:?}\n{}",
                self.d.log()
            );
        }
        let left = self.d.leftovers();
        assert!(left.is_empty(), "{left:#?}\n{}", self.d.log());
        assert!(!self.d.log().contains("panicked"), "{}", self.d.log());
    }
}

// ---- an expired client deadline, then an identical retry ----------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_deadlines_on_run_create_start_then_identical_retries_make_one_object_each() {
    let mut s = Scene::new("fdeadline").await;
    // Each step is made slow (3 s) right after its side effect, so the 500 ms deadline
    // expires in the middle of the call.
    s.d.failpoints = Some(
        "sandbox.run.after-cni-add=sleep(3000);container.create.after-rootfs=sleep(3000);\
         container.start.after-runtime-start=sleep(3000)"
            .into(),
    );
    s.d.restart().await;
    let short = Duration::from_millis(500);

    let first = tokio::time::timeout(short, s.run_pod("victim")).await;
    assert!(first.is_err(), "the deadline expires first");
    let pod = s.run_pod("victim").await.expect("the identical retry");
    let victims: Vec<_> = s
        .pods()
        .await
        .into_iter()
        .filter(|(n, _)| n == "victim")
        .collect();
    assert_eq!(
        victims,
        vec![("victim".to_string(), pod.clone())],
        "one pod"
    );
    assert_eq!(
        s.pod_state(&pod).await,
        Some(cri::PodSandboxState::SandboxReady)
    );
    let again = s
        .run_pod("victim")
        .await
        .expect("a retry after it finished");
    assert_eq!(again, pod);

    let config = e2e::fixtures::sandbox_config("victim", &s.d.cgroup_parent);
    let mut config = config;
    config.log_directory = s.d.dir.join("logs").join("victim").display().to_string();
    let victim = Pod {
        id: pod.clone(),
        config,
    };
    let app = s.app("app");
    let first = tokio::time::timeout(short, s.d.create(&victim, app.clone())).await;
    assert!(first.is_err(), "the deadline expires first");
    let c =
        s.d.create(&victim, app.clone())
            .await
            .expect("the identical retry");
    let before = s.containers().await.len();
    assert_eq!(s.d.create(&victim, app).await.expect("once more"), c);
    assert_eq!(s.containers().await.len(), before, "one container");

    let first = tokio::time::timeout(short, s.d.start_container(&c)).await;
    assert!(first.is_err(), "the deadline expires first");
    s.d.start_container(&c)
        .await
        .expect("the retry of the start");
    let st = s.d.container_status(&c).await;
    assert_eq!(st.state, cri::ContainerState::ContainerRunning as i32);

    s.d.failpoints = None;
    s.finish().await;
}

// ---- the daemon killed at each step of RunPodSandbox --------------------------------------

/// RunPodSandbox dies at `failpoint`: after the restart the half-made pod is gone (its CNI
/// reservation released), and the same pod runs.
async fn run_pod_sandbox_dies_at(name: &str, failpoint: &str) {
    let mut s = Scene::new(name).await;
    s.arm(failpoint).await;
    let call = s.run_pod("victim").await;
    s.after_crash(call).await;
    let names: Vec<String> = s.pods().await.into_iter().map(|(n, _)| n).collect();
    assert_eq!(
        names,
        vec!["survivor".to_string()],
        "the half-made pod is gone"
    );
    s.only_the_survivor_is_networked();
    let pod = s.run_pod("victim").await.expect("the name is free again");
    assert_eq!(
        s.pod_state(&pod).await,
        Some(cri::PodSandboxState::SandboxReady)
    );
    s.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_after_the_sandbox_record() {
    run_pod_sandbox_dies_at("frecord", "sandbox.run.after-record").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_after_the_netns_pin() {
    run_pod_sandbox_dies_at("fnetns", "sandbox.run.after-netns").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_after_cni_add() {
    run_pod_sandbox_dies_at("fcniadd", "sandbox.run.after-cni-add").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_after_the_shim_start() {
    run_pod_sandbox_dies_at("fshim", "sandbox.run.after-shim-start").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_after_the_pause_start() {
    run_pod_sandbox_dies_at("fpause", "sandbox.run.after-pause-start").await;
}

// ---- the daemon killed at each step of CreateContainer ------------------------------------

async fn create_container_dies_at(name: &str, failpoint: &str) {
    let mut s = Scene::new(name).await;
    s.arm(failpoint).await;
    let survivor = s.survivor.clone();
    let app = s.app("late");
    let call = s.d.create(&survivor, app.clone()).await;
    s.after_crash(call).await;
    let ids: Vec<String> = s.containers().await.into_iter().map(|(id, _)| id).collect();
    assert_eq!(
        ids,
        vec![s.survivor_app.clone()],
        "the half-made container is gone"
    );
    let c =
        s.d.create(&survivor, app)
            .await
            .expect("the name is free again");
    s.d.start_container(&c).await.expect("and it starts");
    s.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_after_the_container_record() {
    create_container_dies_at("fcrecord", "container.create.after-record").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_after_the_container_rootfs() {
    create_container_dies_at("frootfs", "container.create.after-rootfs").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_after_the_runtime_create() {
    create_container_dies_at("fruncreate", "container.create.after-runtime-create").await;
}

// ---- start, stop, remove ------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_after_the_runtime_start() {
    let mut s = Scene::new("frunstart").await;
    let survivor = s.survivor.clone();
    let c = s.d.create(&survivor, s.app("late")).await.unwrap();
    s.arm("container.start.after-runtime-start").await;
    let call = s.d.start_container(&c).await;
    s.after_crash(call).await;
    let st = s.d.container_status(&c).await;
    assert_eq!(
        st.state,
        cri::ContainerState::ContainerRunning as i32,
        "found running"
    );
    s.d.start_container(&c)
        .await
        .expect("a retry of the start is fine");
    s.stop_container(&c).await.expect("and it stops");
    let st = s.d.wait_exited(&c, WAIT).await;
    assert_eq!(st.exit_code, 137);
    s.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_after_the_stop_kill() {
    let mut s = Scene::new("fstop").await;
    let survivor = s.survivor.clone();
    let c = s.d.run_container(&survivor, s.app("late")).await;
    s.arm("container.stop.after-kill").await;
    let call = s.stop_container(&c).await;
    s.after_crash(call).await;
    // The exit happened while the daemon was down: reported with its code.
    let st = s.d.wait_exited(&c, WAIT).await;
    assert_eq!(st.exit_code, 137, "{st:?}");
    assert!(st.finished_at >= st.started_at);
    s.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_after_the_runtime_delete() {
    let mut s = Scene::new("fremove").await;
    let survivor = s.survivor.clone();
    let c = s.d.run_container(&survivor, s.app("late")).await;
    s.arm("container.remove.after-runtime-delete").await;
    let call = s.remove_container(&c).await;
    s.after_crash(call).await;
    let listed = s.containers().await;
    assert!(
        listed
            .iter()
            .any(|(id, st)| *id == c && *st == cri::ContainerState::ContainerExited as i32),
        "still listed, exited, for the remove to finish: {listed:?}"
    );
    s.remove_container(&c).await.expect("the remove finishes");
    assert_eq!(s.containers().await.len(), 1);
    s.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_after_cni_del_of_a_stop() {
    let mut s = Scene::new("fstopdel").await;
    let victim = s.run_pod("victim").await.unwrap();
    s.arm("sandbox.stop.after-cni-del").await;
    let call = s.stop_pod(&victim).await;
    s.after_crash(call).await;
    assert_eq!(
        s.pod_state(&victim).await,
        Some(cri::PodSandboxState::SandboxNotready)
    );
    s.only_the_survivor_is_networked();
    s.finish().await;
}

async fn remove_pod_sandbox_dies_at(name: &str, failpoint: &str) {
    let mut s = Scene::new(name).await;
    let victim = s.run_pod("victim").await.unwrap();
    s.stop_pod(&victim).await.unwrap();
    s.arm(failpoint).await;
    let call = s.remove_pod(&victim).await;
    s.after_crash(call).await;
    assert_eq!(
        s.pod_state(&victim).await,
        Some(cri::PodSandboxState::SandboxNotready),
        "listed until its removal finishes"
    );
    s.remove_pod(&victim).await.expect("the removal finishes");
    assert_eq!(s.pod_state(&victim).await, None);
    s.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_after_cni_del_of_a_remove() {
    remove_pod_sandbox_dies_at("frmdel", "sandbox.remove.after-cni-del").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_after_the_shim_shutdown_of_a_remove() {
    remove_pod_sandbox_dies_at("frmshim", "sandbox.remove.after-shim-shutdown").await;
}

// ---- a reboot -----------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_reboot_pods_are_not_ready_and_removal_releases_everything() {
    let mut s = Scene::new("freboot").await;
    let pods = 4;
    let mut extra = Vec::new();
    for i in 0..pods {
        let id = s.run_pod(&format!("more{i}")).await.unwrap();
        extra.push(id);
    }
    let survivor = s.survivor.clone();
    let created = s.d.create(&survivor, s.app("created")).await.unwrap();
    assert_eq!(s.ip_reservations(), pods + 1);

    // The machine goes down: the daemon, the shims and every container process die, the
    // cgroups go, and the runtime directory (a tmpfs like /run) comes back empty.
    s.d.kill_daemon();
    for pid in host::processes_with(&format!("{}/", s.d.state.display())) {
        // SAFETY: kill has no memory-safety preconditions.
        unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    }
    host::remove_cgroup_tree(&s.d.cgroup_parent);
    host::unmount_all_under(&s.d.state);
    host::unmount_all_under(&s.d.root);
    std::fs::remove_dir_all(&s.d.state).unwrap();

    s.d.restart().await;
    let log = s.d.log();
    let recovery = log
        .lines()
        .rfind(|l| l.contains("recovery at start done"))
        .unwrap_or_default()
        .to_string();
    println!("recovery after a reboot with {} pods: {recovery}", pods + 1);
    for (name, id) in s.pods().await {
        assert_eq!(
            s.pod_state(&id).await,
            Some(cri::PodSandboxState::SandboxNotready),
            "{name} after the reboot"
        );
    }
    for (id, state) in s.containers().await {
        assert_eq!(state, cri::ContainerState::ContainerExited as i32, "{id}");
    }
    let st = s.d.container_status(&created).await;
    assert_eq!(st.state, cri::ContainerState::ContainerExited as i32);
    // Removal runs CNI DEL: the IPAM reservations (kept in a persistent directory, like
    // /var/lib/cni) go with the pods.
    assert_eq!(
        s.ip_reservations(),
        pods + 1,
        "reservations outlive the reboot"
    );
    s.finish().await;
}

// ---- kill -9 at arbitrary moments, a dozen times --------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dozen_kill_9s_during_run_create_start_leave_nothing_after_removal() {
    let mut s = Scene::new("fchurn").await;
    let mut recoveries = Vec::new();
    for round in 0..12u64 {
        // Calls in flight on their own connection while the daemon is killed at a moment that
        // moves through the lifecycle from round to round.
        let mut cri = s.d.cri.clone();
        let cgroup_parent = s.d.cgroup_parent.clone();
        let logs = s.d.dir.join("logs");
        let image = s.image.clone();
        let calls = tokio::spawn(async move {
            let name = format!("churn{round}");
            run_pod_with_app(&mut cri, &name, &cgroup_parent, &logs, &image, "sleep 3600").await
        });
        tokio::time::sleep(Duration::from_millis(40 * round)).await;
        s.d.kill_daemon();
        let _ = calls.await;
        s.d.restart().await;
        let log = s.d.log();
        if let Some(line) = log.lines().rfind(|l| l.contains("recovery at start done")) {
            let ms = line
                .split("elapsed_ms=")
                .nth(1)
                .and_then(|r| r.split(' ').next())
                .unwrap_or("?");
            recoveries.push(ms.to_string());
        }
        // Whatever the moment: every pod listed is whole (ready with its network, or not
        // ready and removable), and the one that was up before is untouched.
        assert_eq!(
            s.pod_state(&s.survivor.id.clone()).await,
            Some(cri::PodSandboxState::SandboxReady)
        );
    }
    println!(
        "recovery at each of 12 restarts (ms): {}",
        recoveries.join(" ")
    );
    let listed = s.pods().await.len();
    println!("pods listed after 12 kills: {listed} (the survivor and those that finished)");
    s.finish().await;
}

// ---- recovery of many running pods ----------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_running_pods_come_back_after_kill_9_with_their_start_times() {
    let mut s = Scene::new("fmany").await;
    let mut apps = Vec::new();
    for i in 0..19 {
        let mut cri = s.d.cri.clone();
        let logs = s.d.dir.join("logs");
        let (_, c) = run_pod_with_app(
            &mut cri,
            &format!("many{i}"),
            &s.d.cgroup_parent.clone(),
            &logs,
            &s.image.clone(),
            "sleep 3600",
        )
        .await
        .expect("a running pod");
        let started_at = s.d.container_status(&c).await.started_at;
        apps.push((c, started_at));
    }
    s.d.kill_daemon();
    s.d.restart().await;
    let log = s.d.log();
    let line = log
        .lines()
        .rfind(|l| l.contains("recovery at start done"))
        .unwrap_or_default()
        .to_string();
    println!("recovery with 20 running pods after kill -9: {line}");
    assert!(line.contains("pods_ready=20"), "{line}");
    for (name, id) in s.pods().await {
        assert_eq!(
            s.pod_state(&id).await,
            Some(cri::PodSandboxState::SandboxReady),
            "{name}"
        );
    }
    for (c, started_at) in &apps {
        let st = s.d.container_status(c).await;
        assert_eq!(st.state, cri::ContainerState::ContainerRunning as i32);
        assert_eq!(st.started_at, *started_at);
    }
    s.finish().await;
}

// ---- orphans --------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orphans_no_record_claims_are_removed_at_start() {
    let mut d = TestDaemon::start("forphan").await;
    // What a crash could leave without a record: a pod directory with its /dev/shm mounted,
    // and container directories.
    let shm = d.state.join("sandboxes").join("0rphan").join("shm");
    std::fs::create_dir_all(&shm).unwrap();
    let mounted = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "shm"])
        .arg(&shm)
        .status()
        .unwrap();
    assert!(mounted.success());
    let dirs = [
        d.root.join("containers").join("0rphan"),
        d.state.join("containers").join("0rphan"),
    ];
    for dir in &dirs {
        std::fs::create_dir_all(dir).unwrap();
    }
    d.kill_daemon();
    d.restart().await;
    assert!(
        !shm.exists(),
        "the orphan pod directory, unmounted and removed"
    );
    for dir in &dirs {
        assert!(!dir.exists(), "{}", dir.display());
    }
    assert!(d.log().contains("orphans=3"), "{}", d.log());
    let left = d.leftovers();
    assert!(left.is_empty(), "{left:#?}");
}

// ---- the binary users run has no crash points -------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_peapod_users_run_ignores_peapod_failpoints() {
    // Inherited by the daemon this test starts (and harmless to the other tests': only the
    // test daemon peapod-failpoints reads it, and it is given its own value).
    std::env::set_var("PEAPOD_FAILPOINTS", "sandbox.run.after-record=exit");
    let mut d = TestDaemon::start("fnofp").await;
    let pod = d.run_pod("armed").await;
    assert!(
        !d.wait_daemon_exit(Duration::from_millis(200)),
        "the daemon is still running"
    );
    assert!(!d.log().contains("failpoint"), "{}", d.log());
    d.remove_pod(&pod).await;
    std::env::remove_var("PEAPOD_FAILPOINTS");
    let left = d.leftovers();
    assert!(left.is_empty(), "{left:#?}");
}

// ---- helpers a dead daemon left running ---------------------------------------------------

/// A CNI plugin in the middle of ADD when the daemon is killed goes on by itself; recovery
/// kills it before its rollback (CNI DEL, unpin), or it would make its veth and reserve its
/// address after DEL ran, and both would stay for good.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cni_plugin_left_running_by_a_killed_daemon_is_killed_before_the_rollback() {
    let bin = tempfile::tempdir().unwrap();
    let marker = bin.path().join("orphan-went-on");
    let bridge = ["/usr/lib/cni/bridge", "/opt/cni/bin/bridge"]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists())
        .expect("the bridge plugin");
    let script = bin.path().join("slowbridge");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\nif [ \"$CNI_COMMAND\" = ADD ]; then sleep 3; touch {m}; fi\nexec {bridge}\n",
            m = marker.display()
        ),
    )
    .unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let mut d = TestDaemon::start_with(
        "forphcni",
        e2e::DaemonOptions {
            extra_cni_bin: Some(bin.path().to_path_buf()),
            conflist: Some(
                r#"{"cniVersion":"1.0.0","name":"e2e-{bridge}","plugins":[
                {"type":"slowbridge","bridge":"{bridge}","isGateway":true,"ipMasq":false,
                 "ipam":{"type":"host-local","ranges":[[{"subnet":"{subnet}"}]],"dataDir":"{dir}/ipam"}}]}"#
                    .into(),
            ),
            ..Default::default()
        },
    )
    .await;
    let mut config = e2e::fixtures::sandbox_config("orphaned", &d.cgroup_parent);
    config.log_directory = d.dir.join("logs").display().to_string();
    let call = {
        let mut cri = d.cri.clone();
        tokio::spawn(async move {
            cri.runtime
                .run_pod_sandbox(cri::RunPodSandboxRequest {
                    config: Some(config),
                    runtime_handler: String::new(),
                })
                .await
        })
    };
    // The plugin is in its ADD (sleeping) when the daemon dies.
    let state = d.state.display().to_string();
    let deadline = std::time::Instant::now() + WAIT;
    while host::processes_with("slowbridge").is_empty() {
        assert!(std::time::Instant::now() < deadline, "the plugin never ran");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    d.kill_daemon();
    let _ = call.await;
    d.restart().await;
    assert!(
        d.log()
            .contains("killing a helper a dead daemon left running"),
        "{}",
        d.log()
    );
    // Had it gone on, it would have finished its ADD by now.
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert!(
        !marker.exists(),
        "the orphaned plugin was killed before it went on"
    );
    assert!(host::processes_with("slowbridge").is_empty());
    let pods = d
        .cri
        .runtime
        .list_pod_sandbox(cri::ListPodSandboxRequest { filter: None })
        .await
        .unwrap()
        .into_inner()
        .items;
    assert!(pods.is_empty(), "rolled back: {pods:?}");
    let left = d.leftovers();
    assert!(left.is_empty(), "{left:#?}\n{}", d.log());
    let _ = state;
}
