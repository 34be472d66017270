//! An in-memory CRI for unit tests of the supervisor: sandboxes and containers with states,
//! exits the test decides, ExecSync answers the test sets, images present or pullable.

use crate::cri::{CriApi, CriResult};
use peapod_proto::v1 as cri;
use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;
use std::time::Duration;
use tonic::Status;

const CREATED: i32 = cri::ContainerState::ContainerCreated as i32;
const RUNNING: i32 = cri::ContainerState::ContainerRunning as i32;
const EXITED: i32 = cri::ContainerState::ContainerExited as i32;
const READY: i32 = cri::PodSandboxState::SandboxReady as i32;

#[derive(Debug, Clone)]
pub struct FakeContainer {
    pub id: String,
    pub sandbox: String,
    pub config: cri::ContainerConfig,
    pub state: i32,
    pub exit_code: i32,
    pub started_at: i64,
    pub finished_at: i64,
}

#[derive(Default)]
pub struct State {
    pub sandboxes: HashMap<String, (cri::PodSandboxConfig, i32)>,
    pub containers: HashMap<String, FakeContainer>,
    /// Container name → exit code it exits with as soon as it starts.
    pub exit_on_start: HashMap<String, i32>,
    /// Exit code of ExecSync per container name (default 0).
    pub exec_exit: HashMap<String, i32>,
    /// Container name → how many StartContainer calls fail before one succeeds.
    pub fail_start: HashMap<String, u32>,
    /// How many RunPodSandbox calls fail before one succeeds.
    pub fail_sandbox: u32,
    pub images: BTreeSet<String>,
    pub pullable: BTreeSet<String>,
    pub pulls: Vec<String>,
    pub calls: Vec<String>,
    next: u64,
}

#[derive(Default)]
pub struct FakeCri {
    pub state: Mutex<State>,
}

fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or(0)
}

impl FakeCri {
    pub fn st(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap()
    }

    /// Makes the running container named `name` exit with `code`.
    pub fn exit(&self, name: &str, code: i32) {
        let mut st = self.st();
        for c in st.containers.values_mut() {
            if c.config.metadata.as_ref().map(|m| m.name.as_str()) == Some(name)
                && c.state == RUNNING
            {
                c.state = EXITED;
                c.exit_code = code;
                c.finished_at = now_ns();
            }
        }
    }

    /// Names of created containers, in creation order, with their attempt.
    pub fn created(&self) -> Vec<(String, u32)> {
        let st = self.st();
        let mut v: Vec<&FakeContainer> = st.containers.values().collect();
        v.sort_by_key(|c| c.id.clone());
        v.iter()
            .map(|c| {
                let m = c.config.metadata.clone().unwrap_or_default();
                (m.name, m.attempt)
            })
            .collect()
    }
}

