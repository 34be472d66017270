//! A soak: many pods with exec, HTTP and TCP probes and containers that keep restarting, on a
//! real daemon of its own (started like the integration tests' daemons), for a long time.
//!
//! ```text
//! peapod-soak [--pods 50] [--minutes 30]
//! ```
//!
//! Each pod has a `web` container (busybox httpd; an HTTP readiness probe and a TCP liveness
//! probe) and a `worker` (an exec readiness probe; it exits 1 every 20 s, so restartPolicy
//! Always restarts it with the back-off). While it runs, ExecSync and the list calls are made
//! against random pods. It prints the daemon's and the shims' resident memory, open
//! descriptors and threads at the start (all pods ready) and at the end, the restarts, and
//! every error met (a failed call, a web container restarted by its liveness probe, a pod not
//! ready at the end, an error or panic in the daemon's log, anything left after removal).
//! Exits non-zero if there was any.

use e2e::pods::{busybox, Images};
use e2e::{DaemonOptions, TestDaemon};
use peapod_proto::pods as api;
use peapod_proto::pods::pods_client::PodsClient;
use peapod_proto::v1 as cri;
use std::time::{Duration, Instant};

#[derive(Debug, Default, Clone, Copy)]
struct Usage {
    processes: usize,
    rss_kib: u64,
    fds: usize,
    threads: u64,
}

fn status_field(status: &str, field: &str) -> u64 {
    status
        .lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn usage(pids: &[u32]) -> Usage {
    let mut u = Usage::default();
    for pid in pids {
        let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
            continue;
        };
        u.processes += 1;
        u.rss_kib += status_field(&status, "VmRSS:");
        u.threads += status_field(&status, "Threads:");
        u.fds += std::fs::read_dir(format!("/proc/{pid}/fd"))
            .map(|d| d.count())
            .unwrap_or(0);
    }
    u
}

struct Figures {
    daemon: Usage,
    shims: Usage,
}

fn figures(d: &TestDaemon) -> Figures {
    let cfg = d.dir.join("config.toml");
    let daemon = e2e::host::processes_with(&format!("serve --config {}", cfg.display()));
    let shims: Vec<u32> = e2e::host::processes_with(&format!("{}/", d.state.display()))
        .into_iter()
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm"))
                .is_ok_and(|c| c.trim() == "peapod-shim")
        })
        .collect();
    Figures {
        daemon: usage(&daemon),
        shims: usage(&shims),
    }
}

fn print(label: &str, f: &Figures) {
    println!(
        "{label}: daemon rss={} KiB fds={} threads={} | shims n={} rss={} KiB ({} KiB each) fds={} threads={}",
        f.daemon.rss_kib,
        f.daemon.fds,
        f.daemon.threads,
        f.shims.processes,
        f.shims.rss_kib,
        f.shims.rss_kib / f.shims.processes.max(1) as u64,
        f.shims.fds,
        f.shims.threads
    );
}

fn manifest(n: usize, image: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: Pod
metadata: {{name: soak-{n}}}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: web
    image: {image}
    command: [sh, -c, "mkdir -p /www && echo ok > /www/index.html && exec httpd -f -p 8080 -h /www"]
    readinessProbe: {{httpGet: {{path: /index.html, port: 8080}}, periodSeconds: 2}}
    livenessProbe: {{tcpSocket: {{port: 8080}}, periodSeconds: 2, failureThreshold: 3}}
  - name: worker
    image: {image}
    command: [sh, -c, "touch /tmp/ready; sleep 20; exit 1"]
    readinessProbe: {{exec: {{command: [cat, /tmp/ready]}}, periodSeconds: 2}}
"#
    )
}

async fn pod_json(
    client: &mut PodsClient<tonic::transport::Channel>,
    n: usize,
) -> Result<serde_json::Value, String> {
    let got = client
        .get(api::GetRequest {
            namespace: "default".into(),
            name: format!("soak-{n}"),
        })
        .await
        .map_err(|e| format!("Get soak-{n}: {e}"))?;
    serde_json::from_str(&got.into_inner().pod_json).map_err(|e| format!("soak-{n} JSON: {e}"))
}

