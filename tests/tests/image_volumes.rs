//! Image volumes (KEP-4639): a mount whose `image` is set shows that image's root filesystem
//! (or a directory of it) read-only in the container; ContainerStatus names the image.

use e2e::pods::{busybox, sh, Images};
use e2e::TestDaemon;
use peapod_image::testsupport::{Compression, ImageSpec, Layer};
use peapod_proto::v1 as cri;
use std::time::Duration;
use tonic::Code;

fn volume(path: &str, image: &str, sub_path: &str, readonly: bool) -> cri::Mount {
    cri::Mount {
        container_path: path.into(),
        readonly,
        image: Some(cri::ImageSpec {
            image: image.into(),
            ..Default::default()
        }),
        image_sub_path: sub_path.into(),
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_image_is_mounted_read_only_whole_or_by_sub_path() {
    let mut d = TestDaemon::start("imgvol").await;
    let images = Images::start();
    let image = images.push("busybox:imgvol", &busybox());
    let data = ImageSpec::empty().layer(Layer::new(Compression::Gzip).dir("web", 0o755).file(
        "web/index.html",
        "hello from the image volume\n",
        0o644,
    ));
    let data_ref = images.push("data:imgvol", &data);
    d.pull(&image).await;
    let data_id = d.pull(&data_ref).await;
    let pod = d.run_pod("imgvol-pod").await;

    let mut config = sh(
        "reader",
        &image,
        "cat /mnt/whole/web/index.html; cat /mnt/sub/index.html; \
         if echo x > /mnt/whole/new 2>/dev/null; then echo WRITABLE; else echo READONLY; fi; \
         sleep 300 & wait",
    );
    config.mounts = vec![
        volume("/mnt/whole", &data_ref, "", true),
        volume("/mnt/sub", &data_ref, "web", true),
    ];
    let id = d.run_container(&pod, config).await;
    let lines = d.wait_log(&id, "ONLY", Duration::from_secs(30)).await;
    let text: Vec<&str> = lines
        .iter()
        .filter(|l| l.stream == "stdout")
        .map(|l| l.text.as_str())
        .collect();
    assert_eq!(
        text,
        [
            "hello from the image volume",
            "hello from the image volume",
            "READONLY"
        ],
        "{lines:?}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.stream == "stderr" && l.text.contains("Read-only file system")),
        "{lines:?}"
    );

    // ContainerStatus reports the image each volume came from.
    let st = d.container_status(&id).await;
    for path in ["/mnt/whole", "/mnt/sub"] {
        let m = st
            .mounts
            .iter()
            .find(|m| m.container_path == path)
            .unwrap_or_else(|| panic!("{path} not in {:?}", st.mounts));
        let img = m.image.as_ref().expect("image of the mount");
        assert_eq!(img.image, data_ref);
        assert_eq!(img.image_ref, data_id);
    }

    // Bad image volumes are refused, naming the field, and leave nothing behind.
    let cases = [
        (
            volume("/mnt/x", &data_ref, "", false),
            Code::InvalidArgument,
            "readonly",
        ),
        (
            volume("/mnt/x", &data_ref, "../etc", true),
            Code::InvalidArgument,
            "image_sub_path",
        ),
        (
            volume("/mnt/x", &data_ref, "not-existing", true),
            Code::NotFound,
            "image_sub_path",
        ),
        (
            volume("/mnt/x", "missing:image", "", true),
            Code::NotFound,
            "mounts[0].image",
        ),
    ];
    for (i, (mount, code, field)) in cases.into_iter().enumerate() {
        let mut bad = sh(&format!("bad{i}"), &image, "true");
        bad.mounts = vec![mount];
        let err = d.create(&pod, bad).await.unwrap_err();
        assert_eq!(err.code(), code, "case {i}: {err:?}");
        assert!(err.message().contains(field), "case {i}: {}", err.message());
    }

    d.cri
        .runtime
        .remove_container(cri::RemoveContainerRequest {
            container_id: id.clone(),
        })
        .await
        .unwrap();
    d.remove_pod(&pod).await;
    assert!(d.leftovers().is_empty(), "{:?}", d.leftovers());
}
