//! CheckpointContainer and the restore of its archive (KEP-2008), through the real daemon,
//! shim, runc and CRIU.
//!
//! CRIU does not work on every host: Debian's criu 3.17 fails `criu check` on this machine's
//! 6.18 kernel ("vdso: Unexpected rt vDSO area bounds"), and works in the Debian 12 guest
//! (kernel 6.1, `scripts/vm test "checkpoint --include-ignored"`). So the round trip is
//! `#[ignore]`d here and runs there; the refusals run everywhere, each host asserting the
//! answer it must give.

use e2e::pods::{busybox, container, exec_sync_in, read_log, sh, Images};
use e2e::{DaemonOptions, TestDaemon};
use peapod_proto::v1 as cri;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

const WAIT: Duration = Duration::from_secs(60);

/// Whether `criu check` passes here, and what it printed.
fn criu_works() -> (bool, String) {
    match Command::new("criu").arg("check").output() {
        Ok(out) => (
            out.status.success(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        ),
        Err(e) => (false, e.to_string()),
    }
}

/// A container that counts in memory (a shell variable), writing each count to stdout and to
/// /count, once a second.
fn counter(name: &str, image: &str) -> cri::ContainerConfig {
    sh(
        name,
        image,
        "i=0; while :; do i=$((i+1)); echo \"count $i\"; echo $i > /count; sleep 1; done",
    )
}

async fn checkpoint(d: &mut TestDaemon, id: &str, location: &str) -> Result<(), tonic::Status> {
    d.cri
        .runtime
        .checkpoint_container(cri::CheckpointContainerRequest {
            container_id: id.into(),
            location: location.into(),
            timeout: 0,
        })
        .await
        .map(drop)
}

/// The counts a container's log has, in order.
async fn counts(d: &mut TestDaemon, id: &str) -> Vec<u64> {
    let path = d.container_status(id).await.log_path;
    read_log(Path::new(&path))
        .iter()
        .filter_map(|l| l.text.strip_prefix("count ")?.trim().parse().ok())
        .collect()
}

/// The count in the container's /count.
async fn count_file(d: &mut TestDaemon, id: &str) -> u64 {
    let out = exec_sync_in(d, id, &["cat", "/count"]).await;
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("/count: {out:?}"))
}

