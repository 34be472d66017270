//! Registry faults, through PullImage against a misbehaving registry of the test's own
//! (tests/src/fault_registry.rs): a connection reset in the middle of a layer (resumed with a
//! Range request, or from the start when ranges are ignored), 503 and 429 with Retry-After
//! (bounded retries), a registry that stays down, a blob whose digest does not match, a
//! registry that never answers, and concurrent pulls of one image. Each shows the error (or
//! the success), that nothing half-made is left in the image store, and that the daemon
//! answered meanwhile.

use e2e::fault_registry::{FaultRegistry, Faults};
use e2e::pods::{busybox, sh};
use e2e::{DaemonOptions, TestDaemon};
use peapod_image::testsupport::{BuiltImage, OciLayout};
use peapod_proto::v1 as cri;
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

struct Layout {
    _dir: tempfile::TempDir,
    path: std::path::PathBuf,
    image: BuiltImage,
}

fn layout() -> Layout {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("layout");
    let mut l = OciLayout::create(&path).unwrap();
    // An uncompressed last layer: a changed byte in it is caught by the digest alone (in a
    // gzip layer the gzip checksum catches it first).
    let spec =
        busybox().layer(
            peapod_image::testsupport::Layer::new(peapod_image::testsupport::Compression::None)
                .file("etc/motd", vec![b'x'; 4096], 0o644),
        );
    let image = l.add_image("t", &spec).unwrap();
    Layout {
        _dir: dir,
        path,
        image,
    }
}

async fn pull(d: &mut TestDaemon, reference: &str) -> Result<String, tonic::Status> {
    d.cri
        .image
        .pull_image(cri::PullImageRequest {
            image: Some(cri::ImageSpec {
                image: reference.into(),
                ..Default::default()
            }),
            ..Default::default()
        })
        .await
        .map(|r| r.into_inner().image_ref)
}

/// Everything in the image store's content directories (layers, blobs, temporaries).
fn store_content(d: &TestDaemon) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for sub in ["layers", "blobs/sha256", "pulls"] {
        if let Ok(rd) = std::fs::read_dir(d.root.join("image").join(sub)) {
            for e in rd.flatten() {
                out.insert(format!("{sub}/{}", e.file_name().to_string_lossy()));
            }
        }
    }
    out
}

async fn answers(d: &mut TestDaemon) {
    d.cri
        .runtime
        .version(cri::VersionRequest::default())
        .await
        .expect("the daemon answers");
}

