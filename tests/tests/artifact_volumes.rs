//! OCI artifacts as image volumes (as CRI-O 1.33+ mounts them), end to end through the CRI:
//! an artifact pushed by the real oras (a custom artifactType, the empty config, layers of any
//! media type) is pulled and mounted read-only, each layer a file named by its title; it is
//! refused as a container's own image; an artifact with no layers is a clear error.

use e2e::pods::{busybox, sh, Images};
use e2e::registry_clients;
use e2e::TestDaemon;
use peapod_proto::v1 as cri;
use std::path::Path;
use std::process::Command;
use std::time::Duration;
use tonic::Code;

fn oras(dir: &Path, args: &[&str]) -> String {
    let out = Command::new(registry_clients::bin("oras"))
        .args(args)
        .current_dir(dir)
        .env("HOME", dir)
        .output()
        .expect("run oras");
    assert!(
        out.status.success(),
        "oras {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn volume(path: &str, image: &str) -> cri::Mount {
    cri::Mount {
        container_path: path.into(),
        readonly: true,
        image: Some(cri::ImageSpec {
            image: image.into(),
            ..Default::default()
        }),
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_artifact_pushed_by_oras_is_mounted_read_only_as_files() {
    let images = Images::start();
    let addr = images.registry.addr();
    let image = images.push("busybox:art", &busybox());
    let work = tempfile::Builder::new()
        .prefix("peapod-oras-")
        .tempdir()
        .unwrap();
    std::fs::write(work.path().join("hello.txt"), "hello from an artifact\n").unwrap();
    std::fs::write(work.path().join("model.bin"), [0u8, 1, 2, 3, 255]).unwrap();
    let art = format!("{addr}/models/tiny:v1");
    oras(
        work.path(),
        &[
            "push",
            "--plain-http",
            "--artifact-type",
            "application/vnd.peapod.test.model",
            &art,
            "hello.txt:text/plain",
            "model.bin:application/vnd.peapod.test.weights",
        ],
    );
    // What oras pushed is an artifact: its type, the empty config, two titled layers.
    let manifest = oras(work.path(), &["manifest", "fetch", "--plain-http", &art]);
    let m: serde_json::Value = serde_json::from_str(&manifest).unwrap();
    assert_eq!(
        m["artifactType"], "application/vnd.peapod.test.model",
        "{m}"
    );
    assert_eq!(
        m["config"]["mediaType"], "application/vnd.oci.empty.v1+json",
        "{m}"
    );

    let mut d = TestDaemon::start("artifact").await;
    d.pull(&image).await;
    let art_id = d.pull(&art).await;
    let status = d
        .cri
        .image
        .image_status(cri::ImageStatusRequest {
            image: Some(cri::ImageSpec {
                image: art.clone(),
                ..Default::default()
            }),
            verbose: false,
        })
        .await
        .unwrap()
        .into_inner()
        .image
        .expect("the artifact is listed");
    assert_eq!(status.id, art_id);
    assert_eq!(status.repo_tags, [art.as_str()]);

    let pod = d.run_pod("artifact-pod").await;
    let mut config = sh(
        "reader",
        &image,
        "ls /mnt/art; cat /mnt/art/hello.txt; od -An -tu1 /mnt/art/model.bin; \
         if echo x > /mnt/art/new 2>/dev/null; then echo WRITABLE; else echo READONLY; fi; \
         sleep 300 & wait",
    );
    config.mounts = vec![volume("/mnt/art", &art)];
    let id = d.run_container(&pod, config).await;
    let lines = d.wait_log(&id, "ONLY", Duration::from_secs(30)).await;
    let text: Vec<String> = lines
        .iter()
        .filter(|l| l.stream == "stdout")
        .map(|l| l.text.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect();
    assert_eq!(
        text,
        [
            "hello.txt",
            "model.bin",
            "hello from an artifact",
            "0 1 2 3 255",
            "READONLY"
        ],
        "{lines:?}"
    );
    let st = d.container_status(&id).await;
    let mount = st
        .mounts
        .iter()
        .find(|m| m.container_path == "/mnt/art")
        .expect("the mount");
    assert_eq!(
        mount.image.as_ref().map(|i| i.image_ref.as_str()),
        Some(art_id.as_str())
    );

    // An artifact is not a container's image.
    let e = d
        .create(&pod, sh("bad", &art, "true"))
        .await
        .expect_err("an artifact as a container's image");
    assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
    assert!(
        e.message().contains("OCI artifact") && e.message().contains("image volume"),
        "{}",
        e.message()
    );

    // Once the pod is gone the artifact can be removed, and its files go with it.
    d.remove_pod(&pod).await;
    d.cri
        .image
        .remove_image(cri::RemoveImageRequest {
            image: Some(cri::ImageSpec {
                image: art.clone(),
                ..Default::default()
            }),
        })
        .await
        .unwrap();
    let hex = art_id.trim_start_matches("sha256:");
    assert!(
        !d.root.join("image/layers").join(hex).exists(),
        "the artifact's files were collected"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_artifact_with_no_layers_is_a_clear_error() {
    let images = Images::start();
    let addr = images.registry.addr();
    // A manifest with no layers at all, as the registry accepts it: its config the empty one.
    let empty = b"{}";
    let empty_digest = peapod_image::sha256_digest(empty);
    let (st, hs, _) = images
        .registry
        .http("POST", "/v2/hollow/blobs/uploads/", &[], b"")
        .unwrap();
    assert_eq!(st, 202);
    let loc = hs.iter().find(|(k, _)| k == "location").unwrap().1.clone();
    let path = &loc[loc.find("/v2/").unwrap()..];
    let sep = if path.contains('?') { '&' } else { '?' };
    let (st, _, _) = images
        .registry
        .http(
            "PUT",
            &format!("{path}{sep}digest={empty_digest}"),
            &[("Content-Type", "application/octet-stream")],
            empty,
        )
        .unwrap();
    assert_eq!(st, 201);
    let manifest = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "artifactType": "application/vnd.peapod.test.hollow",
        "config": {"mediaType": "application/vnd.oci.empty.v1+json", "digest": empty_digest, "size": 2},
        "layers": []
    });
    let (st, _, body) = images
        .registry
        .http(
            "PUT",
            "/v2/hollow/manifests/v1",
            &[("Content-Type", "application/vnd.oci.image.manifest.v1+json")],
            manifest.to_string().as_bytes(),
        )
        .unwrap();
    assert_eq!(st, 201, "{}", String::from_utf8_lossy(&body));

    let mut d = TestDaemon::start("artifact-empty").await;
    let before = d.stored_content();
    let e = d
        .try_pull(&format!("{addr}/hollow:v1"))
        .await
        .expect_err("an artifact with no layers");
    assert!(
        e.message()
            .contains("OCI artifact (application/vnd.peapod.test.hollow) with no layers"),
        "{}",
        e.message()
    );
    assert_eq!(d.stored_content(), before, "nothing stored");
}
