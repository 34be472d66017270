//! CDI, the Container Device Interface (github.com/cncf-tags/container-device-interface,
//! SPEC.md): devices a container asks for by fully-qualified name (`vendor.com/class=name`),
//! described by vendors' spec files as edits of the container's OCI spec.
//!
//! The split keeps this crate pure: the daemon reads the spec directories and gives
//! [`CdiSpec::parse`] each file's bytes, builds a [`CdiRegistry`] of what parsed (a file that
//! does not is its to log and skip), and passes that registry in
//! [`ContainerInputs::cdi`](crate::ContainerInputs); [`container_spec`](crate::container_spec)
//! resolves the container's devices in it and applies their edits last, after everything else
//! of the spec is made (as containerd's CDI spec option runs after its others), the edits of a
//! spec file once for any of its devices, before each device's own.
//!
//! The devices asked for: `config.cdi_devices` (the kubelet fills it from a device plugin's or
//! DRA driver's answer), then those of `cdi.k8s.io/*` annotations (the older way: a
//! comma-separated list of names per key), each name once.

mod document;
mod edits;
mod name;
mod registry;

pub use document::{is_spec_file, CdiSpec, CdiSpecError};
pub use registry::CdiRegistry;

use crate::error::{Result, SpecError};
use crate::host::HostPaths;
use peapod_proto::v1::ContainerConfig;
use serde_json::Value;

/// The annotation prefix of CDI device requests.
pub const ANNOTATION_PREFIX: &str = "cdi.k8s.io/";

/// One device a container asks for, and the request field that names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CdiRequest {
    /// `config.cdi_devices[i]` or `config.annotations["cdi.k8s.io/..."]`, for messages.
    pub field: String,
    /// The fully-qualified device name.
    pub name: String,
}

/// The CDI devices `config` asks for, in order, each once; a name that is not
/// fully-qualified is InvalidArgument naming its field.
pub fn requested_devices(config: &ContainerConfig) -> Result<Vec<CdiRequest>> {
    let mut out: Vec<CdiRequest> = Vec::new();
    let mut add = |field: String, name: &str| {
        name::parse_qualified(name)
            .map_err(|why| SpecError::invalid(format!("{field} {name:?}: {why}")))?;
        if !out.iter().any(|r| r.name == name) {
            out.push(CdiRequest {
                field,
                name: name.to_string(),
            });
        }
        Ok::<(), SpecError>(())
    };
    for (i, d) in config.cdi_devices.iter().enumerate() {
        add(format!("config.cdi_devices[{i}]"), &d.name)?;
    }
    // Sorted, so that the order (and the first error) does not depend on a hash map's.
    let mut keys: Vec<&String> = config
        .annotations
        .keys()
        .filter(|k| k.starts_with(ANNOTATION_PREFIX))
        .collect();
    keys.sort();
    for key in keys {
        for name in config.annotations[key].split(',') {
            add(format!("config.annotations[{key:?}]"), name)?;
        }
    }
    Ok(out)
}

/// Applies the edits of every CDI device `config` asks for to `spec`, resolved in `registry`.
/// Errors are InvalidArgument naming the request field, the device and, for what cannot be
/// applied, its spec file.
pub(crate) fn apply(
    spec: &mut Value,
    config: &ContainerConfig,
    registry: &CdiRegistry,
    paths: &dyn HostPaths,
) -> Result<()> {
    let mut specs_applied: Vec<usize> = Vec::new();
    for req in requested_devices(config)? {
        let fail = |why: String| SpecError::invalid(format!("{} {:?}: {why}", req.field, req.name));
        let found = registry.resolve(&req.name).map_err(fail)?;
        let file = found.spec.path().display();
        if !specs_applied.contains(&found.spec_index) {
            specs_applied.push(found.spec_index);
            edits::apply_edits(spec, &found.spec.edits, paths)
                .map_err(|e| fail(format!("the spec-wide containerEdits of {file}: {e}")))?;
        }
        edits::apply_edits(spec, &found.device.edits, paths)
            .map_err(|e| fail(format!("{file}: {e}")))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use peapod_proto::v1::CdiDevice;

    fn config(devices: &[&str], annotations: &[(&str, &str)]) -> ContainerConfig {
        ContainerConfig {
            cdi_devices: devices
                .iter()
                .map(|n| CdiDevice {
                    name: n.to_string(),
                })
                .collect(),
            annotations: annotations
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn requests_from_the_field_then_the_annotations_each_once() {
        let c = config(
            &["v.com/gpu=0", "v.com/gpu=1", "v.com/gpu=0"],
            &[
                ("cdi.k8s.io/z-plugin_dev", "v.com/gpu=1,v.com/nic=a"),
                ("cdi.k8s.io/a-plugin_dev", "v.com/fpga=x"),
                ("io.kubernetes.container.hash", "not=a/device"),
            ],
        );
        let got: Vec<(String, String)> = requested_devices(&c)
            .unwrap()
            .into_iter()
            .map(|r| (r.field, r.name))
            .collect();
        let want = [
            ("config.cdi_devices[0]", "v.com/gpu=0"),
            ("config.cdi_devices[1]", "v.com/gpu=1"),
            (
                "config.annotations[\"cdi.k8s.io/a-plugin_dev\"]",
                "v.com/fpga=x",
            ),
            (
                "config.annotations[\"cdi.k8s.io/z-plugin_dev\"]",
                "v.com/nic=a",
            ),
        ];
        let want: Vec<(String, String)> = want
            .iter()
            .map(|(f, n)| (f.to_string(), n.to_string()))
            .collect();
        assert_eq!(got, want);
        assert!(requested_devices(&ContainerConfig::default())
            .unwrap()
            .is_empty());
    }

    #[test]
    fn malformed_names_name_their_field() {
        let err = requested_devices(&config(&["v.com/gpu=0", "gpu0"], &[]))
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("config.cdi_devices[1] \"gpu0\": not a fully-qualified"),
            "{err}"
        );
        let err = requested_devices(&config(&[], &[("cdi.k8s.io/p_d", "v.com/gpu=0,")]))
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("config.annotations[\"cdi.k8s.io/p_d\"] \"\":"),
            "{err}"
        );
    }
}
