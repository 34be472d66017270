//! Pod networking: pinned network namespaces, CNI, and the files that describe the network to
//! containers (resolv.conf, hosts, hostname).

pub mod cni;
pub mod files;
pub mod netns;

use crate::config::CniConfig;
use crate::error::Result;
use crate::store::sandbox::CniAttachment;
use cni::{Attachment, Invoker, NetworkList};
use peapod_proto::v1::{PodSandboxConfig, Protocol};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::sync::RwLock;
use std::time::Duration;

/// A pod's network as the sandbox lifecycle uses it: CNI ADD on a pinned namespace, and DEL
/// with what ADD used.
#[async_trait::async_trait]
pub trait PodNetwork: Send + Sync {
    /// What CNI ADD will be called with (the network, CNI_ARGS, capabilities), without a
    /// result yet: recorded before ADD runs, so that a crash during ADD leaves what DEL needs.
    fn plan(&self, sandbox_id: &str, config: &PodSandboxConfig) -> Result<CniAttachment>;
    /// CNI ADD of loopback and the planned pod network on `netns`; returns the ADD result.
    async fn setup(&self, sandbox_id: &str, netns: &Path, plan: &CniAttachment) -> Result<Value>;
    /// CNI DEL with what ADD used.
    async fn teardown(&self, sandbox_id: &str, netns: &Path, cni: &CniAttachment) -> Result<()>;
}

/// The configured CNI network (the first configuration in the directory, else the built-in
/// bridge), and the plugins that set it up.
pub struct Network {
    conf_dir: PathBuf,
    invoker: Invoker,
    builtin: NetworkList,
    /// The pod CIDR from UpdateRuntimeConfig, handed to plugins as the `ipRanges` capability.
    pod_cidr: RwLock<Option<String>>,
}

/// Whether the network can set pods up, as Status reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Readiness {
    pub ready: bool,
    pub reason: String,
    pub message: String,
}

impl Network {
    pub fn new(cfg: &CniConfig, data_dir: &Path) -> Network {
        Network {
            conf_dir: cfg.conf_dir.clone(),
            invoker: Invoker {
                bin_dirs: cfg.bin_dirs.clone(),
                timeout: Duration::from_secs(cfg.plugin_timeout_seconds.max(1)),
            },
            builtin: NetworkList::builtin_bridge(
                &cfg.default_bridge,
                &cfg.default_subnet,
                data_dir,
            ),
            pod_cidr: RwLock::new(None),
        }
    }

    /// The network new pods join: the first configuration in the directory, else the built-in.
    pub fn current(&self) -> Result<NetworkList> {
        Ok(cni::load_from_dir(&self.conf_dir)?.unwrap_or_else(|| self.builtin.clone()))
    }

    pub fn set_pod_cidr(&self, cidr: &str) {
        let mut guard = self.pod_cidr.write().unwrap_or_else(|p| p.into_inner());
        *guard = (!cidr.is_empty()).then(|| cidr.to_string());
    }

    pub fn pod_cidr(&self) -> Option<String> {
        self.pod_cidr
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    pub fn readiness(&self) -> Readiness {
        let not_ready = |message: String| Readiness {
            ready: false,
            reason: "NetworkPluginNotReady".into(),
            message,
        };
        let list = match self.current() {
            Ok(l) => l,
            Err(e) => return not_ready(format!("cni config invalid: {e}")),
        };
        let mut types = list.plugin_types();
        types.push("loopback".into());
        let missing: Vec<String> = types
            .into_iter()
            .filter(|t| cni::find_plugin(&self.invoker.bin_dirs, t).is_none())
            .collect();
        if !missing.is_empty() {
            return not_ready(format!(
                "cni plugin not initialized: network {:?} ({}) needs plugins not found in {:?}: {}",
                list.name,
                list.source,
                self.invoker.bin_dirs,
                missing.join(", ")
            ));
        }
        Readiness {
            ready: true,
            reason: String::new(),
            message: String::new(),
        }
    }

    fn cni_args(sandbox_id: &str, config: &PodSandboxConfig) -> Vec<(String, String)> {
        let m = config.metadata.clone().unwrap_or_default();
        vec![
            ("K8S_POD_NAMESPACE".into(), m.namespace),
            ("K8S_POD_NAME".into(), m.name),
            ("K8S_POD_INFRA_CONTAINER_ID".into(), sandbox_id.to_string()),
            ("K8S_POD_UID".into(), m.uid),
        ]
    }

    fn runtime_config(&self, config: &PodSandboxConfig) -> Value {
        let ports: Vec<Value> = config
            .port_mappings
            .iter()
            .filter(|p| p.host_port > 0)
            .map(|p| {
                let protocol = match Protocol::try_from(p.protocol) {
                    Ok(Protocol::Udp) => "udp",
                    Ok(Protocol::Sctp) => "sctp",
                    _ => "tcp",
                };
                let mut v = json!({
                    "hostPort": p.host_port,
                    "containerPort": p.container_port,
                    "protocol": protocol,
                });
                if !p.host_ip.is_empty() {
                    v["hostIP"] = json!(p.host_ip);
                }
                v
            })
            .collect();
        let mut rc = json!({ "portMappings": ports });
        if let Some(cidr) = self.pod_cidr() {
            rc["ipRanges"] = json!([[{ "subnet": cidr }]]);
        }
        rc
    }
}

#[async_trait::async_trait]
impl PodNetwork for Network {
    fn plan(&self, sandbox_id: &str, config: &PodSandboxConfig) -> Result<CniAttachment> {
        Ok(CniAttachment {
            // Reading the configuration directory is file I/O: not on the async workers.
            network: crate::host_ops::off_runtime(|| self.current())?.to_value(),
            result: Value::Null,
            ifname: cni::POD_IFNAME.into(),
            args: Self::cni_args(sandbox_id, config),
            runtime_config: self.runtime_config(config),
            deleted: false,
        })
    }

    async fn setup(&self, sandbox_id: &str, netns: &Path, plan: &CniAttachment) -> Result<Value> {
        let list = NetworkList::from_value(&plan.network)?;
        let att = Attachment {
            container_id: sandbox_id,
            netns,
            ifname: &plan.ifname,
            args: &plan.args,
            runtime_config: &plan.runtime_config,
        };
        let lo = Attachment {
            ifname: "lo",
            ..att.clone()
        };
        self.invoker.add(&NetworkList::loopback(), &lo).await?;
        self.invoker.add(&list, &att).await
    }

    async fn teardown(&self, sandbox_id: &str, netns: &Path, cni: &CniAttachment) -> Result<()> {
        let list = NetworkList::from_value(&cni.network)?;
        let att = Attachment {
            container_id: sandbox_id,
            netns,
            ifname: &cni.ifname,
            args: &cni.args,
            runtime_config: &cni.runtime_config,
        };
        let result = self.invoker.del(&list, &att, &cni.result).await;
        let lo = Attachment {
            ifname: "lo",
            ..att
        };
        if let Err(e) = self
            .invoker
            .del(&NetworkList::loopback(), &lo, &Value::Null)
            .await
        {
            tracing::debug!(error = %e, "loopback DEL");
        }
        result
    }
}
