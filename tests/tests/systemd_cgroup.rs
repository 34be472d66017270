//! The systemd cgroup driver end to end, on a host whose init is systemd (the Debian guest:
//! `scripts/vm test`; `#[ignore]`d on this machine, which has no systemd as PID 1, and
//! failing, not skipping, where systemd is missing): every pause and container a scope unit
//! `peapod-<id>.scope` in the slice its pod's cgroup parent names, its limits and stats where
//! the scope really is, a daemon restart changing nothing for running pods, and no unit or
//! cgroup left once the pod is removed.

use e2e::pods::{busybox, sh, Images};
use e2e::{DaemonOptions, TestDaemon};
use peapod_proto::v1 as cri;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

const WAIT: Duration = Duration::from_secs(60);

fn require_systemd() {
    assert!(
        peapod_host::systemd::booted(),
        "this test needs systemd as PID 1: it runs in the guest (scripts/vm test)"
    );
}

/// `systemctl show -p <prop> --value <unit>`.
fn unit_property(unit: &str, prop: &str) -> String {
    let out = Command::new("systemctl")
        .args(["show", "-p", prop, "--value", unit])
        .output()
        .expect("systemctl");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// The cgroup (from `/proc/<pid>/cgroup`'s `0::` line) of a process.
fn cgroup_of(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/cgroup"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .unwrap_or_default()
        .to_string()
}

async fn pid_of(d: &mut TestDaemon, id: &str) -> u32 {
    let info = d.container_info(id).await;
    info["pid"]
        .as_u64()
        .unwrap_or_else(|| panic!("no pid: {info}")) as u32
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs systemd as PID 1: runs in the guest (scripts/vm test)"]
async fn scopes_in_the_pods_slice_limits_stats_restart_and_nothing_left() {
    require_systemd();
    let mut d = TestDaemon::start_with(
        "systemd-cgroup",
        DaemonOptions {
            cgroup_driver: Some("systemd"),
            ..Default::default()
        },
    )
    .await;
    assert!(d.systemd);
    let images = Images::start();
    let image = images.push("busybox:sd", &busybox());
    d.pull(&image).await;

    // The kubelet's parent for a Burstable pod, as cgroupfs-style path: its slice is named as
    // the kubelet's systemd driver names it (the UID's dashes become underscores).
    let parent = format!("{}/burstable/pod1234-abcd", d.cgroup_parent);
    let pod = d
        .run_pod_with("sd-pod", |c| {
            c.linux.get_or_insert_with(Default::default).cgroup_parent = parent.clone();
        })
        .await;
    let slice = peapod_host::systemd::slice_name(&parent);
    assert!(slice.ends_with("-burstable-pod1234_abcd.slice"), "{slice}");
    let slice_dir = peapod_host::systemd::slice_path(&slice).unwrap();

    let mut ctr = sh("app", &image, "sleep 3600");
    ctr.linux.get_or_insert_with(Default::default).resources = Some(cri::LinuxContainerResources {
        memory_limit_in_bytes: 64 << 20,
        cpu_shares: 512,
        ..Default::default()
    });
    let app = d.run_container(&pod, ctr).await;

    // The pause and the container: each an active scope in the pod's slice, its process in it.
    let pause_pid = d.pod_info(&pod.id).await["pid"]
        .as_u64()
        .expect("the pause's pid") as u32;
    let app_pid = pid_of(&mut d, &app).await;
    for (id, pid) in [(&pod.id, pause_pid), (&app, app_pid)] {
        let unit = format!("peapod-{id}.scope");
        assert_eq!(unit_property(&unit, "ActiveState"), "active", "{unit}");
        assert_eq!(unit_property(&unit, "Slice"), slice, "{unit}");
        assert_eq!(
            cgroup_of(pid),
            format!("{slice_dir}/{unit}"),
            "{unit}'s process"
        );
    }
    let app_dir = format!("/sys/fs/cgroup{slice_dir}/peapod-{app}.scope");
    assert_eq!(
        std::fs::read_to_string(format!("{app_dir}/memory.max"))
            .unwrap()
            .trim(),
        (64u64 << 20).to_string()
    );

    // Stats are read where the container really is.
    let stats = d.container_stats(&app).await;
    let mem = stats.memory.expect("memory stats");
    assert!(
        mem.working_set_bytes.map(|v| v.value).unwrap_or(0) > 0,
        "{mem:?}"
    );

    // An update lands in the scope's cgroup.
    d.cri
        .runtime
        .update_container_resources(cri::UpdateContainerResourcesRequest {
            container_id: app.clone(),
            linux: Some(cri::LinuxContainerResources {
                memory_limit_in_bytes: 96 << 20,
                cpu_shares: 512,
                ..Default::default()
            }),
            ..Default::default()
        })
        .await
        .expect("UpdateContainerResources");
    assert_eq!(
        std::fs::read_to_string(format!("{app_dir}/memory.max"))
            .unwrap()
            .trim(),
        (96u64 << 20).to_string()
    );

    // A restart of the daemon changes nothing for the running pod.
    d.stop_daemon();
    assert!(d.restart().await);
    assert_eq!(
        d.container_status(&app).await.state,
        cri::ContainerState::ContainerRunning as i32
    );
    assert_eq!(pid_of(&mut d, &app).await, app_pid);
    assert_eq!(
        unit_property(&format!("peapod-{app}.scope"), "ActiveState"),
        "active"
    );

    // Removal leaves no unit and no cgroup of the pod.
    d.remove_pod(&pod).await;
    let deadline = Instant::now() + e2e::scaled(WAIT);
    for id in [&pod.id, &app] {
        let unit = format!("peapod-{id}.scope");
        while !matches!(unit_property(&unit, "LoadState").as_str(), "not-found" | "") {
            assert!(
                Instant::now() < deadline,
                "{unit} still loaded: {}",
                unit_property(&unit, "ActiveState")
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        assert!(!Path::new(&format!("/sys/fs/cgroup{slice_dir}/{unit}")).exists());
    }
    assert!(d.leftovers().is_empty(), "{:?}", d.leftovers());
}
