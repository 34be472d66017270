//! CheckpointContainer and the restore (a CreateContainer of an archive, then its
//! StartContainer) against fakes: the archive's layout, every refusal changing nothing, and a
//! malformed archive leaving nothing behind.

use crate::checkpoint::layout;
use crate::images::Images;
use crate::testing::Harness;
use peapod_proto::v1 as cri;
use peapod_proto::v1::runtime_service_server::RuntimeService;
use peapod_proto::v1::ContainerState;
use std::path::{Path, PathBuf};
use tonic::{Code, Request, Status};

async fn checkpoint(h: &Harness, id: &str, location: &Path) -> Result<(), Status> {
    h.cri
        .checkpoint_container(Request::new(cri::CheckpointContainerRequest {
            container_id: id.into(),
            location: location.to_string_lossy().into_owned(),
            timeout: 0,
        }))
        .await
        .map(drop)
}

fn archive_config(h: &Harness, name: &str, archive: &Path) -> cri::ContainerConfig {
    let mut config = h.container_config(name);
    config.image = Some(cri::ImageSpec {
        image: archive.to_string_lossy().into_owned(),
        ..Default::default()
    });
    config
}

/// The names at the top of a tar.
fn top_level(archive: &Path) -> Vec<String> {
    let mut names: Vec<String> = tar::Archive::new(std::fs::File::open(archive).unwrap())
        .entries()
        .unwrap()
        .map(|e| {
            let path = e.unwrap().path().unwrap().into_owned();
            path.components()
                .next()
                .unwrap()
                .as_os_str()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    names.dedup();
    names
}

fn restoring_dir(h: &Harness) -> PathBuf {
    crate::container::restore_staging_root(&h.rt.config.root)
}

#[tokio::test]
async fn a_running_container_is_archived_in_cri_os_layout_and_goes_on_running() {
    let h = Harness::new().await;
    let pod = h.run_pod("web").await.unwrap();
    let c = h.run_container(&pod, "counter").await;
    let rootfs = h.images.upper_dir(&c).unwrap();
    std::fs::write(rootfs.join("written"), b"by the container").unwrap();
    let location = h.dir.path().join("c.tar");

    checkpoint(&h, &c, &location)
        .await
        .expect("CheckpointContainer");
    assert_eq!(
        top_level(&location),
        vec![
            layout::CHECKPOINT_DIR,
            layout::CONFIG_DUMP,
            layout::CONTAINER_CONFIG,
            layout::DELETED_FILES,
            layout::ROOTFS_DIFF,
            layout::SPEC_DUMP,
        ]
    );
    assert_eq!(
        h.container_state(&c).await,
        ContainerState::ContainerRunning
    );
    // The work directory went with the call.
    let root_dir = h.rt.config.root.join("containers").join(&c);
    let left: Vec<_> = std::fs::read_dir(&root_dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("checkpoint"))
        .collect();
    assert!(left.is_empty(), "{left:?}");

    // Restored in a new pod: created without a task, started by a restore.
    h.remove_container(&c).await.unwrap();
    let pod2 = h.run_pod("web2").await.unwrap();
    let r = h
        .create_container_with(&pod2, archive_config(&h, "restored", &location))
        .await
        .expect("CreateContainer from the archive");
    assert_eq!(
        h.container_state(&r).await,
        ContainerState::ContainerCreated
    );
    assert!(
        !h.shim_tasks(&pod2).contains(&r),
        "no task before the start"
    );
    assert_eq!(
        std::fs::read(h.images.upper_dir(&r).unwrap().join("written")).unwrap(),
        b"by the container"
    );
    let status = h.container_status(&r).await.unwrap();
    assert_eq!(status.image.unwrap().image, crate::testing::fakes::IMAGE);
    assert_eq!(h.faults.count("shim.restore"), 0);
    h.start_container(&r)
        .await
        .expect("StartContainer restores");
    assert_eq!(h.faults.count("shim.restore"), 1);
    assert_eq!(
        h.container_state(&r).await,
        ContainerState::ContainerRunning
    );
    // The images went once restored.
    assert!(!h
        .rt
        .config
        .root
        .join("containers")
        .join(&r)
        .join("checkpoint")
        .exists());
    assert!(std::fs::read_dir(restoring_dir(&h))
        .unwrap()
        .next()
        .is_none());
    h.remove_pod(&pod2).await.unwrap();
    h.remove_pod(&pod).await.unwrap();
    h.assert_nothing_left().await;
}

#[tokio::test]
async fn refusals_name_their_reason_and_leave_no_archive() {
    let h = Harness::new().await;
    let pod = h.run_pod("web").await.unwrap();
    let location = h.dir.path().join("c.tar");
    let unknown = checkpoint(&h, "0123456789abcdef", &location).await;
    assert_eq!(unknown.unwrap_err().code(), Code::NotFound);

    let c = h.create_container(&pod, "app").await.unwrap();
    let empty = checkpoint(&h, &c, Path::new("")).await.unwrap_err();
    assert_eq!(empty.code(), Code::InvalidArgument);
    assert!(empty.message().contains("location"), "{empty:?}");
    let created = checkpoint(&h, &c, &location).await.unwrap_err();
    assert_eq!(created.code(), Code::FailedPrecondition, "{created:?}");

    h.start_container(&c).await.unwrap();
    h.faults.fail("criu.check");
    let no_criu = checkpoint(&h, &c, &location).await.unwrap_err();
    assert_eq!(no_criu.code(), Code::FailedPrecondition, "{no_criu:?}");
    assert!(no_criu.message().contains("criu"), "{no_criu:?}");
    h.faults.heal("criu.check");

    // A failed dump: no archive, the container still running.
    h.faults.fail("shim.checkpoint");
    assert!(checkpoint(&h, &c, &location).await.is_err());
    h.faults.heal("shim.checkpoint");
    assert_eq!(
        h.container_state(&c).await,
        ContainerState::ContainerRunning
    );
    let files: Vec<_> = std::fs::read_dir(h.dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains("c.tar"))
        .collect();
    assert!(files.is_empty(), "{files:?}");
}

#[tokio::test]
async fn a_malformed_archive_is_named_and_nothing_is_made() {
    let h = Harness::new().await;
    let pod = h.run_pod("web").await.unwrap();
    let c = h.run_container(&pod, "app").await;
    let good = h.dir.path().join("good.tar");
    checkpoint(&h, &c, &good).await.unwrap();

    // An archive without peapod's container config (another runtime's).
    let unpacked = h.dir.path().join("unpacked");
    std::fs::create_dir(&unpacked).unwrap();
    crate::checkpoint::archive::unpack(&good, &unpacked).unwrap();
    std::fs::remove_file(unpacked.join(layout::CONTAINER_CONFIG)).unwrap();
    let foreign = h.dir.path().join("foreign.tar");
    crate::checkpoint::archive::write(&foreign, &unpacked).unwrap();
    let garbage = h.dir.path().join("garbage.tar");
    std::fs::write(&garbage, vec![1u8; 4096]).unwrap();

    for (archive, named) in [
        (&foreign, layout::CONTAINER_CONFIG),
        (&garbage, "tar"),
        (&h.dir.path().join("missing.tar"), "no such file"),
    ] {
        let err = h
            .create_container_with(&pod, archive_config(&h, "restored", archive))
            .await
            .unwrap_err();
        assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
        assert!(err.message().contains("config.image.image"), "{err:?}");
        assert!(err.message().contains(named), "{named}: {err:?}");
    }
    // The request lacks a mount the checkpointed container had... (none here), and CRIU
    // that does not work is said before anything is unpacked.
    h.faults.fail("criu.check");
    let err = h
        .create_container_with(&pod, archive_config(&h, "restored", &good))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition, "{err:?}");
    h.faults.heal("criu.check");

    let names: Vec<_> = h
        .containers()
        .await
        .into_iter()
        .map(|c| c.metadata.unwrap().name)
        .collect();
    assert_eq!(names, vec!["app"], "no half-made container");
    assert!(std::fs::read_dir(restoring_dir(&h))
        .unwrap()
        .next()
        .is_none());
    // The name is free: the good archive restores under it.
    h.create_container_with(&pod, archive_config(&h, "restored", &good))
        .await
        .expect("the good archive");
    h.remove_pod(&pod).await.unwrap();
    h.assert_nothing_left().await;
}

#[tokio::test]
async fn a_restore_not_yet_started_survives_a_daemon_restart() {
    let mut h = Harness::new().await;
    let pod = h.run_pod("web").await.unwrap();
    let c = h.run_container(&pod, "app").await;
    let location = h.dir.path().join("c.tar");
    checkpoint(&h, &c, &location).await.unwrap();
    let config = archive_config(&h, "restored", &location);
    let r = h.create_container_with(&pod, config).await.unwrap();

    // Recovery finds no task for it, as the create made none: still created, not lost.
    h.restart().await;
    assert_eq!(
        h.container_state(&r).await,
        ContainerState::ContainerCreated
    );
    h.start_container(&r)
        .await
        .expect("the restore after a restart");
    assert_eq!(
        h.container_state(&r).await,
        ContainerState::ContainerRunning
    );
    h.remove_pod(&pod).await.unwrap();
    h.assert_nothing_left().await;
}

#[tokio::test]
async fn a_restore_that_landed_before_the_daemon_died_is_found_running() {
    use crate::shim::{NewTask, Shim};
    let mut h = Harness::new().await;
    let pod = h.run_pod("web").await.unwrap();
    let c = h.run_container(&pod, "app").await;
    let location = h.dir.path().join("c.tar");
    checkpoint(&h, &c, &location).await.unwrap();
    let config = archive_config(&h, "restored", &location);
    let r = h.create_container_with(&pod, config).await.unwrap();
    // The shim restored it; the daemon died before it recorded the start.
    let images =
        h.rt.config
            .root
            .join("containers")
            .join(&r)
            .join("checkpoint");
    let bundle = h.rt.config.state.join("containers").join(&r);
    let task = NewTask {
        id: &r,
        bundle: &bundle,
        terminal: false,
        options: peapod_shim::protocol::CreateOptions {
            start: true,
            restore: images.to_string_lossy().into_owned(),
            ..Default::default()
        },
    };
    h.shims.shim(&pod).unwrap().create(&task).await.unwrap();

    h.restart().await;
    assert_eq!(
        h.container_state(&r).await,
        ContainerState::ContainerRunning
    );
    h.remove_pod(&pod).await.unwrap();
    h.assert_nothing_left().await;
}
