//! Pods and containers through CRI, for tests: images pushed to a registry of the test's own
//! and pulled by the daemon, sandboxes, containers, exits, logs.

use crate::daemon::TestDaemon;
use crate::fixtures::sandbox_config;
use peapod_image::testsupport::{ImageSpec, OciLayout, PushFormat, Registry};
use peapod_proto::v1 as cri;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// A registry on loopback plus the images pushed to it.
pub struct Images {
    pub registry: Registry,
    dir: tempfile::TempDir,
}

impl Images {
    pub fn start() -> Images {
        Images {
            registry: Registry::start().expect("start docker-registry"),
            dir: tempfile::tempdir().expect("tempdir"),
        }
    }

    /// Pushes `spec` as `name:tag` and returns the reference to pull.
    pub fn push(&self, name_tag: &str, spec: &ImageSpec) -> String {
        let layout_dir = self.dir.path().join(name_tag.replace([':', '/'], "_"));
        let mut layout = OciLayout::create(&layout_dir).expect("create OCI layout");
        layout.add_image("t", spec).expect("build image");
        self.registry
            .push(layout.dir(), "t", name_tag, PushFormat::Oci)
            .expect("push image");
        self.registry.reference(name_tag)
    }
}

impl TestDaemon {
    pub async fn pull(&mut self, reference: &str) -> String {
        match self.try_pull(reference).await {
            Ok(image_ref) => image_ref,
            Err(e) => panic!("PullImage {reference}: {e}\n{}", self.log()),
        }
    }

    /// PullImage without credentials: the image's ref, or the call's status.
    pub async fn try_pull(&mut self, reference: &str) -> Result<String, tonic::Status> {
        self.cri
            .image
            .pull_image(cri::PullImageRequest {
                image: Some(cri::ImageSpec {
                    image: reference.to_string(),
                    ..Default::default()
                }),
                ..Default::default()
            })
            .await
            .map(|r| r.into_inner().image_ref)
    }

    /// Entries in the image store's layer and content directories: a refused pull adds none.
    pub fn stored_content(&self) -> usize {
        let count = |p: PathBuf| std::fs::read_dir(p).map(|r| r.count()).unwrap_or(0);
        count(self.root.join("image/layers")) + count(self.root.join("image/blobs/sha256"))
    }

    /// Runs a pod whose logs go under the test directory.
    pub async fn run_pod(&mut self, name: &str) -> Pod {
        self.run_pod_with(name, |_| {}).await
    }

    /// Runs a pod after `tweak` changed its config.
    pub async fn run_pod_with(
        &mut self,
        name: &str,
        tweak: impl FnOnce(&mut cri::PodSandboxConfig),
    ) -> Pod {
        run_pod_in(self, name, tweak).await
    }

    /// RunPodSandbox with a runtime handler, after `tweak` changed the config.
    pub async fn run_pod_on(
        &mut self,
        name: &str,
        runtime_handler: &str,
        tweak: impl FnOnce(&mut cri::PodSandboxConfig),
    ) -> Result<Pod, tonic::Status> {
        try_run_pod_in(self, name, runtime_handler, tweak).await
    }

    pub async fn create(
        &mut self,
        pod: &Pod,
        config: cri::ContainerConfig,
    ) -> Result<String, tonic::Status> {
        create_in(self, pod, config).await
    }

    pub async fn start_container(&mut self, id: &str) -> Result<(), tonic::Status> {
        start_in(self, id).await
    }

    /// ListMetricDescriptors' descriptors.
    pub async fn metric_descriptors(&mut self) -> Vec<cri::MetricDescriptor> {
        self.cri
            .runtime
            .list_metric_descriptors(cri::ListMetricDescriptorsRequest {})
            .await
            .expect("ListMetricDescriptors")
            .into_inner()
            .descriptors
    }

    /// ContainerStats of container `id`; panics if the call fails or has no stats.
    pub async fn container_stats(&mut self, id: &str) -> cri::ContainerStats {
        self.cri
            .runtime
            .container_stats(cri::ContainerStatsRequest {
                container_id: id.to_string(),
            })
            .await
            .unwrap_or_else(|e| panic!("ContainerStats {id}: {e}"))
            .into_inner()
            .stats
            .unwrap_or_else(|| panic!("ContainerStats {id}: no stats"))
    }

    /// The metrics of pod `id` in ListPodSandboxMetrics; panics if it has none.
    pub async fn pod_metrics(&mut self, id: &str) -> cri::PodSandboxMetrics {
        self.cri
            .runtime
            .list_pod_sandbox_metrics(cri::ListPodSandboxMetricsRequest {})
            .await
            .expect("ListPodSandboxMetrics")
            .into_inner()
            .pod_metrics
            .into_iter()
            .find(|m| m.pod_sandbox_id == id)
            .unwrap_or_else(|| panic!("no metrics of pod {id}"))
    }