/// The pulled image runs: its layers are whole.
async fn runs(d: &mut TestDaemon, image: &str) {
    let pod = d.run_pod("check").await;
    let c = d.run_container(&pod, sh("c", image, "sleep 3600")).await;
    let out = d
        .cri
        .runtime
        .exec_sync(cri::ExecSyncRequest {
            container_id: c,
            cmd: vec!["sh".into(), "-c".into(), "echo whole".into()],
            timeout: 10,
        })
        .await
        .expect("ExecSync")
        .into_inner();
    assert_eq!(out.stdout, b"whole\n");
    d.remove_pod(&pod).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_reset_in_the_middle_of_a_layer_is_resumed() {
    let mut d = TestDaemon::start("rreset").await;
    let l = layout();
    let layer = l.image.layer_digests[0].clone();
    for ignore_range in [false, true] {
        let reg = FaultRegistry::start(
            &l.path,
            Faults {
                cut_blobs_after: Some(64 << 10),
                ignore_range,
                ..Default::default()
            },
        )
        .await;
        let image = reg.reference(if ignore_range { "noranges" } else { "ranges" });
        let started = Instant::now();
        pull(&mut d, &image)
            .await
            .unwrap_or_else(|e| panic!("the pull survives the reset: {e}\n{}", d.log()));
        println!(
            "pull with a reset at 64 KiB of the layer (ranges {}): {:?}, {} GETs of the layer",
            if ignore_range { "ignored" } else { "honoured" },
            started.elapsed(),
            reg.requests_to(&layer)
        );
        assert_eq!(reg.requests_to(&layer), 2, "the cut GET and one resumption");
        assert!(d
            .log()
            .contains("layer download cut; resuming where it stopped"));
        runs(&mut d, &image).await;
        d.cri
            .image
            .remove_image(cri::RemoveImageRequest {
                image: Some(cri::ImageSpec {
                    image: image.clone(),
                    ..Default::default()
                }),
            })
            .await
            .expect("RemoveImage");
    }
    assert!(d.leftovers().is_empty(), "{:#?}", d.leftovers());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn busy_registries_503_and_429_with_retry_after_are_retried_with_back_off() {
    let mut d = TestDaemon::start("rbusy").await;
    let l = layout();
    for status in [503u16, 429] {
        let reg = FaultRegistry::start(
            &l.path,
            Faults {
                busy_first: 3,
                busy_status: status,
                busy_retry_after: Some(1),
                ..Default::default()
            },
        )
        .await;
        let image = reg.reference(&format!("busy{status}"));
        let started = Instant::now();
        let call = {
            let mut cri = d.cri.clone();
            let image = image.clone();
            tokio::spawn(async move {
                cri.image
                    .pull_image(cri::PullImageRequest {
                        image: Some(cri::ImageSpec {
                            image,
                            ..Default::default()
                        }),
                        ..Default::default()
                    })
                    .await
            })
        };
        tokio::time::sleep(Duration::from_millis(300)).await;
        answers(&mut d).await;
        call.await
            .unwrap()
            .unwrap_or_else(|e| panic!("retried to success after {status}s: {e}"));
        let took = started.elapsed();
        assert!(
            took >= Duration::from_millis(2900),
            "three Retry-After: 1 waits: {took:?}"
        );
        println!("pull through three {status}s with Retry-After 1: {took:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registry_that_stays_down_fails_the_pull_after_bounded_retries_leaving_nothing() {
    let mut d = TestDaemon::start("rdown").await;
    let l = layout();
    let reg = FaultRegistry::start(
        &l.path,
        Faults {
            always_status: Some(503),
            ..Default::default()
        },
    )
    .await;
    let before = store_content(&d);
    let started = Instant::now();
    let err = pull(&mut d, &reg.reference("down"))
        .await
        .expect_err("a registry that stays down");
    let took = started.elapsed();
    println!("pull from a registry answering 503 to all: {err:?} after {took:?}");
    assert_eq!(err.code(), tonic::Code::Unavailable, "{err:?}");
    assert!(
        err.message().contains("503") && err.message().contains("after 5 tries"),
        "{err:?}"
    );
    assert!(took < Duration::from_secs(30), "bounded: {took:?}");
    assert_eq!(store_content(&d), before, "nothing stored");
    answers(&mut d).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_layer_or_manifest_whose_digest_does_not_match_is_refused_and_nothing_is_stored() {
    let mut d = TestDaemon::start("rdigest").await;
    let l = layout();
    let before = store_content(&d);
    for corrupt in [
        l.image.layer_digests.last().unwrap().clone(),
        l.image.layer_digests[0].clone(),
        l.image.config_digest.clone(),
        l.image.manifest_digest.clone(),
    ] {
        let reg = FaultRegistry::start(
            &l.path,
            Faults {
                corrupt: vec![corrupt.clone()],
                ..Default::default()
            },
        )
        .await;
        // The manifest is checked when pulled by digest.
        let image = if corrupt == l.image.manifest_digest {
            format!("127.0.0.1:{}/bad@{corrupt}", reg.port)
        } else {
            reg.reference("bad")
        };
        let err = pull(&mut d, &image).await.expect_err("refused");
        println!("corrupt {corrupt}: {}", err.message());
        // A gzip layer's own checksum may catch the change before the digest does.
        assert!(
            err.message().contains("digest") || err.message().contains("checksum"),
            "{err:?}"
        );
        if corrupt == *l.image.layer_digests.last().unwrap() {
            assert!(err.message().contains("digest mismatch"), "{err:?}");
        }
        assert_eq!(store_content(&d), before, "nothing stored for {corrupt}");
        let listed = d
            .cri
            .image
            .list_images(cri::ListImagesRequest { filter: None })
            .await
            .unwrap()
            .into_inner()
            .images;
        assert!(
            listed
                .iter()
                .all(|i| !i.repo_tags.iter().any(|t| t.contains("/bad"))),
            "no image recorded: {listed:?}"
        );
    }
    // The same image from a good registry: pulled whole.
    let good = FaultRegistry::start(&l.path, Faults::default()).await;
    pull(&mut d, &good.reference("good")).await.expect("pull");
    runs(&mut d, &good.reference("good")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registry_that_accepts_and_never_answers_ends_at_the_idle_timeout() {
    let mut d = TestDaemon::start_with(
        "rsilent",
        DaemonOptions {
            extra_config: "[registry]\nidle_timeout_seconds = 2\n".into(),
            ..Default::default()
        },
    )
    .await;
    let l = layout();
    let reg = FaultRegistry::start(
        &l.path,
        Faults {
            never_answer: true,
            ..Default::default()
        },
    )
    .await;
    let before = store_content(&d);
    let started = Instant::now();
    let call = {
        let mut cri = d.cri.clone();
        let image = reg.reference("silent");
        tokio::spawn(async move {
            cri.image
                .pull_image(cri::PullImageRequest {
                    image: Some(cri::ImageSpec {
                        image,
                        ..Default::default()
                    }),
                    ..Default::default()
                })
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    answers(&mut d).await;
    let err = call.await.unwrap().expect_err("no answer");
    let took = started.elapsed();
    println!("pull from a registry that never answers: {err:?} after {took:?}");
    assert!(took < Duration::from_secs(20), "{took:?}");
    assert_eq!(err.code(), tonic::Code::Unavailable, "{err:?}");
    assert!(
        err.message().contains(&reg.port.to_string()),
        "names the registry: {err:?}"
    );
    assert_eq!(store_content(&d), before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_pulls_of_one_image_share_one_download() {
    let mut d = TestDaemon::start("rshare").await;
    let l = layout();
    let reg = FaultRegistry::start(&l.path, Faults::default()).await;
    let image = reg.reference("shared");
    let mut calls = Vec::new();
    for _ in 0..4 {
        let mut cri = d.cri.clone();
        let image = image.clone();
        calls.push(tokio::spawn(async move {
            cri.image
                .pull_image(cri::PullImageRequest {
                    image: Some(cri::ImageSpec {
                        image,
                        ..Default::default()
                    }),
                    ..Default::default()
                })
                .await
                .map(|r| r.into_inner().image_ref)
        }));
    }
    let mut refs = BTreeSet::new();
    for c in calls {
        refs.insert(c.await.unwrap().expect("each pull succeeds"));
    }
    assert_eq!(refs.len(), 1, "one image: {refs:?}");
    for layer in &l.image.layer_digests {
        assert_eq!(reg.requests_to(layer), 1, "layer {layer} downloaded once");
    }
    runs(&mut d, &image).await;
}
