//! What cri-api v0.37 (Kubernetes 1.37) added, against the real daemon, runc and CNI: the
//! Stream* list calls, UpdatePodSandboxResources, CheckpointPod/RestorePod, stop signals,
//! bind mount options, env values as bytes, PSI in the stats, the runtime features, and
//! AuthConfig's secrets kept out of the log.

use e2e::pods::{busybox, sh, Images, Pod};
use e2e::TestDaemon;
use peapod_image::testsupport::{docker_archive, Compression, ImageSpec, Layer, Registry};
use peapod_proto::v1 as cri;
use std::collections::HashMap;
use std::time::{Duration, Instant};
use tonic::Code;

const WAIT: Duration = Duration::from_secs(30);
/// The daemon's batch size in the stream test: small, so that a few real objects make
/// several messages.
const BATCH: usize = 3;

/// Every message of a stream, each checked to hold 1..=BATCH items, then its end.
async fn collect<T>(mut stream: tonic::Streaming<T>, len: impl Fn(&T) -> usize) -> Vec<T> {
    let mut out = Vec::new();
    while let Some(msg) = stream
        .message()
        .await
        .unwrap_or_else(|e| panic!("stream: {e}"))
    {
        let n = len(&msg);
        assert!((1..=BATCH).contains(&n), "a message of {n} items");
        out.push(msg);
    }
    out
}

/// Restarts `d` with `stream_batch_items = BATCH` (a top-level key: it goes first).
async fn with_small_batches(d: &mut TestDaemon) {
    let path = d.config_path();
    let text = std::fs::read_to_string(&path).expect("read config");
    std::fs::write(&path, format!("stream_batch_items = {BATCH}\n{text}")).expect("config");
    d.restart().await;
}

