//! Unit-test support: fakes of the lifecycle's side effects ([`fakes`]) and a [`Harness`]
//! that builds the daemon core on them and calls it through the CRI service, as a client
//! would. No root, no shim, no runc, no CNI.

#[cfg(test)]
mod cancel_tests;
pub mod fakes;
#[cfg(test)]
mod fault_point_tests;
#[cfg(test)]
mod recovery_tests;

use crate::config::Config;
use crate::daemon::{Daemon, Effects};
use crate::server::CriService;
use fakes::{
    FakeHost, FakeImages, FakeNetwork, FakeNri, FakeProcessStats, FakeShims, Faults, IMAGE,
};
use peapod_proto::v1 as cri;
use peapod_proto::v1::runtime_service_server::RuntimeService;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tonic::{Request, Status};

/// The fakes a daemon is built on.
type Fakes<'a> = (
    &'a Arc<FakeShims>,
    &'a Arc<FakeNetwork>,
    &'a Arc<FakeHost>,
    &'a Arc<FakeImages>,
    &'a Arc<FakeProcessStats>,
    &'a Arc<FakeNri>,
);

pub struct Harness {
    pub dir: tempfile::TempDir,
    pub faults: Arc<Faults>,
    pub shims: Arc<FakeShims>,
    pub network: Arc<FakeNetwork>,
    pub host: Arc<FakeHost>,
    pub images: Arc<FakeImages>,
    pub process_stats: Arc<FakeProcessStats>,
    pub nri: Arc<FakeNri>,
    pub rt: Arc<Daemon>,
    pub cri: CriService,
}

/// Files and directories below `dir`, relative to it (empty if it does not exist).
fn entries(dir: &Path) -> BTreeSet<PathBuf> {
    std::fs::read_dir(dir)
        .map(|rd| rd.flatten().map(|e| PathBuf::from(e.file_name())).collect())
        .unwrap_or_default()
}

impl Harness {
    pub async fn new() -> Harness {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let faults = Arc::new(Faults::default());
        let shims = Arc::new(FakeShims::new(faults.clone(), &dir.path().join("s")));
        let network = Arc::new(FakeNetwork::new(faults.clone()));
        let host = Arc::new(FakeHost::new(faults.clone()));
        let images = Arc::new(FakeImages::new(faults.clone()));
        let process_stats = Arc::new(FakeProcessStats::default());
        let nri = Arc::new(FakeNri::new(faults.clone()));
        let store = peapod_image::Store::open(&dir.path().join("image"), Default::default())
            .await
            .expect("an empty image store");
        let fakes = (&shims, &network, &host, &images, &process_stats, &nri);
        let rt = Self::daemon(dir.path(), store, fakes).await;
        Harness {
            dir,
            faults,
            shims,
            network,
            host,
            images,
            process_stats,
            nri,
            cri: CriService::new(rt.clone(), peapod_metrics::Metrics::new().expect("metrics")),
            rt,
        }
    }

    async fn daemon(dir: &Path, store: Arc<peapod_image::Store>, fakes: Fakes<'_>) -> Arc<Daemon> {
        let (shims, network, host, images, process_stats, nri) = fakes;
        let mut config = Config {
            root: dir.join("root"),
            state: dir.join("state"),
            ..Config::default()
        };
        // The host's CDI spec directories are not the tests' (`cdi_dir` is).
        config.cdi.spec_dirs = vec![dir.join("cdi")];
        // Two runtime handlers besides the default: one with its runtime, one with another.
        for (name, path) in [("test-handler", "runc"), ("other-runtime", "crun")] {
            config.runtime.handlers.insert(
                name.into(),
                crate::config::RuntimeHandlerConfig {
                    path: path.into(),
                    ..Default::default()
                },
            );
        }
        let cni = Arc::new(crate::network::Network::new(&config.cni, &dir.join("cni")));
        let effects = Effects {
            shims: shims.clone(),
            pod_network: network.clone(),
            host: host.clone(),
            images: images.clone(),
            process_stats: process_stats.clone(),
            runtime_rro: false,
            apparmor: false,
            nri: nri.clone(),
            // The fakes do what a host that can would do.
            user_namespaces: Ok(()),
            criu: Arc::new(fakes::FakeCriu(images.faults())),
        };
        let rt = Daemon::assemble(config, store, cni, effects).expect("the daemon");
        rt.pods.recover().await;
        rt
    }