/// (web ready, web restarts, worker restarts, web container id)
fn container_summary(pod: &serde_json::Value) -> (bool, u64, u64, String) {
    let mut out = (false, 0, 0, String::new());
    for cs in pod["status"]["containerStatuses"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let restarts = cs["restartCount"].as_u64().unwrap_or(0);
        match cs["name"].as_str() {
            Some("web") => {
                out.0 = cs["ready"] == true;
                out.1 = restarts;
                out.3 = cs["containerID"]
                    .as_str()
                    .unwrap_or("")
                    .trim_start_matches("peapod://")
                    .to_string();
            }
            Some("worker") => out.2 = restarts,
            _ => {}
        }
    }
    out
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let mut pods = 50usize;
    let mut minutes = 30u64;
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it
            .next()
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or_else(|| panic!("{flag} needs a number"));
        match flag.as_str() {
            "--pods" => pods = value as usize,
            "--minutes" => minutes = value,
            other => panic!("unknown flag {other} (--pods N, --minutes N)"),
        }
    }
    let mut d = TestDaemon::start_with(
        "peapod-soak",
        DaemonOptions {
            extra_config: "[pods]\ncgroup_parent = \"{cgroup_parent}/kubepods\"\nrestart_backoff_base_seconds = 1\n".into(),
            ..Default::default()
        },
    )
    .await;
    let images = Images::start();
    let image = images.push("busybox:soak", &busybox());
    let channel = peapod_uds::client::channel(&d.socket)
        .await
        .expect("connect");
    let mut client = PodsClient::new(channel);
    let mut errors: Vec<String> = Vec::new();

    let t0 = Instant::now();
    for n in 0..pods {
        if let Err(e) = client
            .apply(api::ApplyRequest {
                namespace: "default".into(),
                manifest: manifest(n, &image).into_bytes(),
                source: "soak".into(),
            })
            .await
        {
            errors.push(format!("apply soak-{n}: {e}"));
        }
    }
    // All web containers ready (the workers come and go by design).
    let mut web_ids = vec![String::new(); pods];
    loop {
        let mut ready = 0;
        for (n, id) in web_ids.iter_mut().enumerate() {
            if let Ok(pod) = pod_json(&mut client, n).await {
                let (web_ready, _, _, cid) = container_summary(&pod);
                if web_ready {
                    ready += 1;
                    *id = cid;
                }
            }
        }
        if ready == pods {
            break;
        }
        if t0.elapsed() > Duration::from_secs(600) {
            errors.push(format!(
                "only {ready} of {pods} pods' web containers ready after 10 minutes"
            ));
            break;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    println!("{pods} pods ready in {:.1}s", t0.elapsed().as_secs_f64());
    let start = figures(&d);
    print("start", &start);

    let soak = Instant::now();
    let end_at = Duration::from_secs(minutes * 60);
    let mut calls = 0u64;
    let mut round = 0usize;
    while soak.elapsed() < end_at {
        round += 1;
        let n = round % pods;
        let id = web_ids[n].clone();
        match d
            .cri
            .runtime
            .exec_sync(cri::ExecSyncRequest {
                container_id: id.clone(),
                cmd: vec!["cat".into(), "/www/index.html".into()],
                timeout: 5,
            })
            .await
        {
            Ok(r) if r.get_ref().exit_code == 0 => {}
            Ok(r) => errors.push(format!(
                "ExecSync in soak-{n}: exit {}",
                r.get_ref().exit_code
            )),
            Err(e) => errors.push(format!("ExecSync in soak-{n}: {e}")),
        }
        if let Err(e) = d
            .cri
            .runtime
            .list_containers(cri::ListContainersRequest { filter: None })
            .await
        {
            errors.push(format!("ListContainers: {e}"));
        }
        if let Err(e) = d
            .cri
            .runtime
            .list_pod_sandbox(cri::ListPodSandboxRequest { filter: None })
            .await
        {
            errors.push(format!("ListPodSandbox: {e}"));
        }
        calls += 3;
        if round.is_multiple_of(60) {
            let f = figures(&d);
            print(&format!("after {:.0}s", soak.elapsed().as_secs_f64()), &f);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }

    let mut worker_restarts = 0;
    for n in 0..pods {
        match pod_json(&mut client, n).await {
            Ok(pod) => {
                let (web_ready, web_restarts, worker, _) = container_summary(&pod);
                worker_restarts += worker;
                if !web_ready {
                    errors.push(format!("soak-{n}: web not ready at the end"));
                }
                if web_restarts > 0 {
                    errors.push(format!(
                        "soak-{n}: web restarted {web_restarts} times (liveness)"
                    ));
                }
            }
            Err(e) => errors.push(e),
        }
    }
    let end = figures(&d);
    println!(
        "soaked {:.1} min: {calls} CRI calls beside the probes, {worker_restarts} worker restarts",
        soak.elapsed().as_secs_f64() / 60.0
    );
    print("start", &start);
    print("end  ", &end);

    for n in 0..pods {
        if let Err(e) = client
            .delete(api::DeleteRequest {
                namespace: "default".into(),
                name: format!("soak-{n}"),
                grace_period_seconds: 0,
                wait: true,
            })
            .await
        {
            errors.push(format!("delete soak-{n}: {e}"));
        }
    }
    for left in d.leftovers() {
        errors.push(format!("left after removal: {left}"));
    }
    for line in d.log().lines() {
        if line.contains(" ERROR ") || line.contains("panicked") {
            errors.push(format!("daemon log: {line}"));
        }
    }
    println!("errors: {}", errors.len());
    for e in errors.iter().take(50) {
        println!("  {e}");
    }
    drop(d);
    if !errors.is_empty() {
        std::process::exit(1);
    }
}
