//! An external NRI plugin for the integration tests, a real process on the runtime's NRI
//! socket (peapod-nri's stub speaks containerd/nri's protocol):
//!
//!   nri-test-plugin --socket PATH [--name N] [--idx NN] [--events FILE]
//!       [--env K=V]... [--annotation K=V]... [--mount HOSTDIR:CTRDIR]... [--nofile N]
//!       [--deny PREFIX] [--deny-pod PREFIX] [--sync-cpu-shares N]
//!
//! Every event it gets is appended to FILE as `<Event> <pod name>[/<container name>]`;
//! CreateContainer is answered with the given adjustments, or refused for containers whose
//! name starts with PREFIX (RunPodSandbox likewise with --deny-pod); with --sync-cpu-shares its Synchronize answer asks for N CPU
//! shares for every existing container. It prints `registered` once connected and runs until killed.

use peapod_nri::api::*;
use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;

#[derive(Default)]
struct TestPlugin {
    events: Option<PathBuf>,
    env: Vec<(String, String)>,
    annotations: Vec<(String, String)>,
    mounts: Vec<(String, String)>,
    nofile: Option<u64>,
    deny: Option<String>,
    deny_pod: Option<String>,
    sync_cpu_shares: Option<u64>,
}

impl TestPlugin {
    fn record(&self, event: &str, pod: &PodSandbox, container: Option<&Container>) {
        let Some(path) = &self.events else { return };
        let line = match container {
            Some(c) => format!("{event} {}/{}\n", pod.name, c.name),
            None => format!("{event} {}\n", pod.name),
        };
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path);
        if let Ok(mut f) = file {
            let _ = f.write_all(line.as_bytes());
        }
    }
}

#[async_trait::async_trait]
impl peapod_nri::stub::Plugin for TestPlugin {
    async fn synchronize(
        &self,
        pods: Vec<PodSandbox>,
        containers: Vec<Container>,
    ) -> Result<Vec<ContainerUpdate>, String> {
        for p in &pods {
            self.record("SyncPod", p, None);
        }
        for c in &containers {
            let pod = pods
                .iter()
                .find(|p| p.id == c.pod_sandbox_id)
                .cloned()
                .unwrap_or_default();
            self.record("SyncContainer", &pod, Some(c));
        }
        // Asked for: every existing container gets these CPU shares.
        let updates = self.sync_cpu_shares.map(|shares| {
            containers
                .iter()
                .map(|c| ContainerUpdate {
                    container_id: c.id.clone(),
                    linux: Some(LinuxContainerUpdate {
                        resources: Some(LinuxResources {
                            cpu: Some(LinuxCpu {
                                shares: Some(OptionalUInt64 { value: shares }),
                                ..Default::default()
                            }),
                            ..Default::default()
                        }),
                    }),
                    ignore_failure: false,
                })
                .collect()
        });
        Ok(updates.unwrap_or_default())
    }
    async fn run_pod_sandbox(&self, pod: PodSandbox) -> Result<(), String> {
        self.record("RunPodSandbox", &pod, None);
        match &self.deny_pod {
            Some(prefix) if pod.name.starts_with(prefix.as_str()) => {
                Err(format!("test plugin denies pod {}", pod.name))
            }
            _ => Ok(()),
        }
    }
    async fn stop_pod_sandbox(&self, pod: PodSandbox) -> Result<(), String> {
        self.record("StopPodSandbox", &pod, None);
        Ok(())
    }
    async fn remove_pod_sandbox(&self, pod: PodSandbox) -> Result<(), String> {
        self.record("RemovePodSandbox", &pod, None);
        Ok(())
    }
    async fn create_container(
        &self,
        pod: PodSandbox,
        c: Container,
    ) -> Result<ContainerAdjustment, String> {
        self.record("CreateContainer", &pod, Some(&c));
        if let Some(prefix) = &self.deny {
            if c.name.starts_with(prefix.as_str()) {
                return Err(format!("test plugin denies {}", c.name));
            }
        }
        Ok(ContainerAdjustment {
            env: self
                .env
                .iter()
                .map(|(k, v)| KeyValue {
                    key: k.clone(),
                    value: v.clone(),
                })
                .collect(),
            annotations: self.annotations.iter().cloned().collect(),
            mounts: self
                .mounts
                .iter()
                .map(|(src, dst)| Mount {
                    destination: dst.clone(),
                    r#type: "bind".into(),
                    source: src.clone(),
                    options: vec!["rbind".into(), "ro".into()],
                })
                .collect(),
            rlimits: self
                .nofile
                .map(|n| PosixRlimit {
                    r#type: "RLIMIT_NOFILE".into(),
                    hard: n,
                    soft: n,
                })
                .into_iter()
                .collect(),
            ..Default::default()
        })
    }
    async fn container_event(&self, e: Event, pod: PodSandbox, c: Container) -> Result<(), String> {
        let name = match e {
            Event::PostCreateContainer => "PostCreateContainer",
            Event::StartContainer => "StartContainer",
            Event::PostStartContainer => "PostStartContainer",
            Event::PostUpdateContainer => "PostUpdateContainer",
            Event::StopContainer => "StopContainer",
            Event::RemoveContainer => "RemoveContainer",
            _ => "Other",
        };
        self.record(name, &pod, Some(&c));
        Ok(())
    }
    async fn update_container(
        &self,
        pod: PodSandbox,
        c: Container,
        _resources: Option<LinuxResources>,
    ) -> Result<Vec<ContainerUpdate>, String> {
        self.record("UpdateContainer", &pod, Some(&c));
        Ok(Vec::new())
    }
}

fn pair(s: &str, sep: char) -> (String, String) {
    match s.split_once(sep) {
        Some((a, b)) => (a.to_string(), b.to_string()),
        None => (s.to_string(), String::new()),
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let mut plugin = TestPlugin::default();
    let (mut socket, mut name, mut idx) = (None, "e2e".to_string(), "10".to_string());
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args
            .next()
            .ok_or_else(|| anyhow::anyhow!("{flag} needs a value"))?;
        match flag.as_str() {
            "--socket" => socket = Some(PathBuf::from(value)),
            "--name" => name = value,
            "--idx" => idx = value,
            "--events" => plugin.events = Some(value.into()),
            "--env" => plugin.env.push(pair(&value, '=')),
            "--annotation" => plugin.annotations.push(pair(&value, '=')),
            "--mount" => plugin.mounts.push(pair(&value, ':')),
            "--nofile" => plugin.nofile = Some(value.parse()?),
            "--deny" => plugin.deny = Some(value),
            "--deny-pod" => plugin.deny_pod = Some(value),
            "--sync-cpu-shares" => plugin.sync_cpu_shares = Some(value.parse()?),
            other => anyhow::bail!("unknown flag {other}"),
        }
    }
    let socket = socket.ok_or_else(|| anyhow::anyhow!("--socket is required"))?;
    let conn = peapod_nri::stub::connect(&socket, &name, &idx, Arc::new(plugin))
        .await
        .map_err(|e| anyhow::anyhow!("connect to {}: {e}", socket.display()))?;
    println!("registered");
    conn.peer.closed().await;
    Ok(())
}