    /// StopContainer with `timeout` seconds of grace; panics if the call fails.
    pub async fn stop_container(&mut self, id: &str, timeout: i64) {
        self.cri
            .runtime
            .stop_container(cri::StopContainerRequest {
                container_id: id.to_string(),
                timeout,
            })
            .await
            .unwrap_or_else(|e| panic!("StopContainer {id}: {e}\n{}", self.log()));
    }

    /// Creates and starts; panics with the daemon log on failure.
    pub async fn run_container(&mut self, pod: &Pod, config: cri::ContainerConfig) -> String {
        run_container_in(self, pod, config).await
    }

    pub async fn container_status(&mut self, id: &str) -> cri::ContainerStatus {
        container_status_in(self, id).await
    }

    /// PodSandboxStatus (not verbose) of pod `id`.
    pub async fn pod_status(&mut self, id: &str) -> cri::PodSandboxStatus {
        self.cri
            .runtime
            .pod_sandbox_status(cri::PodSandboxStatusRequest {
                pod_sandbox_id: id.into(),
                verbose: false,
            })
            .await
            .unwrap_or_else(|e| panic!("PodSandboxStatus {id}: {e}"))
            .into_inner()
            .status
            .expect("a status")
    }

    /// ListContainers of one pod.
    pub async fn containers_of(&mut self, pod: &Pod) -> Vec<cri::Container> {
        self.cri
            .runtime
            .list_containers(cri::ListContainersRequest {
                filter: Some(cri::ContainerFilter {
                    pod_sandbox_id: pod.id.clone(),
                    ..Default::default()
                }),
            })
            .await
            .unwrap_or_else(|e| panic!("ListContainers of {}: {e}", pod.id))
            .into_inner()
            .containers
    }

    /// The verbose `info` of ContainerStatus (pid, rootfs, runtime spec, ...).
    pub async fn container_info(&mut self, id: &str) -> serde_json::Value {
        let resp = self
            .cri
            .runtime
            .container_status(cri::ContainerStatusRequest {
                container_id: id.to_string(),
                verbose: true,
            })
            .await
            .unwrap_or_else(|e| panic!("ContainerStatus {id}: {e}"))
            .into_inner();
        serde_json::from_str(&resp.info["info"]).expect("verbose info is JSON")
    }

    /// The verbose `info` of PodSandboxStatus (the pause's pid, ...).
    pub async fn pod_info(&mut self, id: &str) -> serde_json::Value {
        let resp = self
            .cri
            .runtime
            .pod_sandbox_status(cri::PodSandboxStatusRequest {
                pod_sandbox_id: id.to_string(),
                verbose: true,
            })
            .await
            .unwrap_or_else(|e| panic!("PodSandboxStatus {id}: {e}"))
            .into_inner();
        crate::fixtures::verbose_info(&resp.info)
    }

