//! Prints what the pod supervisor's work costs on a real daemon of its own (started like the
//! integration tests' daemons, with a loopback registry):
//!
//! ```text
//! pod-probe-bench [--runs 200] [--pods 5]
//! ```
//!
//! - apply → Ready of a one-container pod through `peapod.pods.v1.Pods` (min/p50/p90/max);
//! - an exec probe's round trip, which is one CRI ExecSync (`cat /tmp/ready`), as the
//!   supervisor's prober issues it;
//! - the daemon's resident memory with those pods supervised.
//!
//! Figures only; nothing here is an assertion.

use e2e::pods::{busybox, Images};
use e2e::{DaemonOptions, TestDaemon};
use peapod_proto::pods as api;
use peapod_proto::pods::pods_client::PodsClient;
use peapod_proto::v1 as cri;
use std::time::{Duration, Instant};

fn stats(name: &str, mut v: Vec<Duration>) {
    if v.is_empty() {
        println!("{name}: no samples");
        return;
    }
    v.sort();
    let p = |q: f64| v[((v.len() - 1) as f64 * q).round() as usize];
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    println!(
        "{name}: n={} min={:.2}ms p50={:.2}ms p90={:.2}ms max={:.2}ms",
        v.len(),
        ms(v[0]),
        ms(p(0.5)),
        ms(p(0.9)),
        ms(v[v.len() - 1])
    );
}

fn rss_kib(needle: &str) -> u64 {
    e2e::host::processes_with(needle)
        .iter()
        .filter_map(|pid| std::fs::read_to_string(format!("/proc/{pid}/status")).ok())
        .filter_map(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse::<u64>().ok())
        })
        .sum()
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let mut runs = 200usize;
    let mut pods = 5usize;
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || {
            it.next()
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("{flag} needs a number"))
        };
        match flag.as_str() {
            "--runs" => runs = value(),
            "--pods" => pods = value(),
            other => panic!("unknown flag {other}"),
        }
    }
    let mut d = TestDaemon::start_with(
        "pod-probe-bench",
        DaemonOptions {
            extra_config:
                "[pods]\ncgroup_parent = \"{cgroup_parent}/kubepods\"\nsync_period_ms = 100\n"
                    .into(),
            ..Default::default()
        },
    )
    .await;
    let images = Images::start();
    let image = images.push("busybox:bench", &busybox());
    let cfg = d.dir.join("config.toml");
    let channel = peapod_uds::client::channel(&d.socket)
        .await
        .expect("connect");
    let mut client = PodsClient::new(channel);

    let mut ready_times = Vec::new();
    let mut ids = Vec::new();
    for n in 0..pods {
        let manifest = format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: bench-{n}}}\nspec:\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: app\n    image: {image}\n    command: [sh, -c, \"touch /tmp/ready; exec sleep 3600\"]\n    readinessProbe: {{exec: {{command: [cat, /tmp/ready]}}, periodSeconds: 1}}\n"
        );
        let t0 = Instant::now();
        client
            .apply(api::ApplyRequest {
                namespace: "default".into(),
                manifest: manifest.into_bytes(),
                source: "bench".into(),
            })
            .await
            .expect("apply");
        loop {
            let pod: serde_json::Value = serde_json::from_str(
                &client
                    .get(api::GetRequest {
                        namespace: "default".into(),
                        name: format!("bench-{n}"),
                    })
                    .await
                    .expect("get")
                    .into_inner()
                    .pod_json,
            )
            .expect("json");
            let cs = &pod["status"]["containerStatuses"][0];
            if cs["ready"] == true {
                ready_times.push(t0.elapsed());
                ids.push(
                    cs["containerID"]
                        .as_str()
                        .unwrap_or("")
                        .trim_start_matches("peapod://")
                        .to_string(),
                );
                break;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(60),
                "pod never ready: {pod}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    stats("apply -> Ready (first pod pulls the image)", ready_times);

    let mut exec = Vec::new();
    for i in 0..runs {
        let id = &ids[i % ids.len()];
        let t0 = Instant::now();
        let r = d
            .cri
            .runtime
            .exec_sync(cri::ExecSyncRequest {
                container_id: id.clone(),
                cmd: vec!["cat".into(), "/tmp/ready".into()],
                timeout: 1,
            })
            .await
            .expect("ExecSync")
            .into_inner();
        exec.push(t0.elapsed());
        assert_eq!(r.exit_code, 0);
    }
    stats("exec probe (one ExecSync)", exec);
    println!(
        "daemon RSS with {pods} supervised pods: {} KiB",
        rss_kib(&format!("serve --config {}", cfg.display()))
    );
    for n in 0..pods {
        let _ = client
            .delete(api::DeleteRequest {
                namespace: "default".into(),
                name: format!("bench-{n}"),
                grace_period_seconds: 0,
                wait: true,
            })
            .await;
    }
}
