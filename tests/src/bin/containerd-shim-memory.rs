//! Per-pod shim memory under one containerd, `containerd-shim-peapod-v2` against Debian's
//! `containerd-shim-runc-v2`, measured in one run:
//!
//! ```text
//! containerd-shim-memory [--pods N]     (default 5; needs root, containerd, the workspace built)
//! ```
//!
//! It starts a private containerd (the integration tests' harness) with both runtimes, runs N
//! pods on each (a sandbox plus one `sleep` container, so every shim holds two containers),
//! and prints the mean RSS, PSS and private memory per shim from /proc/PID/smaps_rollup while
//! all pods are up. Then it removes everything.

use e2e::containerd::{Containerd, Version, BUSYBOX};
use e2e::fixtures::sandbox_config;
use e2e::pods::sh;
use peapod_proto::v1 as cri;

/// Memory of one process, in kB.
#[derive(Default)]
struct Mem {
    rss: u64,
    pss: u64,
    private: u64,
}

fn mem(pid: u32) -> Option<Mem> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).ok()?;
    let field = |name: &str| -> u64 {
        text.lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    Some(Mem {
        rss: field("Rss:"),
        pss: field("Pss:"),
        private: field("Private_Clean:") + field("Private_Dirty:"),
    })
}

/// Shim processes of `ctd` whose command line starts with `program`.
fn shims_named(ctd: &Containerd, program: &str) -> Vec<u32> {
    ctd.shims()
        .into_iter()
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .map(|c| {
                    let first = c.split(|b| *b == 0).next().unwrap_or_default();
                    String::from_utf8_lossy(first).ends_with(program)
                })
                .unwrap_or(false)
        })
        .collect()
}

async fn run_pods(ctd: &mut Containerd, handler: &str, n: usize) -> anyhow::Result<Vec<String>> {
    let mut pods = Vec::new();
    for i in 0..n {
        let config = sandbox_config(&format!("mem-{handler}-{i}"), &ctd.cgroup_parent);
        let pod = ctd
            .cri
            .runtime
            .run_pod_sandbox(cri::RunPodSandboxRequest {
                config: Some(config.clone()),
                runtime_handler: handler.to_string(),
            })
            .await?
            .into_inner()
            .pod_sandbox_id;
        let id = ctd
            .cri
            .runtime
            .create_container(cri::CreateContainerRequest {
                pod_sandbox_id: pod.clone(),
                config: Some(sh("app", BUSYBOX, "exec sleep 100000")),
                sandbox_config: Some(config),
            })
            .await?
            .into_inner()
            .container_id;
        ctd.cri
            .runtime
            .start_container(cri::StartContainerRequest { container_id: id })
            .await?;
        pods.push(pod);
    }
    Ok(pods)
}

fn report(name: &str, pids: &[u32]) {
    let mems: Vec<Mem> = pids.iter().filter_map(|p| mem(*p)).collect();
    if mems.is_empty() {
        println!("{name}: no shim processes found");
        return;
    }
    let n = mems.len() as f64;
    let mean = |f: fn(&Mem) -> u64| mems.iter().map(f).sum::<u64>() as f64 / n / 1024.0;
    println!(
        "{name}: {} shims, mean per shim: RSS {:.2} MB, PSS {:.2} MB, private {:.2} MB",
        mems.len(),
        mean(|m| m.rss),
        mean(|m| m.pss),
        mean(|m| m.private)
    );
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let mut pods_per_runtime = 5;
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        match flag.as_str() {
            "--pods" => {
                pods_per_runtime = args
                    .next()
                    .and_then(|v| v.parse().ok())
                    .ok_or_else(|| anyhow::anyhow!("--pods needs a number"))?
            }
            other => {
                anyhow::bail!("unknown flag {other} (usage: containerd-shim-memory [--pods N])")
            }
        }
    }
    let mut ctd = Containerd::start(Version::Debian, "peapod").await;
    let mut pods = run_pods(&mut ctd, "peapod", pods_per_runtime).await?;
    pods.extend(run_pods(&mut ctd, "runc", pods_per_runtime).await?);
    println!(
        "containerd 1.6 (Debian), {pods_per_runtime} pods per runtime, each a sandbox and one container:"
    );
    report(
        "containerd-shim-peapod-v2",
        &shims_named(&ctd, "containerd-shim-peapod-v2"),
    );
    report(
        "containerd-shim-runc-v2",
        &shims_named(&ctd, "containerd-shim-runc-v2"),
    );
    for pod in pods {
        ctd.cri
            .runtime
            .stop_pod_sandbox(cri::StopPodSandboxRequest {
                pod_sandbox_id: pod.clone(),
            })
            .await?;
        ctd.cri
            .runtime
            .remove_pod_sandbox(cri::RemovePodSandboxRequest {
                pod_sandbox_id: pod,
            })
            .await?;
    }
    Ok(())
}
