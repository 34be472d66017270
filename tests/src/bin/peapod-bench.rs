//! Prints pod start-up figures for any CRI endpoint, so that peapod and containerd (or CRI-O)
//! can be measured side by side on one machine:
//!
//! ```text
//! peapod-bench [--endpoint unix:///run/peapod/peapod.sock] [--runs 20] [--cgroup-parent /peapod-bench]
//!              [--daemon-match "containerd --config"] [--shim-match containerd-shim-runc-v2]
//! ```
//!
//! For each run: RunPodSandbox is timed (until the sandbox is ready, as the CRI requires),
//! then the pod is stopped and removed (not timed). It then prints min, p50, p90 and max, the
//! ListPodSandbox latency with N pods present, and the resident memory of the daemon and of
//! the shims when they can be found by their command lines.

use e2e::fixtures::sandbox_config;
use e2e::Cri;
use peapod_proto::v1 as cri;
use std::time::{Duration, Instant};

struct Args {
    endpoint: String,
    runs: usize,
    cgroup_parent: String,
    handler: String,
    /// Command-line substrings that find the daemon's and the shims' processes.
    daemon_match: String,
    shim_match: String,
}

fn parse_args() -> Args {
    let mut a = Args {
        endpoint: "unix:///run/peapod/peapod.sock".into(),
        runs: 20,
        cgroup_parent: "/peapod-bench".into(),
        handler: String::new(),
        daemon_match: "peapod serve".into(),
        shim_match: "peapod-shim serve".into(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().unwrap_or_else(|| panic!("{flag} needs a value"));
        match flag.as_str() {
            "--endpoint" => a.endpoint = value(),
            "--runs" => a.runs = value().parse().expect("--runs is a number"),
            "--cgroup-parent" => a.cgroup_parent = value(),
            "--runtime-handler" => a.handler = value(),
            "--daemon-match" => a.daemon_match = value(),
            "--shim-match" => a.shim_match = value(),
            "-h" | "--help" => {
                println!("peapod-bench [--endpoint unix://PATH] [--runs N] [--cgroup-parent PATH] [--runtime-handler NAME] [--daemon-match CMDLINE-SUBSTRING] [--shim-match CMDLINE-SUBSTRING]");
                std::process::exit(0);
            }
            other => panic!("unknown flag {other}"),
        }
    }
    a
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx.min(sorted.len() - 1)]
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}

/// Resident set size (kB) of processes whose command line contains `needle`.
fn rss_of(needle: &str) -> Vec<(u32, u64)> {
    e2e::host::processes_with(needle)
        .into_iter()
        .filter_map(|pid| {
            let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
            let kb = status
                .lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))?
                .split_whitespace()
                .next()?
                .parse()
                .ok()?;
            Some((pid, kb))
        })
        .collect()
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let args = parse_args();
    let mut c = Cri::connect(&args.endpoint).await?;
    let v = c
        .runtime
        .version(cri::VersionRequest::default())
        .await?
        .into_inner();
    println!(
        "endpoint {} : {} {} (CRI {})",
        args.endpoint, v.runtime_name, v.runtime_version, v.runtime_api_version
    );
    let run_id = std::process::id();
    let mut times = Vec::with_capacity(args.runs);
    let mut kept = Vec::new();
    for i in 0..args.runs {
        let config = sandbox_config(&format!("bench-{run_id}-{i}"), &args.cgroup_parent);
        let start = Instant::now();
        let id = c
            .runtime
            .run_pod_sandbox(cri::RunPodSandboxRequest {
                config: Some(config),
                runtime_handler: args.handler.clone(),
            })
            .await?
            .into_inner()
            .pod_sandbox_id;
        times.push(start.elapsed());
        kept.push(id);
    }
    // Memory and list latency with all pods up.
    let list_start = Instant::now();
    let n = c
        .runtime
        .list_pod_sandbox(cri::ListPodSandboxRequest { filter: None })
        .await?
        .into_inner()
        .items
        .len();
    let list_time = list_start.elapsed();
    let daemons = rss_of(&args.daemon_match);
    let shims = rss_of(&args.shim_match);
    for id in &kept {
        c.runtime
            .stop_pod_sandbox(cri::StopPodSandboxRequest {
                pod_sandbox_id: id.clone(),
            })
            .await?;
        c.runtime
            .remove_pod_sandbox(cri::RemovePodSandboxRequest {
                pod_sandbox_id: id.clone(),
            })
            .await?;
    }
    times.sort();
    println!("RunPodSandbox over {} runs (pods kept up):", times.len());
    println!(
        "  min {}  p50 {}  p90 {}  max {}",
        ms(times[0]),
        ms(percentile(&times, 0.5)),
        ms(percentile(&times, 0.9)),
        ms(*times.last().unwrap_or(&Duration::ZERO))
    );
    println!("ListPodSandbox with {n} pods: {}", ms(list_time));
    for (pid, kb) in &daemons {
        println!("daemon pid {pid}: RSS {:.1} MB", *kb as f64 / 1024.0);
    }
    if !shims.is_empty() {
        let total: u64 = shims.iter().map(|(_, kb)| kb).sum();
        println!(
            "shims: {} processes, RSS mean {:.2} MB, max {:.2} MB",
            shims.len(),
            total as f64 / shims.len() as f64 / 1024.0,
            shims.iter().map(|(_, kb)| *kb).max().unwrap_or(0) as f64 / 1024.0
        );
    }
    Ok(())
}
