//! Tracing (`[tracing]`): the daemon's spans exported by OTLP/gRPC to a real collector (Jaeger
//! v2, built by scripts/jaeger, on loopback ports of its own), each CRI call's span the child
//! of the W3C trace context in its gRPC metadata, as the kubelet sends it, with the call's
//! steps under it; read back through Jaeger's query API. Off by default: no exporter at all.

use e2e::daemon::DaemonOptions;
use e2e::fixtures::sandbox_config;
use e2e::jaeger::{Jaeger, Trace};
use e2e::pods::{busybox, container, in_pod, Images, Pod};
use e2e::TestDaemon;
use peapod_proto::v1 as cri;
use std::time::Duration;

/// A random id of `bytes` bytes in lower-case hex, as W3C trace context writes ids.
fn hex_id(bytes: usize) -> String {
    (0..bytes)
        .map(|_| format!("{:02x}", rand::random::<u8>()))
        .collect()
}

/// `msg` with the trace context a caller's client span `parent` of trace `trace` sends.
fn traced<T>(msg: T, trace: &str, parent: &str, sampled: bool) -> tonic::Request<T> {
    let mut r = tonic::Request::new(msg);
    let flags = if sampled { "01" } else { "00" };
    r.metadata_mut().insert(
        "traceparent",
        format!("00-{trace}-{parent}-{flags}")
            .parse()
            .expect("a traceparent value"),
    );
    r.metadata_mut()
        .insert("tracestate", "e2e=caller".parse().expect("a tracestate"));
    r
}

/// RunPodSandbox of pod `name` in `d`, sent with the sampled trace context of client span
/// `parent` of trace `trace`.
async fn run_pod_traced(d: &TestDaemon, name: &str, trace: &str, parent: &str) -> Pod {
    let mut config = sandbox_config(name, &d.cgroup_parent);
    config.log_directory = d.dir.join("logs").join(name).display().to_string();
    let id = d
        .cri
        .clone()
        .runtime
        .run_pod_sandbox(traced(
            cri::RunPodSandboxRequest {
                config: Some(config.clone()),
                runtime_handler: String::new(),
            },
            trace,
            parent,
            true,
        ))
        .await
        .unwrap_or_else(|e| panic!("RunPodSandbox {name}: {e}\n{}", d.log()))
        .into_inner()
        .pod_sandbox_id;
    Pod { id, config }
}

/// ListPodSandbox sent with the trace context of a caller that does not sample its trace;
/// that trace's id.
async fn list_unsampled(d: &TestDaemon) -> String {
    let trace = hex_id(16);
    d.cri
        .clone()
        .runtime
        .list_pod_sandbox(traced(
            cri::ListPodSandboxRequest::default(),
            &trace,
            &hex_id(8),
            false,
        ))
        .await
        .expect("ListPodSandbox");
    trace
}

fn tracing_config(endpoint: &str, extra: &str) -> DaemonOptions {
    DaemonOptions {
        extra_config: format!("[tracing]\nendpoint = \"{endpoint}\"\n{extra}"),
        ..Default::default()
    }
}

/// Names of the daemon's threads: the exporter's (OpenTelemetry's batch span processor)
/// among them only when tracing is on.
fn thread_names(pid: u32) -> Vec<String> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|rd| {
            rd.flatten()
                .filter_map(|t| std::fs::read_to_string(t.path().join("comm")).ok())
                .map(|c| c.trim().to_string())
                .collect()
        })
        .unwrap_or_default()
}

const EXPORTER_THREAD: &str = "OpenTelemetry";

/// The span of CRI call `method` in `trace`, checked to be peapod's server span whose parent
/// is the caller's `parent`; its id.
fn rpc_span(trace: &Trace, method: &str, parent: &str) -> String {
    let service = if method == "PullImage" {
        "runtime.v1.ImageService"
    } else {
        "runtime.v1.RuntimeService"
    };
    let s = trace.one(&format!("{service}/{method}"));
    assert_eq!(s.service, "peapod", "{s:#?}");
    assert_eq!(s.parent, parent, "{method}'s parent: {s:#?}");
    assert_eq!(s.tag("span.kind"), Some("server"), "{s:#?}");
    assert_eq!(s.tag("rpc.system"), Some("grpc"), "{s:#?}");
    assert_eq!(s.tag("rpc.method"), Some(method), "{s:#?}");
    // The caller's tracestate goes on with its trace.
    assert_eq!(s.tag("w3c.tracestate"), Some("e2e=caller"), "{s:#?}");
    s.span_id.clone()
}

