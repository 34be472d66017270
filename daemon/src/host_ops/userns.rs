//! A pod with its own user namespace (NamespaceMode POD): where its namespace is pinned, and
//! the directories the runtime walks as the namespace's root, given to that root.

use super::HostOps;
use crate::error::{Error, Result};
use peapod_host::userns::PinnedUserns;
use peapod_proto::v1::PodSandboxConfig;
use std::path::Path;

/// The user namespace of a pod with one: pinned beside its network namespace, with which it
/// was made, and the host ids of its root. `None` for a pod in the host's user namespace.
pub fn pinned_user_namespace(
    config: &PodSandboxConfig,
    netns: Option<&Path>,
) -> Result<Option<PinnedUserns>> {
    let Some(u) = peapod_spec::pod_user_namespace(config)? else {
        return Ok(None);
    };
    let netns = netns.ok_or_else(|| {
        Error::internal("a pod with its own user namespace has no pinned network namespace")
    })?;
    // Container id 0 is where each mapping starts (checked by pod_user_namespace).
    Ok(Some(PinnedUserns {
        path: super::netns::userns_pin(netns),
        root_uid: u.uids.host_id,
        root_gid: u.gids.host_id,
    }))
}

/// Gives a directory the runtime must walk from inside the pod's user namespace (the pod's
/// and each container's: rootfs mount points, /etc/hosts and friends) to the pod's root. The
/// daemon's umask makes it 0700: owned by host root, the namespace's root could not enter it
/// (capabilities inside a user namespace cover only inodes whose owner it maps), and opening it
/// to everyone would undo the 0700. A pod in the host's user namespace changes nothing.
pub fn give_to_pod_root(host: &dyn HostOps, dir: &Path, config: &PodSandboxConfig) -> Result<()> {
    let Some(u) = peapod_spec::pod_user_namespace(config)? else {
        return Ok(());
    };
    host.chown(dir, u.uids.host_id, u.gids.host_id)
}
