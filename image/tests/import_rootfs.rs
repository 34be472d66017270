//! Imports (docker save, OCI layout tars) and root filesystems: many layers,
//! read-only, local images. No registry needed.

mod common;

use common::*;
use peapod_image::testsupport::*;
use peapod_image::{ErrorKind, ImageConfig};
use std::io::Write;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn import_docker_save_archive_with_tags() {
    let tmp = tempfile::tempdir().unwrap();
    let _mounts = MountGuard(tmp.path().to_path_buf());
    let a = ImageSpec::busybox().cmd(&["echo", "a"]);
    let b = ImageSpec::busybox().cmd(&["echo", "b"]).layer(
        Layer::new(Compression::None)
            .file("b-file", "b", 0o644)
            .whiteout("bin/vi"),
    );
    let archive = tmp.path().join("save.tar");
    let built = docker_archive(
        &archive,
        &[
            (&["busybox:a", "example.com/team/a:1"], &a),
            (&["b:latest"], &b),
        ],
    )
    .unwrap();

    let store = open_store(tmp.path()).await;
    let imgs = store.import(&archive).await.unwrap();
    assert_eq!(imgs.len(), 2);
    assert_eq!(imgs[0].id, built[0].config_digest);
    assert_eq!(
        imgs[0].repo_tags,
        vec!["docker.io/library/busybox:a", "example.com/team/a:1"]
    );
    assert_eq!(imgs[1].repo_tags, vec!["docker.io/library/b:latest"]);
    assert_eq!(imgs[1].config.cmd, vec!["echo", "b"]);
    assert_eq!(store.resolve("b").unwrap().id, built[1].config_digest);
    // Both share the busybox layer: it is unpacked once.
    assert_eq!(ls(&store.root().join("layers")).len(), 2);

    // Importing again changes nothing.
    let again = store.import(&archive).await.unwrap();
    assert_eq!(again.len(), 2);
    assert_eq!(store.list().len(), 2);

    let target = tmp.path().join("rootfs");
    store
        .create_rootfs("b", "cb", &target, false)
        .await
        .unwrap();
    assert_eq!(std::fs::read(target.join("b-file")).unwrap(), b"b");
    assert!(std::fs::symlink_metadata(target.join("bin/vi")).is_err());
    // The writable layer is volatile: its unmount syncs nothing.
    assert!(volatile(&target), "{}", super_options(&target));
    store.remove_rootfs("cb", &target).await.unwrap();
}

/// Whether the overlay at `target` is volatile (Linux 6.12 and later show it as
/// `fsync=volatile`).
fn volatile(target: &std::path::Path) -> bool {
    super_options(target)
        .split(',')
        .any(|o| o == "volatile" || o == "fsync=volatile")
}

