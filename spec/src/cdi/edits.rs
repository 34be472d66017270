//! Applying a CDI device's `containerEdits` to a container's runtime spec (in its JSON form),
//! as the reference library applies them: env (a variable set again replaces it), device
//! nodes (type and numbers from the host's node when the spec leaves them out; an allow rule
//! in the device cgroup), mounts (replacing one at the same destination; all mounts then
//! sorted parents first), OCI hooks, additional groups.

use super::document::{ContainerEdits, DeviceNode, Mount};
use crate::host::{HostDevice, HostPaths};
use crate::util::clean_path;
use serde_json::{json, Value};
use std::path::Path;

/// Applies `edits` to `spec`; the error says what could not be applied.
pub(crate) fn apply_edits(
    spec: &mut Value,
    edits: &ContainerEdits,
    paths: &dyn HostPaths,
) -> Result<(), String> {
    // Refused rather than dropped: a device without its RDT class or network device would
    // run, but not as its vendor describes it.
    if edits.intel_rdt.is_some() {
        return Err("intelRdt edits are not supported by peapod".into());
    }
    if !edits.net_devices.is_empty() {
        return Err("netDevices edits are not supported by peapod".into());
    }
    for var in &edits.env {
        set_env(spec, var);
    }
    for node in &edits.device_nodes {
        add_device(spec, node, paths)?;
    }
    if !edits.mounts.is_empty() {
        add_mounts(spec, &edits.mounts)?;
    }
    for hook in &edits.hooks {
        let mut h = json!({"path": hook.path});
        if !hook.args.is_empty() {
            h["args"] = json!(hook.args);
        }
        if !hook.env.is_empty() {
            h["env"] = json!(hook.env);
        }
        if let Some(t) = hook.timeout {
            h["timeout"] = json!(t);
        }
        with_array(spec, &["hooks", &hook.hook_name], |list| list.push(h));
    }
    with_array(spec, &["process", "user", "additionalGids"], |gids| {
        // 0 is ignored, as the specification says.
        for gid in edits.additional_gids.iter().filter(|g| **g != 0) {
            let gid = json!(gid);
            if !gids.contains(&gid) {
                gids.push(gid);
            }
        }
    });
    Ok(())
}

/// Runs `f` on the array at `path` (made, empty, when absent).
fn with_array(spec: &mut Value, path: &[&str], f: impl FnOnce(&mut Vec<Value>)) {
    let slot = path.iter().fold(spec, |v, key| &mut v[*key]);
    let mut list = match slot.take() {
        Value::Array(list) => list,
        _ => Vec::new(),
    };
    f(&mut list);
    *slot = Value::Array(list);
}

fn env_name(var: &str) -> &str {
    var.split_once('=').map_or(var, |(name, _)| name)
}

fn set_env(spec: &mut Value, var: &str) {
    with_array(spec, &["process", "env"], |env| {
        let name = env_name(var);
        match env
            .iter_mut()
            .find(|e| e.as_str().is_some_and(|e| env_name(e) == name))
        {
            Some(old) => *old = json!(var),
            None => env.push(json!(var)),
        }
    });
}

/// The device node at `path` on the host, itself (not a directory of nodes).
fn host_node(paths: &dyn HostPaths, path: &Path) -> std::io::Result<HostDevice> {
    let mut found = paths.devices(path)?;
    match found.pop() {
        Some(dev) if found.is_empty() && dev.path == path => Ok(dev),
        _ => Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "not a device node",
        )),
    }
}