    /// A new daemon over the same directories and the same (still running) fakes, as after
    /// the daemon process was restarted (the image store, which locks its directory, is
    /// handed over).
    pub async fn restart(&mut self) {
        let fakes = (
            &self.shims,
            &self.network,
            &self.host,
            &self.images,
            &self.process_stats,
            &self.nri,
        );
        let rt = Self::daemon(self.dir.path(), self.rt.images.clone(), fakes).await;
        self.cri = CriService::new(rt.clone(), peapod_metrics::Metrics::new().expect("metrics"));
        self.rt = rt;
    }

    /// The one CDI spec directory of the daemon under test.
    pub fn cdi_dir(&self) -> PathBuf {
        self.dir.path().join("cdi")
    }

    pub fn pod_config(&self, name: &str) -> cri::PodSandboxConfig {
        cri::PodSandboxConfig {
            metadata: Some(cri::PodSandboxMetadata {
                name: name.into(),
                namespace: "default".into(),
                uid: format!("uid-{name}"),
                attempt: 0,
            }),
            hostname: name.into(),
            log_directory: self.dir.path().join("logs").to_string_lossy().into_owned(),
            ..Default::default()
        }
    }

    pub async fn run_pod(&self, name: &str) -> Result<String, Status> {
        self.run_pod_with(self.pod_config(name)).await
    }

    pub async fn run_pod_with(&self, config: cri::PodSandboxConfig) -> Result<String, Status> {
        self.run_pod_with_handler(config, "").await
    }

    /// RunPodSandbox asking for a runtime handler.
    pub async fn run_pod_with_handler(
        &self,
        config: cri::PodSandboxConfig,
        runtime_handler: &str,
    ) -> Result<String, Status> {
        let req = cri::RunPodSandboxRequest {
            config: Some(config),
            runtime_handler: runtime_handler.into(),
        };
        let resp = self.cri.run_pod_sandbox(Request::new(req)).await?;
        // RunPodSandbox spawns the pod's watch, which gets the pod's shim when first polled:
        // let it run now, so that a fault a test injects next into `shim.get` meets the call
        // under test, not the watch (which would take the shim for dead and the pod NOTREADY).
        tokio::task::yield_now().await;
        Ok(resp.into_inner().pod_sandbox_id)
    }

    pub async fn stop_pod(&self, id: &str) -> Result<(), Status> {
        let req = cri::StopPodSandboxRequest {
            pod_sandbox_id: id.into(),
        };
        self.cri.stop_pod_sandbox(Request::new(req)).await.map(drop)
    }

    pub async fn remove_pod(&self, id: &str) -> Result<(), Status> {
        let req = cri::RemovePodSandboxRequest {
            pod_sandbox_id: id.into(),
        };
        self.cri
            .remove_pod_sandbox(Request::new(req))
            .await
            .map(drop)
    }

    pub async fn pod_status(&self, id: &str) -> Result<cri::PodSandboxStatusResponse, Status> {
        let req = cri::PodSandboxStatusRequest {
            pod_sandbox_id: id.into(),
            verbose: false,
        };
        Ok(self
            .cri
            .pod_sandbox_status(Request::new(req))
            .await?
            .into_inner())
    }

    pub async fn pod_state(&self, id: &str) -> cri::PodSandboxState {
        let status = self.pod_status(id).await.expect("the pod's status");
        let state = status.status.expect("a status").state;
        cri::PodSandboxState::try_from(state).expect("a known state")
    }

    pub fn container_config(&self, name: &str) -> cri::ContainerConfig {
        cri::ContainerConfig {
            metadata: Some(cri::ContainerMetadata {
                name: name.into(),
                attempt: 0,
            }),
            image: Some(cri::ImageSpec {
                image: IMAGE.into(),
                ..Default::default()
            }),
            log_path: format!("{name}.log"),
            ..Default::default()
        }
    }

    pub async fn create_container_with(
        &self,
        pod: &str,
        config: cri::ContainerConfig,
    ) -> Result<String, Status> {
        let pod_name = self
            .pod_status(pod)
            .await
            .ok()
            .and_then(|s| s.status?.metadata)
            .map(|m| m.name)
            .unwrap_or_default();
        let req = cri::CreateContainerRequest {
            pod_sandbox_id: pod.into(),
            config: Some(config),
            sandbox_config: Some(self.pod_config(&pod_name)),
        };
        let resp = self.cri.create_container(Request::new(req)).await?;
        Ok(resp.into_inner().container_id)
    }

    pub async fn create_container(&self, pod: &str, name: &str) -> Result<String, Status> {
        self.create_container_with(pod, self.container_config(name))
            .await
    }