/// Asserts that `trace` has a span `step` under the span `under`, and returns the first.
fn step<'a>(trace: &'a Trace, step: &'a str, under: &str) -> &'a e2e::jaeger::Span {
    let found = trace
        .named(step)
        .find(|s| trace.descends_from(&s.span_id, under));
    match found {
        Some(s) => {
            assert_eq!(s.service, "peapod", "{s:#?}");
            s
        }
        None => panic!("no span {step:?} under span {under} in {trace:#?}"),
    }
}

/// PullImage, RunPodSandbox, CreateContainer and StartContainer, each sent with the trace
/// context of a client span of one trace (as the kubelet's otelgrpc sends them): peapod's span
/// of each call is in that trace, the child of the client span the call named, with its steps
/// (the pull's manifest, layers and commit; the pod's netns, CNI plugins, shim and pause; the
/// container's rootfs and the shim's create and start) under it. A failed call's span says so;
/// calls sent without a sampled trace context make no trace (sampling_rate_per_million 0).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cri_calls_are_spans_of_the_callers_trace_with_their_steps() {
    let jaeger = Jaeger::start();
    let images = Images::start();
    let reference = images.push("tracing/busybox:1", &busybox());
    let mut d = TestDaemon::start_with("tracing-on", tracing_config(&jaeger.otlp, "")).await;
    let pid = d.daemon_pid().expect("the daemon runs");
    assert!(
        thread_names(pid)
            .iter()
            .any(|n| n.starts_with(EXPORTER_THREAD)),
        "no exporter thread with tracing on: {:?}",
        thread_names(pid)
    );
    assert!(d.log().contains("tracing: exporting spans by OTLP/gRPC"));

    let trace = hex_id(16);
    let (p_pull, p_run, p_create, p_start, p_fail) =
        (hex_id(8), hex_id(8), hex_id(8), hex_id(8), hex_id(8));
    let mut cri = d.cri.clone();
    cri.image
        .pull_image(traced(
            cri::PullImageRequest {
                image: Some(cri::ImageSpec {
                    image: reference.clone(),
                    ..Default::default()
                }),
                ..Default::default()
            },
            &trace,
            &p_pull,
            true,
        ))
        .await
        .unwrap_or_else(|e| panic!("PullImage: {e}\n{}", d.log()));
    let pod = run_pod_traced(&d, "traced", &trace, &p_run).await;
    let (pod_id, config) = (pod.id.clone(), pod.config.clone());
    let ctr_id = cri
        .runtime
        .create_container(traced(
            cri::CreateContainerRequest {
                pod_sandbox_id: pod_id.clone(),
                config: Some(in_pod(
                    &pod,
                    container("app", &reference, &["sleep", "3600"], &[]),
                )),
                sandbox_config: Some(config),
            },
            &trace,
            &p_create,
            true,
        ))
        .await
        .unwrap_or_else(|e| panic!("CreateContainer: {e}\n{}", d.log()))
        .into_inner()
        .container_id;
    cri.runtime
        .start_container(traced(
            cri::StartContainerRequest {
                container_id: ctr_id.clone(),
            },
            &trace,
            &p_start,
            true,
        ))
        .await
        .unwrap_or_else(|e| panic!("StartContainer: {e}\n{}", d.log()));
    let missing = cri
        .runtime
        .container_status(traced(
            cri::ContainerStatusRequest {
                container_id: "no-such-container".into(),
                verbose: false,
            },
            &trace,
            &p_fail,
            true,
        ))
        .await
        .expect_err("ContainerStatus of a missing container");
    assert_eq!(missing.code(), tonic::Code::NotFound);
    // A caller whose trace is not sampled: nothing of it is exported.
    let unsampled = list_unsampled(&d).await;

    let t = jaeger.wait_trace(&trace, Duration::from_secs(30), |t| {
        [
            "runtime.v1.ImageService/PullImage",
            "runtime.v1.RuntimeService/RunPodSandbox",
            "runtime.v1.RuntimeService/CreateContainer",
            "runtime.v1.RuntimeService/StartContainer",
            "runtime.v1.RuntimeService/ContainerStatus",
            "shim.start",
        ]
        .iter()
        .all(|op| t.named(op).next().is_some())
    });

    let pull = rpc_span(&t, "PullImage", &p_pull);
    let store_pull = step(&t, "pull", &pull);
    assert!(
        store_pull
            .tag("reference")
            .is_some_and(|r| r.ends_with("tracing/busybox:1")),
        "{store_pull:#?}"
    );
    step(&t, "registry.manifest", &store_pull.span_id);
    let layer = step(&t, "layer", &store_pull.span_id);
    assert!(
        layer
            .tag("digest")
            .is_some_and(|d| d.starts_with("sha256:")),
        "{layer:#?}"
    );
    step(&t, "commit", &store_pull.span_id);

    let run = rpc_span(&t, "RunPodSandbox", &p_run);
    assert_eq!(
        t.one("runtime.v1.RuntimeService/RunPodSandbox")
            .tag("sandbox"),
        Some(pod_id.as_str())
    );
    step(&t, "netns.pin", &run);
    let cni = step(&t, "cni.add", &run);
    let plugin = step(&t, "cni.plugin", &cni.span_id);
    assert_eq!(plugin.tag("command"), Some("ADD"), "{plugin:#?}");
    step(&t, "shim.launch", &run);
    let pause = step(&t, "pause.start", &run);
    step(&t, "shim.create", &pause.span_id);

    let create = rpc_span(&t, "CreateContainer", &p_create);
    step(&t, "rootfs", &create);
    let shim_create = step(&t, "shim.create", &create);
    assert_eq!(shim_create.tag("id"), Some(ctr_id.as_str()));

    let start = rpc_span(&t, "StartContainer", &p_start);
    let shim_start = step(&t, "shim.start", &start);
    assert_eq!(shim_start.tag("id"), Some(ctr_id.as_str()));

    let failed = rpc_span(&t, "ContainerStatus", &p_fail);
    let failed = t
        .spans
        .iter()
        .find(|s| s.span_id == failed)
        .expect("the span");
    assert_eq!(failed.tag("otel.status_code"), Some("ERROR"), "{failed:#?}");
    assert_eq!(failed.tag("error"), Some("true"), "{failed:#?}");

    // Every span of peapod's is in the caller's one trace: the calls made without a sampled
    // context (the harness's, the unsampled ListPodSandbox) exported nothing.
    let ours: Vec<String> = jaeger
        .traces_of("peapod")
        .into_iter()
        .map(|t| t.trace_id)
        .collect();
    assert_eq!(ours, vec![trace.clone()], "peapod's traces in Jaeger");
    assert!(
        jaeger.get(&format!("/api/traces/{unsampled}")).is_err(),
        "the unsampled call was exported"
    );
    println!(
        "trace {trace}: {} spans, RunPodSandbox's: {}",
        t.spans.len(),
        t.spans
            .iter()
            .filter(|s| t.descends_from(&s.span_id, &run) && s.span_id != run)
            .map(|s| s.operation.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    );
    d.remove_pod(&pod).await;
}