/// The device node, with what the spec leaves out taken from the host's node. A node the spec
/// describes fully (a type, and a major number unless a FIFO) need not exist on the host: the
/// runtime makes it in the container (the kubelet's sample device plugin relies on that).
fn add_device(spec: &mut Value, node: &DeviceNode, paths: &dyn HostPaths) -> Result<(), String> {
    let host_path = if node.host_path.is_empty() {
        &node.path
    } else {
        &node.host_path
    };
    let complete = !node.kind.is_empty() && (node.major != 0 || node.kind == "p");
    let (kind, major, minor, file_mode) = match (host_node(paths, Path::new(host_path)), complete) {
        (Ok(host), true) => (
            node.kind.clone(),
            node.major,
            node.minor,
            node.file_mode.or(Some(host.file_mode)),
        ),
        (Err(_), true) => (node.kind.clone(), node.major, node.minor, node.file_mode),
        (Err(e), false) => {
            return Err(format!(
                "device node {:?}: host device {host_path:?}: {e}",
                node.path
            ))
        }
        (Ok(host), false) => {
            let host_kind = host.kind.to_string();
            if !node.kind.is_empty() && node.kind != host_kind {
                return Err(format!(
                    "device node {:?}: type {:?}, but host device {host_path:?} is of type {host_kind:?}",
                    node.path, node.kind
                ));
            }
            let (major, minor) = if node.major == 0 {
                (host.major, host.minor)
            } else {
                (node.major, node.minor)
            };
            (
                host_kind,
                major,
                minor,
                node.file_mode.or(Some(host.file_mode)),
            )
        }
    };
    let mut dev = json!({"path": node.path, "type": kind, "major": major, "minor": minor});
    if let Some(mode) = file_mode {
        dev["fileMode"] = json!(mode);
    }
    // Owned by the container's user unless the spec says (the reference library's rule).
    let user = &spec["process"]["user"];
    let owner =
        |id: Option<u32>, key: &str| id.or(user[key].as_u64().filter(|i| *i > 0).map(|i| i as u32));
    if let Some(uid) = owner(node.uid, "uid") {
        dev["uid"] = json!(uid);
    }
    if let Some(gid) = owner(node.gid, "gid") {
        dev["gid"] = json!(gid);
    }
    with_array(spec, &["linux", "devices"], |devices| {
        devices.retain(|d| d["path"] != node.path.as_str());
        devices.push(dev);
    });
    if kind == "b" || kind == "c" {
        let access = match node.permissions.as_str() {
            "" => "rwm",
            "none" => "",
            p => p,
        };
        let rule =
            json!({"allow": true, "type": kind, "major": major, "minor": minor, "access": access});
        with_array(spec, &["linux", "resources", "devices"], |rules| {
            rules.push(rule)
        });
    }
    Ok(())
}

fn in_user_namespace(spec: &Value) -> bool {
    spec["linux"]["namespaces"]
        .as_array()
        .is_some_and(|ns| ns.iter().any(|n| n["type"] == "user"))
}

