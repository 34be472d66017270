//! `/metrics` on `metrics.address`: Prometheus' text format, parsed by prometheus_client's own
//! parser (the venv scripts/setup makes), counting the calls made.

use e2e::daemon::DaemonOptions;
use e2e::TestDaemon;
use peapod_proto::v1 as cri;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn python() -> PathBuf {
    if let Ok(p) = std::env::var("PEAPOD_GRPCIO_PYTHON") {
        return p.into();
    }
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/grpcio-venv/bin/python")
}

/// Prints one line per sample: `name{k="v",...} value`, labels sorted, as parsed by
/// prometheus_client (which rejects text Prometheus would not accept).
const PARSE: &str = r#"
import sys
from prometheus_client.parser import text_string_to_metric_families
for fam in text_string_to_metric_families(sys.stdin.read()):
    for s in fam.samples:
        labels = ",".join('%s="%s"' % (k, v) for k, v in sorted(s.labels.items()))
        print("%s{%s} %r" % (s.name, labels, float(s.value)))
"#;

/// The address the daemon logged for its metrics listener (configured with port 0).
async fn metrics_address(d: &TestDaemon) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let log = d.log();
        if let Some(line) = log
            .lines()
            .find(|l| l.contains("serving metrics at /metrics"))
        {
            let addr = line.split("address=").nth(1).expect("address field");
            return addr.split_whitespace().next().unwrap_or(addr).to_string();
        }
        assert!(
            Instant::now() < deadline,
            "no metrics listener in the log:\n{log}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn scrape(addr: &str) -> HashMap<String, f64> {
    let mut s = tokio::net::TcpStream::connect(addr).await.expect("connect");
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut page = String::new();
    s.read_to_string(&mut page).await.unwrap();
    let (head, body) = page.split_once("\r\n\r\n").expect("http response");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(head.contains("text/plain; version=0.0.4"), "{head}");
    let mut child = std::process::Command::new(python())
        .arg("-c")
        .arg(PARSE)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run python (scripts/setup makes target/grpcio-venv)");
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(body.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "prometheus_client refused the page: {}\n{body}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.rsplit_once(' '))
        .map(|(k, v)| (k.to_string(), v.parse().unwrap()))
        .collect()
}

fn get(m: &HashMap<String, f64>, key: &str) -> f64 {
    m.get(key).copied().unwrap_or(0.0)
}

fn handled(method: &str, code: &str) -> String {
    format!(
        "grpc_server_handled_total{{grpc_code=\"{code}\",grpc_method=\"{method}\",grpc_service=\"runtime.v1.RuntimeService\"}}"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_the_calls_made_and_the_pods_that_exist() {
    let mut d = TestDaemon::start_with(
        "metrics",
        DaemonOptions {
            extra_config: "[metrics]\naddress = \"127.0.0.1:0\"\n".into(),
            ..Default::default()
        },
    )
    .await;
    let addr = metrics_address(&d).await;
    let before = scrape(&addr).await;

    for _ in 0..3 {
        d.cri
            .runtime
            .version(cri::VersionRequest::default())
            .await
            .unwrap();
    }
    for _ in 0..2 {
        let err = d
            .cri
            .runtime
            .container_status(cri::ContainerStatusRequest {
                container_id: "no-such-container".into(),
                verbose: false,
            })
            .await
            .unwrap_err();
        assert_eq!(err.code(), tonic::Code::NotFound);
    }
    let pod = d.run_pod("metrics-pod").await;

    let after = scrape(&addr).await;
    let delta = |k: &str| get(&after, k) - get(&before, k);
    assert_eq!(delta(&handled("Version", "OK")), 3.0);
    assert_eq!(delta(&handled("ContainerStatus", "NotFound")), 2.0);
    assert_eq!(delta(&handled("RunPodSandbox", "OK")), 1.0);
    assert_eq!(delta("peapod_pod_startup_seconds_count{}"), 1.0);
    let latency = "grpc_server_handling_seconds_count{grpc_method=\"Version\",grpc_service=\"runtime.v1.RuntimeService\"}";
    assert_eq!(delta(latency), 3.0);
    assert_eq!(
        get(&after, "peapod_pod_sandboxes{state=\"SANDBOX_READY\"}"),
        1.0
    );
    assert_eq!(get(&after, "peapod_shims{}"), 1.0);

    d.remove_pod(&pod).await;
    // The shim removes its socket as it exits, just after RemovePodSandbox returns.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let end = scrape(&addr).await;
        assert_eq!(
            get(&end, "peapod_pod_sandboxes{state=\"SANDBOX_READY\"}"),
            0.0
        );
        if get(&end, "peapod_shims{}") == 0.0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the shim is still counted: {end:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[test]
fn a_metrics_address_that_cannot_be_bound_stops_the_daemon_before_its_socket_exists() {
    let dir = tempfile::tempdir().unwrap();
    let (root, state) = (dir.path().join("root"), dir.path().join("run"));
    let config = dir.path().join("config.toml");
    std::fs::write(
        &config,
        format!(
            "root = \"{}\"\nstate = \"{}\"\n[metrics]\naddress = \"not-an-address\"\n",
            root.display(),
            state.display()
        ),
    )
    .unwrap();
    let out = std::process::Command::new(e2e::daemon::bin_dir().join("peapod"))
        .args(["serve", "--config"])
        .arg(&config)
        .output()
        .expect("run peapod serve");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("listen for metrics on not-an-address"),
        "{stderr}"
    );
    assert!(
        !state.join("peapod.sock").exists(),
        "a socket was left: {stderr}"
    );
}
