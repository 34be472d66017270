//! Load: 100 pods at concurrency 20, each through the whole churn a kubelet drives
//! (RunPodSandbox, CreateContainer, StartContainer, StopContainer, RemoveContainer,
//! StopPodSandbox, RemovePodSandbox) on the real daemon, runc and CNI. Every call succeeds,
//! and afterwards nothing is left: mounts, netns pins, veths, IPAM reservations, cgroups,
//! shims and other processes, directories — each counted. Timings are printed, never asserted.

use e2e::fixtures::sandbox_config;
use e2e::pods::{busybox, sh, Images};
use e2e::TestDaemon;
use peapod_proto::v1 as cri;
use std::sync::Arc;
use std::time::{Duration, Instant};

const PODS: usize = 100;
const CONCURRENCY: usize = 20;
const STEPS: [&str; 7] = [
    "RunPodSandbox",
    "CreateContainer",
    "StartContainer",
    "StopContainer",
    "RemoveContainer",
    "StopPodSandbox",
    "RemovePodSandbox",
];

/// One pod's churn: the duration of each step, or the step that failed and why.
async fn churn(
    mut c: e2e::Cri,
    n: usize,
    image: String,
    cgroup_parent: String,
    log_dir: std::path::PathBuf,
) -> Result<[Duration; 7], String> {
    let mut took = [Duration::ZERO; 7];
    let mut step = 0;
    let mut clock = Instant::now();
    let mut lap = |took: &mut [Duration; 7], step: &mut usize| {
        took[*step] = clock.elapsed();
        clock = Instant::now();
        *step += 1;
    };
    let fail = |step: usize, e: tonic::Status| format!("pod {n}: {}: {e}", STEPS[step]);

    let name = format!("load-{n}");
    let mut config = sandbox_config(&name, &cgroup_parent);
    config.log_directory = log_dir.join(&name).display().to_string();
    let pod_id = c
        .runtime
        .run_pod_sandbox(cri::RunPodSandboxRequest {
            config: Some(config.clone()),
            runtime_handler: String::new(),
        })
        .await
        .map_err(|e| fail(step, e))?
        .into_inner()
        .pod_sandbox_id;
    lap(&mut took, &mut step);

    // A process that ends on SIGTERM, as a well-behaved app does.
    let container = sh(
        "app",
        &image,
        "trap 'exit 0' TERM; while true; do sleep 1; done",
    );
    let id = c
        .runtime
        .create_container(cri::CreateContainerRequest {
            pod_sandbox_id: pod_id.clone(),
            config: Some(container),
            sandbox_config: Some(config),
        })
        .await
        .map_err(|e| fail(step, e))?
        .into_inner()
        .container_id;
    lap(&mut took, &mut step);

    c.runtime
        .start_container(cri::StartContainerRequest {
            container_id: id.clone(),
        })
        .await
        .map_err(|e| fail(step, e))?;
    lap(&mut took, &mut step);

    c.runtime
        .stop_container(cri::StopContainerRequest {
            container_id: id.clone(),
            timeout: 10,
        })
        .await
        .map_err(|e| fail(step, e))?;
    lap(&mut took, &mut step);

    c.runtime
        .remove_container(cri::RemoveContainerRequest {
            container_id: id.clone(),
        })
        .await
        .map_err(|e| fail(step, e))?;
    lap(&mut took, &mut step);

    c.runtime
        .stop_pod_sandbox(cri::StopPodSandboxRequest {
            pod_sandbox_id: pod_id.clone(),
        })
        .await
        .map_err(|e| fail(step, e))?;
    lap(&mut took, &mut step);

    c.runtime
        .remove_pod_sandbox(cri::RemovePodSandboxRequest {
            pod_sandbox_id: pod_id,
        })
        .await
        .map_err(|e| fail(step, e))?;
    lap(&mut took, &mut step);
    Ok(took)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn ms(d: Duration) -> String {
    format!("{:.0} ms", d.as_secs_f64() * 1000.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_hundred_pods_churn_at_concurrency_twenty_without_errors_or_leaks() {
    let mut d = TestDaemon::start("load").await;
    let images = Images::start();
    let image = images.push("busybox:load", &busybox());
    d.pull(&image).await;

    let gate = Arc::new(tokio::sync::Semaphore::new(CONCURRENCY));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for n in 0..PODS {
        let gate = gate.clone();
        let c = d.cri.clone();
        let image = image.clone();
        let parent = d.cgroup_parent.clone();
        let logs = d.dir.join("logs");
        tasks.push(tokio::spawn(async move {
            let _slot = gate.acquire_owned().await.expect("semaphore");
            let began = Instant::now();
            churn(c, n, image, parent, logs)
                .await
                .map(|steps| (began.elapsed(), steps))
        }));
    }
    let mut per_pod = Vec::new();
    let mut per_step: Vec<Vec<Duration>> = vec![Vec::new(); STEPS.len()];
    let mut errors = Vec::new();
    for t in tasks {
        match t.await.expect("pod task") {
            Ok((total, steps)) => {
                per_pod.push(total);
                for (i, s) in steps.iter().enumerate() {
                    per_step[i].push(*s);
                }
            }
            Err(e) => errors.push(e),
        }
    }
    let total = started.elapsed();
    per_pod.sort();
    println!(
        "load: {PODS} pods at concurrency {CONCURRENCY}: total {:.1} s, {} errors; per pod p50 {} p95 {} max {}",
        total.as_secs_f64(),
        errors.len(),
        ms(percentile(&per_pod, 0.5)),
        ms(percentile(&per_pod, 0.95)),
        ms(per_pod.last().copied().unwrap_or_default()),
    );
    for (i, mut v) in per_step.into_iter().enumerate() {
        v.sort();
        println!(
            "load:   {:<17} p50 {:>7} p95 {:>7}",
            STEPS[i],
            ms(percentile(&v, 0.5)),
            ms(percentile(&v, 0.95))
        );
    }
    assert!(
        errors.is_empty(),
        "{} of {PODS} pods failed:\n{}\n{}",
        errors.len(),
        errors.join("\n"),
        d.log()
    );

    // Nothing leaked: the daemon's tables are empty, and so is the host. Each kind is counted
    // (and printed) so that a leak says what leaked.
    let pods = d
        .cri
        .runtime
        .list_pod_sandbox(cri::ListPodSandboxRequest { filter: None })
        .await
        .unwrap()
        .into_inner()
        .items;
    let containers = d
        .cri
        .runtime
        .list_containers(cri::ListContainersRequest { filter: None })
        .await
        .unwrap()
        .into_inner()
        .containers;
    let leftovers = d.leftovers();
    let count = |kind: &str| leftovers.iter().filter(|l| l.starts_with(kind)).count();
    let shims = e2e::host::processes_with("peapod-shim")
        .into_iter()
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .map(|c| String::from_utf8_lossy(&c).contains(&d.state.display().to_string()))
                .unwrap_or(false)
        })
        .count();
    println!(
        "load: after: {} pods, {} containers listed; mounts {}, netns files {}, veths {}, IP reservations {}, cgroups {}, processes {} (shims {}), directories {}",
        pods.len(),
        containers.len(),
        count("mount"),
        count("netns file"),
        count("veth"),
        count("IP reservation"),
        count("cgroup"),
        count("process"),
        shims,
        count("directory"),
    );
    assert!(pods.is_empty(), "{pods:#?}");
    assert!(containers.is_empty(), "{containers:#?}");
    assert_eq!(shims, 0);
    assert!(leftovers.is_empty(), "{leftovers:#?}");
}