fn tier(tier: &'static str) -> impl FnOnce(&mut cri::PodSandboxConfig) {
    move |c| {
        c.labels.insert("tier".into(), tier.into());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stream_calls_return_their_list_calls_items_in_batches() {
    let mut d = TestDaemon::start("stream").await;
    with_small_batches(&mut d).await;
    let images = Images::start();
    let image = images.push("busybox:stream", &busybox());
    d.pull(&image).await;
    // Eight more images, imported from one archive.
    let tmp = tempfile::tempdir().unwrap();
    let archive = tmp.path().join("many.tar");
    let specs: Vec<(String, ImageSpec)> = (0..8)
        .map(|i| {
            let spec = ImageSpec::empty()
                .layer(Layer::new(Compression::None).file("n", format!("{i}\n"), 0o644))
                .cmd(&["/n"]);
            (format!("example.com/e2e/many:{i}"), spec)
        })
        .collect();
    let tags: Vec<[&str; 1]> = specs.iter().map(|(t, _)| [t.as_str()]).collect();
    let entries: Vec<(&[&str], &ImageSpec)> = tags
        .iter()
        .zip(&specs)
        .map(|(t, (_, s))| (&t[..], s))
        .collect();
    docker_archive(&archive, &entries).expect("archive");
    d.pull(&format!("docker-archive:{}", archive.display()))
        .await;

    let mut pods: Vec<Pod> = Vec::new();
    for i in 0..7 {
        let t = if i % 2 == 0 { "web" } else { "db" };
        pods.push(d.run_pod_with(&format!("stream-{i}"), tier(t)).await);
    }
    let mut running = Vec::new();
    for (p, n) in [(0, 4), (1, 3)] {
        for j in 0..n {
            let name = format!("c{j}");
            running.push(
                d.run_container(&pods[p], sh(&name, &image, "sleep 300"))
                    .await,
            );
        }
    }
    let created = d
        .create(&pods[2], sh("idle", &image, "sleep 300"))
        .await
        .unwrap_or_else(|e| panic!("CreateContainer: {e}\n{}", d.log()));
    d.cri
        .runtime
        .stop_pod_sandbox(cri::StopPodSandboxRequest {
            pod_sandbox_id: pods[6].id.clone(),
        })
        .await
        .unwrap();

    // Pods.
    let web = HashMap::from([("tier".to_string(), "web".to_string())]);
    for filter in [
        None,
        Some(cri::PodSandboxFilter {
            label_selector: web.clone(),
            ..Default::default()
        }),
        Some(cri::PodSandboxFilter {
            state: Some(cri::PodSandboxStateValue {
                state: cri::PodSandboxState::SandboxReady as i32,
            }),
            label_selector: web.clone(),
            ..Default::default()
        }),
        Some(cri::PodSandboxFilter {
            id: pods[3].id.clone(),
            ..Default::default()
        }),
        Some(cri::PodSandboxFilter {
            id: "nosuchpod".into(),
            ..Default::default()
        }),
    ] {
        let list = d
            .cri
            .runtime
            .list_pod_sandbox(cri::ListPodSandboxRequest {
                filter: filter.clone(),
            })
            .await
            .unwrap()
            .into_inner()
            .items;
        let stream = d
            .cri
            .runtime
            .stream_pod_sandboxes(cri::StreamPodSandboxesRequest {
                filter: filter.clone(),
            })
            .await
            .unwrap()
            .into_inner();
        let msgs = collect(stream, |m| m.pod_sandboxes.len()).await;
        assert_eq!(msgs.len(), list.len().div_ceil(BATCH), "{filter:?}");
        let streamed: Vec<_> = msgs.into_iter().flat_map(|m| m.pod_sandboxes).collect();
        assert_eq!(streamed, list, "{filter:?}");
    }
    let all = d
        .cri
        .runtime
        .stream_pod_sandboxes(cri::StreamPodSandboxesRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(collect(all, |m| m.pod_sandboxes.len()).await.len(), 3);

    // Containers.
    for filter in [
        None,
        Some(cri::ContainerFilter {
            state: Some(cri::ContainerStateValue {
                state: cri::ContainerState::ContainerRunning as i32,
            }),
            ..Default::default()
        }),
        Some(cri::ContainerFilter {
            pod_sandbox_id: pods[0].id.clone(),
            ..Default::default()
        }),
        Some(cri::ContainerFilter {
            id: created.clone(),
            ..Default::default()
        }),
        Some(cri::ContainerFilter {
            label_selector: HashMap::from([("container".to_string(), "c1".to_string())]),
            ..Default::default()
        }),
    ] {
        let list = d
            .cri
            .runtime
            .list_containers(cri::ListContainersRequest {
                filter: filter.clone(),
            })
            .await
            .unwrap()
            .into_inner()
            .containers;
        assert!(!list.is_empty(), "{filter:?}");
        let stream = d
            .cri
            .runtime
            .stream_containers(cri::StreamContainersRequest {
                filter: filter.clone(),
            })
            .await
            .unwrap()
            .into_inner();
        let msgs = collect(stream, |m| m.containers.len()).await;
        assert_eq!(msgs.len(), list.len().div_ceil(BATCH), "{filter:?}");
        let streamed: Vec<_> = msgs.into_iter().flat_map(|m| m.containers).collect();
        assert_eq!(streamed, list, "{filter:?}");
    }

    // Images: every image once, ListImages' order, with or without a filter.
    for filter in [
        None,
        Some(cri::ImageFilter {
            image: Some(cri::ImageSpec {
                image: "example.com/e2e/many:5".into(),
                ..Default::default()
            }),
        }),
    ] {
        let list = d
            .cri
            .image
            .list_images(cri::ListImagesRequest {
                filter: filter.clone(),
            })
            .await
            .unwrap()
            .into_inner()
            .images;
        let stream = d
            .cri
            .image
            .stream_images(cri::StreamImagesRequest {
                filter: filter.clone(),
            })
            .await
            .unwrap()
            .into_inner();
        let msgs = collect(stream, |m| m.images.len()).await;
        let streamed: Vec<_> = msgs.into_iter().flat_map(|m| m.images).collect();
        assert_eq!(streamed, list, "{filter:?}");
    }
    let images_listed = d
        .cri
        .image
        .list_images(cri::ListImagesRequest::default())
        .await
        .unwrap()
        .into_inner()
        .images;
    assert!(images_listed.len() >= 9, "{}", images_listed.len());

    // Stats and metrics: the same objects in the same order (figures are sampled anew).
    let container_ids = |s: &[cri::ContainerStats]| -> Vec<String> {
        s.iter()
            .map(|s| s.attributes.as_ref().unwrap().id.clone())
            .collect()
    };
    let list = d
        .cri
        .runtime
        .list_container_stats(cri::ListContainerStatsRequest::default())
        .await
        .unwrap()
        .into_inner()
        .stats;
    assert_eq!(list.len(), running.len());
    let stream = d
        .cri
        .runtime
        .stream_container_stats(cri::StreamContainerStatsRequest::default())
        .await
        .unwrap()
        .into_inner();
    let msgs = collect(stream, |m| m.container_stats.len()).await;
    assert_eq!(msgs.len(), running.len().div_ceil(BATCH));
    let streamed: Vec<_> = msgs.into_iter().flat_map(|m| m.container_stats).collect();
    assert_eq!(container_ids(&streamed), container_ids(&list));

    let pod_ids = |s: &[cri::PodSandboxStats]| -> Vec<String> {
        s.iter()
            .map(|s| s.attributes.as_ref().unwrap().id.clone())
            .collect()
    };
    let filter = Some(cri::PodSandboxStatsFilter {
        label_selector: web,
        ..Default::default()
    });
    let list = d
        .cri
        .runtime
        .list_pod_sandbox_stats(cri::ListPodSandboxStatsRequest {
            filter: filter.clone(),
        })
        .await
        .unwrap()
        .into_inner()
        .stats;
    assert_eq!(list.len(), 3, "the ready web pods");
    let stream = d
        .cri
        .runtime
        .stream_pod_sandbox_stats(cri::StreamPodSandboxStatsRequest { filter })
        .await
        .unwrap()
        .into_inner();
    let streamed: Vec<_> = collect(stream, |m| m.pod_sandbox_stats.len())
        .await
        .into_iter()
        .flat_map(|m| m.pod_sandbox_stats)
        .collect();
    assert_eq!(pod_ids(&streamed), pod_ids(&list));

    let list: Vec<String> = d
        .cri
        .runtime
        .list_pod_sandbox_metrics(cri::ListPodSandboxMetricsRequest {})
        .await
        .unwrap()
        .into_inner()
        .pod_metrics
        .into_iter()
        .map(|m| m.pod_sandbox_id)
        .collect();
    assert_eq!(list.len(), 6, "the ready pods");
    let stream = d
        .cri
        .runtime
        .stream_pod_sandbox_metrics(cri::StreamPodSandboxMetricsRequest {})
        .await
        .unwrap()
        .into_inner();
    let streamed: Vec<String> = collect(stream, |m| m.pod_sandbox_metrics.len())
        .await
        .into_iter()
        .flat_map(|m| m.pod_sandbox_metrics)
        .map(|m| m.pod_sandbox_id)
        .collect();
    assert_eq!(streamed, list);

    for pod in &pods {
        d.remove_pod(pod).await;
    }
    // Nothing left: an empty stream, no message at all.
    let stream = d
        .cri
        .runtime
        .stream_containers(cri::StreamContainersRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert!(collect(stream, |m| m.containers.len()).await.is_empty());
    assert!(d.leftovers().is_empty(), "{:?}", d.leftovers());
}

async fn update_resources(
    d: &mut TestDaemon,
    id: &str,
    resources: Option<cri::LinuxContainerResources>,
) -> Result<(), tonic::Status> {
    d.cri
        .runtime
        .update_pod_sandbox_resources(cri::UpdatePodSandboxResourcesRequest {
            pod_sandbox_id: id.to_string(),
            overhead: Some(cri::LinuxContainerResources {
                cpu_shares: 10,
                memory_limit_in_bytes: 8 << 20,
                ..Default::default()
            }),
            resources,
        })
        .await
        .map(drop)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn update_pod_sandbox_resources_on_a_live_and_an_unknown_pod_and_no_checkpoints() {
    let mut d = TestDaemon::start("podres").await;
    let images = Images::start();
    let image = images.push("busybox:podres", &busybox());
    d.pull(&image).await;
    let pod = d.run_pod("podres").await;
    let app = d
        .run_container(&pod, sh("app", &image, "echo up; sleep 300"))
        .await;
    d.wait_log(&app, "up", WAIT).await;

    let resources = cri::LinuxContainerResources {
        cpu_period: 100_000,
        cpu_quota: 150_000,
        cpu_shares: 1536,
        memory_limit_in_bytes: 300 << 20,
        ..Default::default()
    };
    update_resources(&mut d, &pod.id, Some(resources.clone()))
        .await
        .unwrap_or_else(|e| panic!("UpdatePodSandboxResources: {e}\n{}", d.log()));
    let shown = |info: &serde_json::Value| info["config"]["linux"]["resources"].clone();
    let info = d.pod_info(&pod.id).await;
    assert_eq!(shown(&info)["memory_limit_in_bytes"], 300 << 20, "{info}");
    assert_eq!(shown(&info)["cpu_quota"], 150_000, "{info}");
    assert_eq!(
        info["config"]["linux"]["overhead"]["memory_limit_in_bytes"],
        8 << 20
    );
    // The pod and its container go on as they were.
    let st = d.container_status(&app).await;
    assert_eq!(st.state, cri::ContainerState::ContainerRunning as i32);
    // Kept in the pod's record: a restarted daemon still has it.
    d.restart().await;
    let info = d.pod_info(&pod.id).await;
    assert_eq!(shown(&info)["cpu_shares"], 1536, "{info}");

    let err = update_resources(&mut d, "", Some(resources.clone()))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
    assert!(err.message().contains("pod_sandbox_id"), "{err:?}");
    let err = update_resources(&mut d, "feedfacefeedface", Some(resources))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::NotFound, "{err:?}");

    // CheckpointPod and RestorePod: Unimplemented, naming the call, nothing touched.
    let out = tempfile::tempdir().unwrap();
    let err = d
        .cri
        .runtime
        .checkpoint_pod(cri::CheckpointPodRequest {
            pod_sandbox_id: pod.id.clone(),
            output_path: out.path().display().to_string(),
            container_ids: vec![app.clone()],
            options: HashMap::new(),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Unimplemented, "{err:?}");
    assert!(err.message().contains("CheckpointPod"), "{err:?}");
    assert_eq!(std::fs::read_dir(out.path()).unwrap().count(), 0);
    let err = d
        .cri
        .runtime
        .restore_pod(cri::RestorePodRequest {
            checkpoint_path: out.path().display().to_string(),
            config: Some(pod.config.clone()),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Unimplemented, "{err:?}");
    assert!(err.message().contains("RestorePod"), "{err:?}");
    assert_eq!(
        d.container_status(&app).await.state,
        cri::ContainerState::ContainerRunning as i32
    );

    d.remove_pod(&pod).await;
    assert!(d.leftovers().is_empty(), "{:?}", d.leftovers());
}

/// A shell that waits for `signal` and exits with `code` on it; PID 1 of its PID namespace,
/// it ignores any signal it has no trap for, so another signal changes nothing and only the
/// timeout's SIGKILL would end it (137).
fn trapping(name: &str, image: &str, signal: &str, code: i32) -> cri::ContainerConfig {
    sh(
        name,
        image,
        &format!("trap 'echo got {signal}; exit {code}' {signal}; echo ready; while :; do sleep 1 & wait; done"),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stop_signal_comes_from_the_config_else_the_image_and_stop_container_sends_it() {
    let mut d = TestDaemon::start("stopsig").await;
    let images = Images::start();
    let plain = images.push("busybox:plain", &busybox());
    let usr1 = images.push("busybox:usr1", &busybox().stop_signal("SIGUSR1"));
    d.pull(&plain).await;
    d.pull(&usr1).await;
    let pod = d.run_pod("stopsig").await;

    // (name, image, config's stop_signal, the trap, its exit code, what status reports)
    let cases = [
        ("from-image", &usr1, None, "USR1", 42, cri::Signal::Sigusr1),
        (
            "from-config",
            &plain,
            Some(cri::Signal::Sigusr2),
            "USR2",
            43,
            cri::Signal::Sigusr2,
        ),
        (
            "config-wins",
            &usr1,
            Some(cri::Signal::Sigint),
            "INT",
            44,
            cri::Signal::Sigint,
        ),
        ("default", &plain, None, "TERM", 45, cri::Signal::Sigterm),
    ];
    let mut ids = Vec::new();
    for (name, image, asked, trap, code, _) in &cases {
        let mut config = trapping(name, image, trap, *code);
        if let Some(s) = asked {
            config.stop_signal = *s as i32;
        }
        let id = d.run_container(&pod, config).await;
        d.wait_log(&id, "ready", WAIT).await;
        ids.push(id);
    }
    for ((name, _, _, _, code, want), id) in cases.iter().zip(&ids) {
        let st = d.container_status(id).await;
        assert_eq!(
            cri::Signal::try_from(st.stop_signal),
            Ok(*want),
            "{name}: {st:?}"
        );
        let started = Instant::now();
        d.cri
            .runtime
            .stop_container(cri::StopContainerRequest {
                container_id: id.clone(),
                timeout: 30,
            })
            .await
            .unwrap_or_else(|e| panic!("StopContainer {name}: {e}\n{}", d.log()));
        let st = d.container_status(id).await;
        assert_eq!(st.exit_code, *code, "{name}: the trap ran: {st:?}");
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "{name}: ended by its signal, not the timeout"
        );
        d.wait_log(id, "got", WAIT).await;
        // Still reported once exited.
        let st = d.container_status(id).await;
        assert_eq!(cri::Signal::try_from(st.stop_signal), Ok(*want), "{name}");
    }

    // A Signal the enum does not have: InvalidArgument naming the field, nothing made.
    let mut bad = trapping("bad", &plain, "TERM", 1);
    bad.stop_signal = 77;
    let err = d.create(&pod, bad).await.unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
    assert!(err.message().contains("config.stop_signal"), "{err:?}");
    let listed = d
        .cri
        .runtime
        .list_containers(cri::ListContainersRequest::default())
        .await
        .unwrap()
        .into_inner()
        .containers;
    assert_eq!(listed.len(), cases.len());

    d.remove_pod(&pod).await;
    assert!(d.leftovers().is_empty(), "{:?}", d.leftovers());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mount_options_make_a_noexec_bind_refuse_exec() {
    let mut d = TestDaemon::start("mountopts").await;
    let images = Images::start();
    let image = images.push("busybox:mountopts", &busybox());
    d.pull(&image).await;
    let pod = d.run_pod("mountopts").await;

    // The same program on two binds of one host directory: one noexec, one plain.
    let host = tempfile::tempdir().unwrap();
    std::fs::copy(
        peapod_image::testsupport::BUSYBOX,
        host.path().join("busybox"),
    )
    .expect("busybox-static");
    let bind = |path: &str, options: &[&str]| cri::Mount {
        container_path: path.into(),
        host_path: host.path().display().to_string(),
        mount_options: options.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    };
    let script = "/plain/busybox true && echo plain-ran; /noexec/busybox true; echo noexec-rc=$?; \
                  grep -E ' /(noexec|plain) ' /proc/self/mountinfo; echo done";
    let mut config = sh("app", &image, script);
    config.mounts = vec![
        bind("/noexec", &["noexec", "nosuid", "nodev"]),
        bind("/plain", &[]),
    ];
    let id = d.run_container(&pod, config).await;
    let lines = d.wait_log(&id, "done", WAIT).await;
    let out = e2e::pods::stdout_text(&lines);
    assert!(out.contains("plain-ran"), "{out}");
    assert!(out.contains("noexec-rc=126"), "exec refused: {out}");
    let noexec = out
        .lines()
        .find(|l| l.contains(" /noexec "))
        .unwrap_or_else(|| panic!("{out}"));
    for flag in ["noexec", "nosuid", "nodev"] {
        assert!(noexec.contains(flag), "{flag}: {noexec}");
    }
    let plain = out
        .lines()
        .find(|l| l.contains(" /plain "))
        .unwrap_or_else(|| panic!("{out}"));
    assert!(!plain.contains("noexec"), "{plain}");

    // An option that is not one of the three: InvalidArgument naming it, nothing made.
    let mut bad = sh("bad", &image, "true");
    bad.mounts = vec![bind("/x", &["nodev", "exec"])];
    let err = d.create(&pod, bad).await.unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
    assert!(
        err.message().contains("config.mounts[0].mount_options[1]")
            && err.message().contains("exec"),
        "{err:?}"
    );
    // And an env value that is not UTF-8: refused naming the variable.
    let mut bad = sh("bytes", &image, "true");
    bad.envs = vec![cri::KeyValue {
        key: "RAW".into(),
        value: vec![b'x', 0xfe],
    }];
    let err = d.create(&pod, bad).await.unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
    assert!(
        err.message().contains("config.envs[0]") && err.message().contains("RAW"),
        "{err:?}"
    );
    // UTF-8 beyond ASCII goes through as it was.
    let mut good = sh("utf8", &image, "echo \"v=$CAFE\"");
    good.envs = vec![cri::KeyValue {
        key: "CAFE".into(),
        value: "café ☕".as_bytes().to_vec(),
    }];
    let ok = d.run_container(&pod, good).await;
    d.wait_log(&ok, "v=café ☕", WAIT).await;
    let listed = d
        .cri
        .runtime
        .list_containers(cri::ListContainersRequest::default())
        .await
        .unwrap()
        .into_inner()
        .containers;
    assert_eq!(listed.len(), 2, "the refused ones were never made");

    // Advertised, with user namespaces on the host network not.
    let status = d
        .cri
        .runtime
        .status(cri::StatusRequest { verbose: false })
        .await
        .unwrap()
        .into_inner();
    let features = status.features.expect("features");
    assert!(features.mount_options);
    assert!(!features.user_namespaces_host_network);

    d.remove_pod(&pod).await;
    assert!(d.leftovers().is_empty(), "{:?}", d.leftovers());
}

/// The PSI files of the cgroup v2 directory of `pid`, if it has its own there (as the daemon
/// decides: unified host, or hybrid with the same path as the v1 memory cgroup).
fn own_pressure_dir(pid: u32) -> Option<std::path::PathBuf> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    let unified = text
        .lines()
        .find_map(|l| l.strip_prefix("0::"))?
        .to_string();
    let memory = text
        .lines()
        .find_map(|l| l.split_once(":memory:").map(|(_, p)| p.to_string()));
    let base = std::path::Path::new("/sys/fs/cgroup");
    let dir = match memory {
        None => base.join(unified.trim_start_matches('/')),
        Some(m) if m == unified && unified != "/" => {
            base.join("unified").join(unified.trim_start_matches('/'))
        }
        Some(_) => return None,
    };
    dir.join("cpu.pressure").exists().then_some(dir)
}

/// The file a container's swap usage is read from: v1's memsw of its memory cgroup, or its
/// unified cgroup's `memory.swap.current` on a v2 host.
fn swap_file(pid: u32) -> Option<std::path::PathBuf> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    let base = std::path::Path::new("/sys/fs/cgroup");
    match text
        .lines()
        .find_map(|l| l.split_once(":memory:").map(|(_, p)| p.to_string()))
    {
        Some(m) => Some(
            base.join("memory")
                .join(m.trim_start_matches('/'))
                .join("memory.memsw.usage_in_bytes"),
        ),
        None => {
            let unified = text.lines().find_map(|l| l.strip_prefix("0::"))?;
            Some(
                base.join(unified.trim_start_matches('/'))
                    .join("memory.swap.current"),
            )
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stats_carry_psi_exactly_where_the_host_has_it() {
    let mut d = TestDaemon::start("psi").await;
    let images = Images::start();
    let image = images.push("busybox:psi", &busybox());
    d.pull(&image).await;
    let pod = d.run_pod("psi").await;
    let id = d
        .run_container(&pod, sh("busy", &image, "echo up; while :; do :; done"))
        .await;
    d.wait_log(&id, "up", WAIT).await;
    let pid = d.container_info(&id).await["pid"].as_u64().expect("pid") as u32;
    let stats = d.container_stats(&id).await;
    // Swap usage exactly where the container's memory cgroup accounts swap.
    let accounted = swap_file(pid).is_some_and(|f| f.exists());
    assert_eq!(stats.swap.is_some(), accounted, "{:?}", stats.swap);
    let cpu = stats.cpu.expect("cpu");
    match own_pressure_dir(pid) {
        Some(dir) => {
            let psi = cpu
                .psi
                .unwrap_or_else(|| panic!("{} has PSI", dir.display()));
            let some = psi.some.expect("some");
            assert!(some.total > 0, "a busy loop stalls on CPU: {some:?}");
            assert!((0.0..=100.0).contains(&some.avg10));
            if dir.join("io.pressure").exists() {
                let io = stats.io.expect("io usage with its PSI");
                assert!(io.timestamp > 0 && io.psi.is_some());
            }
            if dir.join("memory.pressure").exists() {
                assert!(stats.memory.expect("memory").psi.is_some());
            }
            // The pressure counters: described, and the container's among the pod's metrics.
            let descriptors = d.metric_descriptors().await;
            let name = "container_pressure_cpu_waiting_seconds_total";
            assert!(
                descriptors.iter().any(|x| x.name == name),
                "{name} described"
            );
            let ours = d.pod_metrics(&pod.id).await;
            let waiting = ours
                .container_metrics
                .iter()
                .flat_map(|c| &c.metrics)
                .find(|m| m.name == name)
                .unwrap_or_else(|| panic!("{name} of the busy container"));
            // Read after the stats: the counter only grew since (whole seconds of it).
            let value = waiting.value.as_ref().unwrap().value;
            assert!(value >= some.total / 1_000_000_000, "{waiting:?} {some:?}");
        }
        None => {
            eprintln!("no cgroup v2 of the container's own here: PSI must be unset");
            assert!(cpu.psi.is_none(), "{cpu:?}");
            assert!(stats.io.is_none());
        }
    }
    d.remove_pod(&pod).await;
    assert!(d.leftovers().is_empty(), "{:?}", d.leftovers());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auth_secrets_never_reach_the_log() {
    let mut d = TestDaemon::start("redact").await;
    let secret = format!("pw-{}-zq", std::process::id());
    let token = format!("tok-{}-zq", std::process::id());
    let registry = Registry::start_with_auth("peapod", &secret).expect("registry with auth");
    let images = tempfile::tempdir().unwrap();
    let mut layout =
        peapod_image::testsupport::OciLayout::create(&images.path().join("l")).expect("layout");
    layout.add_image("t", &busybox()).expect("image");
    registry
        .push(
            layout.dir(),
            "t",
            "private:1",
            peapod_image::testsupport::PushFormat::Oci,
        )
        .expect("push");
    let reference = registry.reference("private:1");
    let pull = |d: &mut TestDaemon, auth: cri::AuthConfig| {
        let mut image = d.cri.image.clone();
        let reference = reference.clone();
        async move {
            image
                .pull_image(cri::PullImageRequest {
                    image: Some(cri::ImageSpec {
                        image: reference,
                        ..Default::default()
                    }),
                    auth: Some(auth),
                    sandbox_config: None,
                })
                .await
        }
    };
    // A failing pull (its error is logged) and a good one, with every secret field set.
    let wrong = cri::AuthConfig {
        username: "peapod".into(),
        password: format!("{secret}-wrong"),
        registry_token: token.clone(),
        ..Default::default()
    };
    assert!(pull(&mut d, wrong).await.is_err());
    let right = cri::AuthConfig {
        username: "peapod".into(),
        password: secret.clone(),
        ..Default::default()
    };
    pull(&mut d, right)
        .await
        .unwrap_or_else(|e| panic!("pull: {e}\n{}", d.log()));
    let log = d.log();
    assert!(log.contains("pulled"), "a debug-level log was written");
    assert!(!log.contains(&secret), "the password is in the log");
    assert!(!log.contains(&token), "the token is in the log");
    assert!(d.leftovers().is_empty(), "{:?}", d.leftovers());
}
