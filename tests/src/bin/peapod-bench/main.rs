//! Prints pod start-up figures for any CRI endpoint, so that peapod and containerd (or CRI-O)
//! can be measured side by side on one machine:
//!
//! ```text
//! peapod-bench [--endpoint unix:///run/peapod/peapod.sock] [--runs 20] [--cgroup-parent /peapod-bench]
//!              [--daemon-match "containerd --config"] [--shim-match containerd-shim-runc-v2]
//!              [--exec-runs 200] [--exec-image REF] [--lifecycle-runs 20] [--fleet 20]
//!              [--parallel 8] [--pull-rounds 3]
//! ```
//!
//! For each run: RunPodSandbox is timed (until the sandbox is ready, as the CRI requires),
//! then the pod is stopped and removed (not timed). It then prints min, p50, p90 and max, the
//! ListPodSandbox latency with N pods present, and the resident memory of the daemon and of
//! the shims when they can be found by their command lines.
//!
//! Then the lifecycle figures (`lifecycle.rs`): `--lifecycle-runs` pods of one `sleep`
//! container brought up one at a time (RunPodSandbox, CreateContainer, StartContainer, each
//! timed) and then stopped and removed (timed), and a fleet of `--fleet` pods brought up
//! `--parallel` at a time (wall time). 0 skips either.
//!
//! Then the exec-probe figure: one pod with one running container, and `--exec-runs` ExecSync
//! calls of `true` in it, one after the other, as the kubelet's exec probes make them; it
//! prints min, p50, p90 and max. The image is `--exec-image` if given (it must be pullable by
//! the endpoint), else a busybox image the benchmark builds and serves from a registry of its
//! own on loopback (the lifecycle figures use the same image). `--exec-runs 0` skips it.
//!
//! Last, the pull figure (`pull.rs`): a 4-layer image of about 124 MB, one layer of 20,000
//! small files, pushed to that registry and pulled and removed `--pull-rounds` times.
//!
//! With `--scale 20,300,1000` it measures a node at those pod counts instead, for one or more
//! `--target`s side by side (see `scale.rs`):
//!
//! ```text
//! peapod-bench --scale 20,300,1000 --target name=peapod,endpoint=unix:///…,daemon-pid=N
//!              --target name=containerd,endpoint=unix:///…,daemon-pid=M,shim-match=TEXT
//!              [--calls 200] [--rounds 10] [--idle-seconds 30] [--parallel 8] [--exec-calls 20]
//!              [--image REF] [--probe-seconds S]
//!              [--lifecycle-runs N] [--fleet 20] [--fleet-rounds K]
//! ```
//!
//! There `--lifecycle-runs` and `--fleet-rounds` measure the pod lifecycle of every target
//! first, the targets taking turns pod by pod and fleet by fleet (`scale/side_by_side.rs`);
//! `--scale ''` measures only that.

mod lifecycle;
mod pull;
mod scale;

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
    /// ExecSync calls for the exec-probe figure (0: none).
    exec_runs: usize,
    exec_image: Option<String>,
    /// Pods brought up one at a time (and stopped and removed) for the pod-up figure.
    lifecycle_runs: usize,
    /// Pods brought up `parallel` at a time for the fleet figure (0: none).
    fleet: usize,
    parallel: usize,
    /// Pulls of the large image (0: none).
    pull_rounds: usize,
}

/// `--scale` and its flags, if given.
fn parse_scale() -> Option<scale::ScaleArgs> {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    if !argv.iter().any(|a| a == "--scale") {
        return None;
    }
    let mut a = scale::ScaleArgs {
        levels: Vec::new(),
        targets: Vec::new(),
        calls: 200,
        rounds: 10,
        idle_seconds: 30,
        parallel: 8,
        exec_calls: 20,
        image: None,
        probe_seconds: 0,
        lifecycle: scale::side_by_side::Plan {
            pods: 0,
            fleet: 20,
            fleet_rounds: 0,
        },
    };
    let mut it = argv.into_iter();
    while let Some(flag) = it.next() {
        let mut value = || it.next().unwrap_or_else(|| panic!("{flag} needs a value"));
        let number = |v: String| -> usize { v.parse().expect("a number") };
        match flag.as_str() {
            "--scale" => {
                // Empty: no levels (the side-by-side lifecycle alone).
                a.levels = value()
                    .split(',')
                    .filter(|n| !n.trim().is_empty())
                    .map(|n| n.trim().parse().expect("--scale takes N,N,..."))
                    .collect()
            }
            "--lifecycle-runs" => a.lifecycle.pods = number(value()),
            "--fleet" => a.lifecycle.fleet = number(value()),
            "--fleet-rounds" => a.lifecycle.fleet_rounds = number(value()),
            "--target" => a.targets.push(scale::parse_target(&value())),
            "--calls" => a.calls = number(value()),
            "--rounds" => a.rounds = number(value()),
            "--idle-seconds" => a.idle_seconds = number(value()) as u64,
            "--parallel" => a.parallel = number(value()),
            "--exec-calls" => a.exec_calls = number(value()),
            "--image" => a.image = Some(value()),
            "--probe-seconds" => a.probe_seconds = number(value()) as u64,
            other => panic!("unknown flag {other} (with --scale)"),
        }
    }
    assert!(!a.targets.is_empty(), "--scale needs at least one --target");
    Some(a)
}