/// With `sampling_rate_per_million = 1000000`, a call that comes with no trace context starts
/// a trace of its own (a root span, under the configured service name); a caller's decision
/// not to sample is still followed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_without_a_caller_are_sampled_at_the_configured_rate() {
    let jaeger = Jaeger::start();
    let d = TestDaemon::start_with(
        "tracing-rate",
        tracing_config(
            &jaeger.otlp,
            "sampling_rate_per_million = 1000000\nservice_name = \"peapod-e2e\"\n",
        ),
    )
    .await;
    let mut cri = d.cri.clone();
    let unsampled = list_unsampled(&d).await;
    cri.runtime
        .version(cri::VersionRequest::default())
        .await
        .expect("Version");
    let deadline = std::time::Instant::now() + e2e::scaled(Duration::from_secs(30));
    let version = loop {
        let found = jaeger.traces_of("peapod-e2e").into_iter().find(|t| {
            t.named("runtime.v1.RuntimeService/Version")
                .next()
                .is_some()
        });
        if let Some(t) = found {
            break t;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no Version trace in Jaeger; services {:?}\n{}",
            jaeger.services(),
            d.log()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    let root = version.one("runtime.v1.RuntimeService/Version");
    assert_eq!(
        root.parent, "",
        "a call without a caller is a root: {root:#?}"
    );
    assert_eq!(root.service, "peapod-e2e");
    assert!(
        jaeger.get(&format!("/api/traces/{unsampled}")).is_err(),
        "a call its caller did not sample was exported"
    );
}

/// Off (no `[tracing]` endpoint, the default): no exporter thread, nothing sent to a collector
/// even for calls that come with a sampled trace context, and no `otel.*` fields in the log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn off_by_default_nothing_is_exported() {
    let jaeger = Jaeger::start();
    let mut d = TestDaemon::start("tracing-off").await;
    let pid = d.daemon_pid().expect("the daemon runs");
    let trace = hex_id(16);
    let pod = run_pod_traced(&d, "untraced", &trace, &hex_id(8)).await;
    assert!(
        !thread_names(pid)
            .iter()
            .any(|n| n.starts_with(EXPORTER_THREAD)),
        "an exporter thread with tracing off: {:?}",
        thread_names(pid)
    );
    // Longer than the exporter's batch delay (5 s): had anything been sent, it would be there.
    tokio::time::sleep(e2e::scaled(Duration::from_secs(7))).await;
    assert!(
        !jaeger.services().iter().any(|s| s.contains("peapod")),
        "services in Jaeger: {:?}",
        jaeger.services()
    );
    assert!(jaeger.get(&format!("/api/traces/{trace}")).is_err());
    let log = d.log();
    assert!(!log.contains("tracing: exporting"), "{log}");
    assert!(!log.contains("otel."), "{log}");
    d.remove_pod(&pod).await;
}

