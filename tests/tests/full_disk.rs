//! A full disk, on small filesystems (tmpfs with size=): the daemon's root (records, image
//! store) and a pod's log directory. Every write that meets ENOSPC fails its call with
//! ResourceExhausted naming what was being written, nothing half-written is taken as whole,
//! the daemon keeps answering, a container is never held back by a full log disk (what is
//! dropped is counted and said), and once space is freed everything works without a restart.

use e2e::pods::{busybox, sh, Images};
use e2e::TestDaemon;
use peapod_image::testsupport::{Compression, Layer};
use peapod_proto::v1 as cri;
use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

fn mount_tmpfs(path: &Path, size: &str) {
    std::fs::create_dir_all(path).unwrap();
    let ok = std::process::Command::new("mount")
        .args([
            "-t",
            "tmpfs",
            "-o",
            &format!("size={size},mode=0711"),
            "tmpfs",
        ])
        .arg(path)
        .status()
        .unwrap()
        .success();
    assert!(ok, "mount a tmpfs at {}", path.display());
}

fn umount(path: &Path) {
    let _ = std::process::Command::new("umount")
        .arg("-l")
        .arg(path)
        .status();
}

/// Fills the filesystem of `dir` to the last byte; returns the filler file.
fn fill(dir: &Path) -> std::path::PathBuf {
    use std::io::Write;
    let filler = dir.join("filler");
    let mut f = std::fs::File::create(&filler).unwrap();
    let block = vec![0x5au8; 64 << 10];
    loop {
        match f.write(&block) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) => {
                assert_eq!(e.raw_os_error(), Some(libc::ENOSPC), "{e}");
                break;
            }
        }
    }
    // Then what is left of the last block.
    let small = [0x5au8; 512];
    while f.write(&small).is_ok_and(|n| n > 0) {}
    filler
}

fn store_content(d: &TestDaemon) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for sub in ["layers", "blobs/sha256", "pulls", "containers"] {
        if let Ok(rd) = std::fs::read_dir(d.root.join("image").join(sub)) {
            for e in rd.flatten() {
                out.insert(format!("{sub}/{}", e.file_name().to_string_lossy()));
            }
        }
    }
    out
}

async fn pull(d: &mut TestDaemon, image: &str) -> Result<String, tonic::Status> {
    d.cri
        .image
        .pull_image(cri::PullImageRequest {
            image: Some(cri::ImageSpec {
                image: image.into(),
                ..Default::default()
            }),
            ..Default::default()
        })
        .await
        .map(|r| r.into_inner().image_ref)
}

fn exhausted(what: &str, r: Result<impl std::fmt::Debug, tonic::Status>) -> tonic::Status {
    let err = r.expect_err(what);
    assert_eq!(
        err.code(),
        tonic::Code::ResourceExhausted,
        "{what}: {err:?}"
    );
    assert!(
        err.message().contains("No space left on device"),
        "{what}: {err:?}"
    );
    println!("{what} on a full disk: {}", err.message());
    err
}

