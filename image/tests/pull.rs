//! Pulls through `Store` from Debian's docker-registry on loopback, with
//! images built from busybox-static and pushed with skopeo.

mod common;

use common::*;
use peapod_image::testsupport::*;
use peapod_image::{Credentials, ErrorKind, RegistryConfig};
use std::collections::HashMap;
use std::os::unix::fs::FileTypeExt;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pull_oci_and_docker_media_types_all_compressions() {
    let reg = Registry::start().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let _mounts = MountGuard(tmp.path().to_path_buf());
    let mut layout = OciLayout::create(&tmp.path().join("layout")).unwrap();
    let spec = ImageSpec::busybox()
        .entrypoint(&["/bin/sh", "-c"])
        .cmd(&["echo hi"])
        .env("A=1")
        .user("1000:1000")
        .workdir("/work")
        .label("org.example", "yes")
        .stop_signal("SIGINT")
        .layer(Layer::new(Compression::Zstd).file("zstd-file", "z", 0o644))
        .layer(Layer::new(Compression::Gzip).file("gzip-file", "p", 0o600))
        .layer(Layer::new(Compression::None).file("plain-file", "u", 0o640));
    let built = layout.add_image("v1", &spec).unwrap();
    // Byte for byte: zstd, gzip and uncompressed layers as the layout has them.
    assert_eq!(
        reg.push_exact(layout.dir(), "v1", "bb/oci:v1").unwrap(),
        built.manifest_digest
    );
    assert_eq!(
        reg.manifest_digest("bb/oci", "v1").unwrap(),
        built.manifest_digest
    );
    // skopeo gzips the uncompressed layer: another manifest, same config.
    reg.push(layout.dir(), "v1", "bb/plain:v1", PushFormat::Oci)
        .unwrap();
    // Docker schema 2 carries gzip layers only.
    let dspec =
        ImageSpec::busybox().layer(Layer::new(Compression::Gzip).file("docker-file", "d", 0o644));
    layout.add_image("v2", &dspec).unwrap();
    reg.push(layout.dir(), "v2", "bb/docker:v2", PushFormat::DockerV2S2)
        .unwrap();

    let store = open_store(tmp.path()).await;
    let name = reg.reference("bb/oci");
    let img = store.pull(&format!("{name}:v1"), None).await.unwrap();
    assert_eq!(img.id, built.config_digest);
    assert_eq!(img.repo_tags, vec![format!("{name}:v1")]);
    assert_eq!(
        img.repo_digests,
        vec![format!("{name}@{}", built.manifest_digest)]
    );
    assert!(img.size > 500_000, "size {}", img.size);
    assert_eq!(img.config.entrypoint, vec!["/bin/sh", "-c"]);
    assert_eq!(img.config.cmd, vec!["echo hi"]);
    assert!(img.config.env.contains(&"A=1".to_string()));
    assert_eq!(img.config.user, "1000:1000");
    assert_eq!(img.config.working_dir, "/work");
    assert_eq!(img.config.stop_signal, "SIGINT");
    assert_eq!(
        img.config.labels.get("org.example").map(String::as_str),
        Some("yes")
    );
    assert_eq!(
        peapod_image::image_user(&img.config.user),
        (Some(1000), String::new())
    );

    // Lookups: tag, repo digest, id, bare hex, prefix.
    for r in [
        format!("{name}:v1"),
        format!("{name}@{}", built.manifest_digest),
        img.id.clone(),
        img.id[7..].to_string(),
        img.id[7..19].to_string(),
    ] {
        assert_eq!(
            store.resolve(&r).map(|i| i.id),
            Some(img.id.clone()),
            "resolve {r}"
        );
    }

    // Pulling again by digest fetches no layer again.
    let before: usize = built
        .layer_digests
        .iter()
        .map(|d| reg.blob_fetches(d))
        .sum();
    assert_eq!(before, built.layer_digests.len());
    let again = store
        .pull(&format!("{name}@{}", built.manifest_digest), None)
        .await
        .unwrap();
    assert_eq!(again.id, img.id);
    let after: usize = built
        .layer_digests
        .iter()
        .map(|d| reg.blob_fetches(d))
        .sum();
    assert_eq!(after, before, "present layers must not be refetched");

    let dimg = store
        .pull(&reg.reference("bb/docker:v2"), None)
        .await
        .unwrap();
    assert_eq!(dimg.repo_tags, vec![reg.reference("bb/docker:v2")]);
    assert!(dimg.repo_digests[0].starts_with(&format!("{}@sha256:", reg.reference("bb/docker"))));
    assert_eq!(store.list().len(), 2);
    let plain = store
        .pull(&reg.reference("bb/plain:v1"), None)
        .await
        .unwrap();
    assert_eq!(
        plain.id, img.id,
        "same config, whatever the layer compression"
    );
    let plain_digest = reg.manifest_digest("bb/plain", "v1").unwrap();
    assert_ne!(plain_digest, built.manifest_digest);
    assert!(plain
        .repo_digests
        .contains(&format!("{}@{plain_digest}", reg.reference("bb/plain"))));
    assert_eq!(store.list().len(), 2);

    // The merged rootfs holds every layer's files.
    let target = tmp.path().join("rootfs");
    let rootfs = store
        .create_rootfs(&img.id, "c1", &target, false)
        .await
        .unwrap();
    assert!(peapod_image::is_mountpoint(&target));
    assert_eq!(std::fs::read(target.join("zstd-file")).unwrap(), b"z");
    assert_eq!(std::fs::read(target.join("gzip-file")).unwrap(), b"p");
    assert_eq!(std::fs::read(target.join("plain-file")).unwrap(), b"u");
    assert!(std::fs::read_link(target.join("bin/sh")).is_ok());
    assert!(std::fs::read_to_string(target.join("etc/passwd"))
        .unwrap()
        .starts_with("root:"));
    assert_eq!(rootfs.lower_dirs.len(), 4);
    store.remove_rootfs("c1", &target).await.unwrap();
    assert!(!peapod_image::is_mountpoint(&target));
    assert!(!target.exists());

    // ImageFsInfo counts the content.
    let fs = store.fs_info();
    assert!(
        fs.image.used_bytes > 1_000_000 && fs.image.inodes_used > 100,
        "{fs:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_platform_index_picks_the_host() {
    let reg = Registry::start().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let _mounts = MountGuard(tmp.path().to_path_buf());
    let mut layout = OciLayout::create(&tmp.path().join("layout")).unwrap();
    let host =
        ImageSpec::busybox().layer(Layer::new(Compression::Gzip).file("which", "host", 0o644));
    let other_arch = if host.platform.architecture == "arm64" {
        "amd64"
    } else {
        "arm64"
    };
    let other = ImageSpec::busybox()
        .platform(other_arch, None)
        .layer(Layer::new(Compression::Gzip).file("which", "other", 0o644));
    let (index_digest, built) = layout.add_index("multi", &[&other, &host]).unwrap();
    reg.push(layout.dir(), "multi", "multi:1", PushFormat::Oci)
        .unwrap();

    let store = open_store(tmp.path()).await;
    let img = store.pull(&reg.reference("multi:1"), None).await.unwrap();
    assert_eq!(img.id, built[1].config_digest);
    assert_eq!(
        img.repo_digests,
        vec![format!("{}@{index_digest}", reg.reference("multi"))]
    );
    assert_eq!(
        reg.blob_fetches(built[0].layer_digests.last().unwrap()),
        0,
        "the other platform's layer was fetched"
    );
    assert_eq!(
        store
            .resolve(&format!("{}@{index_digest}", reg.reference("multi")))
            .unwrap()
            .id,
        img.id
    );

    let target = tmp.path().join("rootfs");
    store
        .create_rootfs(&img.id, "c", &target, false)
        .await
        .unwrap();
    assert_eq!(std::fs::read(target.join("which")).unwrap(), b"host");
    store.remove_rootfs("c", &target).await.unwrap();

    // The same as a Docker manifest list (skopeo converts the index).
    reg.push(
        layout.dir(),
        "multi",
        "multi-docker:1",
        PushFormat::DockerV2S2,
    )
    .unwrap();
    let list_digest = reg.manifest_digest("multi-docker", "1").unwrap();
    let (_, headers, _) = reg
        .http(
            "GET",
            "/v2/multi-docker/manifests/1",
            &[(
                "Accept",
                "application/vnd.docker.distribution.manifest.list.v2+json",
            )],
            b"",
        )
        .unwrap();
    assert!(
        headers
            .iter()
            .any(|(k, v)| k == "content-type" && v.contains("manifest.list.v2")),
        "{headers:?}"
    );
    let dimg = store
        .pull(&reg.reference("multi-docker:1"), None)
        .await
        .unwrap();
    // Same config, so the same image: it now has both repo digests.
    assert_eq!(dimg.id, img.id);
    assert!(dimg
        .repo_digests
        .contains(&format!("{}@{list_digest}", reg.reference("multi-docker"))));
    assert_eq!(dimg.repo_digests.len(), 2);
    let target = tmp.path().join("rootfs2");
    store
        .create_rootfs(&dimg.id, "c2", &target, false)
        .await
        .unwrap();
    assert_eq!(std::fs::read(target.join("which")).unwrap(), b"host");
    store.remove_rootfs("c2", &target).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn whiteouts_apply_in_the_overlay_and_removal_leaves_nothing() {
    let reg = Registry::start().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let _mounts = MountGuard(tmp.path().to_path_buf());
    let mut layout = OciLayout::create(&tmp.path().join("layout")).unwrap();
    let spec = ImageSpec::busybox()
        .layer(
            Layer::new(Compression::Gzip)
                .dir("data", 0o755)
                .file("data/keep", "k", 0o644)
                .file("data/gone", "g", 0o644)
                .dir("cache", 0o755)
                .file("cache/old1", "o", 0o644)
                .dir("cache/olddir", 0o755)
                .file("cache/olddir/x", "o", 0o644),
        )
        .layer(
            Layer::new(Compression::Zstd)
                .whiteout("data/gone")
                .opaque("cache")
                .file("cache/new", "n", 0o644)
                .whiteout("bin/vi"),
        );
    layout.add_image("wh", &spec).unwrap();
    reg.push(layout.dir(), "wh", "wh:1", PushFormat::Oci)
        .unwrap();

    let store = open_store(tmp.path()).await;
    let img = store.pull(&reg.reference("wh:1"), None).await.unwrap();
    let target = tmp.path().join("bundle/rootfs");
    let rootfs = store
        .create_rootfs(&img.id, "ctr-wh", &target, false)
        .await
        .unwrap();
    assert!(target.join("data/keep").exists());
    assert!(
        !target.join("data/gone").exists(),
        "file whiteout not applied"
    );
    assert_eq!(
        ls(&target.join("cache")),
        vec!["new"],
        "opaque whiteout not applied"
    );
    assert!(std::fs::symlink_metadata(target.join("bin/vi")).is_err());
    assert!(std::fs::symlink_metadata(target.join("bin/sh")).is_ok());
    // In the layer itself the whiteout is an overlay whiteout (0/0 char device).
    let top = &rootfs.lower_dirs[0];
    assert!(std::fs::symlink_metadata(top.join("data/gone"))
        .unwrap()
        .file_type()
        .is_char_device());

    // Writes go to the container's upper dir only.
    std::fs::write(target.join("data/new-file"), vec![7u8; 64 * 1024]).unwrap();
    std::fs::remove_file(target.join("data/keep")).unwrap();
    let upper = rootfs.upper_dir.clone().unwrap();
    assert!(upper.join("data/new-file").exists());
    assert!(!rootfs
        .lower_dirs
        .iter()
        .any(|l| l.join("data/new-file").exists()));
    let (bytes, inodes) = store.rootfs_usage("ctr-wh").unwrap();
    assert!(bytes >= 64 * 1024 && inodes >= 2, "usage {bytes} {inodes}");
    assert!(store.fs_info().container.used_bytes >= 64 * 1024);

    // A second container shares the layers.
    let target2 = tmp.path().join("bundle2/rootfs");
    store
        .create_rootfs(&img.id, "ctr-2", &target2, false)
        .await
        .unwrap();
    assert!(
        target2.join("data/keep").exists(),
        "containers must not see each other's writes"
    );
    assert!(store
        .create_rootfs(&img.id, "ctr-2", &target2, false)
        .await
        .is_err());

    // Removing the image keeps what containers use until they go.
    store.remove(&img.id).await.unwrap();
    assert!(store.list().is_empty());
    assert!(target2.join("bin/busybox").exists());
    store.remove_rootfs("ctr-wh", &target).await.unwrap();
    store.remove_rootfs("ctr-wh", &target).await.unwrap(); // idempotent
    assert!(!target.exists());
    assert!(store.rootfs_usage("ctr-wh").is_none());
    assert!(std::fs::read_to_string(target2.join("data/keep")).is_ok());
    store.remove_rootfs("ctr-2", &target2).await.unwrap();
    let root = store.root().to_path_buf();
    assert!(ls(&root.join("containers")).is_empty());
    assert!(
        ls(&root.join("layers")).is_empty(),
        "layers left: {:?}",
        ls(&root.join("layers"))
    );
    assert!(!peapod_image::is_mountpoint(&target2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn basic_auth_registry() {
    let reg = Registry::start_with_auth("alice", "s3cret").unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let mut layout = OciLayout::create(&tmp.path().join("layout")).unwrap();
    layout.add_image("v1", &ImageSpec::busybox()).unwrap();
    reg.push(layout.dir(), "v1", "private/bb:v1", PushFormat::Oci)
        .unwrap();

    let store = open_store(tmp.path()).await;
    let r = reg.reference("private/bb:v1");
    let e = store.pull(&r, None).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Unauthenticated, "{e}");
    let wrong = Credentials {
        username: "alice".into(),
        password: "nope".into(),
        ..Default::default()
    };
    let e = store.pull(&r, Some(&wrong)).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Unauthenticated, "{e}");
    assert!(store.list().is_empty());

    let good = Credentials {
        username: "alice".into(),
        password: "s3cret".into(),
        ..Default::default()
    };
    let img = store.pull(&r, Some(&good)).await.unwrap();
    store.remove(&img.id).await.unwrap();
    // The `auth` form (base64 of user:password) works as well.
    use base64::Engine as _;
    let auth = Credentials {
        auth: base64::engine::general_purpose::STANDARD.encode("alice:s3cret"),
        server_address: reg.addr(),
        ..Default::default()
    };
    assert_eq!(store.pull(&r, Some(&auth)).await.unwrap().id, img.id);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_tag_and_bad_reference_are_clear_errors() {
    let reg = Registry::start().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let mut layout = OciLayout::create(&tmp.path().join("layout")).unwrap();
    layout.add_image("v1", &ImageSpec::busybox()).unwrap();
    reg.push(layout.dir(), "v1", "bb:v1", PushFormat::Oci)
        .unwrap();
    let store = open_store(tmp.path()).await;

    let e = store
        .pull(&reg.reference("bb:nope"), None)
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotFound, "{e}");
    let msg = e.to_string();
    assert!(
        msg.contains("bb/manifests/nope") && msg.contains("MANIFEST_UNKNOWN"),
        "{msg}"
    );
    let e = store
        .pull(&reg.reference("no/such/repo:v1"), None)
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotFound, "{e}");
    let e = store.pull("Not A Reference", None).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
    // Nothing listens on port 1: unavailable, not a hang.
    let e = store.pull("127.0.0.1:1/x:y", None).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}");
    assert!(store.list().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn corrupted_blob_is_refused_and_nothing_is_stored() {
    let reg = Registry::start().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let mut layout = OciLayout::create(&tmp.path().join("layout")).unwrap();
    let spec = ImageSpec::busybox().layer(Layer::new(Compression::Gzip).file(
        "payload",
        vec![42u8; 100_000],
        0o644,
    ));
    let built = layout.add_image("v1", &spec).unwrap();
    reg.push(layout.dir(), "v1", "bad:v1", PushFormat::Oci)
        .unwrap();
    // Flip bytes in the middle of the last layer, same length, on the registry's disk.
    let data_path = reg.blob_data_path(built.layer_digests.last().unwrap());
    let mut data = std::fs::read(&data_path).unwrap();
    let mid = data.len() / 2;
    for b in &mut data[mid..mid + 16] {
        *b ^= 0xff;
    }
    std::fs::write(&data_path, &data).unwrap();

    let store = open_store(tmp.path()).await;
    let e = store
        .pull(&reg.reference("bad:v1"), None)
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Internal, "{e}");
    assert!(store.list().is_empty());
    let root = store.root().to_path_buf();
    assert!(
        ls(&root.join("layers")).is_empty(),
        "layers left: {:?}",
        ls(&root.join("layers"))
    );
    assert!(
        ls(&root.join("blobs/sha256")).is_empty(),
        "blobs left: {:?}",
        ls(&root.join("blobs/sha256"))
    );
    assert!(ls(&root.join("pulls")).is_empty());
    // Also after a restart: nothing is picked up.
    drop(store);
    let store = open_store(tmp.path()).await;
    assert!(store.list().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parallel_pulls_fetch_each_blob_once_and_report_progress() {
    let reg = Registry::start().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let mut layout = OciLayout::create(&tmp.path().join("layout")).unwrap();
    // Uncompressed, so the pull takes long enough to watch its progress.
    let big: Vec<u8> = (0..24 * 1024 * 1024u32)
        .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
        .collect();
    let spec = ImageSpec::busybox().layer(Layer::new(Compression::None).file("big", big, 0o644));
    let built = layout.add_image("v1", &spec).unwrap();
    assert_eq!(built.layer_digests.len(), 2);
    reg.push_exact(layout.dir(), "v1", "two:v1").unwrap();
    let before = reg.requests().len();

    let store = open_store(tmp.path()).await;
    let r = reg.reference("two:v1");
    let progress_file = store.progress_path(&r);
    let watcher = {
        let store = store.clone();
        let r = r.clone();
        let progress_file = progress_file.clone();
        tokio::spawn(async move {
            let mut seen_file = None;
            let mut seen_mem = None;
            for _ in 0..2000 {
                if seen_file.is_none() {
                    seen_file = peapod_image::read_progress(&progress_file);
                }
                if seen_mem.is_none() {
                    seen_mem = store.progress(&r);
                }
                if seen_file.is_some() && seen_mem.is_some() {
                    break;
                }
                tokio::time::sleep(std::time::Duration::from_millis(5)).await;
            }
            (seen_file, seen_mem)
        })
    };
    let (a, b) = tokio::join!(store.pull(&r, None), store.pull(&r, None));
    let (a, b) = (a.unwrap(), b.unwrap());
    assert_eq!(a.id, b.id);
    for d in built.layer_digests.iter().chain([&built.config_digest]) {
        assert_eq!(
            reg.blob_fetches(d),
            1,
            "blob {d} not fetched exactly once: {:?}",
            &reg.requests()[before..]
        );
    }
    let reqs = reg.requests();
    let mut blob_gets: HashMap<String, usize> = HashMap::new();
    for q in &reqs[before..] {
        if q.method == "GET" && q.path.contains("/blobs/") {
            *blob_gets.entry(q.path.clone()).or_default() += 1;
        }
    }
    assert_eq!(blob_gets.len(), 3, "{reqs:?}");
    assert!(
        blob_gets.values().all(|&n| n == 1),
        "a blob was fetched twice: {blob_gets:?}"
    );
    let (file, mem) = watcher.await.unwrap();
    let file = file.expect("progress file seen during the pull");
    assert_eq!(file.reference, r);
    assert_eq!(file.layers.len(), 2);
    assert!(file.total_bytes > 24 * 1024 * 1024);
    assert!(mem.is_some());
    assert!(
        !progress_file.exists(),
        "progress file must go when the pull ends"
    );
    assert!(store.progress(&r).is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mirrors_are_tried_in_order_before_the_registry() {
    let reg = Registry::start().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let mut layout = OciLayout::create(&tmp.path().join("layout")).unwrap();
    let built = layout.add_image("v1", &ImageSpec::busybox()).unwrap();
    reg.push(layout.dir(), "v1", "mirrored/bb:v1", PushFormat::Oci)
        .unwrap();
    // registry.invalid does not exist: only the mirrors can serve it; the
    // first mirror is dead, the second is our registry.
    let mut mirrors = HashMap::new();
    mirrors.insert(
        "registry.invalid".to_string(),
        vec![
            "http://127.0.0.1:1".to_string(),
            format!("http://{}", reg.addr()),
        ],
    );
    let store = open_store_with(
        tmp.path(),
        RegistryConfig {
            insecure: vec![],
            mirrors,
            ..Default::default()
        },
    )
    .await;
    let img = store
        .pull("registry.invalid/mirrored/bb:v1", None)
        .await
        .unwrap();
    assert_eq!(img.id, built.config_digest);
    assert_eq!(img.repo_tags, vec!["registry.invalid/mirrored/bb:v1"]);
    assert!(reg
        .requests()
        .iter()
        .any(|q| q.path.contains("ns=registry.invalid")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn state_and_rootfs_survive_a_restart() {
    let reg = Registry::start().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let _mounts = MountGuard(tmp.path().to_path_buf());
    let mut layout = OciLayout::create(&tmp.path().join("layout")).unwrap();
    layout
        .add_image(
            "v1",
            &ImageSpec::busybox()
                .user("app")
                .passwd_line("app:x:1000:1000::/home/app:/bin/sh")
                .group_line("app:x:1000:")
                .group_line("audio:x:29:app"),
        )
        .unwrap();
    reg.push(layout.dir(), "v1", "restart:v1", PushFormat::Oci)
        .unwrap();
    let target = tmp.path().join("rootfs");
    let id = {
        let store = open_store(tmp.path()).await;
        let img = store
            .pull(&reg.reference("restart:v1"), None)
            .await
            .unwrap();
        assert_eq!(
            peapod_image::image_user(&img.config.user),
            (None, "app".to_string())
        );
        store
            .create_rootfs(&img.id, "survivor", &target, false)
            .await
            .unwrap();
        // The image's accounts are in its root filesystem, where the daemon reads them.
        let read = |rel| peapod_host::rootfs::read_account_file(&target, rel).unwrap();
        assert!(read("etc/passwd")
            .unwrap()
            .contains("app:x:1000:1000::/home/app:/bin/sh"));
        assert!(read("etc/group").unwrap().contains("audio:x:29:app"));
        std::fs::write(target.join("tmp/x"), b"x").unwrap();
        img.id
    };
    let store = open_store(tmp.path()).await;
    assert_eq!(store.resolve(&reg.reference("restart:v1")).unwrap().id, id);
    assert!(store.rootfs_usage("survivor").is_some());
    store.remove(&id).await.unwrap();
    assert!(target.join("bin/busybox").exists());
    store.remove_rootfs("survivor", &target).await.unwrap();
    assert!(!target.exists());
    assert!(ls(&store.root().join("layers")).is_empty());
}

/// A registry that answers the manifest request with headers and then one byte every 100 ms,
/// for ever: never idle long enough for the idle timeout, so only the overall pull deadline
/// ends the pull, with an error that names the setting; the store keeps nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trickling_registry_meets_the_overall_pull_deadline() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move {
        loop {
            let Ok((mut conn, _)) = listener.accept().await else {
                return;
            };
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                let _ = conn.read(&mut buf).await;
                let head = "HTTP/1.1 200 OK\r\nContent-Type: application/vnd.oci.image.manifest.v1+json\r\nContent-Length: 1000000\r\n\r\n";
                if conn.write_all(head.as_bytes()).await.is_err() {
                    return;
                }
                while conn.write_all(b" ").await.is_ok() {
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                }
            });
        }
    });
    let tmp = tempfile::tempdir().unwrap();
    let store = open_store_with(
        tmp.path(),
        RegistryConfig {
            pull_timeout: Some(std::time::Duration::from_secs(2)),
            idle_timeout: std::time::Duration::from_secs(30),
            ..Default::default()
        },
    )
    .await;
    let reference = format!("{addr}/trickle:v1");
    // The bound only keeps a broken build from hanging the suite; the assertion is the error.
    let err = tokio::time::timeout(
        std::time::Duration::from_secs(50),
        store.pull(&reference, None),
    )
    .await
    .expect("the pull deadline (2 s) ended the pull before this bound")
    .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
    let msg = err.to_string();
    assert!(
        msg.contains("pull_timeout_seconds") && msg.contains("trickle"),
        "{msg}"
    );
    assert!(store.list().is_empty(), "a timed-out pull stores no image");
    server.abort();
}