/// A collector that is not there costs the calls nothing: they succeed as without tracing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_collector_does_not_fail_calls() {
    // A loopback port with nothing listening (bound, then let go).
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let mut d = TestDaemon::start_with(
        "tracing-nowhere",
        tracing_config(
            &format!("127.0.0.1:{port}"),
            "sampling_rate_per_million = 1000000\n",
        ),
    )
    .await;
    let pod = d.run_pod("nowhere").await;
    let version = d
        .cri
        .runtime
        .version(cri::VersionRequest::default())
        .await
        .expect("Version")
        .into_inner();
    assert_eq!(version.runtime_name, "peapod");
    d.remove_pod(&pod).await;
}

/// A `[tracing]` table the daemon cannot use stops it at start, naming the field, before it
/// makes anything (no state or root directory, no socket).
#[test]
fn bad_tracing_config_is_refused_at_start() {
    let dir = tempfile::tempdir().expect("tempdir");
    for (table, complaint) in [
        (
            "endpoint = \"collector\"",
            "tracing.endpoint \"collector\": no port",
        ),
        (
            "endpoint = \"https://c:4317\"",
            "tracing.endpoint \"https://c:4317\": scheme \"https\" is not supported",
        ),
        (
            "endpoint = \"127.0.0.1:4317\"\nsampling_rate_per_million = 2000000",
            "tracing.sampling_rate_per_million 2000000 is out of range",
        ),
        (
            "sampling_rate_per_million = -5",
            "tracing.sampling_rate_per_million -5 is out of range",
        ),
        (
            "endpoint = \"127.0.0.1:4317\"\nsampling = 1",
            "unknown field `sampling`",
        ),
    ] {
        let root = dir.path().join("root");
        let state = dir.path().join("state");
        let config = dir.path().join("config.toml");
        std::fs::write(
            &config,
            format!(
                "root = \"{}\"\nstate = \"{}\"\n[tracing]\n{table}\n",
                root.display(),
                state.display()
            ),
        )
        .expect("write config");
        let out = std::process::Command::new(e2e::daemon::bin_dir().join("peapod"))
            .arg("serve")
            .arg("--config")
            .arg(&config)
            .stdin(std::process::Stdio::null())
            .output()
            .expect("run peapod serve");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{table}: started\n{stderr}");
        assert!(stderr.contains(complaint), "{table}: {stderr}");
        assert!(
            !root.exists() && !state.exists(),
            "{table}: made directories"
        );
    }
}