/// The superblock options of the filesystem mounted at `target`, from mountinfo.
fn super_options(target: &std::path::Path) -> String {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let target = target.to_str().unwrap();
    let line = info
        .lines()
        .rfind(|l| l.split(' ').nth(4) == Some(target))
        .unwrap_or_else(|| panic!("{target} is not mounted"));
    line.split(' ').next_back().unwrap().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn import_oci_layout_archives() {
    let tmp = tempfile::tempdir().unwrap();
    let spec = ImageSpec::busybox()
        .env("X=1")
        .layer(Layer::new(Compression::Zstd).file("z", "z", 0o644));
    // Named through the containerd annotation.
    let named = tmp.path().join("named.tar");
    let built = oci_archive(&named, "registry.example/app:2", &spec).unwrap();
    // gzip-compressed archive of the same.
    let gz = tmp.path().join("named.tar.gz");
    {
        let mut enc = flate2::write::GzEncoder::new(
            std::fs::File::create(&gz).unwrap(),
            flate2::Compression::fast(),
        );
        enc.write_all(&std::fs::read(&named).unwrap()).unwrap();
        enc.finish().unwrap();
    }
    // A layout that only carries a tag (as `skopeo copy oci:DIR:latest` writes).
    let mut layout = OciLayout::create(&tmp.path().join("layout")).unwrap();
    let other = ImageSpec::busybox().env("Y=2");
    let built_other = layout.add_image("latest", &other).unwrap();
    let tag_only = tmp.path().join("tag-only.tar");
    layout.to_tar(&tag_only).unwrap();

    let store = open_store(tmp.path()).await;
    let imgs = store.import(&named).await.unwrap();
    assert_eq!(imgs.len(), 1);
    assert_eq!(imgs[0].id, built.config_digest);
    assert_eq!(imgs[0].repo_tags, vec!["registry.example/app:2"]);
    assert_eq!(
        imgs[0].repo_digests,
        vec![format!("registry.example/app@{}", built.manifest_digest)]
    );
    store.remove(&imgs[0].id).await.unwrap();
    assert!(store.list().is_empty());

    let imgs = store.import(&gz).await.unwrap();
    assert_eq!(imgs[0].id, built.config_digest);
    assert!(
        ls(store.root()).iter().all(|n| !n.starts_with(".tmp")),
        "temp archive left behind"
    );

    let imgs = store.import(&tag_only).await.unwrap();
    assert_eq!(imgs.len(), 1);
    assert_eq!(imgs[0].id, built_other.config_digest);
    assert!(imgs[0].repo_tags.is_empty());
    assert!(store.resolve(&built_other.config_digest[7..19]).is_some());

    // Not an image archive at all.
    let junk = tmp.path().join("junk.tar");
    let mut b = tar::Builder::new(std::fs::File::create(&junk).unwrap());
    let mut h = tar::Header::new_gnu();
    h.set_size(2);
    h.set_mode(0o644);
    b.append_data(&mut h, "hello.txt", &b"hi"[..]).unwrap();
    b.into_inner().unwrap();
    let e = store.import(&junk).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Internal, "{e}");
    let e = store
        .import(&tmp.path().join("missing.tar"))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("missing.tar"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tampered_archive_layer_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let spec = ImageSpec::busybox().layer(Layer::new(Compression::None).file(
        "payload",
        vec![b'a'; 4096],
        0o644,
    ));
    let archive = tmp.path().join("img.tar");
    let built = oci_archive(&archive, "example.com/t:1", &spec).unwrap();
    // Change one byte of the payload inside the archive (same length).
    let mut data = std::fs::read(&archive).unwrap();
    let needle = vec![b'a'; 4096];
    let pos = data.windows(4096).position(|w| w == &needle[..]).unwrap();
    data[pos + 100] = b'b';
    std::fs::write(&archive, &data).unwrap();

    let store = open_store(tmp.path()).await;
    let e = store.import(&archive).await.unwrap_err();
    assert!(e.to_string().contains("digest mismatch"), "{e}");
    assert!(store.list().is_empty());
    // The busybox layer was fine and committed, but nothing refers to it: it
    // goes too, and no temp dir is left.
    assert!(
        ls(&store.root().join("layers")).is_empty(),
        "{:?}",
        ls(&store.root().join("layers"))
    );
    let _ = built;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_layers_exceed_the_mount_option_page() {
    let tmp = tempfile::tempdir().unwrap();
    let _mounts = MountGuard(tmp.path().to_path_buf());
    // A long store path and 80 layers: ~9 KiB of lowerdir options, more than a page.
    let mut spec = ImageSpec::busybox();
    for i in 0..80 {
        spec = spec.layer(Layer::new(Compression::Gzip).file(
            &format!("layers/{i}"),
            format!("{i}"),
            0o644,
        ));
    }
    // and the last layer wins over the first for a shared path
    spec = spec
        .layer(Layer::new(Compression::None).file("shared", "first", 0o644))
        .layer(Layer::new(Compression::None).file("shared", "last", 0o644));
    let archive = tmp.path().join("many.tar");
    oci_archive(&archive, "example.com/many:1", &spec).unwrap();
    let deep = tmp
        .path()
        .join("a-rather-long-directory-name-for-the-store-root-to-push-paths-up");
    std::fs::create_dir_all(&deep).unwrap();
    let store = open_store(&deep).await;
    let img = store.import(&archive).await.unwrap().remove(0);
    let target = tmp.path().join("rootfs");
    let rootfs = store
        .create_rootfs(&img.id, "many", &target, false)
        .await
        .unwrap();
    assert_eq!(rootfs.lower_dirs.len(), 83);
    let opts: usize = rootfs
        .lower_dirs
        .iter()
        .map(|p| p.as_os_str().len() + 1)
        .sum();
    assert!(opts > 4096, "test must exceed a page of options ({opts})");
    assert_eq!(ls(&target.join("layers")).len(), 80);
    assert_eq!(std::fs::read(target.join("shared")).unwrap(), b"last");
    std::fs::write(target.join("written"), b"w").unwrap();
    assert!(rootfs.upper_dir.unwrap().join("written").exists());
    // Through the new mount API too.
    assert!(volatile(&target), "{}", super_options(&target));
    store.remove_rootfs("many", &target).await.unwrap();
    assert!(!peapod_image::is_mountpoint(&target));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readonly_rootfs_single_and_multi_layer() {
    let tmp = tempfile::tempdir().unwrap();
    let _mounts = MountGuard(tmp.path().to_path_buf());
    let store = open_store(tmp.path()).await;
    // One layer: bind-mounted read-only.
    let pause = store
        .add_local_image(
            "registry.k8s.io/pause:3.10",
            &[("pause".into(), std::fs::read(BUSYBOX).unwrap(), 0o755)],
            ImageConfig {
                entrypoint: vec!["/pause".into()],
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(pause.repo_tags, vec!["registry.k8s.io/pause:3.10"]);
    let again = store
        .add_local_image(
            "registry.k8s.io/pause:3.10",
            &[("pause".into(), std::fs::read(BUSYBOX).unwrap(), 0o755)],
            ImageConfig {
                entrypoint: vec!["/pause".into()],
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(again.id, pause.id, "a local image is deterministic");
    let t1 = tmp.path().join("ro1");
    let r1 = store
        .create_rootfs(&pause.id, "ro-1", &t1, true)
        .await
        .unwrap();
    assert!(r1.upper_dir.is_none());
    assert!(t1.join("pause").exists());
    let e = std::fs::write(t1.join("x"), b"x").unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EROFS));
    assert_eq!(store.rootfs_usage("ro-1"), Some((0, 0)));

    // Several layers: a lower-only overlay, read-only.
    let archive = tmp.path().join("img.tar");
    oci_archive(
        &archive,
        "example.com/ro:1",
        &ImageSpec::busybox().layer(Layer::new(Compression::Gzip).file("top", "t", 0o644)),
    )
    .unwrap();
    let img = store.import(&archive).await.unwrap().remove(0);
    let t2 = tmp.path().join("ro2");
    store
        .create_rootfs(&img.id, "ro-2", &t2, true)
        .await
        .unwrap();
    assert!(t2.join("top").exists() && t2.join("bin/busybox").exists());
    let e = std::fs::write(t2.join("x"), b"x").unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EROFS));

    // Errors leave nothing behind.
    let e = store
        .create_rootfs("no-such-image", "c3", &tmp.path().join("ro3"), false)
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotFound);
    let e = store
        .create_rootfs(&img.id, "../evil", &tmp.path().join("ro3"), false)
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    assert_eq!(ls(&store.root().join("containers")), vec!["ro-1", "ro-2"]);

    store.remove_rootfs("ro-1", &t1).await.unwrap();
    store.remove_rootfs("ro-2", &t2).await.unwrap();
    assert!(ls(&store.root().join("containers")).is_empty());
    assert!(!t1.exists() && !t2.exists());
}
