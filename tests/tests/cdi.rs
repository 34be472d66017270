//! CDI devices end to end: CDI spec files in the daemon's own spec directories (`[cdi]
//! spec_dirs`), a container asking for a device by name in `cdi_devices` as the kubelet does
//! with a device plugin's answer, and real runc making the device node inside it.

use e2e::daemon::DaemonOptions;
use e2e::pods::{busybox, exec_sync_in, sh, Images};
use e2e::{host, TestDaemon};
use peapod_proto::v1 as cri;
use std::path::Path;
use tonic::Code;

/// The kubelet's sample device plugin's spec (test/images/sample-device-plugin, with
/// CDI_ENABLED), as it writes it to /var/run/cdi/example.com.json.
const SAMPLE_PLUGIN: &str = r#"{"cdiVersion":"0.3.0","kind":"example.com/resource","devices":[{"name":"CDI-Dev-1","containerEdits":{"env":["CDI_DEVICE=CDI-Dev-1"],"deviceNodes":[{"path":"/tmp/CDI-Dev-1","type":"b","major":1,"minor":0}]}},{"name":"CDI-Dev-2","containerEdits":{"env":["CDI_DEVICE=CDI-Dev-2"],"deviceNodes":[{"path":"/tmp/CDI-Dev-2","type":"b","major":1,"minor":1}]}}]}"#;

/// The same device in the earlier directory, which the later one overrides.
const STATIC: &str = r#"{"cdiVersion":"0.3.0","kind":"example.com/resource","devices":[{"name":"CDI-Dev-2","containerEdits":{"env":["CDI_DEVICE=static"],"deviceNodes":[{"path":"/tmp/CDI-Dev-2","type":"b","major":1,"minor":9}]}}]}"#;

fn asking(config: &mut cri::ContainerConfig, names: &[&str]) {
    config.cdi_devices = names
        .iter()
        .map(|n| cri::CdiDevice {
            name: n.to_string(),
        })
        .collect();
}

fn entries(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cdi_device_is_in_the_container_and_a_bad_one_changes_nothing() {
    let mut d = TestDaemon::start_with(
        "cdi",
        DaemonOptions {
            extra_config: "[cdi]\nspec_dirs = [\"{dir}/cdi-static\", \"{dir}/cdi\"]\n".into(),
            ..Default::default()
        },
    )
    .await;
    let (static_dir, dynamic_dir) = (d.dir.join("cdi-static"), d.dir.join("cdi"));
    std::fs::create_dir_all(&static_dir).unwrap();
    std::fs::create_dir_all(&dynamic_dir).unwrap();
    std::fs::write(static_dir.join("example.com.json"), STATIC).unwrap();
    // Written while the daemon runs, as a device plugin does; a broken file beside it is
    // skipped, not fatal.
    std::fs::write(dynamic_dir.join("example.com.json"), SAMPLE_PLUGIN).unwrap();
    std::fs::write(dynamic_dir.join("broken.json"), "{\"cdiVersion\":").unwrap();

    let images = Images::start();
    let image = images.push("busybox:cdi", &busybox());
    d.pull(&image).await;
    let pod = d.run_pod("cdi-pod").await;

    let mut config = sh("with-device", &image, "sleep 300 & wait");
    asking(&mut config, &["example.com/resource=CDI-Dev-2"]);
    let id = d.run_container(&pod, config).await;
    let out = exec_sync_in(
        &mut d,
        &id,
        &[
            "sh",
            "-c",
            "echo $CDI_DEVICE; ls -ln /tmp/CDI-Dev-2; ls /tmp",
        ],
    )
    .await;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(
        out.exit_code,
        0,
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(
        lines[0], "CDI-Dev-2",
        "the later directory's definition: {stdout}"
    );
    // `brw-... 1 0 0 1, 1 <date> /tmp/CDI-Dev-2`: a block device 1:1, made by the runtime
    // (the host has no /tmp/CDI-Dev-2).
    let ls: Vec<&str> = lines[1].split_whitespace().collect();
    assert!(ls[0].starts_with('b'), "a block device: {stdout}");
    assert_eq!((ls[4], ls[5]), ("1,", "1"), "major 1, minor 1: {stdout}");
    assert_eq!(
        lines[2..],
        ["CDI-Dev-2"],
        "only the device asked for: {stdout}"
    );
    assert!(!Path::new("/tmp/CDI-Dev-2").exists());
    assert!(
        d.log().contains("broken.json"),
        "the skipped file is in the daemon's log"
    );

    // A device no spec defines, and a name that is not fully-qualified: InvalidArgument
    // naming the field and the device, and nothing of the container made.
    let dirs_before = (
        entries(&d.root.join("containers")),
        entries(&d.state.join("containers")),
    );
    let mounts_before = host::mounts_under(&d.dir);
    for (name, why) in [
        ("example.com/resource=CDI-Dev-9", "no such CDI device"),
        ("CDI-Dev-1", "not a fully-qualified CDI device name"),
    ] {
        let mut bad = sh("bad-device", &image, "true");
        asking(&mut bad, &["example.com/resource=CDI-Dev-1", name]);
        let err = d.create(&pod, bad).await.unwrap_err();
        assert_eq!(err.code(), Code::InvalidArgument, "{err}");
        let field = format!("config.cdi_devices[1] {name:?}: {why}");
        assert!(err.message().contains(&field), "{err}");
        let containers = d.containers_of(&pod).await;
        let ids: Vec<&str> = containers.iter().map(|c| c.id.as_str()).collect();
        assert_eq!(ids, [id.as_str()], "only the first container");
        let dirs_after = (
            entries(&d.root.join("containers")),
            entries(&d.state.join("containers")),
        );
        assert_eq!(dirs_after, dirs_before, "no directory of the bad container");
        assert_eq!(host::mounts_under(&d.dir), mounts_before, "no mount");
    }
    // The unknown device's error names the file that was skipped.
    let mut bad = sh("bad-device", &image, "true");
    asking(&mut bad, &["example.com/resource=CDI-Dev-9"]);
    let err = d.create(&pod, bad).await.unwrap_err();
    assert!(err.message().contains("broken.json"), "{err}");

    d.remove_pod(&pod).await;
    assert!(d.leftovers().is_empty(), "{:#?}", d.leftovers());
}
