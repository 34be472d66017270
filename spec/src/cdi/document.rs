//! A CDI spec file: its format (the CDI specification's JSON definition, read from JSON or
//! YAML), and the checks the reference library makes when it loads one: a known `cdiVersion`
//! at least as new as the fields used, a valid `kind`, at least one device, unique and valid
//! device names, non-empty device edits, valid edits. Unknown fields are refused, as the
//! reference loader refuses them: a field we do not know could change what a device needs.

use super::name::{check_device_name, parse_kind};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// A spec file that could not be used, and why.
#[derive(Debug, thiserror::Error)]
#[error("CDI spec {}: {problem}", path.display())]
pub struct CdiSpecError {
    pub path: PathBuf,
    pub problem: String,
}

/// Whether `path` is named like a CDI spec file (`*.json` or `*.yaml`, as the reference
/// library scans for them).
pub fn is_spec_file(path: &Path) -> bool {
    matches!(
        path.extension().and_then(|e| e.to_str()),
        Some("json" | "yaml")
    )
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSpec {
    #[serde(rename = "cdiVersion")]
    version: String,
    kind: String,
    #[serde(default)]
    annotations: BTreeMap<String, String>,
    #[serde(default)]
    devices: Vec<RawDevice>,
    #[serde(default, rename = "containerEdits")]
    container_edits: ContainerEdits,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDevice {
    name: String,
    #[serde(default)]
    annotations: BTreeMap<String, String>,
    #[serde(default, rename = "containerEdits")]
    container_edits: ContainerEdits,
}

/// `containerEdits`: what a device (or any device of a spec) adds to a container's OCI spec.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct ContainerEdits {
    #[serde(default)]
    pub env: Vec<String>,
    #[serde(default)]
    pub device_nodes: Vec<DeviceNode>,
    #[serde(default)]
    pub mounts: Vec<Mount>,
    #[serde(default)]
    pub hooks: Vec<Hook>,
    /// The specification's text spells it `additionalGIDs`, its Go types `additionalGids`
    /// (and Go's JSON decoder takes either): both are read.
    #[serde(default, alias = "additionalGIDs")]
    pub additional_gids: Vec<u32>,
    /// Read so that a spec using them loads; a device whose edits use them is refused when a
    /// container asks for it (peapod does not apply RDT classes nor move network devices).
    #[serde(default)]
    pub intel_rdt: Option<IntelRdt>,
    #[serde(default)]
    pub net_devices: Vec<NetDevice>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct DeviceNode {
    pub path: String,
    #[serde(default)]
    pub host_path: String,
    /// "b", "c", "u", "p", or empty (taken from the host's node).
    #[serde(default, rename = "type")]
    pub kind: String,
    #[serde(default)]
    pub major: i64,
    #[serde(default)]
    pub minor: i64,
    #[serde(default)]
    pub file_mode: Option<u32>,
    /// Device-cgroup access: any of r, w, m; empty means rwm, "none" means nothing.
    #[serde(default)]
    pub permissions: String,
    #[serde(default)]
    pub uid: Option<u32>,
    #[serde(default)]
    pub gid: Option<u32>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct Mount {
    pub host_path: String,
    pub container_path: String,
    #[serde(default)]
    pub options: Vec<String>,
    #[serde(default, rename = "type")]
    pub kind: String,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct Hook {
    pub hook_name: String,
    pub path: String,
    #[serde(default)]
    pub args: Vec<String>,
    #[serde(default)]
    pub env: Vec<String>,
    #[serde(default)]
    pub timeout: Option<i64>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct IntelRdt {
    #[serde(default, rename = "closID")]
    pub clos_id: String,
    #[serde(default)]
    pub l3_cache_schema: String,
    #[serde(default)]
    pub mem_bw_schema: String,
    #[serde(default)]
    pub schemata: Option<Vec<String>>,
    #[serde(default)]
    pub enable_monitoring: bool,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct NetDevice {
    pub host_interface_name: String,
    pub name: String,
}

/// The OCI hooks a CDI hook may name (`prestart` is deprecated in the runtime spec, but the
/// reference library still accepts it).
pub(crate) const HOOK_NAMES: &[&str] = &[
    "prestart",
    "createRuntime",
    "createContainer",
    "startContainer",
    "poststart",
    "poststop",
];

/// One device of a spec.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Device {
    pub name: String,
    pub edits: ContainerEdits,
}

/// A loaded, checked CDI spec file.
#[derive(Debug, Clone, PartialEq)]
pub struct CdiSpec {
    pub(crate) path: PathBuf,
    /// The index of its directory among the configured ones: for a device defined in two
    /// directories, the later directory's definition wins.
    pub(crate) priority: usize,
    pub(crate) vendor: String,
    pub(crate) class: String,
    /// Applied once to a container that gets any device of this spec, before the device's.
    pub(crate) edits: ContainerEdits,
    pub(crate) devices: Vec<Device>,
}

impl CdiSpec {
    /// Parses and checks the spec file at `path` (its contents `bytes`) found in the directory
    /// of index `priority`: JSON for `*.json`, YAML otherwise.
    pub fn parse(path: &Path, priority: usize, bytes: &[u8]) -> Result<CdiSpec, CdiSpecError> {
        let error = |problem: String| CdiSpecError {
            path: path.to_path_buf(),
            problem,
        };
        let raw: RawSpec = if path.extension().is_some_and(|e| e == "json") {
            serde_json::from_slice(bytes).map_err(|e| error(format!("invalid JSON: {e}")))?
        } else {
            serde_saphyr::from_slice(bytes).map_err(|e| error(format!("invalid YAML: {e}")))?
        };
        let (vendor, class) = parse_kind(&raw.kind).map_err(error)?;
        check_version(&raw).map_err(error)?;
        check_edits(&raw.container_edits).map_err(|e| error(format!("containerEdits: {e}")))?;
        if raw.devices.is_empty() {
            return Err(error("no devices".into()));
        }
        let mut devices: Vec<Device> = Vec::with_capacity(raw.devices.len());
        for d in &raw.devices {
            let problem = |p: String| error(format!("device {:?}: {p}", d.name));
            check_device_name(&d.name).map_err(problem)?;
            if devices.iter().any(|o| o.name == d.name) {
                return Err(problem("defined twice in this file".into()));
            }
            if d.container_edits == ContainerEdits::default() {
                return Err(problem("its containerEdits are empty".into()));
            }
            check_edits(&d.container_edits).map_err(problem)?;
            devices.push(Device {
                name: d.name.clone(),
                edits: d.container_edits.clone(),
            });
        }
        Ok(CdiSpec {
            path: path.to_path_buf(),
            priority,
            vendor: vendor.to_string(),
            class: class.to_string(),
            edits: raw.container_edits,
            devices,
        })
    }

    /// `vendor/class`.
    pub fn kind(&self) -> String {
        format!("{}/{}", self.vendor, self.class)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The fully-qualified names of its devices.
    pub fn device_names(&self) -> impl Iterator<Item = String> + '_ {
        self.devices
            .iter()
            .map(|d| format!("{}/{}={}", self.vendor, self.class, d.name))
    }
}

fn check_env(env: &[String]) -> Result<(), String> {
    match env.iter().find(|v| v.find('=').is_none_or(|i| i == 0)) {
        Some(v) => Err(format!("env {v:?} is not NAME=value")),
        None => Ok(()),
    }
}

fn check_edits(e: &ContainerEdits) -> Result<(), String> {
    check_env(&e.env)?;
    for d in &e.device_nodes {
        if d.path.is_empty() {
            return Err("a device node has no path".into());
        }
        if !matches!(d.kind.as_str(), "" | "b" | "c" | "u" | "p") {
            return Err(format!(
                "device node {:?}: type {:?} is not b, c, u or p",
                d.path, d.kind
            ));
        }
        let p = d.permissions.as_str();
        if !(p.is_empty() || p == "none" || p.chars().all(|c| matches!(c, 'r' | 'w' | 'm'))) {
            return Err(format!(
                "device node {:?}: permissions {p:?} are not a combination of r, w and m",
                d.path
            ));
        }
    }
    for h in &e.hooks {
        if !HOOK_NAMES.contains(&h.hook_name.as_str()) {
            return Err(format!(
                "hook name {:?} is not one of {}",
                h.hook_name,
                HOOK_NAMES.join(", ")
            ));
        }
        if h.path.is_empty() {
            return Err(format!("a {} hook has no path", h.hook_name));
        }
        if h.timeout.is_some_and(|t| t <= 0) {
            return Err(format!(
                "{} hook {:?}: timeout must be over 0",
                h.hook_name, h.path
            ));
        }
        check_env(&h.env).map_err(|e| format!("{} hook {:?}: {e}", h.hook_name, h.path))?;
    }
    for m in &e.mounts {
        if m.host_path.is_empty() || m.container_path.is_empty() {
            return Err(format!(
                "mount {:?} -> {:?}: hostPath and containerPath are required",
                m.host_path, m.container_path
            ));
        }
    }
    for n in &e.net_devices {
        if n.host_interface_name.is_empty() || n.name.is_empty() {
            return Err("a netDevice needs hostInterfaceName and name".into());
        }
    }
    Ok(())
}

/// The CDI versions this loader knows, oldest first.
const VERSIONS: &[&str] = &[
    "0.1.0", "0.2.0", "0.3.0", "0.4.0", "0.5.0", "0.6.0", "0.7.0", "0.8.0", "1.0.0", "1.1.0",
];

fn version_index(v: &str) -> Option<usize> {
    VERSIONS
        .iter()
        .position(|k| *k == v.trim_start_matches('v'))
}

/// The oldest version with every field the spec uses (the specification's table of
/// released versions).
fn required_version(raw: &RawSpec) -> &'static str {
    let edits: Vec<&ContainerEdits> = std::iter::once(&raw.container_edits)
        .chain(raw.devices.iter().map(|d| &d.container_edits))
        .collect();
    let rdt_v110 = |e: &&ContainerEdits| {
        e.intel_rdt
            .as_ref()
            .is_some_and(|r| r.schemata.is_some() || r.enable_monitoring)
    };
    if edits
        .iter()
        .any(|e| rdt_v110(e) || !e.net_devices.is_empty())
    {
        return "1.1.0";
    }
    if edits
        .iter()
        .any(|e| e.intel_rdt.is_some() || !e.additional_gids.is_empty())
    {
        return "0.7.0";
    }
    let class_has_dot = raw
        .kind
        .split_once('/')
        .is_some_and(|(_, c)| c.contains('.'));
    if !raw.annotations.is_empty()
        || raw.devices.iter().any(|d| !d.annotations.is_empty())
        || class_has_dot
    {
        return "0.6.0";
    }
    let digit_name = raw
        .devices
        .iter()
        .any(|d| d.name.starts_with(|c: char| c.is_ascii_digit()));
    let host_path = edits
        .iter()
        .any(|e| e.device_nodes.iter().any(|n| !n.host_path.is_empty()));
    if digit_name || host_path {
        return "0.5.0";
    }
    "0.3.0"
}

fn check_version(raw: &RawSpec) -> Result<(), String> {
    let Some(have) = version_index(&raw.version) else {
        return Err(format!(
            "cdiVersion {:?} is not a known CDI version ({})",
            raw.version,
            VERSIONS.join(", ")
        ));
    };
    let need = required_version(raw);
    if version_index(need).is_some_and(|n| have < n) {
        return Err(format!(
            "cdiVersion {:?} is older than the fields used need ({need})",
            raw.version
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the kubelet's sample device plugin writes with CDI_ENABLED (test/images/
    /// sample-device-plugin), in its own byte layout.
    const SAMPLE_PLUGIN: &str = r#"{"cdiVersion":"0.3.0","kind":"example.com/resource","devices":[{"name":"CDI-Dev-1","containerEdits":{"env":["CDI_DEVICE=CDI-Dev-1"],"deviceNodes":[{"path":"/tmp/CDI-Dev-1","type":"b","major":1,"minor":0}]}},{"name":"CDI-Dev-2","containerEdits":{"env":["CDI_DEVICE=CDI-Dev-2"],"deviceNodes":[{"path":"/tmp/CDI-Dev-2","type":"b","major":1,"minor":1}]}}]}"#;

    fn parse(name: &str, text: &str) -> Result<CdiSpec, String> {
        CdiSpec::parse(Path::new(name), 0, text.as_bytes()).map_err(|e| e.to_string())
    }

    #[test]
    fn the_sample_device_plugins_spec() {
        let s = parse("/var/run/cdi/example.com.json", SAMPLE_PLUGIN).unwrap();
        assert_eq!(s.kind(), "example.com/resource");
        assert_eq!(
            s.device_names().collect::<Vec<_>>(),
            [
                "example.com/resource=CDI-Dev-1",
                "example.com/resource=CDI-Dev-2"
            ]
        );
        let node = &s.devices[1].edits.device_nodes[0];
        assert_eq!(
            (
                node.path.as_str(),
                node.kind.as_str(),
                node.major,
                node.minor
            ),
            ("/tmp/CDI-Dev-2", "b", 1, 1)
        );
        assert_eq!(s.devices[0].edits.env, ["CDI_DEVICE=CDI-Dev-1"]);
        assert_eq!(s.edits, ContainerEdits::default());
    }

    #[test]
    fn yaml_with_every_kind_of_edit() {
        let s = parse(
            "/etc/cdi/vendor.yaml",
            r#"
cdiVersion: "0.7.0"
kind: vendor.com/gpu
containerEdits:
  env: ["VENDOR_DRIVER=1"]
  hooks:
    - hookName: createContainer
      path: /usr/bin/vendor-hook
      args: ["vendor-hook", "create"]
      env: ["A=1"]
      timeout: 5
devices:
  - name: "0"
    containerEdits:
      deviceNodes:
        - path: /dev/vgpu0
          hostPath: /dev/vendor/gpu0
          permissions: rw
          fileMode: 432
          uid: 0
          gid: 44
      mounts:
        - hostPath: /usr/lib/vendor
          containerPath: /usr/lib/vendor
          options: [ro, nosuid, nodev, bind]
      additionalGIDs: [44]
"#,
        )
        .unwrap();
        assert_eq!(s.edits.hooks[0].hook_name, "createContainer");
        assert_eq!(s.edits.hooks[0].timeout, Some(5));
        let d = &s.devices[0].edits;
        assert_eq!(d.device_nodes[0].host_path, "/dev/vendor/gpu0");
        assert_eq!(d.device_nodes[0].file_mode, Some(0o660));
        assert_eq!(d.device_nodes[0].gid, Some(44));
        assert_eq!(d.mounts[0].options, ["ro", "nosuid", "nodev", "bind"]);
        assert_eq!(d.additional_gids, [44]);
    }

    #[test]
    fn bad_files_say_what_is_wrong() {
        let device = r#"{"name":"a","containerEdits":{"env":["A=1"]}}"#;
        let spec = |version: &str, kind: &str, devices: &str| {
            format!(r#"{{"cdiVersion":"{version}","kind":"{kind}","devices":[{devices}]}}"#)
        };
        for (name, text, why) in [
            ("x.json", "{not json".to_string(), "invalid JSON"),
            ("x.yaml", "devices: [".to_string(), "invalid YAML"),
            (
                "x.json",
                r#"{"cdiVersion":"0.3.0","kind":"v.com/c","devices":[],"extra":1}"#.into(),
                "unknown field",
            ),
            (
                "x.json",
                spec(
                    "0.3.0",
                    "v.com/c",
                    r#"{"name":"a","containerEdits":{"envs":[]}}"#,
                ),
                "unknown field",
            ),
            ("x.json", spec("0.3.0", "v.com", device), "vendor/class"),
            (
                "x.json",
                spec("9.9.9", "v.com/c", device),
                "not a known CDI version",
            ),
            ("x.json", spec("0.3.0", "v.com/c", ""), "no devices"),
            (
                "x.json",
                spec("0.3.0", "v.com/c", &format!("{device},{device}")),
                "defined twice",
            ),
            (
                "x.json",
                spec("0.3.0", "v.com/c", r#"{"name":"a","containerEdits":{}}"#),
                "containerEdits are empty",
            ),
            (
                "x.json",
                spec(
                    "0.3.0",
                    "v.com/c",
                    r#"{"name":"-a","containerEdits":{"env":["A=1"]}}"#,
                ),
                "device name",
            ),
            (
                "x.json",
                spec(
                    "0.3.0",
                    "v.com/c",
                    r#"{"name":"a","containerEdits":{"env":["=1"]}}"#,
                ),
                "NAME=value",
            ),
            (
                "x.json",
                spec(
                    "0.3.0",
                    "v.com/c",
                    r#"{"name":"a","containerEdits":{"deviceNodes":[{"path":"/dev/x","type":"z"}]}}"#,
                ),
                "is not b, c, u or p",
            ),
            (
                "x.json",
                spec(
                    "0.3.0",
                    "v.com/c",
                    r#"{"name":"a","containerEdits":{"deviceNodes":[{"path":"/dev/x","permissions":"rwx"}]}}"#,
                ),
                "permissions",
            ),
            (
                "x.json",
                spec(
                    "0.3.0",
                    "v.com/c",
                    r#"{"name":"a","containerEdits":{"hooks":[{"hookName":"later","path":"/h"}]}}"#,
                ),
                "hook name",
            ),
            (
                "x.json",
                spec(
                    "0.3.0",
                    "v.com/c",
                    r#"{"name":"a","containerEdits":{"mounts":[{"hostPath":"","containerPath":"/x"}]}}"#,
                ),
                "hostPath and containerPath",
            ),
            // Fields newer than the version the file claims.
            (
                "x.json",
                spec(
                    "0.3.0",
                    "v.com/c",
                    r#"{"name":"0","containerEdits":{"env":["A=1"]}}"#,
                ),
                "(0.5.0)",
            ),
            (
                "x.json",
                spec(
                    "0.6.0",
                    "v.com/c",
                    r#"{"name":"a","containerEdits":{"additionalGids":[5]}}"#,
                ),
                "(0.7.0)",
            ),
            (
                "x.json",
                spec(
                    "0.7.0",
                    "v.com/c",
                    r#"{"name":"a","containerEdits":{"netDevices":[{"hostInterfaceName":"eth1","name":"net1"}]}}"#,
                ),
                "(1.1.0)",
            ),
        ] {
            let err = parse(name, &text).unwrap_err();
            assert!(err.contains(why), "{text}: {err}");
            assert!(err.starts_with(&format!("CDI spec {name}: ")), "{err}");
        }
    }

    #[test]
    fn versions_with_a_v_and_file_names() {
        let ok = r#"{"cdiVersion":"v1.0.0","kind":"v.com/c","devices":[{"name":"a","containerEdits":{"env":["A=1"]}}]}"#;
        assert!(parse("x.json", ok).is_ok());
        assert!(is_spec_file(Path::new("/etc/cdi/a.json")));
        assert!(is_spec_file(Path::new("/etc/cdi/a.yaml")));
        assert!(!is_spec_file(Path::new("/etc/cdi/a.yml")));
        assert!(!is_spec_file(Path::new("/etc/cdi/a.json.tmp")));
    }
}
