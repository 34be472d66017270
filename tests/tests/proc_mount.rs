//! procMount: the kubelet's masked and read-only /proc paths are mounted as given, and two
//! empty lists (`procMount: Unmasked`) mean nothing masked, as containerd and CRI-O read them.
//! Runs on this host and in the guest (scripts/vm test).

use e2e::pods::{busybox, kubelet_proc_mask, read_log, sh, stdout_text, Images};
use e2e::TestDaemon;
use std::path::Path;
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(30);

/// Prints the mount points under /proc and /sys the container has, one per line.
const MOUNTS: &str = "awk '{print $5}' /proc/self/mountinfo | grep -E '^/(proc|sys)/' | sort";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn default_paths_are_masked_and_unmasked_means_none() {
    let mut d = TestDaemon::start("proc-mount").await;
    let images = Images::start();
    let image = images.push("busybox:pm", &busybox());
    d.pull(&image).await;
    let pod = d.run_pod("proc-mount").await;

    let mut masked = sh("masked", &image, MOUNTS);
    {
        let sc = masked
            .linux
            .get_or_insert_with(Default::default)
            .security_context
            .get_or_insert_with(Default::default);
        kubelet_proc_mask(sc);
    }
    let masked = d.run_container(&pod, masked).await;
    let unmasked = d.run_container(&pod, sh("unmasked", &image, MOUNTS)).await;

    // Those of the kubelet's paths this kernel has (runc and the shim skip a missing one).
    let present: Vec<&str> = peapod_spec::DEFAULT_MASKED_PATHS
        .iter()
        .chain(peapod_spec::DEFAULT_READONLY_PATHS)
        .copied()
        .filter(|p| Path::new(p).exists())
        .collect();
    assert!(present.contains(&"/proc/sys"), "{present:?}");
    let st = d.wait_exited(&masked, WAIT).await;
    assert_eq!(st.exit_code, 0, "{st:?}");
    let mounts = stdout_text(&read_log(Path::new(&st.log_path)));
    for p in &present {
        assert!(
            mounts.lines().any(|l| l == *p),
            "{p} masked or read-only: {mounts}"
        );
    }
    let st = d.wait_exited(&unmasked, WAIT).await;
    assert_eq!(st.exit_code, 0, "{st:?}");
    let mounts = stdout_text(&read_log(Path::new(&st.log_path)));
    for p in &present {
        assert!(
            !mounts.lines().any(|l| l == *p),
            "{p} left alone when both lists are empty: {mounts}"
        );
    }
    d.remove_pod(&pod).await;
}
