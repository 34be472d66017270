//! The ImageService end to end, through the daemon's CRI socket: pulls from a registry of the
//! test's own (OCI and Docker media types, an index, many layers and whiteouts, basic auth,
//! missing tags, corrupt blobs, parallel pulls), status and lookups, removal while a container
//! uses the image, ImageFsInfo, the built-in pause image, and the `peapod image` CLI (pull with
//! progress, ls, rm, inspect, import of `docker save` and OCI layout archives).

use e2e::pods::{busybox, container, read_log, sh, stdout_text, Images};
use e2e::TestDaemon;
use peapod_image::testsupport::{
    docker_archive, oci_archive, BuiltImage, Compression, ImageSpec, Layer, OciLayout, PushFormat,
    Registry,
};
use peapod_proto::v1 as cri;
use std::collections::BTreeSet;
use std::path::Path;
use std::time::{Duration, Instant};
use tonic::Code;

const WAIT: Duration = Duration::from_secs(20);

fn spec(reference: &str) -> Option<cri::ImageSpec> {
    Some(cri::ImageSpec {
        image: reference.to_string(),
        ..Default::default()
    })
}

async fn try_pull(
    d: &mut TestDaemon,
    reference: &str,
    auth: Option<cri::AuthConfig>,
) -> Result<String, tonic::Status> {
    d.cri
        .image
        .pull_image(cri::PullImageRequest {
            image: spec(reference),
            auth,
            sandbox_config: None,
        })
        .await
        .map(|r| r.into_inner().image_ref)
}

async fn status(d: &mut TestDaemon, reference: &str) -> Option<cri::Image> {
    d.cri
        .image
        .image_status(cri::ImageStatusRequest {
            image: spec(reference),
            verbose: false,
        })
        .await
        .unwrap_or_else(|e| panic!("ImageStatus {reference}: {e}"))
        .into_inner()
        .image
}

/// The `info` JSON of a verbose ImageStatus.
async fn verbose_info(d: &mut TestDaemon, reference: &str) -> serde_json::Value {
    let resp = d
        .cri
        .image
        .image_status(cri::ImageStatusRequest {
            image: spec(reference),
            verbose: true,
        })
        .await
        .unwrap_or_else(|e| panic!("ImageStatus {reference}: {e}"))
        .into_inner();
    serde_json::from_str(resp.info.get("info").expect("verbose info")).expect("info is JSON")
}

async fn list(d: &mut TestDaemon, filter: Option<&str>) -> Vec<cri::Image> {
    d.cri
        .image
        .list_images(cri::ListImagesRequest {
            filter: filter.map(|f| cri::ImageFilter { image: spec(f) }),
        })
        .await
        .expect("ListImages")
        .into_inner()
        .images
}

async fn list_ids(d: &mut TestDaemon, filter: Option<&str>) -> BTreeSet<String> {
    list(d, filter).await.into_iter().map(|i| i.id).collect()
}

async fn remove(d: &mut TestDaemon, reference: &str) -> Result<(), tonic::Status> {
    d.cri
        .image
        .remove_image(cri::RemoveImageRequest {
            image: spec(reference),
        })
        .await
        .map(|_| ())
}

/// (used bytes, inodes, mountpoint) of the image and the container filesystems.
type Usage = (u64, u64, String);

async fn fs_info(d: &mut TestDaemon) -> (Usage, Usage) {
    let resp = d
        .cri
        .image
        .image_fs_info(cri::ImageFsInfoRequest {})
        .await
        .expect("ImageFsInfo")
        .into_inner();
    let usage = |u: &cri::FilesystemUsage| -> Usage {
        (
            u.used_bytes.as_ref().map_or(0, |v| v.value),
            u.inodes_used.as_ref().map_or(0, |v| v.value),
            u.fs_id
                .as_ref()
                .map(|f| f.mountpoint.clone())
                .unwrap_or_default(),
        )
    };
    assert_eq!(resp.image_filesystems.len(), 1, "{resp:?}");
    assert_eq!(resp.container_filesystems.len(), 1, "{resp:?}");
    (
        usage(&resp.image_filesystems[0]),
        usage(&resp.container_filesystems[0]),
    )
}

/// Unpacked layers on disk (their directory names: the diff_id hex).
fn layer_dirs(d: &TestDaemon) -> BTreeSet<String> {
    std::fs::read_dir(d.root.join("image/layers"))
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| !n.starts_with('.'))
                .collect()
        })
        .unwrap_or_default()
}

/// The layers the listed images keep (diff_id hex), from verbose ImageStatus.
async fn listed_layers(d: &mut TestDaemon) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for img in list(d, None).await {
        let info = verbose_info(d, &img.id).await;
        for l in info["layers"].as_array().expect("layers") {
            let l = l.as_str().expect("diff_id");
            out.insert(l.trim_start_matches("sha256:").to_string());
        }
    }
    out
}

/// Pushes `spec` from an OCI layout of its own to `reg` as `name_tag`.
fn push(
    reg: &Registry,
    tmp: &Path,
    name_tag: &str,
    spec: &ImageSpec,
    format: PushFormat,
) -> (String, BuiltImage) {
    let dir = tmp.join(name_tag.replace([':', '/'], "_"));
    let mut layout = OciLayout::create(&dir).expect("layout");
    let built = layout.add_image("t", spec).expect("build image");
    reg.push(layout.dir(), "t", name_tag, format)
        .expect("push image");
    (reg.reference(name_tag), built)
}

