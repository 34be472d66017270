//! Pod networking: CNI on a pod's pinned network namespace (pinning it is a host operation:
//! `crate::host_ops::netns`), and the files that describe the network to containers
//! (resolv.conf, hosts, hostname).

pub mod cni;
pub mod files;

use crate::config::CniConfig;
use crate::error::Result;
use crate::store::sandbox::CniAttachment;
use cni::{Attachment, Invoker, NetworkList};
use peapod_host::sync::RwLockUnpoisoned;
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
    /// CNI ADD of the planned pod network on `netns` (its loopback is up since it was made:
    /// `crate::host_ops::netns`); returns the ADD result.
    async fn setup(&self, sandbox_id: &str, netns: &Path, plan: &CniAttachment) -> Result<Value>;
    /// CNI DEL with what ADD used.
    async fn teardown(&self, sandbox_id: &str, netns: &Path, cni: &CniAttachment) -> Result<()>;
}

/// The configured CNI network (the first configuration in the directory, else the built-in
/// bridge), and the plugins that set it up.
pub struct Network {
    conf_dir: PathBuf,
    invoker: Invoker,
    /// The built-in bridge network's bridge, default subnet and IPAM data directory.
    builtin_bridge: String,
    builtin_subnet: String,
    data_dir: PathBuf,
    /// The pod CIDR from UpdateRuntimeConfig: the built-in network's range, and the `ipRanges`
    /// capability for configured networks that declare it.
    pod_cidr: RwLock<Option<String>>,
    /// Where the pod CIDR is kept across restarts: the kubelet sends it only when it changes,
    /// so a daemon restarted under a running kubelet would otherwise never hear it again.
    pod_cidr_file: PathBuf,
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
        let pod_cidr_file = data_dir.with_file_name("pod-cidr");
        let pod_cidr = match std::fs::read_to_string(&pod_cidr_file) {
            Ok(text) if is_cidr(text.trim()) => Some(text.trim().to_string()),
            Ok(text) => {
                tracing::warn!(file = %pod_cidr_file.display(), content = %text.trim(), "ignoring a stored pod CIDR that is not one");
                None
            }
            Err(_) => None,
        };
        Network {
            conf_dir: cfg.conf_dir.clone(),
            invoker: Invoker {
                bin_dirs: cfg.bin_dirs.clone(),
                timeout: Duration::from_secs(cfg.plugin_timeout_seconds.max(1)),
            },
            builtin_bridge: cfg.default_bridge.clone(),
            builtin_subnet: cfg.default_subnet.clone(),
            data_dir: data_dir.to_path_buf(),
            pod_cidr: RwLock::new(pod_cidr),
            pod_cidr_file,
        }
    }

    /// The network new pods join: the first configuration in the directory, else the built-in.
    pub fn current(&self) -> Result<NetworkList> {
        Ok(cni::load_from_dir(&self.conf_dir)?.unwrap_or_else(|| self.builtin()))
    }

    /// The built-in bridge, on the pod CIDR when the kubelet gave one.
    fn builtin(&self) -> NetworkList {
        let subnet = self
            .pod_cidr()
            .unwrap_or_else(|| self.builtin_subnet.clone());
        NetworkList::builtin_bridge(&self.builtin_bridge, &subnet, &self.data_dir)
    }

    /// Sets (or, empty, clears) the pod CIDR, and keeps it for the next start.
    pub fn set_pod_cidr(&self, cidr: &str) -> Result<()> {
        let file = &self.pod_cidr_file;
        crate::blocking::off_runtime(|| {
            if cidr.is_empty() {
                peapod_host::fs::remove_file_if_exists(file)
            } else {
                if let Some(dir) = file.parent() {
                    std::fs::create_dir_all(dir)?;
                }
                peapod_host::fs::write_file_atomic(file, cidr.as_bytes())
            }
        })
        .map_err(|e| crate::error::Error::path("store the pod CIDR in", file, e))?;
        let mut guard = self.pod_cidr.write_unpoisoned();
        *guard = (!cidr.is_empty()).then(|| cidr.to_string());
        Ok(())
    }

    pub fn pod_cidr(&self) -> Option<String> {
        self.pod_cidr.read_unpoisoned().clone()
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
        let missing: Vec<String> = list
            .plugin_types()
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
            network: crate::blocking::off_runtime(|| self.current())?.to_value(),
            result: Value::Null,
            ifname: cni::POD_IFNAME.into(),
            args: Self::cni_args(sandbox_id, config),
            runtime_config: self.runtime_config(config),
            deleted: false,
        })
    }

    #[tracing::instrument(level = "debug", name = "cni.add", skip_all, fields(network = %plan.network["name"].as_str().unwrap_or_default()))]
    async fn setup(&self, sandbox_id: &str, netns: &Path, plan: &CniAttachment) -> Result<Value> {
        let (list, att) = attachment(sandbox_id, netns, plan)?;
        self.invoker.add(&list, &att).await
    }

    #[tracing::instrument(level = "debug", name = "cni.del", skip_all, fields(network = %cni.network["name"].as_str().unwrap_or_default()))]
    async fn teardown(&self, sandbox_id: &str, netns: &Path, cni: &CniAttachment) -> Result<()> {
        let (list, att) = attachment(sandbox_id, netns, cni)?;
        self.invoker.del(&list, &att, &cni.result).await
    }
}

