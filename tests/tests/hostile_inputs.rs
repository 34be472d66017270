//! Hostile input, one row per finding of the review (issue 10, "Hardening found in review"):
//! each row feeds the real daemon something an image, a registry name or a streaming client
//! can send, asserts the clear error (or the safe mode), and that the daemon still answers
//! Version afterwards. One daemon, one registry, one pod for all rows.

use e2e::pods::{busybox, sh, Images, Pod};
use e2e::TestDaemon;
use peapod_image::testsupport::{Compression, Layer};
use peapod_proto::v1 as cri;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::Path;
use std::time::{Duration, Instant};

/// Long enough for anything the daemon does here; a hang (the bug) goes far past it.
const BOUND: Duration = Duration::from_secs(30);

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p)
        .unwrap_or_else(|e| panic!("stat {}: {e}", p.display()))
        .permissions()
        .mode()
        & 0o7777
}

/// Version answers promptly: the row left the daemon serving.
async fn still_answers(d: &mut TestDaemon, row: &str) {
    let v = tokio::time::timeout(
        Duration::from_secs(5),
        d.cri.runtime.version(cri::VersionRequest::default()),
    )
    .await
    .unwrap_or_else(|_| panic!("row {row}: Version did not answer within 5 s\n{}", d.log()))
    .unwrap_or_else(|e| panic!("row {row}: Version failed: {e}"));
    assert_eq!(v.into_inner().runtime_name, "peapod", "row {row}");
}

