//! Device nodes and their device-cgroup rules.

use crate::error::{Result, SpecError};
use crate::host::{HostDevice, HostPaths};
use peapod_proto::v1::{Device, Mount};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

/// `linux.devices` and `linux.resources.devices`.
pub(crate) struct DevicePlan {
    pub devices: Vec<Value>,
    pub rules: Vec<Value>,
}

fn device_json(dev: &HostDevice, container_path: &Path) -> Value {
    json!({
        "path": container_path,
        "type": dev.kind.to_string(),
        "major": dev.major,
        "minor": dev.minor,
        "fileMode": dev.file_mode,
        "uid": dev.uid,
        "gid": dev.gid,
    })
}

fn valid_permissions(p: &str) -> bool {
    !p.is_empty() && p.chars().all(|c| matches!(c, 'r' | 'w' | 'm'))
}

/// The devices of a container, containerd's way: a deny-all rule first (runc then adds its
/// own allow rules for the standard nodes such as /dev/null), then each CRI device (a node,
/// or every node under a directory) with an allow rule of its permissions; with a tty and
/// the host's /dev bind-mounted, the host's /dev/console too. Privileged: every host
/// device as well, and one allow-all rule instead.
pub(crate) fn container_devices(
    devices: &[Device],
    mounts: &[Mount],
    tty: bool,
    privileged: bool,
    host_devices: &[HostDevice],
    paths: &dyn HostPaths,
) -> Result<DevicePlan> {
    let mut requested: Vec<Device> = devices.to_vec();
    let host_dev_mounted = mounts
        .iter()
        .any(|m| m.container_path == "/dev" && m.host_path == "/dev");
    if tty
        && host_dev_mounted
        && !requested
            .iter()
            .any(|d| d.container_path == "/dev/console" && !d.host_path.is_empty())
    {
        requested.push(Device {
            container_path: "/dev/console".into(),
            host_path: "/dev/console".into(),
            permissions: "rwm".into(),
        });
    }

    let mut plan = DevicePlan {
        devices: Vec::new(),
        rules: vec![json!({"allow": false, "access": "rwm"})],
    };
    let mut placed: Vec<PathBuf> = Vec::new();
    for (i, d) in requested.iter().enumerate() {
        let f = |name: &str| format!("config.devices[{i}].{name}");
        if d.host_path.is_empty() {
            return Err(SpecError::invalid(format!("{} is empty", f("host_path"))));
        }
        let container_path = if d.container_path.is_empty() {
            d.host_path.clone()
        } else {
            d.container_path.clone()
        };
        if !container_path.starts_with('/') {
            return Err(SpecError::invalid(format!(
                "{}: {container_path:?} must be an absolute path",
                f("container_path")
            )));
        }
        let permissions = if d.permissions.is_empty() {
            "rwm"
        } else {
            d.permissions.as_str()
        };
        if !valid_permissions(permissions) {
            return Err(SpecError::invalid(format!(
                "{}: {:?} is not a combination of r, w and m",
                f("permissions"),
                d.permissions
            )));
        }
        let host_path = Path::new(&d.host_path);
        let nodes = paths
            .devices(host_path)
            .map_err(|e| SpecError::invalid(format!("{}: {}: {e}", f("host_path"), d.host_path)))?;
        for dev in nodes {
            let target = match dev.path.strip_prefix(host_path) {
                Ok(rel) if !rel.as_os_str().is_empty() => Path::new(&container_path).join(rel),
                _ => PathBuf::from(&container_path),
            };
            plan.devices.push(device_json(&dev, &target));
            plan.rules.push(json!({
                "allow": true,
                "type": dev.kind.to_string(),
                "major": dev.major,
                "minor": dev.minor,
                "access": permissions,
            }));
            placed.push(target);
        }
    }
    if privileged {
        for dev in host_devices {
            if placed.iter().any(|p| p == &dev.path) {
                continue;
            }
            plan.devices.push(device_json(dev, &dev.path));
            placed.push(dev.path.clone());
        }
        plan.rules = vec![json!({"allow": true, "access": "rwm"})];
    }
    Ok(plan)
}