/// An image with a layer of incompressible bytes, so that its pull needs real space.
fn big_image() -> peapod_image::testsupport::ImageSpec {
    let mut noise = vec![0u8; 3 << 20];
    let mut x: u64 = 0x9e3779b97f4a7c15;
    for b in noise.iter_mut() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *b = x as u8;
    }
    busybox().layer(Layer::new(Compression::Gzip).file("noise", noise, 0o644))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pulls_imports_pods_containers_and_records_on_a_full_disk_fail_cleanly_and_recover() {
    let mut d = TestDaemon::start("dfull").await;
    d.stop_daemon();
    // The daemon's root (records and image store) on a 48 MiB filesystem.
    std::fs::remove_dir_all(&d.root).unwrap();
    mount_tmpfs(&d.root, "48m");
    d.restart().await;
    let images = Images::start();
    let small = images.push("busybox:small", &busybox());
    let big = images.push("busybox:big", &big_image());
    let archive_dir = tempfile::tempdir().unwrap();
    let archive = archive_dir.path().join("big.tar");
    peapod_image::testsupport::oci_archive(&archive, "local/big:1", &big_image()).unwrap();
    pull(&mut d, &small)
        .await
        .expect("pull before the disk fills");
    let pod = d.run_pod("before").await;

    let filler = fill(&d.root);
    let before = store_content(&d);
    let err = exhausted("PullImage", pull(&mut d, &big).await);
    assert!(
        err.message().contains(&d.root.display().to_string()),
        "names the file: {err:?}"
    );
    assert_eq!(store_content(&d), before, "no partial layer or blob kept");
    let err = exhausted(
        "import",
        pull(&mut d, &format!("oci-archive:{}", archive.display())).await,
    );
    assert!(
        err.message().contains(&d.root.display().to_string()),
        "{err:?}"
    );
    assert_eq!(store_content(&d), before, "no partial import kept");

    let mut config = e2e::fixtures::sandbox_config("during", &d.cgroup_parent);
    config.log_directory = d.dir.join("logs").display().to_string();
    let err = exhausted(
        "RunPodSandbox",
        d.cri
            .runtime
            .run_pod_sandbox(cri::RunPodSandboxRequest {
                config: Some(config.clone()),
                runtime_handler: String::new(),
            })
            .await,
    );
    assert!(
        err.message().contains("sandbox.json"),
        "names the record: {err:?}"
    );
    let err = exhausted(
        "CreateContainer",
        d.create(&pod, sh("during", &small, "sleep 3600")).await,
    );
    assert!(
        err.message().contains(&d.root.display().to_string()),
        "{err:?}"
    );

    // The daemon answers, and lists only what is whole.
    let pods = d
        .cri
        .runtime
        .list_pod_sandbox(cri::ListPodSandboxRequest { filter: None })
        .await
        .expect("ListPodSandbox")
        .into_inner()
        .items;
    assert_eq!(pods.len(), 1, "only the pod from before: {pods:?}");
    let containers = d
        .cri
        .runtime
        .list_containers(cri::ListContainersRequest { filter: None })
        .await
        .expect("ListContainers")
        .into_inner()
        .containers;
    assert!(containers.is_empty(), "{containers:?}");
    assert!(
        e2e::host::bridge_ports(&d.bridge).len() == 1,
        "the failed pod left no veth"
    );

    // Space freed: everything works, without a restart.
    std::fs::remove_file(&filler).unwrap();
    pull(&mut d, &big)
        .await
        .expect("the pull after space is freed");
    pull(&mut d, &format!("oci-archive:{}", archive.display()))
        .await
        .expect("the import after space is freed");
    let again = d
        .cri
        .runtime
        .run_pod_sandbox(cri::RunPodSandboxRequest {
            config: Some(config.clone()),
            runtime_handler: String::new(),
        })
        .await
        .expect("RunPodSandbox after space is freed")
        .into_inner()
        .pod_sandbox_id;
    let c = d.run_container(&pod, sh("after", &big, "sleep 3600")).await;
    assert_eq!(
        d.container_status(&c).await.state,
        cri::ContainerState::ContainerRunning as i32
    );
    d.remove_pod(&pod).await;
    d.remove_pod(&e2e::pods::Pod { id: again, config }).await;
    let left: Vec<String> = d
        .leftovers()
        .into_iter()
        .filter(|l| *l != format!("mount {}", d.root.display()))
        .collect();
    assert!(left.is_empty(), "{left:#?}\n{}", d.log());
    d.stop_daemon();
    umount(&d.root);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_log_disk_never_holds_a_container_back_and_drops_are_counted_and_said() {
    let mut d = TestDaemon::start("dlog").await;
    let images = Images::start();
    let image = images.push("busybox:chatty", &busybox());
    d.pull(&image).await;
    // Where run_pod puts the pod's logs, on a 256 KiB filesystem.
    let logs = d.dir.join("logs").join("chatty");
    mount_tmpfs(&logs, "256k");
    let pod = d.run_pod("chatty").await;
    // Bursts of output, as fast as the shell goes, with a counter beside them.
    let script = "i=0; while true; do j=0; while [ $j -lt 500 ]; do i=$((i+1)); j=$((j+1)); echo \"line $i of the chatty container\"; done; echo $i > /tmp/count; sleep 0.2; done";
    let mut config = sh("chatty", &image, script);
    config.log_path = "chatty.log".into();
    let c = d.run_container(&pod, config).await;
    let log = logs.join("chatty.log");
    let count = |d: &mut TestDaemon| {
        let mut cri = d.cri.clone();
        let c = c.clone();
        async move {
            let out = cri
                .runtime
                .exec_sync(cri::ExecSyncRequest {
                    container_id: c,
                    cmd: vec!["cat".into(), "/tmp/count".into()],
                    timeout: 10,
                })
                .await
                .expect("ExecSync")
                .into_inner();
            String::from_utf8_lossy(&out.stdout)
                .trim()
                .parse::<u64>()
                .unwrap_or(0)
        }
    };
    // The log disk fills...
    let shim_log = d.state.join("sandboxes").join(&pod.id).join("shim.log");
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !std::fs::read_to_string(&shim_log)
        .unwrap_or_default()
        .contains("cannot write the container log")
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the log disk never filled"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // ...and the container goes on.
    let a = count(&mut d).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let b = count(&mut d).await;
    assert!(
        b > a,
        "the container is not held back by its full log: {a} then {b}"
    );
    assert_eq!(
        d.container_status(&c).await.state,
        cri::ContainerState::ContainerRunning as i32
    );
    let shim_text = std::fs::read_to_string(&shim_log).unwrap();
    assert_eq!(
        shim_text.matches("cannot write the container log").count(),
        1,
        "said once, not per line:\n{shim_text}"
    );
    // Space freed (the file rotated away, as the kubelet does, and reopened): lines come
    // again, after a record of what was dropped.
    std::fs::remove_file(&log).unwrap();
    d.cri
        .runtime
        .reopen_container_log(cri::ReopenContainerLogRequest {
            container_id: c.clone(),
        })
        .await
        .expect("ReopenContainerLog");
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if text.contains("of output were dropped") && text.contains("of the chatty container") {
            let note = text
                .lines()
                .find(|l| l.contains("of output were dropped"))
                .unwrap();
            println!("after the log disk was full: {note}");
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no lines after space was freed: {text:.400}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(std::fs::read_to_string(&shim_log)
        .unwrap()
        .contains("writable again"));
    d.remove_pod(&pod).await;
    umount(&logs);
    let left = d.leftovers();
    assert!(left.is_empty(), "{left:#?}");
}
