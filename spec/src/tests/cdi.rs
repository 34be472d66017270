//! CDI devices in whole specs: resolved in the registry the daemon read, their edits applied
//! over the finished spec (and kept exactly by the OCI type), errors naming the request field.

use super::*;
use crate::cdi::CdiSpec;
use peapod_proto::v1::CdiDevice;

/// What the kubelet's sample device plugin writes with CDI_ENABLED (test/images/
/// sample-device-plugin), byte for byte.
const SAMPLE_PLUGIN: &str = r#"{"cdiVersion":"0.3.0","kind":"example.com/resource","devices":[{"name":"CDI-Dev-1","containerEdits":{"env":["CDI_DEVICE=CDI-Dev-1"],"deviceNodes":[{"path":"/tmp/CDI-Dev-1","type":"b","major":1,"minor":0}]}},{"name":"CDI-Dev-2","containerEdits":{"env":["CDI_DEVICE=CDI-Dev-2"],"deviceNodes":[{"path":"/tmp/CDI-Dev-2","type":"b","major":1,"minor":1}]}}]}"#;

/// A vendor spec with spec-wide edits and every kind of device edit.
const VENDOR: &str = r#"
cdiVersion: "0.7.0"
kind: vendor.com/gpu
containerEdits:
  env: ["VENDOR_DRIVER=2.1", "MODE=gpu"]
  hooks:
    - {hookName: createContainer, path: /usr/bin/vendor-hook, args: [vendor-hook, create], timeout: 10}
devices:
  - name: "0"
    containerEdits:
      deviceNodes:
        - {path: /dev/vgpu0, hostPath: /dev/vendor0, permissions: rw}
      mounts:
        - {hostPath: /usr/lib/vendor, containerPath: /data, options: [ro, rbind]}
      additionalGids: [44]
  - name: "1"
    containerEdits:
      deviceNodes:
        - {path: /dev/vgpu1, type: c, major: 195, minor: 1}
"#;

fn registry(files: &[(&str, &str)]) -> CdiRegistry {
    let specs = files
        .iter()
        .enumerate()
        .map(|(i, (path, text))| CdiSpec::parse(Path::new(path), i, text.as_bytes()).unwrap())
        .collect();
    CdiRegistry::new(specs, Vec::new())
}

fn ask(f: &mut Fixture, names: &[&str]) {
    f.config.cdi_devices = names
        .iter()
        .map(|n| CdiDevice {
            name: n.to_string(),
        })
        .collect();
}

fn fixture() -> Fixture {
    let mut f = Fixture::new();
    f.cdi = registry(&[
        ("/etc/cdi/vendor.yaml", VENDOR),
        ("/var/run/cdi/example.com.json", SAMPLE_PLUGIN),
    ]);
    f.paths.devices.insert(
        "/dev/vendor0".into(),
        vec![dev("/dev/vendor0", 'c', 195, 0)],
    );
    f
}

#[test]
fn the_sample_device_plugins_device() {
    let mut f = fixture();
    ask(&mut f, &["example.com/resource=CDI-Dev-2"]);
    let s = f.json();
    assert!(strs(&s["process"]["env"]).contains(&"CDI_DEVICE=CDI-Dev-2".to_string()));
    assert_eq!(
        s["linux"]["devices"],
        json!([{"path": "/tmp/CDI-Dev-2", "type": "b", "major": 1, "minor": 1, "uid": 1000, "gid": 1000}])
    );
    let rules = s["linux"]["resources"]["devices"].as_array().unwrap();
    assert_eq!(rules[0], json!({"allow": false, "access": "rwm"}));
    assert_eq!(
        rules.last().unwrap(),
        &json!({"allow": true, "type": "b", "major": 1, "minor": 1, "access": "rwm"})
    );
    // Nothing asked for: no device, no env.
    ask(&mut f, &[]);
    let s = f.json();
    assert!(s["linux"].get("devices").is_none());
    assert!(!strs(&s["process"]["env"])
        .iter()
        .any(|e| e.starts_with("CDI_")));
}