    /// Creates and starts a container (both must succeed).
    pub async fn run_container(&self, pod: &str, name: &str) -> String {
        let id = self
            .create_container(pod, name)
            .await
            .expect("CreateContainer");
        self.start_container(&id).await.expect("StartContainer");
        id
    }

    pub async fn start_container(&self, id: &str) -> Result<(), Status> {
        let req = cri::StartContainerRequest {
            container_id: id.into(),
        };
        self.cri.start_container(Request::new(req)).await.map(drop)
    }

    pub async fn stop_container(&self, id: &str, timeout: i64) -> Result<(), Status> {
        let req = cri::StopContainerRequest {
            container_id: id.into(),
            timeout,
        };
        self.cri.stop_container(Request::new(req)).await.map(drop)
    }

    pub async fn remove_container(&self, id: &str) -> Result<(), Status> {
        let req = cri::RemoveContainerRequest {
            container_id: id.into(),
        };
        self.cri.remove_container(Request::new(req)).await.map(drop)
    }

    pub async fn container_status(&self, id: &str) -> Result<cri::ContainerStatus, Status> {
        let req = cri::ContainerStatusRequest {
            container_id: id.into(),
            verbose: false,
        };
        let resp = self.cri.container_status(Request::new(req)).await?;
        Ok(resp.into_inner().status.expect("a status"))
    }

    pub async fn container_state(&self, id: &str) -> cri::ContainerState {
        let status = self
            .container_status(id)
            .await
            .expect("the container's status");
        cri::ContainerState::try_from(status.state).expect("a known state")
    }

    pub async fn pods(&self) -> Vec<cri::PodSandbox> {
        let req = cri::ListPodSandboxRequest { filter: None };
        let resp = self.cri.list_pod_sandbox(Request::new(req)).await;
        resp.expect("ListPodSandbox")
            .into_inner()
            .received()
            .expect("decode")
            .items
    }

    pub async fn containers(&self) -> Vec<cri::Container> {
        let req = cri::ListContainersRequest { filter: None };
        let resp = self.cri.list_containers(Request::new(req)).await;
        resp.expect("ListContainers")
            .into_inner()
            .received()
            .expect("decode")
            .containers
    }

    /// The ids of a pod's containers its shim holds (the pause under the pod's own id).
    pub fn shim_tasks(&self, pod: &str) -> BTreeSet<String> {
        self.shims
            .shim(pod)
            .map(|s| s.task_ids())
            .unwrap_or_default()
    }

    /// Directories the core keeps per object: sandbox and container record and runtime
    /// directories.
    pub fn object_dirs(&self) -> BTreeSet<PathBuf> {
        let cfg = &self.rt.config;
        let mut out = BTreeSet::new();
        for dir in [
            cfg.root.join("sandboxes"),
            cfg.root.join("containers"),
            cfg.state.join("sandboxes"),
            cfg.state.join("containers"),
        ] {
            out.extend(entries(&dir).into_iter().map(|e| dir.join(e)));
        }
        out
    }

    /// The containers' directories (`<root>/containers/<id>`, `<state>/containers/<id>`).
    pub fn container_dirs(&self) -> Vec<PathBuf> {
        self.object_dirs()
            .into_iter()
            .filter(|d| d.parent().is_some_and(|p| p.ends_with("containers")))
            .collect()
    }

    /// Nothing of any pod or container is left: no record, directory, shim, CNI attachment,
    /// pinned namespace, mount or root filesystem.
    pub async fn assert_nothing_left(&self) {
        assert!(
            self.pods().await.is_empty(),
            "pods: {:?}",
            self.pods().await
        );
        assert!(self.containers().await.is_empty(), "containers left");
        assert_eq!(self.object_dirs(), BTreeSet::new(), "directories left");
        assert_eq!(self.shims.live(), BTreeSet::new(), "shims left running");
        assert_eq!(
            self.network.attached(),
            BTreeSet::new(),
            "CNI attachments left"
        );
        assert_eq!(
            self.host.pinned(),
            BTreeSet::new(),
            "network namespaces left"
        );
        assert_eq!(self.host.mounts(), BTreeSet::new(), "mounts left");
        assert_eq!(
            self.shims.orphans(),
            BTreeSet::new(),
            "containers of a dead shim never killed"
        );
        assert_eq!(
            self.images.rootfs_owners(),
            BTreeSet::new(),
            "root filesystems left"
        );
    }
}
