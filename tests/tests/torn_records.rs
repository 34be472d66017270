//! Torn state: record files cut short (a power loss mid-write) or filled with garbage (a bad
//! disk) while the daemon is down. The daemon starts anyway (no crash loop), names each file
//! in its log and sets it aside; each object is listed NOTREADY/EXITED (or as what its shim
//! says) and removable, with nothing of it left after removal; the other objects are
//! untouched. The same for the image store's metadata.

use e2e::pods::{busybox, sh, Images};
use e2e::TestDaemon;
use peapod_proto::v1 as cri;
use std::path::Path;

fn tear(path: &Path) {
    let data = std::fs::read(path).expect("the record exists");
    std::fs::write(path, &data[..data.len() / 2]).expect("tear it");
}

fn garble(path: &Path) {
    std::fs::write(path, b"\x00\xff{{garbage\x13\x37").expect("garble it");
}

async fn pods(d: &mut TestDaemon) -> Vec<cri::PodSandbox> {
    d.cri
        .runtime
        .list_pod_sandbox(cri::ListPodSandboxRequest { filter: None })
        .await
        .expect("ListPodSandbox")
        .into_inner()
        .items
}

async fn containers(d: &mut TestDaemon) -> Vec<cri::Container> {
    d.cri
        .runtime
        .list_containers(cri::ListContainersRequest { filter: None })
        .await
        .expect("ListContainers")
        .into_inner()
        .containers
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn torn_pod_and_container_records_are_set_aside_and_their_objects_removable() {
    let mut d = TestDaemon::start("ttorn").await;
    let images = Images::start();
    let image = images.push("busybox:torn", &busybox());
    d.pull(&image).await;
    let torn_pod = d.run_pod("tornpod").await;
    let in_torn_pod = d
        .run_container(&torn_pod, sh("a", &image, "sleep 3600"))
        .await;
    let intact = d.run_pod("intact").await;
    let torn_app = d
        .run_container(&intact, sh("b", &image, "sleep 3600"))
        .await;
    let untouched = d
        .run_container(&intact, sh("c", &image, "sleep 3600"))
        .await;
    let untouched_started = d.container_status(&untouched).await.started_at;

    d.kill_daemon();
    let pod_record = d
        .root
        .join("sandboxes")
        .join(&torn_pod.id)
        .join("sandbox.json");
    let app_record = d
        .root
        .join("containers")
        .join(&torn_app)
        .join("container.json");
    tear(&pod_record);
    garble(&app_record);
    d.restart().await;

    let log = d.log();
    for file in [&pod_record, &app_record] {
        assert!(
            log.lines()
                .any(|l| l.contains("cannot be read") && l.contains(&file.display().to_string())),
            "the log names {}:\n{log}",
            file.display()
        );
        let mut aside = file.as_os_str().to_owned();
        aside.push(".torn");
        assert!(Path::new(&aside).is_file(), "set aside, not deleted");
    }
    // The torn pod: listed not ready, under the placeholder namespace; its container (whose
    // record is whole) still runs in it.
    let listed = pods(&mut d).await;
    let p = listed
        .iter()
        .find(|p| p.id == torn_pod.id)
        .expect("the pod of a torn record is listed");
    assert_eq!(p.state, cri::PodSandboxState::SandboxNotready as i32);
    let intact_listed = listed.iter().find(|p| p.id == intact.id).unwrap();
    assert_eq!(
        intact_listed.state,
        cri::PodSandboxState::SandboxReady as i32
    );
    // The torn container: what its shim says (still running), the others untouched.
    let st = d.container_status(&torn_app).await;
    assert_eq!(
        st.state,
        cri::ContainerState::ContainerRunning as i32,
        "{st:?}"
    );
    let st = d.container_status(&untouched).await;
    assert_eq!(st.state, cri::ContainerState::ContainerRunning as i32);
    assert_eq!(st.started_at, untouched_started);
    let st = d.container_status(&in_torn_pod).await;
    assert_eq!(st.state, cri::ContainerState::ContainerRunning as i32);

    // Both removable, and the daemon keeps answering meanwhile.
    d.cri
        .runtime
        .stop_container(cri::StopContainerRequest {
            container_id: torn_app.clone(),
            timeout: 0,
        })
        .await
        .expect("StopContainer of the torn container");
    d.cri
        .runtime
        .remove_container(cri::RemoveContainerRequest {
            container_id: torn_app.clone(),
        })
        .await
        .expect("RemoveContainer of the torn container");
    assert!(!containers(&mut d).await.iter().any(|c| c.id == torn_app));
    d.remove_pod(&torn_pod).await;
    assert!(!pods(&mut d).await.iter().any(|p| p.id == torn_pod.id));
    assert_eq!(
        d.container_status(&untouched).await.state,
        cri::ContainerState::ContainerRunning as i32
    );
    d.remove_pod(&intact).await;
    let left = d.leftovers();
    assert!(left.is_empty(), "{left:#?}\n{}", d.log());
    assert!(!d.log().contains("panicked"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn torn_image_store_metadata_never_stops_the_daemon_and_running_containers_keep_their_layers()
{
    let mut d = TestDaemon::start("timgmeta").await;
    let images = Images::start();
    let image = images.push("busybox:tornmeta", &busybox());
    d.pull(&image).await;
    let pod = d.run_pod("p").await;
    let app = d.run_container(&pod, sh("app", &image, "sleep 3600")).await;

    d.kill_daemon();
    let store = d.root.join("image");
    let state = store.join("state.json");
    tear(&state);
    // And every layer's and rootfs record's metadata too.
    let mut torn_layers = 0;
    for e in std::fs::read_dir(store.join("layers")).unwrap().flatten() {
        let meta = e.path().join("meta.json");
        if meta.is_file() {
            garble(&meta);
            torn_layers += 1;
        }
    }
    assert!(torn_layers > 0);
    for e in std::fs::read_dir(store.join("containers"))
        .unwrap()
        .flatten()
    {
        let meta = e.path().join("meta.json");
        if meta.is_file() {
            tear(&meta);
        }
    }
    d.restart().await;
    let log = d.log();
    assert!(
        log.lines()
            .any(|l| l.contains("image store's metadata cannot be read")
                && l.contains(&state.display().to_string())),
        "{log}"
    );
    assert!(store.join("state.json.torn").is_file());
    assert_eq!(
        log.matches("a layer's metadata cannot be read").count(),
        torn_layers,
        "{log}"
    );
    // The running container keeps running on its layers and answers exec.
    let st = d.container_status(&app).await;
    assert_eq!(st.state, cri::ContainerState::ContainerRunning as i32);
    let out = d
        .cri
        .runtime
        .exec_sync(cri::ExecSyncRequest {
            container_id: app.clone(),
            cmd: vec!["cat".into(), "/bin/sh".into()],
            timeout: 10,
        })
        .await
        .expect("ExecSync")
        .into_inner();
    assert_eq!(out.exit_code, 0, "the layers are all there");
    // The image is forgotten; a pull brings it back and a new container runs from it.
    d.pull(&image).await;
    let again = d
        .run_container(&pod, sh("again", &image, "sleep 3600"))
        .await;
    assert_eq!(
        d.container_status(&again).await.state,
        cri::ContainerState::ContainerRunning as i32
    );
    d.remove_pod(&pod).await;
    let left = d.leftovers();
    assert!(left.is_empty(), "{left:#?}\n{}", d.log());
}