async fn wait_count(d: &mut TestDaemon, id: &str, at_least: u64) -> Vec<u64> {
    let deadline = Instant::now() + e2e::scaled(WAIT);
    loop {
        let seen = counts(d, id).await;
        if seen.last().is_some_and(|&n| n >= at_least) {
            return seen;
        }
        assert!(
            Instant::now() < deadline,
            "{id} did not count to {at_least}: {seen:?}\n{}",
            d.log()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Bad input and an unusable host change nothing and say why, wherever this runs: where
/// CRIU does not work, a running container's checkpoint is FailedPrecondition with criu's
/// reason; where it does, a container the shim created itself (the default `runtime.create
/// = "native"`) is FailedPrecondition naming the key to change.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_name_their_reason_and_leave_no_archive() {
    let mut d = TestDaemon::start("ckpt-refusals").await;
    let images = Images::start();
    let image = images.push("busybox:ckpt", &busybox());
    d.pull(&image).await;
    let pod = d.run_pod("ckpt-refusals").await;
    let c = d.run_container(&pod, counter("counter", &image)).await;
    let location = d.dir.join("counter.tar");
    let at = location.to_string_lossy().into_owned();

    let unknown = checkpoint(&mut d, "0123456789abcdef", &at)
        .await
        .unwrap_err();
    assert_eq!(unknown.code(), tonic::Code::NotFound, "{unknown:?}");
    let empty = checkpoint(&mut d, &c, "").await.unwrap_err();
    assert_eq!(empty.code(), tonic::Code::InvalidArgument, "{empty:?}");
    assert!(empty.message().contains("location"), "{empty:?}");

    let refused = checkpoint(&mut d, &c, &at).await.unwrap_err();
    assert_eq!(
        refused.code(),
        tonic::Code::FailedPrecondition,
        "{refused:?}"
    );
    let (works, said) = criu_works();
    if works {
        assert!(refused.message().contains("runtime.create"), "{refused:?}");
    } else {
        assert!(refused.message().contains("CRIU"), "{refused:?} ({said})");
        eprintln!("criu here: {}", refused.message());
    }
    assert!(!location.exists(), "no archive");
    assert_eq!(
        d.container_status(&c).await.state,
        cri::ContainerState::ContainerRunning as i32
    );
    d.remove_pod(&pod).await;
    assert!(d.leftovers().is_empty(), "{:?}", d.leftovers());
}

/// The round trip: a counter checkpointed while it runs, removed with its pod, restored from
/// the archive in a new pod, goes on from its count (not from zero), with the file written
/// into its root filesystem; exec and logs work in it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a host where criu works (not this 6.18 kernel): runs in the guest (scripts/vm test)"]
async fn a_restored_counter_goes_on_from_its_checkpoint() {
    let (works, said) = criu_works();
    assert!(works, "criu check fails here: {said}");
    let options = DaemonOptions {
        extra_config: "[runtime]\ncreate = \"runc\"\n".into(),
        ..Default::default()
    };
    let mut d = TestDaemon::start_with("ckpt-round-trip", options).await;
    let images = Images::start();
    let image = images.push("busybox:ckpt", &busybox());
    d.pull(&image).await;
    let pod = d.run_pod("ckpt-a").await;
    let c = d.run_container(&pod, counter("counter", &image)).await;
    exec_sync_in(&mut d, &c, &["sh", "-c", "echo precious > /written"]).await;
    wait_count(&mut d, &c, 3).await;

    let location = d.dir.join("counter.tar");
    let at = location.to_string_lossy().into_owned();
    // A limit the dump cannot keep (it takes seconds under TCG): DeadlineExceeded, no archive,
    // and the counter counts on. (Where the dump is quicker it succeeds; then it is removed.)
    let short = d
        .cri
        .runtime
        .checkpoint_container(cri::CheckpointContainerRequest {
            container_id: c.clone(),
            location: at.clone(),
            timeout: 1,
        })
        .await;
    match short {
        Err(e) => {
            assert_eq!(e.code(), tonic::Code::DeadlineExceeded, "{e:?}");
            assert!(!location.exists(), "no archive after a dump past its limit");
            let then = count_file(&mut d, &c).await;
            wait_count(&mut d, &c, then + 2).await;
        }
        Ok(_) => std::fs::remove_file(&location).unwrap(),
    }
    let before = count_file(&mut d, &c).await;
    let started = Instant::now();
    if let Err(e) = checkpoint(&mut d, &c, &at).await {
        panic!("CheckpointContainer: {e}\n{}", d.log());
    }
    let dumped = started.elapsed();
    // Left running, as the kubelet's /checkpoint expects.
    assert_eq!(
        d.container_status(&c).await.state,
        cri::ContainerState::ContainerRunning as i32
    );
    let after = count_file(&mut d, &c).await;
    let listing = Command::new("tar")
        .arg("-tf")
        .arg(&location)
        .output()
        .unwrap();
    let listing = String::from_utf8_lossy(&listing.stdout).into_owned();
    for entry in [
        "checkpoint/",
        "config.dump",
        "spec.dump",
        "rootfs-diff.tar",
        "deleted.files",
        "container-config.dump",
    ] {
        assert!(listing.contains(entry), "{entry} in {listing}");
    }
    let size = std::fs::metadata(&location).unwrap().len();
    d.remove_pod(&pod).await;

    // A malformed archive: named, and nothing made.
    let garbage = d.dir.join("garbage.tar");
    std::fs::write(&garbage, vec![7u8; 4096]).unwrap();
    let pod2 = d.run_pod("ckpt-b").await;
    let bad = container("restored", &garbage.to_string_lossy(), &[], &[]);
    let err = d.create(&pod2, bad).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err:?}");
    assert!(err.message().contains("config.image.image"), "{err:?}");
    assert!(d.containers_of(&pod2).await.is_empty());

    let restored = container("restored", &at, &[], &[]);
    let r = match d.create(&pod2, restored).await {
        Ok(r) => r,
        Err(e) => panic!("CreateContainer from the archive: {e}\n{}", d.log()),
    };
    let started = Instant::now();
    if let Err(e) = d.start_container(&r).await {
        panic!("StartContainer (restore): {e}\n{}", d.log());
    }
    let restore_time = started.elapsed();
    assert_eq!(
        d.container_status(&r).await.state,
        cri::ContainerState::ContainerRunning as i32
    );
    let seen = wait_count(&mut d, &r, before + 2).await;
    let first = seen[0];
    assert!(
        before < first && first <= after + 1,
        "the restored counter starts after its checkpoint ({before}..={after}), not from zero: {seen:?}"
    );
    let written = exec_sync_in(&mut d, &r, &["cat", "/written"]).await;
    assert_eq!(String::from_utf8_lossy(&written.stdout).trim(), "precious");
    // A restored container checkpoints again (its CRIU configuration, the cgroup root, holds
    // for the dump too).
    let again = d.dir.join("again.tar");
    if let Err(e) = checkpoint(&mut d, &r, &again.to_string_lossy()).await {
        panic!(
            "CheckpointContainer of the restored container: {e}\n{}",
            d.log()
        );
    }
    assert!(std::fs::metadata(&again).unwrap().len() > 0);
    eprintln!(
        "checkpoint: dump and archive {dumped:?}, {size} bytes; restore (StartContainer) {restore_time:?}; counts {before}..={after} at the dump, the restored one from {first}"
    );
    d.remove_pod(&pod2).await;
    assert!(d.leftovers().is_empty(), "{:?}", d.leftovers());
}