fn add_mounts(spec: &mut Value, mounts: &[Mount]) -> Result<(), String> {
    if in_user_namespace(spec) {
        // The reference library asks the runtime for idmapped binds here, which runc 1.1
        // cannot make; peapod makes a pod's idmapped binds itself, but only for CRI mounts.
        return Err(
            "mounts into a pod with its own user namespace are not supported (they would need idmapped binds)"
                .into(),
        );
    }
    with_array(spec, &["mounts"], |list| {
        for m in mounts {
            let dest = clean_path(&m.container_path);
            list.retain(|x| x["destination"].as_str().map(clean_path) != Some(dest.clone()));
            let mut mount = json!({"destination": m.container_path, "source": m.host_path});
            if !m.kind.is_empty() {
                mount["type"] = json!(m.kind);
            }
            if !m.options.is_empty() {
                mount["options"] = json!(m.options);
            }
            list.push(mount);
        }
        // Parents before children (fewer path elements first; stable, so the order of
        // equals stays), as the reference library sorts after adding mounts.
        list.sort_by_key(|m| {
            m["destination"]
                .as_str()
                .map_or(0, |d| clean_path(d).matches('/').count())
        });
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::HostPropagation;
    use std::collections::HashMap;
    use std::io;
    use std::path::PathBuf;

    /// Host device nodes by path; `/dev/dir` is a directory holding one.
    struct Nodes(HashMap<PathBuf, HostDevice>);

    impl HostPaths for Nodes {
        fn mount_source(&self, p: &Path) -> io::Result<PathBuf> {
            Ok(p.into())
        }
        fn propagation(&self, _: &Path) -> io::Result<HostPropagation> {
            Ok(HostPropagation::Private)
        }
        fn devices(&self, p: &Path) -> io::Result<Vec<HostDevice>> {
            if p == Path::new("/dev/dir") {
                return Ok(vec![self.0[Path::new("/dev/vendor0")].clone()]);
            }
            self.0
                .get(p)
                .map(|d| vec![d.clone()])
                .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "no such file"))
        }
    }

    fn host() -> Nodes {
        let node = |path: &str, kind, major, minor| HostDevice {
            path: path.into(),
            kind,
            major,
            minor,
            file_mode: 0o660,
            uid: 0,
            gid: 0,
        };
        Nodes(
            [
                node("/dev/vendor0", 'c', 195, 0),
                node("/dev/vendor-disk", 'b', 259, 3),
            ]
            .into_iter()
            .map(|d| (d.path.clone(), d))
            .collect(),
        )
    }

    fn base() -> Value {
        json!({
            "process": {"env": ["PATH=/bin", "MODE=a"], "user": {"uid": 1000, "gid": 0, "additionalGids": [0, 10]}},
            "mounts": [
                {"destination": "/proc", "type": "proc", "source": "proc"},
                {"destination": "/etc/hosts", "type": "bind", "source": "/run/x/hosts"},
                {"destination": "/data/sub", "type": "bind", "source": "/d/sub"},
            ],
            "linux": {
                "namespaces": [{"type": "mount"}],
                "resources": {"devices": [{"allow": false, "access": "rwm"}]},
                "devices": [{"path": "/dev/vgpu", "type": "c", "major": 1, "minor": 1}],
            },
        })
    }

    fn edits(json: Value) -> ContainerEdits {
        serde_json::from_value(json).unwrap()
    }

    fn apply(spec: &mut Value, e: Value) -> Result<(), String> {
        apply_edits(spec, &edits(e), &host())
    }

    #[test]
    fn env_replaces_or_appends() {
        let mut s = base();
        apply(&mut s, json!({"env": ["MODE=b", "CDI_DEVICE=CDI-Dev-1"]})).unwrap();
        assert_eq!(
            s["process"]["env"],
            json!(["PATH=/bin", "MODE=b", "CDI_DEVICE=CDI-Dev-1"])
        );
    }

    #[test]
    fn device_nodes_from_the_spec_or_the_host() {
        let mut s = base();
        apply(
            &mut s,
            json!({"deviceNodes": [
                // Complete: need not exist on the host (the sample device plugin's).
                {"path": "/tmp/CDI-Dev-1", "type": "b", "major": 1, "minor": 0},
                // Everything from the host, at another path in the container, read-only.
                {"path": "/dev/vgpu", "hostPath": "/dev/vendor0", "permissions": "r", "uid": 0},
                // Type given, numbers from the host; no cgroup access.
                {"path": "/dev/vendor-disk", "type": "b", "permissions": "none", "fileMode": 384, "gid": 6},
                // A FIFO needs no numbers, and gets no cgroup rule.
                {"path": "/run/fifo", "type": "p"},
            ]}),
        )
        .unwrap();
        assert_eq!(
            s["linux"]["devices"],
            json!([
                {"path": "/tmp/CDI-Dev-1", "type": "b", "major": 1, "minor": 0, "uid": 1000},
                // Replaced the spec's own /dev/vgpu.
                {"path": "/dev/vgpu", "type": "c", "major": 195, "minor": 0, "fileMode": 0o660, "uid": 0},
                {"path": "/dev/vendor-disk", "type": "b", "major": 259, "minor": 3, "fileMode": 384, "uid": 1000, "gid": 6},
                {"path": "/run/fifo", "type": "p", "major": 0, "minor": 0, "uid": 1000},
            ])
        );
        assert_eq!(
            s["linux"]["resources"]["devices"],
            json!([
                {"allow": false, "access": "rwm"},
                {"allow": true, "type": "b", "major": 1, "minor": 0, "access": "rwm"},
                {"allow": true, "type": "c", "major": 195, "minor": 0, "access": "r"},
                {"allow": true, "type": "b", "major": 259, "minor": 3, "access": ""},
            ])
        );
    }

    #[test]
    fn device_nodes_the_host_cannot_complete_are_refused() {
        for (node, why) in [
            (
                json!({"path": "/dev/nothing"}),
                "host device \"/dev/nothing\": no such file",
            ),
            (json!({"path": "/dev/x", "type": "c"}), "no such file"),
            (json!({"path": "/dev/dir"}), "not a device node"),
            (
                json!({"path": "/dev/vendor0", "type": "b"}),
                "type \"b\", but host device \"/dev/vendor0\" is of type \"c\"",
            ),
        ] {
            let err = apply(&mut base(), json!({"deviceNodes": [node]})).unwrap_err();
            assert!(err.contains(why), "{err}");
        }
    }

    #[test]
    fn mounts_replace_and_sort_parents_first() {
        let mut s = base();
        apply(
            &mut s,
            json!({"mounts": [
                {"hostPath": "/usr/lib/vendor", "containerPath": "/usr/lib/vendor", "options": ["ro", "bind"]},
                {"hostPath": "/vendor/hosts", "containerPath": "/etc/hosts/", "type": "bind"},
                {"hostPath": "/d", "containerPath": "/data"},
            ]}),
        )
        .unwrap();
        let dests: Vec<&str> = s["mounts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["destination"].as_str().unwrap())
            .collect();
        assert_eq!(
            dests,
            [
                "/proc",
                "/data",
                "/data/sub",
                "/etc/hosts/",
                "/usr/lib/vendor"
            ]
        );
        let m = &s["mounts"][4];
        assert_eq!(
            *m,
            json!({"destination": "/usr/lib/vendor", "source": "/usr/lib/vendor", "options": ["ro", "bind"]})
        );
        assert_eq!(s["mounts"][3]["source"], "/vendor/hosts");

        let mut userns = base();
        userns["linux"]["namespaces"] = json!([{"type": "mount"}, {"type": "user"}]);
        let err = apply(
            &mut userns,
            json!({"mounts": [{"hostPath": "/d", "containerPath": "/data"}]}),
        )
        .unwrap_err();
        assert!(err.contains("user namespace"), "{err}");
    }

    #[test]
    fn hooks_and_groups() {
        let mut s = base();
        apply(
            &mut s,
            json!({
                "hooks": [
                    {"hookName": "createRuntime", "path": "/bin/a", "args": ["a", "x"], "env": ["E=1"], "timeout": 3},
                    {"hookName": "poststop", "path": "/bin/b"},
                    {"hookName": "createRuntime", "path": "/bin/c"},
                ],
                "additionalGids": [0, 10, 44],
            }),
        )
        .unwrap();
        assert_eq!(
            s["hooks"],
            json!({
                "createRuntime": [
                    {"path": "/bin/a", "args": ["a", "x"], "env": ["E=1"], "timeout": 3},
                    {"path": "/bin/c"},
                ],
                "poststop": [{"path": "/bin/b"}],
            })
        );
        assert_eq!(s["process"]["user"]["additionalGids"], json!([0, 10, 44]));
    }

    #[test]
    fn rdt_and_net_devices_are_refused() {
        let err = apply(&mut base(), json!({"intelRdt": {"closID": "gold"}})).unwrap_err();
        assert!(err.contains("intelRdt"), "{err}");
        let err = apply(
            &mut base(),
            json!({"netDevices": [{"hostInterfaceName": "eth1", "name": "net1"}]}),
        )
        .unwrap_err();
        assert!(err.contains("netDevices"), "{err}");
    }
}