/// `address/prefix` with an IP address and a prefix length that fits it.
pub fn is_cidr(text: &str) -> bool {
    text.split_once('/').is_some_and(|(ip, len)| {
        match (ip.parse::<std::net::IpAddr>(), len.parse::<u8>()) {
            (Ok(std::net::IpAddr::V4(_)), Ok(n)) => n <= 32,
            (Ok(std::net::IpAddr::V6(_)), Ok(n)) => n <= 128,
            _ => false,
        }
    })
}

/// The network list and the pod's identity a recorded attachment gives CNI, for ADD and DEL.
fn attachment<'a>(
    sandbox_id: &'a str,
    netns: &'a Path,
    cni: &'a CniAttachment,
) -> Result<(NetworkList, Attachment<'a>)> {
    let list = NetworkList::from_value(&cni.network)?;
    let att = Attachment {
        container_id: sandbox_id,
        netns,
        ifname: &cni.ifname,
        args: &cni.args,
        runtime_config: &cni.runtime_config,
    };
    Ok((list, att))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cidrs() {
        for ok in ["10.244.1.0/24", "0.0.0.0/0", "fd00::/64"] {
            assert!(is_cidr(ok), "{ok}");
        }
        for bad in [
            "",
            "10.0.0.0",
            "10.0.0.0/33",
            "fd00::/129",
            "x/8",
            "10.0.0.0/-1",
        ] {
            assert!(!is_cidr(bad), "{bad}");
        }
    }

    #[test]
    fn the_builtin_network_moves_to_the_pod_cidr_the_kubelet_gives() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = CniConfig {
            conf_dir: dir.path().join("empty"),
            default_subnet: "10.88.0.0/16".into(),
            ..CniConfig::default()
        };
        let net = Network::new(&cfg, &dir.path().join("ipam"));
        let ranges = |n: &Network| n.current().unwrap().plugins[0]["ipam"]["ranges"].clone();
        assert_eq!(ranges(&net), json!([[{"subnet": "10.88.0.0/16"}]]));
        net.set_pod_cidr("10.244.1.0/24").unwrap();
        assert_eq!(ranges(&net), json!([[{"subnet": "10.244.1.0/24"}]]));
        // A restarted daemon still has it (the kubelet does not send it again).
        let again = Network::new(&cfg, &dir.path().join("ipam"));
        assert_eq!(again.pod_cidr().as_deref(), Some("10.244.1.0/24"));
        // The range is the network's own: one range set, whatever the runtime config says.
        let plan = net.plan("sb", &PodSandboxConfig::default()).unwrap();
        let list = NetworkList::from_value(&plan.network).unwrap();
        assert_eq!(
            list.plugins[0]["ipam"]["ranges"].as_array().unwrap().len(),
            1
        );
        net.set_pod_cidr("").unwrap();
        assert_eq!(ranges(&net), json!([[{"subnet": "10.88.0.0/16"}]]));
        assert_eq!(
            Network::new(&cfg, &dir.path().join("ipam")).pod_cidr(),
            None
        );
        // A torn or foreign file is not taken for a CIDR.
        std::fs::write(dir.path().join("pod-cidr"), "garbage").unwrap();
        assert_eq!(
            Network::new(&cfg, &dir.path().join("ipam")).pod_cidr(),
            None
        );
    }
}