/// Under the real kubelet (Kubernetes' own, built by k8s/build.sh; standalone, with tracing
/// configured to the same Jaeger, every span sampled): the kubelet's sync of a static pod and
/// peapod's RunPodSandbox are one trace, peapod's span the child of the kubelet's gRPC client
/// span for that call, with peapod's steps under it.
#[test]
fn the_kubelets_and_peapods_spans_are_one_trace() {
    use e2e::cluster::{self, Cluster};
    let jaeger = Jaeger::start();
    let c = Cluster::standalone_traced(&jaeger.otlp);
    let manifest = std::path::Path::new(cluster::DIR).join("manifests/traced.yaml");
    std::fs::write(
        &manifest,
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: traced\nspec:\n  containers:\n  - name: app\n    \
         image: docker.io/library/busybox:latest\n    imagePullPolicy: IfNotPresent\n    \
         command: [\"sleep\", \"3600\"]\n",
    )
    .expect("write the static pod's manifest");
    c.wait(
        "the static pod's container running",
        Duration::from_secs(180),
        || {
            let out = c.crictl(
                "node-1",
                &["ps", "-q", "--name", "app", "--state", "running"],
            );
            (!out.trim().is_empty()).then_some(())
        },
    );
    // The trace of the kubelet's sync that ran the sandbox: peapod's RunPodSandbox span and
    // the kubelet's spans above it.
    let (trace, run) = c.wait(
        "a trace with the kubelet's and peapod's RunPodSandbox spans",
        Duration::from_secs(60),
        || {
            jaeger.traces_of("peapod").into_iter().find_map(|t| {
                let run = t
                    .named("runtime.v1.RuntimeService/RunPodSandbox")
                    .find(|s| s.service == "peapod")?
                    .clone();
                let client = t.spans.iter().find(|s| s.span_id == run.parent)?;
                (client.service == "kubelet").then_some((t.clone(), run))
            })
        },
    );
    let client = trace
        .spans
        .iter()
        .find(|s| s.span_id == run.parent)
        .expect("the parent");
    assert_eq!(
        client.operation, "runtime.v1.RuntimeService/RunPodSandbox",
        "the kubelet's client span: {client:#?}"
    );
    assert_eq!(client.tag("span.kind"), Some("client"), "{client:#?}");
    let sync = trace
        .spans
        .iter()
        .find(|s| s.service == "kubelet" && s.operation == "syncPod")
        .unwrap_or_else(|| panic!("no syncPod span of the kubelet: {trace:#?}"));
    assert!(
        trace.descends_from(&run.span_id, &sync.span_id),
        "{trace:#?}"
    );
    for step in ["cni.add", "shim.launch", "pause.start"] {
        assert!(
            trace
                .named(step)
                .any(|s| trace.descends_from(&s.span_id, &run.span_id)),
            "no {step} under peapod's RunPodSandbox: {trace:#?}"
        );
    }
    println!(
        "trace {}: {} spans ({} of the kubelet, {} of peapod)",
        trace.trace_id,
        trace.spans.len(),
        trace
            .spans
            .iter()
            .filter(|s| s.service == "kubelet")
            .count(),
        trace.spans.iter().filter(|s| s.service == "peapod").count()
    );
    std::fs::remove_file(&manifest).expect("remove the manifest");
    c.wait(
        "the static pod's sandbox gone",
        Duration::from_secs(120),
        || c.sandboxes("node-1").is_empty().then_some(()),
    );
    drop(c);
    let left = Cluster::leftovers();
    assert!(left.is_empty(), "after scripts/cluster down: {left:#?}");
}