fn parse_args() -> Args {
    let mut a = Args {
        endpoint: "unix:///run/peapod/peapod.sock".into(),
        runs: 20,
        cgroup_parent: "/peapod-bench".into(),
        handler: String::new(),
        daemon_match: "peapod serve".into(),
        shim_match: "peapod-shim serve".into(),
        exec_runs: 200,
        exec_image: None,
        lifecycle_runs: 20,
        fleet: 20,
        parallel: 8,
        pull_rounds: 3,
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
            "--exec-runs" => a.exec_runs = value().parse().expect("--exec-runs is a number"),
            "--exec-image" => a.exec_image = Some(value()),
            "--lifecycle-runs" => a.lifecycle_runs = value().parse().expect("a number"),
            "--fleet" => a.fleet = value().parse().expect("--fleet is a number"),
            "--parallel" => a.parallel = value().parse().expect("--parallel is a number"),
            "--pull-rounds" => a.pull_rounds = value().parse().expect("a number"),
            "-h" | "--help" => {
                println!("peapod-bench [--endpoint unix://PATH] [--runs N] [--cgroup-parent PATH] [--runtime-handler NAME] [--daemon-match CMDLINE-SUBSTRING] [--shim-match CMDLINE-SUBSTRING] [--exec-runs N] [--exec-image REF] [--lifecycle-runs N] [--fleet N] [--parallel N] [--pull-rounds N]");
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

/// Memory of one process, in kB: resident (RSS, counting shared library and binary pages in
/// full), proportional (PSS, shared pages divided among their users) and private (what the
/// process alone costs), and of the resident pages those that are anonymous (heap and stacks,
/// not the program's file).
#[derive(Debug, Clone, Copy, Default)]
struct Mem {
    rss: u64,
    pss: u64,
    private: u64,
    anon: u64,
}

fn mem_of(pid: u32) -> Option<Mem> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).ok()?;
    let field = |name: &str| -> u64 {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap_or(0)
    };
    Some(Mem {
        rss: field("Rss:"),
        pss: field("Pss:"),
        private: field("Private_Clean:") + field("Private_Dirty:"),
        anon: field("Anonymous:"),
    })
}

/// Memory of the processes whose command line contains `needle`.
fn mem_matching(needle: &str) -> Vec<(u32, Mem)> {
    e2e::host::processes_with(needle)
        .into_iter()
        .filter_map(|pid| Some((pid, mem_of(pid)?)))
        .collect()
}

fn mb(kb: u64) -> f64 {
    kb as f64 / 1024.0
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    if let Some(scale) = parse_scale() {
        return scale::run(scale).await;
    }
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
    let daemons = mem_matching(&args.daemon_match);
    let shims = mem_matching(&args.shim_match);
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
    // `--runs 0`: only the exec-probe figure.
    if let (Some(min), Some(max)) = (times.first(), times.last()) {
        println!("RunPodSandbox over {} runs (pods kept up):", times.len());
        println!(
            "  min {}  p50 {}  p90 {}  max {}",
            ms(*min),
            ms(percentile(&times, 0.5)),
            ms(percentile(&times, 0.9)),
            ms(*max)
        );
        println!("ListPodSandbox with {n} pods: {}", ms(list_time));
    }
    // Kept alive until the end: the registry serves the images while they are pulled.
    let mut registry = None;
    let needs_image = args.exec_runs > 0 || args.lifecycle_runs > 0 || args.fleet > 0;
    let image_ref = match &args.exec_image {
        Some(reference) if needs_image => Some(pull(&mut c, reference).await?),
        _ if needs_image || args.pull_rounds > 0 => {
            let images = e2e::pods::Images::start();
            let reference = images.push("bench/busybox:1", &e2e::pods::busybox());
            registry = Some(images);
            Some(pull(&mut c, &reference).await?)
        }
        _ => None,
    };
    if let Some(image_ref) = &image_ref {
        if args.lifecycle_runs > 0 || args.fleet > 0 {
            let a = lifecycle::LifecycleArgs {
                runs: args.lifecycle_runs,
                fleet: args.fleet,
                parallel: args.parallel,
                cgroup_parent: &args.cgroup_parent,
                handler: &args.handler,
                image: image_ref,
            };
            lifecycle::run(&c, &a, run_id).await?;
        }
        if args.exec_runs > 0 {
            exec_probe(&mut c, &args, run_id, image_ref).await?;
        }
    }
    if args.pull_rounds > 0 {
        let images = registry.get_or_insert_with(e2e::pods::Images::start);
        let reference = images.push("bench/large:1", &pull::image());
        pull::run(&mut c, &reference, args.pull_rounds, &args.daemon_match).await?;
    }
    drop(registry);
    for (pid, m) in &daemons {
        println!(
            "daemon pid {pid}: RSS {:.1} MB, PSS {:.1} MB, private {:.1} MB, anonymous {:.1} MB",
            mb(m.rss),
            mb(m.pss),
            mb(m.private),
            mb(m.anon)
        );
    }
    if !shims.is_empty() {
        let n = shims.len() as u64;
        let sum = |f: fn(&Mem) -> u64| shims.iter().map(|(_, m)| f(m)).sum::<u64>();
        println!(
            "shims: {n} processes, mean per shim: RSS {:.2} MB, PSS {:.2} MB, private {:.2} MB, anonymous {:.2} MB",
            mb(sum(|m| m.rss) / n),
            mb(sum(|m| m.pss) / n),
            mb(sum(|m| m.private) / n),
            mb(sum(|m| m.anon) / n)
        );
    }
    Ok(())
}

/// ExecSync `true` `args.exec_runs` times in one running container; prints the latencies.
/// PullImage of `image`; its image ref.
async fn pull(c: &mut Cri, image: &str) -> Result<String, tonic::Status> {
    let req = cri::PullImageRequest {
        image: Some(cri::ImageSpec {
            image: image.to_string(),
            ..Default::default()
        }),
        ..Default::default()
    };
    Ok(c.image.pull_image(req).await?.into_inner().image_ref)
}

async fn exec_probe(c: &mut Cri, args: &Args, run_id: u32, image_ref: &str) -> anyhow::Result<()> {
    let config = sandbox_config(&format!("bench-exec-{run_id}"), &args.cgroup_parent);
    let pod = c
        .runtime
        .run_pod_sandbox(cri::RunPodSandboxRequest {
            config: Some(config.clone()),
            runtime_handler: args.handler.clone(),
        })
        .await?
        .into_inner()
        .pod_sandbox_id;
    let result = exec_probe_in(c, args, &pod, &config, image_ref).await;
    c.runtime
        .stop_pod_sandbox(cri::StopPodSandboxRequest {
            pod_sandbox_id: pod.clone(),
        })
        .await?;
    c.runtime
        .remove_pod_sandbox(cri::RemovePodSandboxRequest {
            pod_sandbox_id: pod,
        })
        .await?;
    let mut times = result?;
    times.sort();
    println!(
        "ExecSync `true` over {} calls in one running container:",
        times.len()
    );
    println!(
        "  min {}  p50 {}  p90 {}  max {}",
        ms(times[0]),
        ms(percentile(&times, 0.5)),
        ms(percentile(&times, 0.9)),
        ms(*times.last().unwrap_or(&Duration::ZERO))
    );
    Ok(())
}

async fn exec_probe_in(
    c: &mut Cri,
    args: &Args,
    pod: &str,
    pod_config: &cri::PodSandboxConfig,
    image: &str,
) -> anyhow::Result<Vec<Duration>> {
    let container = e2e::pods::container("probed", image, &["sleep"], &["100000"]);
    let id = c
        .runtime
        .create_container(cri::CreateContainerRequest {
            pod_sandbox_id: pod.to_string(),
            config: Some(container),
            sandbox_config: Some(pod_config.clone()),
        })
        .await?
        .into_inner()
        .container_id;
    c.runtime
        .start_container(cri::StartContainerRequest {
            container_id: id.clone(),
        })
        .await?;
    let mut times = Vec::with_capacity(args.exec_runs);
    for _ in 0..args.exec_runs {
        let start = Instant::now();
        let out = c
            .runtime
            .exec_sync(cri::ExecSyncRequest {
                container_id: id.clone(),
                cmd: vec!["true".into()],
                timeout: 10,
            })
            .await?
            .into_inner();
        times.push(start.elapsed());
        anyhow::ensure!(out.exit_code == 0, "`true` exited {}", out.exit_code);
    }
    Ok(times)
}