#[test]
fn spec_wide_edits_once_then_each_devices() {
    let mut f = fixture();
    // A CRI mount the device's mount replaces.
    f.config.mounts.push(Mount {
        container_path: "/data".into(),
        host_path: "/srv/data".into(),
        ..Default::default()
    });
    ask(&mut f, &["vendor.com/gpu=1", "vendor.com/gpu=0"]);
    let s = f.json();
    let env = strs(&s["process"]["env"]);
    assert_eq!(
        env,
        vec![
            "PATH=/usr/bin:/bin",
            "HOSTNAME=web-host",
            // The config's MODE, replaced in place by the spec's.
            "MODE=gpu",
            "VENDOR_DRIVER=2.1",
        ]
    );
    assert_eq!(
        s["hooks"],
        json!({"createContainer": [{"path": "/usr/bin/vendor-hook", "args": ["vendor-hook", "create"], "timeout": 10}]}),
        "the spec-wide hook once for two of its devices"
    );
    let devices = s["linux"]["devices"].as_array().unwrap();
    let paths: Vec<&str> = devices
        .iter()
        .map(|d| d["path"].as_str().unwrap())
        .collect();
    assert_eq!(paths, ["/dev/vgpu1", "/dev/vgpu0"]);
    assert_eq!(
        devices[1],
        json!({"path": "/dev/vgpu0", "type": "c", "major": 195, "minor": 0, "fileMode": 0o666, "uid": 1000, "gid": 1000})
    );
    assert!(s["linux"]["resources"]["devices"]
        .as_array()
        .unwrap()
        .contains(&json!({"allow": true, "type": "c", "major": 195, "minor": 0, "access": "rw"})));
    let data: Vec<&Value> = s["mounts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["destination"] == "/data")
        .collect();
    assert_eq!(
        data,
        [&json!({"destination": "/data", "source": "/usr/lib/vendor", "options": ["ro", "rbind"]})]
    );
    assert_eq!(
        s["process"]["user"]["additionalGids"],
        json!([10, 1000, 44])
    );
}

#[test]
fn annotations_ask_too_and_a_name_counts_once() {
    let mut f = fixture();
    ask(&mut f, &["example.com/resource=CDI-Dev-1"]);
    f.config.annotations.insert(
        "cdi.k8s.io/example.com_dev".into(),
        "example.com/resource=CDI-Dev-1,vendor.com/gpu=1".into(),
    );
    let s = f.json();
    let paths: Vec<&str> = s["linux"]["devices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["path"].as_str().unwrap())
        .collect();
    assert_eq!(paths, ["/tmp/CDI-Dev-1", "/dev/vgpu1"]);
    // The annotation is an ordinary one too: copied into the spec.
    assert_eq!(
        s["annotations"]["cdi.k8s.io/example.com_dev"],
        "example.com/resource=CDI-Dev-1,vendor.com/gpu=1"
    );
}

#[test]
fn a_privileged_containers_host_device_is_replaced_not_doubled() {
    let mut f = fixture();
    f.sc().privileged = true;
    f.sandbox_sc().privileged = true;
    f.cdi = registry(&[(
        "/etc/cdi/disk.json",
        r#"{"cdiVersion":"0.5.0","kind":"vendor.com/disk","devices":[{"name":"sda","containerEdits":{"deviceNodes":[{"path":"/dev/sda","type":"b","major":8,"minor":0,"permissions":"r"}]}}]}"#,
    )]);
    ask(&mut f, &["vendor.com/disk=sda"]);
    let s = f.json();
    let sda: Vec<&Value> = s["linux"]["devices"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d["path"] == "/dev/sda")
        .collect();
    assert_eq!(sda.len(), 1, "{sda:?}");
    assert_eq!(
        s["linux"]["resources"]["devices"][0],
        json!({"allow": true, "access": "rwm"}),
        "still allow-all"
    );
}

#[test]
fn unknown_malformed_and_inapplicable_devices_are_invalid_arguments() {
    let mut f = fixture();
    ask(
        &mut f,
        &[
            "example.com/resource=CDI-Dev-1",
            "example.com/resource=CDI-Dev-9",
        ],
    );
    let err = f.err();
    assert!(
        err.starts_with(
            "config.cdi_devices[1] \"example.com/resource=CDI-Dev-9\": no such CDI device"
        ),
        "{err}"
    );
    ask(&mut f, &["CDI-Dev-1"]);
    assert!(f
        .err()
        .starts_with("config.cdi_devices[0] \"CDI-Dev-1\": not a fully-qualified"));
    // The host node its spec relies on is gone.
    f.paths.devices.clear();
    ask(&mut f, &["vendor.com/gpu=0"]);
    let err = f.err();
    assert!(
        err.starts_with("config.cdi_devices[0] \"vendor.com/gpu=0\": /etc/cdi/vendor.yaml: device node \"/dev/vgpu0\": host device \"/dev/vendor0\""),
        "{err}"
    );
    // Nothing to resolve in: the daemon passes an empty registry only when nothing is asked.
    f.cdi = CdiRegistry::empty();
    ask(&mut f, &["vendor.com/gpu=1"]);
    assert!(f.err().contains("no such CDI device"));
}