#[async_trait::async_trait]
impl CriApi for FakeCri {
    async fn run_pod_sandbox(&self, config: cri::PodSandboxConfig) -> CriResult<String> {
        let mut st = self.st();
        st.calls.push("RunPodSandbox".into());
        if st.fail_sandbox > 0 {
            st.fail_sandbox -= 1;
            return Err(Status::internal("plugin type=\"bridge\" failed (add)"));
        }
        st.next += 1;
        let id = format!("sb{:04}", st.next);
        st.sandboxes.insert(id.clone(), (config, READY));
        st.calls.push(format!("RunPodSandbox {id}"));
        Ok(id)
    }
    async fn pod_sandbox_ip(&self, _id: &str) -> CriResult<String> {
        Ok("10.0.0.7".into())
    }
    async fn pod_sandbox_ready(&self, id: &str) -> CriResult<bool> {
        Ok(self.st().sandboxes.get(id).is_some_and(|s| s.1 == READY))
    }
    async fn stop_pod_sandbox(&self, id: &str) -> CriResult<()> {
        let mut st = self.st();
        st.calls.push(format!("StopPodSandbox {id}"));
        if let Some(s) = st.sandboxes.get_mut(id) {
            s.1 = cri::PodSandboxState::SandboxNotready as i32;
        }
        for c in st.containers.values_mut() {
            if c.sandbox == id && c.state == RUNNING {
                c.state = EXITED;
                c.exit_code = 137;
                c.finished_at = now_ns();
            }
        }
        Ok(())
    }
    async fn remove_pod_sandbox(&self, id: &str) -> CriResult<()> {
        let mut st = self.st();
        st.calls.push(format!("RemovePodSandbox {id}"));
        st.sandboxes.remove(id);
        st.containers.retain(|_, c| c.sandbox != id);
        Ok(())
    }
    async fn list_pod_sandboxes(
        &self,
        labels: HashMap<String, String>,
    ) -> CriResult<Vec<cri::PodSandbox>> {
        let st = self.st();
        Ok(st
            .sandboxes
            .iter()
            .filter(|(_, (c, _))| labels.iter().all(|(k, v)| c.labels.get(k) == Some(v)))
            .map(|(id, (c, state))| cri::PodSandbox {
                id: id.clone(),
                labels: c.labels.clone(),
                state: *state,
                ..Default::default()
            })
            .collect())
    }
    async fn create_container(
        &self,
        sandbox_id: &str,
        config: cri::ContainerConfig,
        _sandbox_config: cri::PodSandboxConfig,
    ) -> CriResult<String> {
        let mut st = self.st();
        if !st.sandboxes.contains_key(sandbox_id) {
            return Err(Status::not_found("sandbox"));
        }
        st.next += 1;
        let id = format!("c{:04}", st.next);
        st.calls.push(format!(
            "CreateContainer {}",
            config
                .metadata
                .as_ref()
                .map(|m| m.name.clone())
                .unwrap_or_default()
        ));
        st.containers.insert(
            id.clone(),
            FakeContainer {
                id: id.clone(),
                sandbox: sandbox_id.into(),
                config,
                state: CREATED,
                exit_code: 0,
                started_at: 0,
                finished_at: 0,
            },
        );
        Ok(id)
    }
    async fn start_container(&self, id: &str) -> CriResult<()> {
        let mut st = self.st();
        let exits = st.exit_on_start.clone();
        let name = st
            .containers
            .get(id)
            .and_then(|c| c.config.metadata.as_ref().map(|m| m.name.clone()))
            .unwrap_or_default();
        if let Some(n) = st.fail_start.get_mut(&name) {
            if *n > 0 {
                *n -= 1;
                return Err(Status::internal("runc: exec format error"));
            }
        }
        let c = st
            .containers
            .get_mut(id)
            .ok_or_else(|| Status::not_found(id.to_string()))?;
        c.state = RUNNING;
        c.started_at = now_ns();
        let name = c
            .config
            .metadata
            .as_ref()
            .map(|m| m.name.clone())
            .unwrap_or_default();
        if let Some(code) = exits.get(&name) {
            c.state = EXITED;
            c.exit_code = *code;
            c.finished_at = now_ns();
        }
        Ok(())
    }
    async fn stop_container(&self, id: &str, _timeout: i64) -> CriResult<()> {
        let mut st = self.st();
        st.calls.push(format!("StopContainer {id}"));
        if let Some(c) = st.containers.get_mut(id) {
            if c.state == RUNNING {
                c.state = EXITED;
                c.exit_code = 137;
                c.finished_at = now_ns();
            }
        }
        Ok(())
    }
    async fn remove_container(&self, id: &str) -> CriResult<()> {
        let mut st = self.st();
        st.calls.push(format!("RemoveContainer {id}"));
        st.containers.remove(id);
        Ok(())
    }
    async fn container_status(&self, id: &str) -> CriResult<cri::ContainerStatus> {
        let st = self.st();
        let c = st
            .containers
            .get(id)
            .ok_or_else(|| Status::not_found(id.to_string()))?;
        Ok(cri::ContainerStatus {
            id: id.into(),
            metadata: c.config.metadata.clone(),
            state: c.state,
            started_at: c.started_at,
            finished_at: c.finished_at,
            exit_code: c.exit_code,
            image_ref: "img@sha256:1".into(),
            labels: c.config.labels.clone(),
            ..Default::default()
        })
    }
    async fn list_containers(
        &self,
        labels: HashMap<String, String>,
    ) -> CriResult<Vec<cri::Container>> {
        let st = self.st();
        Ok(st
            .containers
            .values()
            .filter(|c| {
                labels
                    .iter()
                    .all(|(k, v)| c.config.labels.get(k) == Some(v))
            })
            .map(|c| cri::Container {
                id: c.id.clone(),
                pod_sandbox_id: c.sandbox.clone(),
                metadata: c.config.metadata.clone(),
                labels: c.config.labels.clone(),
                state: c.state,
                ..Default::default()
            })
            .collect())
    }
    async fn exec_sync(
        &self,
        id: &str,
        _cmd: Vec<String>,
        _timeout: Duration,
    ) -> CriResult<cri::ExecSyncResponse> {
        let st = self.st();
        let c = st
            .containers
            .get(id)
            .ok_or_else(|| Status::not_found(id.to_string()))?;
        let name = c
            .config
            .metadata
            .as_ref()
            .map(|m| m.name.clone())
            .unwrap_or_default();
        let code = st.exec_exit.get(&name).copied().unwrap_or(0);
        Ok(cri::ExecSyncResponse {
            stdout: if code == 0 {
                Vec::new()
            } else {
                b"not healthy".to_vec()
            },
            stderr: Vec::new(),
            exit_code: code,
        })
    }
    async fn image_id(&self, image: &str) -> CriResult<Option<String>> {
        Ok(self
            .st()
            .images
            .contains(image)
            .then(|| format!("sha256:{image}")))
    }
    async fn pull_image(
        &self,
        image: &str,
        _sandbox_config: cri::PodSandboxConfig,
    ) -> CriResult<String> {
        let mut st = self.st();
        st.pulls.push(image.into());
        if st.pullable.contains(image) {
            st.images.insert(image.into());
            Ok(image.into())
        } else {
            Err(Status::not_found(format!("{image}: manifest unknown")))
        }
    }
}