fn create_request(pod: &Pod, config: cri::ContainerConfig) -> cri::CreateContainerRequest {
    cri::CreateContainerRequest {
        pod_sandbox_id: pod.id.clone(),
        config: Some(config),
        sandbox_config: Some(pod.config.clone()),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_inputs_get_clear_errors_and_the_daemon_keeps_answering() {
    let mut d = TestDaemon::start("hostile").await;
    let images = Images::start();
    let image = images.push("busybox:hostile", &busybox());
    let fifo_image = images.push(
        "fifo-accounts:v1",
        &busybox().layer(
            Layer::new(Compression::Gzip)
                .fifo("etc/passwd")
                .fifo("etc/group"),
        ),
    );
    let signal_image = images.push(
        "bad-signal:v1",
        &busybox().stop_signal("SIGRTMIN+2147483647"),
    );
    for r in [&image, &fifo_image, &signal_image] {
        d.pull(r).await;
    }
    let pod = d.run_pod("hostile-pod").await;

    // Row: the CRI socket is 0660 and no staging directory of its bind is left behind.
    {
        let meta = std::fs::metadata(&d.socket).unwrap();
        assert!(meta.file_type().is_socket());
        assert_eq!(mode(&d.socket), 0o660, "row socket-mode");
        let stray: Vec<_> = std::fs::read_dir(&d.state)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with(".b"))
            .collect();
        assert!(stray.is_empty(), "row socket-mode: {stray:?}");
        still_answers(&mut d, "socket-mode").await;
    }

    // Row: an image whose /etc/passwd and /etc/group are FIFOs. Three CreateContainer calls at
    // once (the report's reproduction) each fail with InvalidArgument naming the file, well
    // within the bound, and Version answers while they run.
    {
        let started = Instant::now();
        let mut calls = Vec::new();
        for i in 0..3 {
            let mut cri = d.cri.clone();
            let req = create_request(&pod, sh(&format!("fifo{i}"), &fifo_image, "true"));
            calls.push(tokio::spawn(async move {
                tokio::time::timeout(BOUND, cri.runtime.create_container(req)).await
            }));
        }
        still_answers(&mut d, "fifo-passwd (during)").await;
        for call in calls {
            let status = call
                .await
                .unwrap()
                .unwrap_or_else(|_| panic!("row fifo-passwd: CreateContainer hung\n{}", d.log()))
                .expect_err("row fifo-passwd: CreateContainer succeeded");
            assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");
            assert!(
                status.message().contains("/etc/passwd") && status.message().contains("FIFO"),
                "row fifo-passwd: {}",
                status.message()
            );
        }
        println!(
            "fifo-passwd: three CreateContainer calls failed in {:?}",
            started.elapsed()
        );
        still_answers(&mut d, "fifo-passwd").await;
    }

    // Row: an image whose StopSignal overflows the RTMIN arithmetic.
    {
        let status = d
            .cri
            .runtime
            .create_container(create_request(&pod, sh("sig", &signal_image, "true")))
            .await
            .expect_err("row stop-signal: CreateContainer succeeded");
        assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");
        assert!(
            status.message().contains("StopSignal")
                && status.message().contains("SIGRTMIN+2147483647"),
            "row stop-signal: {}",
            status.message()
        );
        still_answers(&mut d, "stop-signal").await;
    }

    // Row: a registry host that merely starts with "127." is not loopback: it is spoken to
    // over HTTPS (and here, with no DNS, not reached at all), never over plain HTTP.
    {
        let status = d
            .cri
            .image
            .pull_image(cri::PullImageRequest {
                image: Some(cri::ImageSpec {
                    image: "127.evil.example:5000/trap:v1".into(),
                    ..Default::default()
                }),
                ..Default::default()
            })
            .await
            .expect_err("row 127-prefix: pull succeeded");
        let msg = status.message();
        assert!(
            msg.contains("https://127.evil.example:5000/"),
            "row 127-prefix: {msg}"
        );
        assert!(!msg.contains("http://127.evil"), "row 127-prefix: {msg}");
        still_answers(&mut d, "127-prefix").await;
    }

    // A container for the rows that need one running (streaming, directory modes).
    let app = d.run_container(&pod, sh("app", &image, "sleep 300")).await;

    // Row: a SPDY header block whose one NUL-split value would copy a 128 KiB name 128 Ki
    // times (16 GiB) is refused: the stream is never accepted and the connection ends.
    {
        let url = d
            .cri
            .runtime
            .exec(cri::ExecRequest {
                container_id: app.clone(),
                cmd: vec!["true".into()],
                stdout: true,
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner()
            .url;
        let opts = peapod_streaming::client::ClientOptions::default();
        let (conn, _incoming, _) =
            peapod_streaming::client::upgrade_spdy(&url, &["v4.channel.k8s.io"], &opts)
                .await
                .expect("row spdy-bomb: upgrade");
        let bomb = peapod_streaming::spdy::Headers::new()
            .with("streamtype", "error")
            .with(&"n".repeat(128 * 1024), "\0".repeat(128 * 1024 - 64));
        let opened = tokio::time::timeout(BOUND, conn.open_stream(bomb)).await;
        assert!(
            !matches!(opened, Ok(Ok(_))),
            "row spdy-bomb: the server accepted the stream"
        );
        tokio::time::timeout(BOUND, conn.closed())
            .await
            .expect("row spdy-bomb: the server kept the connection open");
        still_answers(&mut d, "spdy-bomb").await;
        // The daemon is still whole: a fair exec on a new connection works.
        let out = d
            .cri
            .runtime
            .exec_sync(cri::ExecSyncRequest {
                container_id: app.clone(),
                cmd: vec!["echo".into(), "alive".into()],
                timeout: 10,
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(String::from_utf8_lossy(&out.stdout), "alive\n");
    }

    // Row: directories holding layers, root filesystems and upper directories are 0700 (a
    // local user must not reach setuid binaries or device nodes in image layers); the state
    // directory's parents stay traversable (0711), not listable.
    {
        for dir in [d.root.join("image"), d.root.join("containers")] {
            assert_eq!(mode(&dir), 0o700, "row dir-modes: {}", dir.display());
        }
        for dir in [d.root.clone(), d.state.clone(), d.state.join("containers")] {
            assert_eq!(mode(&dir), 0o711, "row dir-modes: {}", dir.display());
        }
        let bundle = d.state.join("containers").join(&app);
        assert_eq!(mode(&bundle), 0o700, "row dir-modes: bundle");
        assert!(
            e2e::host::mounts_under(&bundle)
                .iter()
                .any(|m| m.ends_with("rootfs")),
            "the container's rootfs is mounted under its 0700 bundle"
        );
        let image_containers = d.root.join("image").join("containers");
        for e in std::fs::read_dir(&image_containers).unwrap().flatten() {
            assert_eq!(
                mode(&e.path()),
                0o700,
                "row dir-modes: {}",
                e.path().display()
            );
        }
        still_answers(&mut d, "dir-modes").await;
    }

    // Row: files containers must read keep explicit modes under the daemon's umask: a
    // container running as a non-root user reads its hosts, resolv.conf and /, and writes
    // /tmp.
    {
        let mut c = sh(
            "nonroot",
            &image,
            "id -u; cat /etc/hosts /etc/resolv.conf >/dev/null && ls / >/dev/null && \
             touch /tmp/x && echo readable",
        );
        c.linux.as_mut().unwrap().security_context = Some(cri::LinuxContainerSecurityContext {
            run_as_user: Some(cri::Int64Value { value: 4242 }),
            ..Default::default()
        });
        let id = d.run_container(&pod, c).await;
        let st = d.wait_exited(&id, BOUND).await;
        let out = e2e::pods::stdout_text(&e2e::pods::read_log(Path::new(&st.log_path)));
        assert_eq!(
            out, "4242\nreadable\n",
            "row non-root: exit {}",
            st.exit_code
        );
        still_answers(&mut d, "non-root").await;
    }

    d.remove_pod(&pod).await;
    assert!(d.leftovers().is_empty(), "{:#?}", d.leftovers());
}
