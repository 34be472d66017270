//! Resources and devices: cgroup v1 and v2 limits, CRI devices (CDI devices: `cdi.rs`).

use super::*;

#[test]
fn resources_on_v1_and_v2() {
    let mut f = Fixture::new();
    let r = f.config.linux.as_mut().unwrap().resources.as_mut().unwrap();
    r.unified = [("memory.high".to_string(), "1000000".to_string())].into();
    r.cpuset_cpus = "0".into();
    r.memory_swap_limit_in_bytes = 64 << 20;
    r.oom_score_adj = 500;
    let s = f.json();
    assert!(
        s["linux"]["resources"].get("unified").is_none(),
        "no unified on v1"
    );
    assert_eq!(s["linux"]["resources"]["memory"]["swap"], 64 << 20);
    assert_eq!(s["linux"]["resources"]["cpu"]["cpus"], "0");
    assert_eq!(s["process"]["oomScoreAdj"], 500);
    f.host.cgroup_v2 = true;
    let s = f.json();
    assert_eq!(
        s["linux"]["resources"]["unified"],
        json!({"memory.high": "1000000"})
    );
    f.config.linux.as_mut().unwrap().resources = None;
    let s = f.json();
    assert!(s["process"].get("oomScoreAdj").is_none());
    assert_eq!(
        s["linux"]["resources"],
        json!({"devices": [{"allow": false, "access": "rwm"}]})
    );
}

#[test]
fn cri_devices() {
    let mut f = Fixture::new();
    f.paths
        .devices
        .insert("/dev/fuse".into(), vec![dev("/dev/fuse", 'c', 10, 229)]);
    f.paths.devices.insert(
        "/dev/snd".into(),
        vec![
            dev("/dev/snd/timer", 'c', 116, 33),
            dev("/dev/snd/by-x/pcm", 'c', 116, 2),
        ],
    );
    f.config.devices = vec![
        Device {
            container_path: "/dev/fuse".into(),
            host_path: "/dev/fuse".into(),
            permissions: "rw".into(),
        },
        Device {
            container_path: "/dev/sound".into(),
            host_path: "/dev/snd".into(),
            permissions: "mrw".into(),
        },
    ];
    let s = f.json();
    assert_eq!(
        s["linux"]["devices"],
        json!([
            {"path": "/dev/fuse", "type": "c", "major": 10, "minor": 229, "fileMode": 438, "uid": 0, "gid": 0},
            {"path": "/dev/sound/timer", "type": "c", "major": 116, "minor": 33, "fileMode": 438, "uid": 0, "gid": 0},
            {"path": "/dev/sound/by-x/pcm", "type": "c", "major": 116, "minor": 2, "fileMode": 438, "uid": 0, "gid": 0},
        ])
    );
    assert_eq!(
        s["linux"]["resources"]["devices"],
        json!([
            {"allow": false, "access": "rwm"},
            {"allow": true, "type": "c", "major": 10, "minor": 229, "access": "rw"},
            {"allow": true, "type": "c", "major": 116, "minor": 33, "access": "mrw"},
            {"allow": true, "type": "c", "major": 116, "minor": 2, "access": "mrw"},
        ])
    );
    f.config.devices[0].permissions = "rwx".into();
    assert!(f.err().contains("config.devices[0].permissions"));
    f.config.devices[0].permissions = "r".into();
    f.config.devices[0].host_path = "/dev/missing".into();
    assert!(f.err().contains("config.devices[0].host_path"));
}
