//! CDI devices in CreateContainer against fakes: the spec files are read at each create that
//! asks for a device (a file written a moment ago counts), the device's edits reach the
//! bundle's config.json, and a device that cannot be had fails the create with
//! InvalidArgument through the create's failure path: nothing of the container is left.

use crate::testing::Harness;
use peapod_proto::v1 as cri;
use tonic::Code;

const SPEC: &str = r#"{"cdiVersion":"0.3.0","kind":"example.com/resource","devices":[{"name":"CDI-Dev-1","containerEdits":{"env":["CDI_DEVICE=CDI-Dev-1"],"deviceNodes":[{"path":"/tmp/CDI-Dev-1","type":"b","major":1,"minor":0}]}}]}"#;

fn asking(h: &Harness, name: &str, devices: &[&str]) -> cri::ContainerConfig {
    let mut config = h.container_config(name);
    config.cdi_devices = devices
        .iter()
        .map(|n| cri::CdiDevice {
            name: n.to_string(),
        })
        .collect();
    config
}

fn config_json(h: &Harness, id: &str) -> serde_json::Value {
    let path =
        h.rt.config
            .state
            .join("containers")
            .join(id)
            .join("config.json");
    serde_json::from_slice(&std::fs::read(&path).expect("config.json")).expect("JSON")
}

/// A daemon with a pod, and the spec file written into its CDI directory (after the daemon
/// started, as a device plugin writes it).
async fn pod_and_spec() -> (Harness, String) {
    let h = Harness::new().await;
    let pod = h.run_pod("web").await.unwrap();
    std::fs::create_dir_all(h.cdi_dir()).unwrap();
    std::fs::write(h.cdi_dir().join("example.com.json"), SPEC).unwrap();
    (h, pod)
}

#[tokio::test]
async fn a_device_written_just_before_the_create_is_in_the_bundle() {
    let (h, pod) = pod_and_spec().await;
    let id = h
        .create_container_with(&pod, asking(&h, "app", &["example.com/resource=CDI-Dev-1"]))
        .await
        .expect("CreateContainer");
    let spec = config_json(&h, &id);
    let env: Vec<&str> = spec["process"]["env"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e.as_str())
        .collect();
    assert!(env.contains(&"CDI_DEVICE=CDI-Dev-1"), "{env:?}");
    assert_eq!(
        spec["linux"]["devices"],
        serde_json::json!([{"path": "/tmp/CDI-Dev-1", "type": "b", "major": 1, "minor": 0}])
    );
    h.remove_container(&id).await.unwrap();
    h.remove_pod(&pod).await.unwrap();
    h.assert_nothing_left().await;
}

#[tokio::test]
async fn an_unknown_or_malformed_device_fails_the_create_and_leaves_nothing() {
    let (h, pod) = pod_and_spec().await;
    for (devices, message) in [
        (
            [
                "example.com/resource=CDI-Dev-1",
                "example.com/resource=CDI-Dev-7",
            ],
            "config.cdi_devices[1] \"example.com/resource=CDI-Dev-7\": no such CDI device",
        ),
        (
            ["example.com/resource=CDI-Dev-1", "CDI-Dev-1"],
            "config.cdi_devices[1] \"CDI-Dev-1\": not a fully-qualified CDI device name",
        ),
    ] {
        let err = h
            .create_container_with(&pod, asking(&h, "app", &devices))
            .await
            .unwrap_err();
        assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
        assert!(err.message().contains(message), "{err:?}");
        assert!(h.containers().await.is_empty(), "no record");
        assert!(h.images.rootfs_owners().is_empty(), "no rootfs");
        let dirs = h.container_dirs();
        assert!(dirs.is_empty(), "container directories left: {dirs:?}");
    }
    // The rootfs was made, then removed by the failure path.
    assert!(h.faults.count("rootfs.remove") >= 1);
    // The name is free again.
    let id = h
        .create_container_with(&pod, asking(&h, "app", &["example.com/resource=CDI-Dev-1"]))
        .await
        .expect("the same name, with a device that exists");
    h.remove_container(&id).await.unwrap();
    h.remove_pod(&pod).await.unwrap();
    h.assert_nothing_left().await;
}