/// Incompressible bytes (xorshift), so that a layer's size is what goes over the wire.
fn noise(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(&x.to_le_bytes());
    }
    out.truncate(len);
    out
}

/// The sizes a manifest declares: config plus layers (what ImageStatus.size reports).
fn manifest_size(reg: &Registry, repo: &str, reference: &str, accept: &str) -> u64 {
    let (st, _, body) = reg
        .http(
            "GET",
            &format!("/v2/{repo}/manifests/{reference}"),
            &[("Accept", accept)],
            b"",
        )
        .expect("GET manifest");
    assert_eq!(st, 200, "{}", String::from_utf8_lossy(&body));
    let m: serde_json::Value = serde_json::from_slice(&body).expect("manifest JSON");
    m["config"]["size"].as_u64().expect("config size")
        + m["layers"]
            .as_array()
            .expect("layers")
            .iter()
            .map(|l| l["size"].as_u64().expect("layer size"))
            .sum::<u64>()
}

const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
const DOCKER_MANIFEST: &str = "application/vnd.docker.distribution.manifest.v2+json";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pulls_oci_docker_and_index_images_with_status_fields_and_lookups() {
    let mut d = TestDaemon::start("img-status").await;
    let reg = Registry::start().expect("registry");
    let tmp = tempfile::tempdir().unwrap();
    let port = reg.port;

    // OCI media types, a numeric user.
    let oci_spec = busybox().user("1000").label("which", "oci");
    let (oci_ref, oci_built) = push(&reg, tmp.path(), "app:oci", &oci_spec, PushFormat::Oci);
    // Docker schema 2 media types, a named user.
    let docker_spec = busybox()
        .user("app")
        .passwd_line("app:x:1001:1001::/home/app:/bin/sh")
        .group_line("app:x:1001:")
        .label("which", "docker");
    let (docker_ref, _) = push(
        &reg,
        tmp.path(),
        "app:docker",
        &docker_spec,
        PushFormat::DockerV2S2,
    );
    // A multi-platform index: the host's platform and another.
    let host = busybox().label("which", "host");
    let other_arch = if host.platform.architecture == "arm64" {
        "amd64"
    } else {
        "arm64"
    };
    let other = busybox().label("which", "other").platform(other_arch, None);
    let mut layout = OciLayout::create(&tmp.path().join("multi")).unwrap();
    let (_, index_built) = layout.add_index("multi", &[&other, &host]).unwrap();
    reg.push(layout.dir(), "multi", "app:multi", PushFormat::Oci)
        .expect("push index");
    let multi_ref = reg.reference("app:multi");

    // What the registry holds is what the test means: Docker media type for :docker.
    let (_, headers, _) = reg
        .http(
            "GET",
            "/v2/app/manifests/docker",
            &[("Accept", DOCKER_MANIFEST)],
            b"",
        )
        .unwrap();
    let ctype = headers
        .iter()
        .find(|(k, _)| k == "content-type")
        .map(|(_, v)| v.as_str());
    assert_eq!(ctype, Some(DOCKER_MANIFEST));

    let oci_id = d.pull(&oci_ref).await;
    let docker_id = d.pull(&docker_ref).await;
    let multi_id = d.pull(&multi_ref).await;
    assert_eq!(
        oci_id, oci_built.config_digest,
        "the id is the config digest"
    );
    assert_eq!(
        multi_id, index_built[1].config_digest,
        "the host's platform is picked from the index"
    );
    assert!(
        status(&mut d, &index_built[0].config_digest)
            .await
            .is_none(),
        "the other platform's image is not stored"
    );

    // Status fields.
    let oci = status(&mut d, &oci_ref).await.expect("oci image");
    let digest = reg.manifest_digest("app", "oci").unwrap();
    assert_eq!(oci.id, oci_id);
    assert_eq!(oci.repo_tags, vec![format!("127.0.0.1:{port}/app:oci")]);
    assert_eq!(
        oci.repo_digests,
        vec![format!("127.0.0.1:{port}/app@{digest}")]
    );
    assert_eq!(oci.size, manifest_size(&reg, "app", "oci", OCI_MANIFEST));
    assert_eq!(oci.uid.as_ref().map(|u| u.value), Some(1000));
    assert_eq!(oci.username, "");
    assert!(!oci.pinned);
    assert_eq!(
        oci.spec.as_ref().map(|s| s.image.as_str()),
        Some(oci_id.as_str())
    );

    let docker = status(&mut d, &docker_ref).await.expect("docker image");
    assert_eq!(docker.id, docker_id);
    assert_ne!(docker.id, oci.id);
    assert_eq!(
        docker.repo_tags,
        vec![format!("127.0.0.1:{port}/app:docker")]
    );
    let ddigest = reg.manifest_digest("app", "docker").unwrap();
    assert_eq!(
        docker.repo_digests,
        vec![format!("127.0.0.1:{port}/app@{ddigest}")]
    );
    assert_eq!(
        docker.size,
        manifest_size(&reg, "app", "docker", DOCKER_MANIFEST)
    );
    assert_eq!(docker.uid, None, "a named user has no uid");
    assert_eq!(docker.username, "app");

    let multi = status(&mut d, &multi_ref).await.expect("index image");
    let idigest = reg.manifest_digest("app", "multi").unwrap();
    assert_eq!(
        multi.repo_digests,
        vec![format!("127.0.0.1:{port}/app@{idigest}")],
        "the repo digest of an index pull is the index's"
    );
    assert!(multi.size > 0);
    assert_eq!(multi.uid.as_ref().map(|u| u.value), None);
    assert_eq!(multi.username, "");

    // Verbose: the image config and the layers.
    let info = verbose_info(&mut d, &docker_id).await;
    assert_eq!(info["imageSpec"]["config"]["User"], "app", "{info:#}");
    assert_eq!(info["layers"].as_array().map(Vec::len), Some(1), "{info:#}");
    assert_eq!(info["repoTags"][0], docker.repo_tags[0].as_str());

    // Lookups: tag, short name forms, name@digest, id, bare hex, unique prefixes.
    let hex = oci_id.trim_start_matches("sha256:").to_string();
    for r in [
        oci_ref.clone(),
        format!("127.0.0.1:{port}/app@{digest}"),
        oci_id.clone(),
        hex.clone(),
        format!("sha256:{}", &hex[..12]),
        hex[..12].to_string(),
    ] {
        let found = status(&mut d, &r).await;
        assert_eq!(found.map(|i| i.id), Some(oci_id.clone()), "lookup by {r}");
    }
    for r in [
        format!("127.0.0.1:{port}/app:nope"),
        format!("127.0.0.1:{port}/other:oci"),
        format!("127.0.0.1:{port}/app@sha256:{}", "0".repeat(64)),
        format!("sha256:{}", "0".repeat(64)),
        // Matches every image: not unique.
        "sha256:".to_string(),
    ] {
        assert!(status(&mut d, &r).await.is_none(), "{r} finds nothing");
    }
    let err = d
        .cri
        .image
        .image_status(cri::ImageStatusRequest {
            image: spec(""),
            verbose: false,
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");

    // ListImages with and without a filter.
    let all = list_ids(&mut d, None).await;
    assert_eq!(
        all,
        BTreeSet::from([oci_id.clone(), docker_id.clone(), multi_id.clone()])
    );
    assert_eq!(
        list_ids(&mut d, Some(&docker_ref)).await,
        BTreeSet::from([docker_id.clone()])
    );
    assert_eq!(
        list_ids(&mut d, Some(&hex[..12])).await,
        BTreeSet::from([oci_id.clone()])
    );
    assert!(
        list_ids(&mut d, Some(&format!("127.0.0.1:{port}/app:nope")))
            .await
            .is_empty()
    );

    // Pulling again changes nothing and answers the same id.
    assert_eq!(d.pull(&oci_ref).await, oci_id);
    assert_eq!(list(&mut d, None).await.len(), 3);
    assert!(d.leftovers().is_empty(), "{:?}", d.leftovers());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multi_layer_image_with_whiteouts_runs_with_them_applied() {
    let mut d = TestDaemon::start("img-layers").await;
    let reg = Registry::start().expect("registry");
    let tmp = tempfile::tempdir().unwrap();
    let spec = busybox()
        .layer(
            Layer::new(Compression::Zstd)
                .dir("data", 0o755)
                .file("data/keep", "kept\n", 0o644)
                .file("data/gone", "should be hidden\n", 0o644)
                .dir("opq", 0o755)
                .file("opq/old", "old\n", 0o644)
                .dir("opq/sub", 0o755)
                .file("opq/sub/deep", "deep\n", 0o644),
        )
        .layer(
            Layer::new(Compression::None)
                .whiteout("data/gone")
                .opaque("opq")
                .file("opq/new", "new\n", 0o644),
        )
        .layer(Layer::new(Compression::Gzip).file_owned("data/owned", "o\n", 0o640, 1234, 5678));
    let mut layout = OciLayout::create(&tmp.path().join("layers")).unwrap();
    let built = layout.add_image("t", &spec).unwrap();
    // Byte for byte: the zstd and the uncompressed layers stay as they are.
    let digest = reg.push_exact(layout.dir(), "t", "layers:1").expect("push");
    let reference = reg.reference("layers:1");
    let id = d.pull(&reference).await;
    assert_eq!(id, built.config_digest);
    let img = status(&mut d, &reference).await.unwrap();
    assert_eq!(
        img.repo_digests,
        vec![format!("{}@{digest}", reg.reference("layers"))]
    );
    let info = verbose_info(&mut d, &id).await;
    let layers: Vec<&str> = info["layers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(layers, built.diff_ids, "bottom layer first");

    let pod = d.run_pod("layers-pod").await;
    let script = "cat /data/keep; ls -1 /data; ls -1A /opq; \
                  test -e /data/gone || echo no-gone; test -e /opq/sub || echo no-sub; \
                  stat -c '%u:%g %a' /data/owned";
    let cid = d.run_container(&pod, sh("check", &reference, script)).await;
    let st = d.wait_exited(&cid, WAIT).await;
    assert_eq!(st.exit_code, 0, "{st:?}");
    let out = stdout_text(&read_log(Path::new(&st.log_path)));
    assert_eq!(
        out, "kept\nkeep\nowned\nnew\nno-gone\nno-sub\n1234:5678 640\n",
        "file whiteout, opaque directory, ownership and mode"
    );
    d.remove_pod(&pod).await;
    assert!(d.leftovers().is_empty(), "{:?}", d.leftovers());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remove_image_by_tag_and_id_unknown_succeeds_and_used_content_outlives_it() {
    let mut d = TestDaemon::start("img-remove").await;
    let images = Images::start();
    let spec_a = busybox().label("n", "a");
    let a = images.push("rm:a", &spec_a);
    let a2 = images.push("rm:a2", &spec_a);

    // Two tags of one image: RemoveImage by one tag removes the image with all its names.
    let id = d.pull(&a).await;
    assert_eq!(d.pull(&a2).await, id);
    assert_eq!(status(&mut d, &a).await.unwrap().repo_tags.len(), 2);
    assert!(!layer_dirs(&d).is_empty());
    remove(&mut d, &a).await.expect("RemoveImage by tag");
    assert!(status(&mut d, &a).await.is_none());
    assert!(status(&mut d, &a2).await.is_none());
    assert!(status(&mut d, &id).await.is_none());
    assert!(list(&mut d, None).await.is_empty());
    assert!(
        layer_dirs(&d).is_empty(),
        "unpacked layers go with the image: {:?}",
        layer_dirs(&d)
    );

    // By id, and by a unique id prefix.
    assert_eq!(d.pull(&a).await, id);
    remove(&mut d, &id).await.expect("RemoveImage by id");
    assert!(list(&mut d, None).await.is_empty());
    assert_eq!(d.pull(&a).await, id);
    let hex = id.trim_start_matches("sha256:");
    remove(&mut d, &hex[..10])
        .await
        .expect("RemoveImage by prefix");
    assert!(list(&mut d, None).await.is_empty());
    assert!(layer_dirs(&d).is_empty());

    // Unknown images succeed; an empty reference is refused.
    remove(&mut d, &images.registry.reference("rm:unknown"))
        .await
        .expect("unknown tag");
    remove(&mut d, &format!("sha256:{}", "0".repeat(64)))
        .await
        .expect("unknown id");
    let err = remove(&mut d, "").await.unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");

    // An image a running container uses: the record goes, the content stays until the
    // container is removed.
    let used = images.push(
        "rm:used",
        &busybox().layer(Layer::new(Compression::Gzip).file("marker", "still here\n", 0o644)),
    );
    let used_id = d.pull(&used).await;
    let pod = d.run_pod("rm-pod").await;
    let cid = d
        .run_container(
            &pod,
            sh("user", &used, "while true; do cat /marker; sleep 0.2; done"),
        )
        .await;
    d.wait_log(&cid, "still here", WAIT).await;
    let used_layers: BTreeSet<String> = verbose_info(&mut d, &used_id).await["layers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| {
            v.as_str()
                .unwrap()
                .trim_start_matches("sha256:")
                .to_string()
        })
        .collect();
    remove(&mut d, &used)
        .await
        .expect("RemoveImage of a used image");
    assert!(status(&mut d, &used).await.is_none());
    assert!(!list_ids(&mut d, None).await.contains(&used_id));
    assert!(
        used_layers.is_subset(&layer_dirs(&d)),
        "layers of a running container stay"
    );
    // The container keeps running and reading its root filesystem.
    let path = d.container_status(&cid).await.log_path;
    let before = read_log(Path::new(&path)).len();
    tokio::time::sleep(Duration::from_millis(800)).await;
    let st = d.container_status(&cid).await;
    assert_eq!(
        st.state,
        cri::ContainerState::ContainerRunning as i32,
        "{st:?}"
    );
    let lines = read_log(Path::new(&path));
    assert!(lines.len() > before, "the container still logs");
    assert!(lines.iter().all(|l| l.text == "still here"), "{lines:?}");
    // A new container cannot use the removed image.
    let err = d
        .create(&pod, sh("late", &used, "true"))
        .await
        .expect_err("CreateContainer from a removed image");
    assert_eq!(err.code(), Code::NotFound, "{err:?}");

    d.remove_pod(&pod).await;
    // Collected now: only what listed images keep stays (the built-in pause image).
    let kept = listed_layers(&mut d).await;
    assert!(
        used_layers.is_disjoint(&layer_dirs(&d)),
        "{:?}",
        layer_dirs(&d)
    );
    assert_eq!(layer_dirs(&d), kept);
    let writable: Vec<_> = std::fs::read_dir(d.root.join("image/containers"))
        .map(|rd| rd.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    assert!(writable.is_empty(), "{writable:?}");
    assert!(d.leftovers().is_empty(), "{:?}", d.leftovers());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auth_missing_tags_and_corrupt_blobs_fail_clearly_and_store_nothing() {
    let mut d = TestDaemon::start("img-errors").await;
    let tmp = tempfile::tempdir().unwrap();

    // Basic auth (htpasswd).
    let secure = Registry::start_with_auth("peapod", "s3cret").expect("registry with auth");
    let (private, built) = push(
        &secure,
        tmp.path(),
        "private:1",
        &busybox(),
        PushFormat::Oci,
    );
    let err = try_pull(&mut d, &private, None).await.unwrap_err();
    assert_eq!(err.code(), Code::Unauthenticated, "{err:?}");
    assert!(
        err.message().contains("authentication") && err.message().contains(&secure.addr()),
        "{err:?}"
    );
    let wrong = cri::AuthConfig {
        username: "peapod".into(),
        password: "wrong".into(),
        ..Default::default()
    };
    let err = try_pull(&mut d, &private, Some(wrong)).await.unwrap_err();
    assert!(
        matches!(err.code(), Code::Unauthenticated | Code::PermissionDenied),
        "{err:?}"
    );
    assert!(list(&mut d, None).await.is_empty());
    let right = cri::AuthConfig {
        username: "peapod".into(),
        password: "s3cret".into(),
        ..Default::default()
    };
    let id = try_pull(&mut d, &private, Some(right))
        .await
        .unwrap_or_else(|e| panic!("pull with credentials: {e}\n{}", d.log()));
    assert_eq!(id, built.config_digest);
    // The CLI's --creds.
    remove(&mut d, &id).await.unwrap();
    let out = cli(&d, &["image", "pull", "-q", &private]).await;
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("authentication"),
        "{out:?}"
    );
    let out = cli(
        &d,
        &["image", "pull", "-q", "--creds", "peapod:s3cret", &private],
    )
    .await;
    assert!(out.status.success(), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), id);

    // A missing tag and a missing repository.
    let open = Registry::start().expect("registry");
    push(&open, tmp.path(), "there:1", &busybox(), PushFormat::Oci);
    for missing in [open.reference("there:2"), open.reference("nowhere:1")] {
        let err = try_pull(&mut d, &missing, None).await.unwrap_err();
        assert_eq!(err.code(), Code::NotFound, "{missing}: {err:?}");
        assert!(err.message().contains("not found"), "{err:?}");
        let name = missing.rsplit('/').next().unwrap();
        let (repo, tag) = name.split_once(':').unwrap();
        assert!(
            err.message().contains(repo) && err.message().contains(tag),
            "the message names what is missing: {err:?}"
        );
    }

    // A corrupt layer blob, after a good one: the pull fails and stores nothing, not even the
    // good layer. Uncompressed (pushed byte for byte), the tar still reads and the digest
    // check catches it; gzipped, the stream's own checksum does.
    for (tag, compression, seed) in [
        ("raw:1", Compression::None, 7),
        ("gz:1", Compression::Gzip, 9),
    ] {
        let bad_spec = ImageSpec::empty()
            .layer(Layer::new(compression).file("good", noise(200_000, seed), 0o644))
            .layer(Layer::new(compression).file("bad", noise(200_000, seed + 1), 0o644));
        let dir = tmp.path().join(tag.replace(':', "_"));
        let mut layout = OciLayout::create(&dir).unwrap();
        let bad_built = layout.add_image("t", &bad_spec).unwrap();
        open.push_exact(layout.dir(), "t", tag).expect("push");
        let bad = open.reference(tag);
        let bad_digest = &bad_built.layer_digests[1];
        let blob = open.blob_data_path(bad_digest);
        let mut data = std::fs::read(&blob).expect("registry blob");
        let mid = data.len() / 2;
        data[mid] ^= 0xff;
        data[mid + 1] ^= 0xff;
        std::fs::write(&blob, &data).unwrap();
        let before_fs = fs_info(&mut d).await;
        let before_list = list_ids(&mut d, None).await;
        let before_layers = layer_dirs(&d);
        let err = try_pull(&mut d, &bad, None).await.unwrap_err();
        if compression == Compression::None {
            assert!(
                err.message().contains("digest mismatch") && err.message().contains(bad_digest),
                "{err:?}"
            );
        } else {
            assert!(err.message().contains("corrupt"), "{err:?}");
        }
        assert!(status(&mut d, &bad).await.is_none());
        assert!(status(&mut d, &bad_built.config_digest).await.is_none());
        assert_eq!(list_ids(&mut d, None).await, before_list);
        assert_eq!(
            layer_dirs(&d),
            before_layers,
            "no layer of the failed pull stays"
        );
        assert_eq!(fs_info(&mut d).await, before_fs, "ImageFsInfo unchanged");
        assert!(
            open.blob_fetches(&bad_built.layer_digests[0]) == 1,
            "the good layer was fetched: {:#?}",
            open.requests()
        );
    }
    // Nothing half-written stays either.
    let mut junk = Vec::new();
    for sub in ["blobs/sha256", "layers", "pulls"] {
        if let Ok(rd) = std::fs::read_dir(d.root.join("image").join(sub)) {
            junk.extend(
                rd.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .filter(|n| n.starts_with('.') || n.ends_with(".json")),
            );
        }
    }
    assert!(junk.is_empty(), "{junk:?}");
    assert!(d.leftovers().is_empty(), "{:?}", d.leftovers());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parallel_pulls_of_a_two_layer_image_fetch_each_blob_once() {
    let mut d = TestDaemon::start("img-parallel").await;
    let reg = Registry::start().expect("registry");
    let tmp = tempfile::tempdir().unwrap();
    let two_layers =
        busybox().layer(Layer::new(Compression::Gzip).file("data", noise(2_000_000, 3), 0o644));
    let (reference, built) = push(&reg, tmp.path(), "twice:1", &two_layers, PushFormat::Oci);
    assert_eq!(built.layer_digests.len(), 2);

    let mut c1 = d.cri.image.clone();
    let mut c2 = d.cri.image.clone();
    let req = || cri::PullImageRequest {
        image: spec(&reference),
        ..Default::default()
    };
    let (r1, r2) = tokio::join!(c1.pull_image(req()), c2.pull_image(req()));
    let id1 = r1.expect("first pull").into_inner().image_ref;
    let id2 = r2.expect("second pull").into_inner().image_ref;
    assert_eq!(id1, id2);
    assert_eq!(id1, built.config_digest);
    // A pull of what is present fetches no blob either.
    assert_eq!(d.pull(&reference).await, id1);
    // The registry writes its access log line after the response.
    tokio::time::sleep(Duration::from_millis(300)).await;
    for digest in built.layer_digests.iter().chain([&built.config_digest]) {
        assert_eq!(
            reg.blob_fetches(digest),
            1,
            "blob {digest} fetched once; requests: {:#?}",
            reg.requests()
        );
    }
    assert_eq!(list(&mut d, None).await.len(), 1);
    assert!(d.leftovers().is_empty(), "{:?}", d.leftovers());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn image_fs_info_counts_pulled_content_and_container_writes() {
    let mut d = TestDaemon::start("img-fsinfo").await;
    let images = Images::start();
    let ((img0, ino0, img_mount), (ctr0, _, ctr_mount)) = fs_info(&mut d).await;
    assert_eq!(img_mount, d.root.join("image").display().to_string());
    assert_eq!(
        ctr_mount,
        d.root.join("image/containers").display().to_string()
    );

    let reference = images.push("fs:1", &busybox());
    d.pull(&reference).await;
    let ((img1, ino1, _), _) = fs_info(&mut d).await;
    let busybox_len = std::fs::metadata("/bin/busybox").unwrap().len();
    assert!(
        img1 >= img0 + busybox_len,
        "image fs grows by at least the unpacked busybox: {img0} -> {img1}"
    );
    let applets = peapod_image::testsupport::busybox_applets().unwrap().len() as u64;
    assert!(
        ino1 >= ino0 + applets,
        "an inode per applet link: {ino0} -> {ino1}"
    );

    let pod = d.run_pod("fs-pod").await;
    let ((img2, _, _), (ctr1, _, _)) = fs_info(&mut d).await;
    let cid = d
        .run_container(
            &pod,
            sh(
                "writer",
                &reference,
                "dd if=/dev/zero of=/big bs=65536 count=80 2>/dev/null && sync && echo written && sleep 1000",
            ),
        )
        .await;
    d.wait_log(&cid, "written", WAIT).await;
    let ((img3, _, _), (ctr2, ictr2, _)) = fs_info(&mut d).await;
    assert!(
        ctr2 >= ctr1 + 80 * 65536,
        "container fs counts the writable layer: {ctr1} -> {ctr2}"
    );
    assert!(ictr2 > 0);
    assert_eq!(img3, img2, "writes in a container are not image content");
    d.remove_pod(&pod).await;
    let (_, (ctr3, _, _)) = fs_info(&mut d).await;
    assert!(ctr3 <= ctr0.max(ctr1), "removed with the container: {ctr3}");
    assert!(d.leftovers().is_empty(), "{:?}", d.leftovers());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn builtin_pause_image_lists_pinned_under_the_configured_name() {
    let name = "example.com/e2e/pause:9";
    let mut d = TestDaemon::start_with(
        "img-pause",
        e2e::DaemonOptions {
            extra_config: format!("[sandbox]\nimage = \"{name}\"\n"),
            ..Default::default()
        },
    )
    .await;
    let pod = d.run_pod("pause-pod").await;
    let found: Vec<cri::Image> = list(&mut d, None)
        .await
        .into_iter()
        .filter(|i| i.repo_tags.iter().any(|t| t == name))
        .collect();
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].pinned, "the sandbox image is pinned");
    let st = status(&mut d, name)
        .await
        .expect("status of the sandbox image");
    assert_eq!(st.id, found[0].id);
    assert!(st.pinned);
    assert!(st.size > 0);
    // A second pod uses the same image.
    let pod2 = d.run_pod("pause-pod2").await;
    assert_eq!(list(&mut d, None).await.len(), 1);
    d.remove_pod(&pod).await;
    d.remove_pod(&pod2).await;
    assert!(d.leftovers().is_empty(), "{:?}", d.leftovers());
}

/// Runs `peapod --endpoint <the test daemon> ARGS...` (the real CLI binary).
async fn cli(d: &TestDaemon, args: &[&str]) -> std::process::Output {
    cli_in(d, args, None).await
}

async fn cli_in(d: &TestDaemon, args: &[&str], cwd: Option<&Path>) -> std::process::Output {
    let mut cmd = tokio::process::Command::new(e2e::daemon::bin_dir().join("peapod"));
    cmd.arg("--endpoint")
        .arg(&d.socket)
        .args(args)
        .env_remove("PEAPOD_SOCKET")
        .stdin(std::process::Stdio::null());
    if let Some(dir) = cwd {
        cmd.current_dir(dir);
    }
    tokio::time::timeout(Duration::from_secs(120), cmd.output())
        .await
        .expect("the CLI finishes")
        .expect("run the CLI")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cli_imports_docker_save_and_oci_layout_archives_that_then_run() {
    let mut d = TestDaemon::start("img-import").await;
    let tmp = tempfile::tempdir().unwrap();
    let marker = |text: &str| {
        busybox()
            .layer(Layer::new(Compression::Gzip).file("etc/which", format!("{text}\n"), 0o644))
            .cmd(&["cat", "/etc/which"])
    };
    let dock = tmp.path().join("dock.tar");
    let dock_built = docker_archive(
        &dock,
        &[
            (
                &["example.com/e2e/dock:1", "example.com/e2e/dock:2"],
                &marker("from docker save"),
            ),
            (&["example.com/e2e/second:1"], &marker("the second image")),
        ],
    )
    .unwrap();
    let oci = tmp.path().join("oci.tar");
    let oci_built =
        oci_archive(&oci, "example.com/e2e/oci:1", &marker("from an OCI layout")).unwrap();

    // A relative path: the CLI hands the daemon an absolute one.
    let out = cli_in(&d, &["image", "import", "dock.tar"], Some(tmp.path())).await;
    assert!(out.status.success(), "{out:?}\n{}", d.log());
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("Imported example.com/e2e/dock:1"),
        "{stdout}"
    );
    assert!(
        stdout.contains("Imported example.com/e2e/dock:2"),
        "{stdout}"
    );
    assert!(
        stdout.contains("Imported example.com/e2e/second:1"),
        "every image of the archive: {stdout}"
    );
    let out = cli(&d, &["image", "import", oci.to_str().unwrap()]).await;
    assert!(out.status.success(), "{out:?}\n{}", d.log());
    assert!(
        text(&out.stdout).contains("Imported example.com/e2e/oci:1"),
        "{out:?}"
    );

    let dimg = status(&mut d, "example.com/e2e/dock:2")
        .await
        .expect("imported");
    assert_eq!(dimg.id, dock_built[0].config_digest);
    assert_eq!(
        dimg.repo_tags,
        vec!["example.com/e2e/dock:1", "example.com/e2e/dock:2"]
    );
    let oimg = status(&mut d, "example.com/e2e/oci:1")
        .await
        .expect("imported");
    assert_eq!(oimg.id, oci_built.config_digest);
    let second = status(&mut d, "example.com/e2e/second:1")
        .await
        .expect("imported");
    assert_eq!(second.id, dock_built[1].config_digest);

    // crictl can do it too: PullImage of oci-archive:/path; again is the same image.
    let again = try_pull(&mut d, &format!("oci-archive:{}", oci.display()), None)
        .await
        .expect("PullImage oci-archive:");
    assert_eq!(again, oimg.id);
    assert_eq!(list(&mut d, None).await.len(), 3);

    // Containers run from both.
    let pod = d.run_pod("import-pod").await;
    for (name, image, want) in [
        ("dock", "example.com/e2e/dock:1", "from docker save\n"),
        ("oci", "example.com/e2e/oci:1", "from an OCI layout\n"),
        ("second", "example.com/e2e/second:1", "the second image\n"),
    ] {
        let cid = d
            .run_container(&pod, container(name, image, &[], &[]))
            .await;
        let st = d.wait_exited(&cid, WAIT).await;
        assert_eq!(st.exit_code, 0, "{st:?}");
        assert_eq!(stdout_text(&read_log(Path::new(&st.log_path))), want);
    }
    d.remove_pod(&pod).await;

    // Bad archive references: refused quickly, with the field named, storing nothing.
    let fifo = tmp.path().join("fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let garbage = tmp.path().join("garbage.tar");
    std::fs::write(&garbage, noise(10_000, 5)).unwrap();
    let cases: Vec<(String, Code)> = vec![
        ("docker-archive:dock.tar".into(), Code::InvalidArgument),
        ("docker-archive:/nonexistent/x.tar".into(), Code::NotFound),
        (
            format!("docker-archive:{}", fifo.display()),
            Code::InvalidArgument,
        ),
        ("oci-archive:/dev/null".into(), Code::InvalidArgument),
        (
            format!("docker-archive:{}", tmp.path().display()),
            Code::InvalidArgument,
        ),
    ];
    for (r, code) in cases {
        let res = tokio::time::timeout(Duration::from_secs(10), try_pull(&mut d, &r, None))
            .await
            .unwrap_or_else(|_| panic!("{r} hangs"));
        let err = res.expect_err(&r);
        assert_eq!(err.code(), code, "{r}: {err:?}");
    }
    let err = try_pull(
        &mut d,
        &format!("docker-archive:{}", garbage.display()),
        None,
    )
    .await
    .expect_err("garbage archive");
    assert!(
        err.message().contains(garbage.to_str().unwrap()) && !err.message().contains("/proc/"),
        "the message names the archive: {err:?}"
    );
    let out = cli(&d, &["image", "import", "/nonexistent/x.tar"]).await;
    assert!(!out.status.success());
    assert_eq!(
        list(&mut d, None).await.len(),
        4,
        "three imports and the pause image"
    );
    assert!(d.leftovers().is_empty(), "{:?}", d.leftovers());
}

/// A TCP proxy to `upstream` that sends responses at about `rate` bytes a second, so that a
/// pull lasts long enough to watch.
async fn slow_proxy(upstream: u16, rate: usize) -> (u16, tokio::task::JoinHandle<()>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let task = tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            tokio::spawn(async move {
                let Ok(server) = tokio::net::TcpStream::connect(("127.0.0.1", upstream)).await
                else {
                    return;
                };
                let (mut cr, mut cw) = client.into_split();
                let (mut sr, mut sw) = server.into_split();
                let up = async {
                    let _ = tokio::io::copy(&mut cr, &mut sw).await;
                    let _ = sw.shutdown().await;
                };
                let down = async {
                    let mut buf = vec![0u8; 16 * 1024];
                    while let Ok(n) = sr.read(&mut buf).await {
                        if n == 0 || cw.write_all(&buf[..n]).await.is_err() {
                            break;
                        }
                        tokio::time::sleep(Duration::from_secs_f64(n as f64 / rate as f64)).await;
                    }
                    let _ = cw.shutdown().await;
                };
                tokio::join!(up, down);
            });
        }
    });
    (port, task)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cli_pull_draws_progress_then_ls_inspect_and_rm() {
    let mut d = TestDaemon::start("img-cli").await;
    let reg = Registry::start().expect("registry");
    let tmp = tempfile::tempdir().unwrap();
    let spec =
        busybox().layer(Layer::new(Compression::Gzip).file("big", noise(3_000_000, 11), 0o644));
    push(&reg, tmp.path(), "big:1", &spec, PushFormat::Oci);
    // About 3.5 s at 1 MB/s.
    let (proxy, proxy_task) = slow_proxy(reg.port, 1_000_000).await;
    let reference = format!("127.0.0.1:{proxy}/big:1");

    let started = Instant::now();
    let out = cli(&d, &["image", "pull", &reference]).await;
    let took = started.elapsed();
    proxy_task.abort();
    assert!(out.status.success(), "{out:?}\n{}", d.log());
    let id = text(&out.stdout).trim().to_string();
    let img = status(&mut d, &reference).await.expect("pulled");
    assert_eq!(img.id, id, "the CLI prints the image id");
    // Progress lines on stderr (not a terminal: a line at most every second), read from
    // the daemon's progress file under the root the daemon reported.
    let stderr = text(&out.stderr);
    let bars: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with(&format!("{reference} [")))
        .collect();
    assert!(bars.len() >= 2, "took {took:?}; stderr:\n{stderr}");
    assert!(
        bars.iter()
            .any(|l| l.contains("/2 layers") && !l.contains("2/2 layers")),
        "a line while layers are still coming: {stderr}"
    );
    let last = bars.last().unwrap();
    assert!(last.contains("[==============================]"), "{last}");
    assert!(last.ends_with("2/2 layers"), "{last}");
    assert!(
        !d.root.join("image/pulls").exists()
            || std::fs::read_dir(d.root.join("image/pulls"))
                .unwrap()
                .next()
                .is_none(),
        "the progress file goes with the pull"
    );

    // ls: a crictl-like table; -q: ids; a filter.
    let out = cli(&d, &["image", "ls"]).await;
    assert!(out.status.success(), "{out:?}");
    let ls = text(&out.stdout);
    let mut lines = ls.lines();
    let header: Vec<&str> = lines
        .next()
        .unwrap()
        .split("   ")
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect();
    assert_eq!(header, ["IMAGE", "TAG", "IMAGE ID", "SIZE"], "{ls}");
    let short = &id["sha256:".len().."sha256:".len() + 13];
    let row: Vec<&str> = lines
        .find(|l| l.contains(short))
        .unwrap_or_else(|| panic!("no row for {short}: {ls}"))
        .split_whitespace()
        .collect();
    assert_eq!(
        row[..3],
        [format!("127.0.0.1:{proxy}/big").as_str(), "1", short],
        "{ls}"
    );
    assert!(row[3].ends_with("MB"), "{ls}");
    let out = cli(&d, &["image", "ls", "-q"]).await;
    assert_eq!(text(&out.stdout).trim(), id);
    let out = cli(&d, &["image", "ls", "nothing:here"]).await;
    assert_eq!(text(&out.stdout).lines().count(), 1, "just the header");

    // inspect by a short id.
    let out = cli(&d, &["image", "inspect", short]).await;
    assert!(out.status.success(), "{out:?}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("inspect JSON");
    assert_eq!(v["status"]["id"], id.as_str());
    assert_eq!(v["info"]["layers"].as_array().map(Vec::len), Some(2));
    assert_eq!(v["info"]["imageSpec"]["rootfs"]["type"], "layers");
    let out = cli(&d, &["image", "inspect", "nothing:here"]).await;
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("no such image"), "{out:?}");

    // rm: whole image; an unknown one fails but the others still go.
    let out = cli(&d, &["image", "rm", &reference, "nothing:here"]).await;
    assert!(!out.status.success(), "{out:?}");
    assert_eq!(text(&out.stdout), format!("Deleted: {reference}\n"));
    assert!(
        text(&out.stderr).contains("no such image nothing:here"),
        "{out:?}"
    );
    assert!(status(&mut d, &id).await.is_none());
    let out = cli(&d, &["image", "ls", "-q"]).await;
    assert_eq!(text(&out.stdout), "");
    assert!(d.leftovers().is_empty(), "{:?}", d.leftovers());
}