    /// Polls until the container has exited (at most `limit`).
    pub async fn wait_exited(&mut self, id: &str, limit: Duration) -> cri::ContainerStatus {
        let deadline = Instant::now() + crate::scaled(limit);
        loop {
            let st = self.container_status(id).await;
            if st.state == cri::ContainerState::ContainerExited as i32 {
                return st;
            }
            if Instant::now() > deadline {
                panic!(
                    "container {id} did not exit within {limit:?}: {st:?}\n{}",
                    self.log()
                );
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    /// Polls until the container's log has a line containing `needle` (at most `limit`).
    pub async fn wait_log(&mut self, id: &str, needle: &str, limit: Duration) -> Vec<LogLine> {
        let path = self.container_status(id).await.log_path;
        let deadline = Instant::now() + crate::scaled(limit);
        loop {
            let lines = read_log(Path::new(&path));
            if lines.iter().any(|l| l.text.contains(needle)) {
                return lines;
            }
            if Instant::now() > deadline {
                panic!(
                    "log of {id} has no {needle:?} within {limit:?}: {lines:#?}\n{}",
                    self.log()
                );
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    pub async fn remove_pod(&mut self, pod: &Pod) {
        remove_pod_in(self, pod).await
    }
}

/// A CRI server under test, peapod's daemon or containerd running the peapod shim: what the
/// pod helpers `*_in` need of it.
pub trait CriServer {
    fn cri(&mut self) -> &mut crate::Cri;
    fn cgroup_parent(&self) -> &str;
    /// Where pods' CRI logs go: `<logs_root>/<pod name>/`.
    fn logs_root(&self) -> PathBuf;
    /// The server's own log, for failure messages.
    fn server_log(&self) -> String;
}

impl CriServer for TestDaemon {
    fn cri(&mut self) -> &mut crate::Cri {
        &mut self.cri
    }

    fn cgroup_parent(&self) -> &str {
        &self.cgroup_parent
    }

    fn logs_root(&self) -> PathBuf {
        self.dir.join("logs")
    }

    fn server_log(&self) -> String {
        self.log()
    }
}

/// Runs pod `name` in `s` (logs under [`CriServer::logs_root`]) after `tweak` changed its
/// config; panics with the server's log on failure.
pub async fn run_pod_in(
    s: &mut impl CriServer,
    name: &str,
    tweak: impl FnOnce(&mut cri::PodSandboxConfig),
) -> Pod {
    try_run_pod_in(s, name, "", tweak)
        .await
        .unwrap_or_else(|e| panic!("RunPodSandbox {name}: {e}\n{}", s.server_log()))
}

/// RunPodSandbox of pod `name` in `s` with `runtime_handler` ("": the default), after `tweak`
/// changed its config.
pub async fn try_run_pod_in(
    s: &mut impl CriServer,
    name: &str,
    runtime_handler: &str,
    tweak: impl FnOnce(&mut cri::PodSandboxConfig),
) -> Result<Pod, tonic::Status> {
    let mut config = sandbox_config(name, s.cgroup_parent());
    tweak(&mut config);
    config.log_directory = s.logs_root().join(name).display().to_string();
    let id = s
        .cri()
        .runtime
        .run_pod_sandbox(cri::RunPodSandboxRequest {
            config: Some(config.clone()),
            runtime_handler: runtime_handler.into(),
        })
        .await?
        .into_inner()
        .pod_sandbox_id;
    Ok(Pod { id, config })
}

pub async fn create_in(
    s: &mut impl CriServer,
    pod: &Pod,
    config: cri::ContainerConfig,
) -> Result<String, tonic::Status> {
    s.cri()
        .runtime
        .create_container(cri::CreateContainerRequest {
            pod_sandbox_id: pod.id.clone(),
            config: Some(config),
            sandbox_config: Some(pod.config.clone()),
        })
        .await
        .map(|r| r.into_inner().container_id)
}

pub async fn start_in(s: &mut impl CriServer, id: &str) -> Result<(), tonic::Status> {
    s.cri()
        .runtime
        .start_container(cri::StartContainerRequest {
            container_id: id.to_string(),
        })
        .await
        .map(|_| ())
}

/// Creates and starts a container in `pod`; panics with the server's log on failure.
pub async fn run_container_in(
    s: &mut impl CriServer,
    pod: &Pod,
    config: cri::ContainerConfig,
) -> String {
    let name = config
        .metadata
        .as_ref()
        .map(|m| m.name.clone())
        .unwrap_or_default();
    let id = match create_in(s, pod, config).await {
        Ok(id) => id,
        Err(e) => panic!("CreateContainer {name}: {e}\n{}", s.server_log()),
    };
    if let Err(e) = start_in(s, &id).await {
        panic!("StartContainer {name}: {e}\n{}", s.server_log());
    }
    id
}

pub async fn container_status_in(s: &mut impl CriServer, id: &str) -> cri::ContainerStatus {
    s.cri()
        .runtime
        .container_status(cri::ContainerStatusRequest {
            container_id: id.to_string(),
            verbose: false,
        })
        .await
        .unwrap_or_else(|e| panic!("ContainerStatus {id}: {e}"))
        .into_inner()
        .status
        .expect("status")
}

/// ExecSync of `cmd` (30 s timeout); panics with the server's log on failure.
pub async fn exec_sync_in(s: &mut impl CriServer, id: &str, cmd: &[&str]) -> cri::ExecSyncResponse {
    let result = s
        .cri()
        .runtime
        .exec_sync(cri::ExecSyncRequest {
            container_id: id.to_string(),
            cmd: cmd.iter().map(|c| c.to_string()).collect(),
            timeout: 30,
        })
        .await;
    match result {
        Ok(r) => r.into_inner(),
        Err(e) => panic!("ExecSync {cmd:?} in {id}: {e}\n{}", s.server_log()),
    }
}

/// `config` with its pod's namespace options, as the kubelet (and critest) send them.
pub fn in_pod(pod: &Pod, mut config: cri::ContainerConfig) -> cri::ContainerConfig {
    let ns = pod
        .config
        .linux
        .as_ref()
        .and_then(|l| l.security_context.as_ref())
        .and_then(|s| s.namespace_options.clone());
    config
        .linux
        .get_or_insert_with(Default::default)
        .security_context
        .get_or_insert_with(Default::default)
        .namespace_options = ns;
    config
}

/// Stops and removes `pod`; panics with the server's log on failure.
pub async fn remove_pod_in(s: &mut impl CriServer, pod: &Pod) {
    s.cri()
        .runtime
        .stop_pod_sandbox(cri::StopPodSandboxRequest {
            pod_sandbox_id: pod.id.clone(),
        })
        .await
        .unwrap_or_else(|e| panic!("StopPodSandbox: {e}\n{}", s.server_log()));
    s.cri()
        .runtime
        .remove_pod_sandbox(cri::RemovePodSandboxRequest {
            pod_sandbox_id: pod.id.clone(),
        })
        .await
        .unwrap_or_else(|e| panic!("RemovePodSandbox: {e}\n{}", s.server_log()));
}

#[derive(Debug, Clone)]
pub struct Pod {
    pub id: String,
    pub config: cri::PodSandboxConfig,
}

/// Runs pod `name` (logs under `logs`) with one `sh -c script` container, created and started,
/// over its own client (for calls made concurrently, or cut short); returns the pod's and the
/// container's ids.
pub async fn run_pod_with_app(
    cri: &mut crate::Cri,
    name: &str,
    cgroup_parent: &str,
    logs: &Path,
    image: &str,
    script: &str,
) -> Result<(String, String), tonic::Status> {
    let mut config = sandbox_config(name, cgroup_parent);
    config.log_directory = logs.join(name).display().to_string();
    let pod = cri
        .runtime
        .run_pod_sandbox(cri::RunPodSandboxRequest {
            config: Some(config.clone()),
            runtime_handler: String::new(),
        })
        .await?
        .into_inner()
        .pod_sandbox_id;
    let cid = cri
        .runtime
        .create_container(cri::CreateContainerRequest {
            pod_sandbox_id: pod.clone(),
            config: Some(sh("app", image, script)),
            sandbox_config: Some(config),
        })
        .await?
        .into_inner()
        .container_id;
    cri.runtime
        .start_container(cri::StartContainerRequest {
            container_id: cid.clone(),
        })
        .await?;
    Ok((pod, cid))
}

/// A container config: name, image, command and args; logs at `<name>/0.log`.
pub fn container(name: &str, image: &str, command: &[&str], args: &[&str]) -> cri::ContainerConfig {
    cri::ContainerConfig {
        metadata: Some(cri::ContainerMetadata {
            name: name.to_string(),
            attempt: 0,
        }),
        image: Some(cri::ImageSpec {
            image: image.to_string(),
            ..Default::default()
        }),
        command: command.iter().map(|s| s.to_string()).collect(),
        args: args.iter().map(|s| s.to_string()).collect(),
        log_path: format!("{name}/0.log"),
        labels: HashMap::from([("container".to_string(), name.to_string())]),
        linux: Some(cri::LinuxContainerConfig::default()),
        ..Default::default()
    }
}

/// Sets the masked and read-only /proc paths the kubelet sends for every container whose
/// procMount is Default (an empty list means none, as containerd and CRI-O read it).
pub fn kubelet_proc_mask(sc: &mut cri::LinuxContainerSecurityContext) {
    let owned = |list: &[&str]| list.iter().map(|s| s.to_string()).collect();
    sc.masked_paths = owned(peapod_spec::DEFAULT_MASKED_PATHS);
    sc.readonly_paths = owned(peapod_spec::DEFAULT_READONLY_PATHS);
}

/// The pod's namespace options, made where missing.
pub fn namespace_options(pod: &mut cri::PodSandboxConfig) -> &mut cri::NamespaceOption {
    pod.linux
        .get_or_insert_with(Default::default)
        .security_context
        .get_or_insert_with(Default::default)
        .namespace_options
        .get_or_insert_with(Default::default)
}

/// A shell one-liner container (busybox sh).
pub fn sh(name: &str, image: &str, script: &str) -> cri::ContainerConfig {
    container(name, image, &["sh", "-c", script], &[])
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogLine {
    pub stream: String,
    pub tag: String,
    pub text: String,
}

/// Parses a CRI log file (`<RFC3339Nano> <stream> <P|F> <text>`).
pub fn read_log(path: &Path) -> Vec<LogLine> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let mut it = l.splitn(4, ' ');
            let _ts = it.next()?;
            Some(LogLine {
                stream: it.next()?.to_string(),
                tag: it.next()?.to_string(),
                text: it.next().unwrap_or("").to_string(),
            })
        })
        .collect()
}

/// The text of stdout F/P lines joined as the kubelet reassembles them.
pub fn stdout_text(lines: &[LogLine]) -> String {
    let mut out = String::new();
    for l in lines.iter().filter(|l| l.stream == "stdout") {
        out.push_str(&l.text);
        if l.tag == "F" {
            out.push('\n');
        }
    }
    out
}

pub fn busybox() -> ImageSpec {
    ImageSpec::busybox()
}

pub fn log_dir(d: &TestDaemon, pod: &str) -> PathBuf {
    d.dir.join("logs").join(pod)
}
