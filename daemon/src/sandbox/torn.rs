//! Sandboxes whose record file could not be read at start (torn by a power loss, garbage from
//! a bad disk; the file is set aside by the store): a placeholder record takes its place,
//! NOTREADY, built from what the host still has under the sandbox's id — its pinned network
//! namespace, its shim's socket, its directories — so that recovery settles what still runs
//! and RemovePodSandbox releases it all (CNI DEL with the current network configuration,
//! which is what DEL of the bridge and host-local plugins needs: the id and the interface).
//! Without it the orphan sweep would take its directories while its shim and containers ran on.

use super::SandboxService;
use crate::cgroups;
use crate::error::Result;
use crate::store::sandbox::{SandboxRecord, SandboxState};
use peapod_proto::v1::{PodSandboxConfig, PodSandboxMetadata};

/// The namespace placeholders are listed in (a kubelet removes sandboxes it does not know).
pub const TORN_NAMESPACE: &str = "peapod-torn-records";

impl SandboxService {
    /// Puts a placeholder in place of every sandbox record the store could not read.
    pub(crate) fn replace_torn_records(&self) -> usize {
        let torn = self.sandboxes.take_torn();
        let mut replaced = 0;
        for id in torn {
            match self.placeholder(&id) {
                Ok(record) => {
                    let entry = self.sandboxes.entry(record);
                    if let Err(e) = entry.update(|_| {}) {
                        tracing::error!(sandbox = %id, error = %e, "persisting the placeholder of a torn record");
                    }
                    {
                        let mut table = self.sandboxes.write();
                        let rec = entry.get();
                        if let Err(e) = table.names.reserve(&rec.name, &id, 0, "pod sandbox") {
                            tracing::warn!(sandbox = %id, error = %e, "reserving a placeholder's name");
                        }
                        table.insert(entry);
                    }
                    tracing::warn!(sandbox = %id, namespace = TORN_NAMESPACE, "a pod sandbox whose record was torn is listed NOTREADY for RemovePodSandbox");
                    replaced += 1;
                }
                Err(e) => {
                    tracing::error!(sandbox = %id, error = %e, "no placeholder for a torn sandbox record")
                }
            }
        }
        replaced
    }

    fn placeholder(&self, id: &str) -> Result<SandboxRecord> {
        let short: String = id.chars().take(12).collect();
        let config = PodSandboxConfig {
            metadata: Some(PodSandboxMetadata {
                name: format!("torn-record-{short}"),
                uid: id.to_string(),
                namespace: TORN_NAMESPACE.into(),
                attempt: 0,
            }),
            ..Default::default()
        };
        let netns = self.paths.netns_dir().join(id);
        let netns = netns.exists().then_some(netns);
        let cni = match &netns {
            Some(_) => Some(self.network.plan(id, &config)?),
            None => None,
        };
        let dir = self.paths.sandbox_state_dir(id);
        let parent = self.settings.default_cgroup_parent.clone();
        Ok(SandboxRecord {
            id: id.to_string(),
            name: SandboxRecord::name_of(&config),
            cgroups_path: cgroups::cgroups_path(self.settings.cgroup_driver, &parent, id),
            cgroup_parent: parent,
            config,
            runtime_handler: String::new(),
            created_at_ns: 0,
            state: SandboxState::NotReady,
            netns,
            ips: Vec::new(),
            cni,
            shim_socket: self.shims.socket_path(id),
            pause_pid: 0,
            shm: Some(dir.join("shm")),
            dir,
            // Released whether or not it was: removal tolerates an unknown owner.
            rootfs_mounted: true,
            request_digest: 0,
            pause_create_sent: false,
        })
    }
}
