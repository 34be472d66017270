//! `peapod-bench --scale 20,300,1000 --target … --target …`: the node at N pods, for several
//! CRI endpoints side by side in one run.
//!
//! Each target (`--target name=peapod,endpoint=unix:///…,daemon-pid=PID,shim-match=TEXT,
//! cgroup-parent=/…`) is grown to each level in turn: pods shaped as the kubelet makes them
//! (its labels and annotations), each with one running container (`sleep`), `--parallel` at
//! a time. At each level, with every target holding that many pods:
//!
//! - idle: the CPU time and the context switches of each daemon and of all its shims over
//!   `--idle-seconds` in which nobody calls them (both targets idle in the same window);
//! - memory: the daemon's RSS (anonymous and file-backed) and PSS, the shims' mean PSS;
//! - latency, interleaved (a round of every call kind on each target, `--rounds` times, so
//!   that the machine's other load falls on both alike): ListPodSandbox and ListContainers
//!   as the kubelet's relist makes them (an empty filter), their Stream* forms,
//!   ListContainers of one pod, PodSandboxStatus and ContainerStatus of a random pod, and
//!   Version; then `--exec-calls` ExecSync `true`, every other one in a random container and
//!   the rest in one already exec'd earlier in the run (as a probe is: the same container
//!   again, other work in between), told apart: a runtime may keep something per container
//!   after its first exec (peapod's resident exec helper). p50 and p99 each.
//!
//! Memory per added pod is the daemon's RSS growth between levels over the pods added. A
//! target that cannot grow to a level (a limit of the machine) stops there, says so, and is
//! measured at what it holds. At the end every pod is stopped and removed.

mod probes;
pub mod side_by_side;
mod undecoded;

use e2e::Cri;
use peapod_proto::v1 as cri;
use prost::Message as _;
use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::time::{Duration, Instant};

pub struct Target {
    pub name: String,
    pub endpoint: String,
    pub daemon_pid: Option<u32>,
    pub daemon_match: String,
    pub shim_match: String,
    pub cgroup_parent: String,
    pub handler: String,
}

pub struct ScaleArgs {
    pub levels: Vec<usize>,
    pub targets: Vec<Target>,
    /// Calls of each kind per target and level (spread over the rounds).
    pub calls: usize,
    pub rounds: usize,
    pub idle_seconds: u64,
    pub parallel: usize,
    pub exec_calls: usize,
    pub image: Option<String>,
    /// Seconds of exec probes on every pod at each level (0: none; `probes.rs`).
    pub probe_seconds: u64,
    /// The pod lifecycle side by side, before the levels (`side_by_side.rs`).
    pub lifecycle: side_by_side::Plan,
}

/// `name=x,endpoint=unix://…,daemon-pid=N,daemon-match=TEXT,shim-match=TEXT,cgroup-parent=/p,
/// runtime-handler=H`.
pub fn parse_target(spec: &str) -> Target {
    let mut t = Target {
        name: String::new(),
        endpoint: String::new(),
        daemon_pid: None,
        daemon_match: "peapod serve".into(),
        shim_match: "peapod-shim serve".into(),
        cgroup_parent: "/peapod-bench-scale".into(),
        handler: String::new(),
    };
    for kv in spec.split(',') {
        let (k, v) = kv
            .split_once('=')
            .unwrap_or_else(|| panic!("--target: {kv:?} is not key=value"));
        match k {
            "name" => t.name = v.into(),
            "endpoint" => t.endpoint = v.into(),
            "daemon-pid" => t.daemon_pid = Some(v.parse().expect("daemon-pid is a number")),
            "daemon-match" => t.daemon_match = v.into(),
            "shim-match" => t.shim_match = v.into(),
            "cgroup-parent" => t.cgroup_parent = v.into(),
            "runtime-handler" => t.handler = v.into(),
            other => panic!("--target: unknown key {other}"),
        }
    }
    assert!(!t.endpoint.is_empty(), "--target needs endpoint=");
    if t.name.is_empty() {
        t.name = t.endpoint.clone();
    }
    t
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum Call {
    ListPods,
    ListContainers,
    /// The same calls, their answers taken as bytes ([`undecoded`]).
    ListPodsUndecoded,
    ListContainersUndecoded,
    StreamPods,
    StreamContainers,
    ListContainersOfPod,
    PodStatus,
    ContainerStatus,
    Version,
    /// In a container exec'd before in this run.
    ExecSync,
    /// In a container not exec'd before.
    ExecSyncFirst,
}

impl Call {
    const MEASURED: [Call; 10] = [
        Call::ListPods,
        Call::ListContainers,
        Call::ListPodsUndecoded,
        Call::ListContainersUndecoded,
        Call::StreamPods,
        Call::StreamContainers,
        Call::ListContainersOfPod,
        Call::PodStatus,
        Call::ContainerStatus,
        Call::Version,
    ];

    fn label(self) -> &'static str {
        match self {
            Call::ListPods => "ListPodSandbox",
            Call::ListContainers => "ListContainers",
            Call::ListPodsUndecoded => "ListPodSandbox, answer not decoded",
            Call::ListContainersUndecoded => "ListContainers, answer not decoded",
            Call::StreamPods => "StreamPodSandboxes",
            Call::StreamContainers => "StreamContainers",
            Call::ListContainersOfPod => "ListContainers of one pod",
            Call::PodStatus => "PodSandboxStatus",
            Call::ContainerStatus => "ContainerStatus",
            Call::Version => "Version",
            Call::ExecSync => "ExecSync `true` again",
            Call::ExecSyncFirst => "ExecSync `true` first",
        }
    }
}

/// One target while the benchmark runs.
pub struct Live {
    pub cri: Cri,
    /// (pod id, container id) of every pod made, in order.
    pub pods: Vec<(String, String)>,
    image: String,
    /// Where it stopped growing, and why.
    full: Option<String>,
    /// Calls it does not implement.
    unimplemented: Vec<Call>,
    /// Containers exec'd in so far.
    execd: Vec<String>,
}

/// What one level measured of one target.
#[derive(Default, Clone)]
struct Figures {
    pods: usize,
    grow: Option<(usize, Duration)>,
    lat: BTreeMap<Call, Vec<Duration>>,
    daemon: Option<super::Mem>,
    daemon_anon_kb: u64,
    shims: usize,
    shim_pss_mean_kb: u64,
    idle_daemon_cpu: f64,
    idle_shims_cpu: f64,
    idle_daemon_switches: f64,
    idle_shims_switches: f64,
    /// Size of the list answers and the time this client takes to decode them (median).
    decode: Vec<(Call, usize, Duration)>,
}

/// A small deterministic generator (no dependency, same picks for every target).
struct Lcg(u64);
impl Lcg {
    fn below(&mut self, n: usize) -> usize {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((self.0 >> 33) as usize) % n.max(1)
    }
}

fn pod_config(run: u32, i: usize, parent: &str) -> cri::PodSandboxConfig {
    let name = format!("scale-{run}-{i}");
    let uid = format!("{run:08x}-0000-4000-8000-{i:012}");
    cri::PodSandboxConfig {
        metadata: Some(cri::PodSandboxMetadata {
            name: name.clone(),
            uid: uid.clone(),
            namespace: "bench".into(),
            attempt: 0,
        }),
        hostname: name.clone(),
        dns_config: Some(cri::DnsConfig {
            servers: vec!["10.96.0.10".into()],
            searches: vec![
                "bench.svc.cluster.local".into(),
                "svc.cluster.local".into(),
                "cluster.local".into(),
            ],
            options: vec!["ndots:5".into()],
        }),
        // What the kubelet puts on every sandbox, plus a workload's own labels.
        labels: HashMap::from([
            ("app".to_string(), "scale".to_string()),
            ("pod-template-hash".to_string(), "5d9c8b7f6".to_string()),
            ("io.kubernetes.pod.name".to_string(), name.clone()),
            (
                "io.kubernetes.pod.namespace".to_string(),
                "bench".to_string(),
            ),
            ("io.kubernetes.pod.uid".to_string(), uid),
        ]),
        annotations: HashMap::from([
            (
                "kubernetes.io/config.seen".to_string(),
                "2026-01-01T00:00:00.000000000Z".to_string(),
            ),
            ("kubernetes.io/config.source".to_string(), "api".to_string()),
        ]),
        linux: Some(cri::LinuxPodSandboxConfig {
            cgroup_parent: parent.to_string(),
            security_context: Some(cri::LinuxSandboxSecurityContext {
                namespace_options: Some(cri::NamespaceOption {
                    network: cri::NamespaceMode::Pod as i32,
                    pid: cri::NamespaceMode::Container as i32,
                    ipc: cri::NamespaceMode::Pod as i32,
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn container_config(pod: &cri::PodSandboxConfig, image: &str) -> cri::ContainerConfig {
    let mut c = e2e::pods::container("app", image, &["sleep"], &["1000000"]);
    c.log_path = String::new();
    let m = pod.metadata.clone().unwrap_or_default();
    c.labels = HashMap::from([
        (
            "io.kubernetes.container.name".to_string(),
            "app".to_string(),
        ),
        ("io.kubernetes.pod.name".to_string(), m.name),
        ("io.kubernetes.pod.namespace".to_string(), m.namespace),
        ("io.kubernetes.pod.uid".to_string(), m.uid),
    ]);
    c.annotations = HashMap::from([
        (
            "io.kubernetes.container.hash".to_string(),
            "7a1c3e2d".to_string(),
        ),
        (
            "io.kubernetes.container.restartCount".to_string(),
            "0".to_string(),
        ),
        (
            "io.kubernetes.container.terminationMessagePath".to_string(),
            "/dev/termination-log".to_string(),
        ),
        (
            "io.kubernetes.container.terminationMessagePolicy".to_string(),
            "File".to_string(),
        ),
        (
            "io.kubernetes.pod.terminationGracePeriod".to_string(),
            "30".to_string(),
        ),
    ]);
    c
}

/// How long each call of bringing a pod up took.
pub struct Phases {
    pub run: Duration,
    pub create: Duration,
    pub start: Duration,
}

async fn up_one(
    c: Cri,
    run: u32,
    i: usize,
    parent: String,
    handler: String,
    image: String,
) -> anyhow::Result<(String, String)> {
    Ok(up_one_timed(c, run, i, parent, handler, image).await?.1)
}

/// Pod `i` of run `run` with its one container, up and running; each call timed.
pub async fn up_one_timed(
    mut c: Cri,
    run: u32,
    i: usize,
    parent: String,
    handler: String,
    image: String,
) -> anyhow::Result<(Phases, (String, String))> {
    let config = pod_config(run, i, &parent);
    let t = Instant::now();
    let pod = c
        .runtime
        .run_pod_sandbox(cri::RunPodSandboxRequest {
            config: Some(config.clone()),
            runtime_handler: handler,
        })
        .await?
        .into_inner()
        .pod_sandbox_id;
    let run_took = t.elapsed();
    let t = Instant::now();
    let ctr = c
        .runtime
        .create_container(cri::CreateContainerRequest {
            pod_sandbox_id: pod.clone(),
            config: Some(container_config(&config, &image)),
            sandbox_config: Some(config),
        })
        .await?
        .into_inner()
        .container_id;
    let create = t.elapsed();
    let t = Instant::now();
    c.runtime
        .start_container(cri::StartContainerRequest {
            container_id: ctr.clone(),
        })
        .await?;
    let phases = Phases {
        run: run_took,
        create,
        start: t.elapsed(),
    };
    Ok((phases, (pod, ctr)))
}

pub async fn down_one(c: Cri, pod: String) -> anyhow::Result<()> {
    down_one_timed(c, pod).await.map(drop)
}

/// StopPodSandbox then RemovePodSandbox of `pod`; how long each took.
pub async fn down_one_timed(mut c: Cri, pod: String) -> anyhow::Result<(Duration, Duration)> {
    let t = Instant::now();
    c.runtime
        .stop_pod_sandbox(cri::StopPodSandboxRequest {
            pod_sandbox_id: pod.clone(),
        })
        .await?;
    let stop = t.elapsed();
    let t = Instant::now();
    c.runtime
        .remove_pod_sandbox(cri::RemovePodSandboxRequest {
            pod_sandbox_id: pod,
        })
        .await?;
    Ok((stop, t.elapsed()))
}

/// Pods `from..to` of run `run` brought up on `c`, `parallel` at a time, stopping at the
/// first failure: the (pod, container) ids of those that came up, and why one did not.
pub async fn up_parallel(
    c: &Cri,
    run: u32,
    pods: std::ops::Range<usize>,
    parallel: usize,
    parent: &str,
    handler: &str,
    image: &str,
) -> (Vec<(String, String)>, Option<String>) {
    let mut set = tokio::task::JoinSet::new();
    let mut next = pods.start;
    let mut up = Vec::with_capacity(pods.len());
    let mut failed = None;
    loop {
        while failed.is_none() && set.len() < parallel.max(1) && next < pods.end {
            set.spawn(up_one(
                c.clone(),
                run,
                next,
                parent.to_string(),
                handler.to_string(),
                image.to_string(),
            ));
            next += 1;
        }
        match set.join_next().await {
            None => break,
            Some(Ok(Ok(ids))) => up.push(ids),
            Some(Ok(Err(e))) => failed = Some(e.to_string()),
            Some(Err(e)) => failed = Some(e.to_string()),
        }
    }
    (up, failed)
}

/// Grows `live` to `to` pods, `parallel` at a time; stops at the first failure (recorded in
/// `live.full`). Returns the time it took.
async fn grow(t: &Target, live: &mut Live, to: usize, parallel: usize, run: u32) -> Duration {
    let start = Instant::now();
    let from = live.pods.len();
    let (up, failed) = up_parallel(
        &live.cri,
        run,
        from..to.max(from),
        parallel,
        &t.cgroup_parent,
        &t.handler,
        &live.image,
    )
    .await;
    live.pods.extend(up);
    if let Some(why) = failed {
        eprintln!(
            "{}: could not grow past {} pods: {why}",
            t.name,
            live.pods.len()
        );
        live.full = Some(why);
    }
    start.elapsed()
}

/// ExecSync `true` in container `ctr`.
pub async fn exec_true(c: &mut Cri, ctr: String) -> anyhow::Result<()> {
    let r = c
        .runtime
        .exec_sync(cri::ExecSyncRequest {
            container_id: ctr,
            cmd: vec!["true".into()],
            timeout: 10,
        })
        .await?
        .into_inner();
    anyhow::ensure!(r.exit_code == 0, "ExecSync true exited {}", r.exit_code);
    Ok(())
}

/// One call of `kind`; Ok(false) when the target does not implement it.
async fn call_once(live: &mut Live, kind: Call, rng: &mut Lcg) -> anyhow::Result<bool> {
    let n = live.pods.len();
    let (pod, ctr) = live.pods[rng.below(n)].clone();
    let c = &mut live.cri;
    let res: Result<(), tonic::Status> = match kind {
        Call::ListPods => c
            .runtime
            .list_pod_sandbox(cri::ListPodSandboxRequest {
                filter: Some(Default::default()),
            })
            .await
            .map(|r| assert!(r.into_inner().items.len() >= n)),
        Call::ListContainers => c
            .runtime
            .list_containers(cri::ListContainersRequest {
                filter: Some(Default::default()),
            })
            .await
            .map(|r| assert!(r.into_inner().containers.len() >= n)),
        Call::ListPodsUndecoded => undecoded::list_pod_sandbox(&c.channel)
            .await
            .map(|b| assert!(b.len() >= n * 64, "{} bytes for {n} pods", b.len())),
        Call::ListContainersUndecoded => undecoded::list_containers(&c.channel)
            .await
            .map(|b| assert!(b.len() >= n * 64, "{} bytes for {n} containers", b.len())),
        Call::ListContainersOfPod => c
            .runtime
            .list_containers(cri::ListContainersRequest {
                filter: Some(cri::ContainerFilter {
                    pod_sandbox_id: pod,
                    ..Default::default()
                }),
            })
            .await
            .map(|r| assert_eq!(r.into_inner().containers.len(), 1)),
        Call::StreamPods => match c
            .runtime
            .stream_pod_sandboxes(cri::StreamPodSandboxesRequest {
                filter: Some(Default::default()),
            })
            .await
        {
            Ok(s) => read_stream(s.into_inner(), n, |m| m.pod_sandboxes.len()).await,
            Err(e) => Err(e),
        },
        Call::StreamContainers => match c
            .runtime
            .stream_containers(cri::StreamContainersRequest {
                filter: Some(Default::default()),
            })
            .await
        {
            Ok(s) => read_stream(s.into_inner(), n, |m| m.containers.len()).await,
            Err(e) => Err(e),
        },
        Call::PodStatus => c
            .runtime
            .pod_sandbox_status(cri::PodSandboxStatusRequest {
                pod_sandbox_id: pod,
                verbose: false,
            })
            .await
            .map(drop),
        Call::ContainerStatus => c
            .runtime
            .container_status(cri::ContainerStatusRequest {
                container_id: ctr,
                verbose: false,
            })
            .await
            .map(drop),
        Call::Version => c
            .runtime
            .version(cri::VersionRequest::default())
            .await
            .map(drop),
        Call::ExecSync | Call::ExecSyncFirst => return exec_true(c, ctr).await.map(|_| true),
    };
    match res {
        Ok(()) => Ok(true),
        Err(s) if s.code() == tonic::Code::Unimplemented => Ok(false),
        Err(s) => Err(anyhow::anyhow!("{}: {s}", kind.label())),
    }
}

/// utime + stime (clock ticks, every thread, dead ones too) of `pid`, and the context
/// switches (voluntary and not) of each of its live threads.
fn cpu_of(pid: u32) -> Option<(u64, HashMap<u32, u64>)> {
    let (user, system) = e2e::host::cpu_ticks(&pid.to_string())?;
    let ticks = user + system;
    let mut switches = HashMap::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task"))
        .ok()?
        .flatten()
    {
        let Ok(tid) = task.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(status) = std::fs::read_to_string(task.path().join("status")) else {
            continue;
        };
        let n: u64 = status
            .lines()
            .filter_map(|l| {
                l.strip_prefix("voluntary_ctxt_switches:")
                    .or_else(|| l.strip_prefix("nonvoluntary_ctxt_switches:"))
            })
            .filter_map(|v| v.trim().parse::<u64>().ok())
            .sum();
        switches.insert(tid, n);
    }
    Some((ticks, switches))
}

/// CPU ticks and context switches between two samples of one process: the switches of the
/// threads alive in both.
fn delta(a: &(u64, HashMap<u32, u64>), b: &(u64, HashMap<u32, u64>)) -> (u64, u64) {
    let switches =
        b.1.iter()
            .filter_map(|(tid, n)| Some(n.saturating_sub(*a.1.get(tid)?)))
            .sum();
    (b.0.saturating_sub(a.0), switches)
}

/// The median time to decode `bytes` as a `T`, over 21 decodings.
fn decode_time<T: prost::Message + Default>(bytes: &[u8]) -> Duration {
    let mut times: Vec<Duration> = (0..21)
        .map(|_| {
            let start = Instant::now();
            let decoded = T::decode(bytes);
            let took = start.elapsed();
            assert!(decoded.is_ok());
            took
        })
        .collect();
    times.sort();
    times[times.len() / 2]
}

fn anon_kb(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("RssAnon:"))
                .and_then(|v| v.split_whitespace().next()?.parse().ok())
        })
        .unwrap_or(0)
}

fn daemon_pid(t: &Target) -> Option<u32> {
    t.daemon_pid
        .or_else(|| e2e::host::processes_with(&t.daemon_match).first().copied())
}

fn pct(sorted: &[Duration], p: f64) -> Duration {
    super::percentile(sorted, p)
}

fn ms2(d: Duration) -> String {
    let ms = d.as_secs_f64() * 1000.0;
    if ms < 10.0 {
        format!("{ms:.2}")
    } else {
        format!("{ms:.1}")
    }
}

pub async fn run(args: ScaleArgs) -> anyhow::Result<()> {
    let run = std::process::id();
    let clk_tck = e2e::host::ticks_per_second();
    println!(
        "machine: {} CPUs, pid_max {}, tasks now {}, MemAvailable {}",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        std::fs::read_to_string("/proc/sys/kernel/pid_max")
            .unwrap_or_default()
            .trim(),
        count_tasks(),
        mem_available()
    );
    // One image for every target, from a registry of the benchmark's own unless given.
    let mut registry = None;
    let image = match &args.image {
        Some(r) => r.clone(),
        None => {
            let images = e2e::pods::Images::start();
            let reference = images.push("bench/busybox:1", &e2e::pods::busybox());
            registry = Some(images);
            reference
        }
    };
    let mut lives = Vec::new();
    for t in &args.targets {
        let mut cri = Cri::connect(&t.endpoint).await?;
        let v = cri
            .runtime
            .version(cri::VersionRequest::default())
            .await?
            .into_inner();
        println!(
            "{}: {} {} at {} (daemon pid {:?})",
            t.name,
            v.runtime_name,
            v.runtime_version,
            t.endpoint,
            daemon_pid(t)
        );
        let image_ref = super::pull(&mut cri, &image).await?;
        lives.push(Live {
            cri,
            pods: Vec::new(),
            image: image_ref,
            full: None,
            unimplemented: Vec::new(),
            execd: Vec::new(),
        });
    }
    if args.lifecycle.pods > 0 || args.lifecycle.fleet_rounds > 0 {
        side_by_side::run(&args.targets, &lives, &args.lifecycle, args.parallel, run).await?;
    }
    if args.levels.is_empty() {
        return Ok(());
    }
    let mut all: Vec<Vec<Figures>> = vec![Vec::new(); args.targets.len()];
    let mut rng = Lcg(0x5eed);
    for &level in &args.levels {
        let mut figs: Vec<Figures> = vec![Figures::default(); args.targets.len()];
        for (i, t) in args.targets.iter().enumerate() {
            let live = &mut lives[i];
            if live.full.is_some() {
                continue;
            }
            let before = live.pods.len();
            let took = grow(t, live, level, args.parallel, run).await;
            figs[i].grow = Some((live.pods.len() - before, took));
        }
        // Settle: CNI, exits of the start-up, the kubelet-less daemons' own work.
        tokio::time::sleep(Duration::from_secs(3)).await;
        // Idle, all targets in the same window.
        let procs: Vec<(Option<u32>, Vec<u32>)> = args
            .targets
            .iter()
            .map(|t| (daemon_pid(t), e2e::host::processes_with(&t.shim_match)))
            .collect();
        type Sample = (u64, HashMap<u32, u64>);
        let sample =
            |procs: &Vec<(Option<u32>, Vec<u32>)>| -> Vec<(Option<Sample>, HashMap<u32, Sample>)> {
                procs
                    .iter()
                    .map(|(d, shims)| {
                        (
                            d.and_then(cpu_of),
                            shims
                                .iter()
                                .filter_map(|p| Some((*p, cpu_of(*p)?)))
                                .collect(),
                        )
                    })
                    .collect()
            };
        let first = sample(&procs);
        let idle_start = Instant::now();
        tokio::time::sleep(Duration::from_secs(args.idle_seconds)).await;
        let second = sample(&procs);
        let secs = idle_start.elapsed().as_secs_f64();
        for i in 0..args.targets.len() {
            let f = &mut figs[i];
            f.pods = lives[i].pods.len();
            if let (Some(a), Some(b)) = (&first[i].0, &second[i].0) {
                let (ticks, switches) = delta(a, b);
                f.idle_daemon_cpu = ticks as f64 / clk_tck / secs * 100.0;
                f.idle_daemon_switches = switches as f64 / secs;
            }
            let (mut ticks, mut sw) = (0u64, 0u64);
            for (pid, b) in &second[i].1 {
                if let Some(a) = first[i].1.get(pid) {
                    let (t, s) = delta(a, b);
                    ticks += t;
                    sw += s;
                }
            }
            f.idle_shims_cpu = ticks as f64 / clk_tck / secs * 100.0;
            f.idle_shims_switches = sw as f64 / secs;
            // Memory.
            if let Some(pid) = procs[i].0 {
                f.daemon = super::mem_of(pid);
                f.daemon_anon_kb = anon_kb(pid);
            }
            let pss: Vec<u64> = procs[i]
                .1
                .iter()
                .filter_map(|p| super::mem_of(*p).map(|m| m.pss))
                .collect();
            f.shims = pss.len();
            if !pss.is_empty() {
                f.shim_pss_mean_kb = pss.iter().sum::<u64>() / pss.len() as u64;
            }
        }
        // Latency, interleaved.
        let per_round = args.calls.div_ceil(args.rounds.max(1)).max(1);
        for _ in 0..args.rounds.max(1) {
            for (i, live) in lives.iter_mut().enumerate() {
                for kind in Call::MEASURED {
                    if live.unimplemented.contains(&kind) {
                        continue;
                    }
                    for _ in 0..per_round {
                        let start = Instant::now();
                        if !call_once(live, kind, &mut rng).await? {
                            live.unimplemented.push(kind);
                            break;
                        }
                        figs[i].lat.entry(kind).or_default().push(start.elapsed());
                    }
                }
            }
        }
        // What part of a list call is this client's own decoding.
        for (i, live) in lives.iter_mut().enumerate() {
            let pods = live
                .cri
                .runtime
                .list_pod_sandbox(cri::ListPodSandboxRequest {
                    filter: Some(Default::default()),
                })
                .await?
                .into_inner()
                .encode_to_vec();
            let containers = live
                .cri
                .runtime
                .list_containers(cri::ListContainersRequest {
                    filter: Some(Default::default()),
                })
                .await?
                .into_inner()
                .encode_to_vec();
            figs[i].decode = vec![
                (
                    Call::ListPods,
                    pods.len(),
                    decode_time::<cri::ListPodSandboxResponse>(&pods),
                ),
                (
                    Call::ListContainers,
                    containers.len(),
                    decode_time::<cri::ListContainersResponse>(&containers),
                ),
            ];
        }
        for j in 0..args.exec_calls {
            for (i, live) in lives.iter_mut().enumerate() {
                let ctr = if j % 2 == 1 && !live.execd.is_empty() {
                    live.execd[rng.below(live.execd.len())].clone()
                } else {
                    live.pods[rng.below(live.pods.len())].1.clone()
                };
                let kind = if live.execd.contains(&ctr) {
                    Call::ExecSync
                } else {
                    live.execd.push(ctr.clone());
                    Call::ExecSyncFirst
                };
                let start = Instant::now();
                exec_true(&mut live.cri, ctr).await?;
                figs[i].lat.entry(kind).or_default().push(start.elapsed());
            }
        }
        for f in &mut figs {
            for v in f.lat.values_mut() {
                v.sort();
            }
        }
        print_level(&args, level, &figs, &lives);
        for (i, t) in args.targets.iter().enumerate() {
            probes::run(t, &lives[i], args.probe_seconds).await;
        }
        for (i, f) in figs.into_iter().enumerate() {
            all[i].push(f);
        }
    }
    println!();
    println!("{}", summary(&args, &all, &lives));
    // Down: every pod of every target.
    for (t, live) in args.targets.iter().zip(&mut lives) {
        let start = Instant::now();
        let mut set = tokio::task::JoinSet::new();
        let pods = std::mem::take(&mut live.pods);
        let n = pods.len();
        let mut errors = 0;
        for (pod, _) in pods {
            if set.len() >= args.parallel.max(1) {
                if let Some(Ok(Err(_)) | Err(_)) = set.join_next().await {
                    errors += 1;
                }
            }
            set.spawn(down_one(live.cri.clone(), pod));
        }
        while let Some(r) = set.join_next().await {
            if !matches!(r, Ok(Ok(()))) {
                errors += 1;
            }
        }
        println!(
            "{}: {n} pods stopped and removed in {:.1} s ({errors} errors)",
            t.name,
            start.elapsed().as_secs_f64()
        );
    }
    drop(registry);
    Ok(())
}

fn count_tasks() -> usize {
    std::fs::read_dir("/proc")
        .map(|d| {
            d.flatten()
                .filter(|e| e.file_name().to_string_lossy().parse::<u32>().is_ok())
                .filter_map(|e| std::fs::read_dir(e.path().join("task")).ok())
                .map(|t| t.count())
                .sum()
        })
        .unwrap_or(0)
}

fn mem_available() -> String {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find_map(|l| l.strip_prefix("MemAvailable:"))
                .map(|v| v.trim().to_string())
        })
        .unwrap_or_default()
}

fn print_level(args: &ScaleArgs, level: usize, figs: &[Figures], lives: &[Live]) {
    println!();
    println!(
        "== {level} pods (one running container each); tasks on the machine {}, MemAvailable {}",
        count_tasks(),
        mem_available()
    );
    let mut header = format!("{:<34}", "figure");
    for t in &args.targets {
        let _ = write!(header, "{:>26}", t.name);
    }
    println!("{header}");
    let row = |label: &str, cell: &dyn Fn(&Figures, &Live) -> String| {
        let mut line = format!("{label:<34}");
        for (f, l) in figs.iter().zip(lives) {
            let _ = write!(line, "{:>26}", cell(f, l));
        }
        println!("{line}");
    };
    row("pods up", &|f, l| match &l.full {
        Some(_) => format!("{} (full)", f.pods),
        None => f.pods.to_string(),
    });
    row(
        &format!("grow, {} at a time", args.parallel),
        &|f, _| match f.grow {
            Some((n, d)) if n > 0 => format!("+{n} in {:.1} s", d.as_secs_f64()),
            _ => "-".into(),
        },
    );
    let mut kinds: Vec<Call> = Call::MEASURED.to_vec();
    kinds.extend([Call::ExecSync, Call::ExecSyncFirst]);
    for kind in kinds {
        row(
            &format!("{} p50/p99 ms", kind.label()),
            &|f, _| match f.lat.get(&kind) {
                Some(v) if !v.is_empty() => format!("{} / {}", ms2(pct(v, 0.5)), ms2(pct(v, 0.99))),
                _ => "n/a".into(),
            },
        );
    }
    for kind in [Call::ListPods, Call::ListContainers] {
        row(
            &format!("{} answer: kB / decode ms", kind.label()),
            &|f, _| match f.decode.iter().find(|d| d.0 == kind) {
                Some((_, len, t)) => format!("{:.0} / {}", *len as f64 / 1024.0, ms2(*t)),
                None => "-".into(),
            },
        );
    }
    row("daemon RSS (anon) MB", &|f, _| match f.daemon {
        Some(m) => format!(
            "{:.1} ({:.1})",
            super::mb(m.rss),
            super::mb(f.daemon_anon_kb)
        ),
        None => "-".into(),
    });
    row("daemon PSS MB", &|f, _| match f.daemon {
        Some(m) => format!("{:.1}", super::mb(m.pss)),
        None => "-".into(),
    });
    row("shim PSS mean MB (shims)", &|f, _| {
        format!("{:.2} ({})", super::mb(f.shim_pss_mean_kb), f.shims)
    });
    row(
        &format!("idle CPU % daemon / shims ({}s)", args.idle_seconds),
        &|f, _| format!("{:.2} / {:.2}", f.idle_daemon_cpu, f.idle_shims_cpu),
    );
    row("idle wakeups/s daemon / shims", &|f, _| {
        format!(
            "{:.1} / {:.1}",
            f.idle_daemon_switches, f.idle_shims_switches
        )
    });
}

/// The side-by-side table over every level, as markdown (for docs/performance.md).
fn summary(args: &ScaleArgs, all: &[Vec<Figures>], lives: &[Live]) -> String {
    let mut out = String::new();
    let _ = write!(out, "| figure |");
    for &level in &args.levels {
        for t in &args.targets {
            let _ = write!(out, " {} {level} |", t.name);
        }
    }
    out.push('\n');
    out.push_str("|---|");
    for _ in 0..args.levels.len() * args.targets.len() {
        out.push_str("---|");
    }
    out.push('\n');
    let row = |out: &mut String, label: &str, cell: &dyn Fn(usize, usize) -> String| {
        let _ = write!(out, "| {label} |");
        for li in 0..args.levels.len() {
            for ti in 0..args.targets.len() {
                let _ = write!(out, " {} |", cell(ti, li));
            }
        }
        out.push('\n');
    };
    let fig = |ti: usize, li: usize| all.get(ti).and_then(|v| v.get(li));
    row(&mut out, "pods up", &|ti, li| match fig(ti, li) {
        Some(f) if lives[ti].full.is_some() && f.pods < args.levels[li] => {
            format!("{} (full)", f.pods)
        }
        Some(f) => f.pods.to_string(),
        None => "-".into(),
    });
    let mut kinds: Vec<Call> = Call::MEASURED.to_vec();
    kinds.extend([Call::ExecSync, Call::ExecSyncFirst]);
    for kind in kinds {
        row(
            &mut out,
            &format!("{} p50 / p99 (ms)", kind.label()),
            &|ti, li| match fig(ti, li).and_then(|f| f.lat.get(&kind)) {
                Some(v) if !v.is_empty() => format!("{} / {}", ms2(pct(v, 0.5)), ms2(pct(v, 0.99))),
                _ => "n/a".into(),
            },
        );
    }
    row(
        &mut out,
        "(of which this client's decoding of ListPodSandbox, ms)",
        &|ti, li| match fig(ti, li).and_then(|f| f.decode.iter().find(|d| d.0 == Call::ListPods)) {
            Some((_, _, t)) => ms2(*t),
            None => "-".into(),
        },
    );
    row(
        &mut out,
        "daemon RSS (anon) MB",
        &|ti, li| match fig(ti, li) {
            Some(Figures {
                daemon: Some(m),
                daemon_anon_kb,
                ..
            }) => format!(
                "{:.1} ({:.1})",
                super::mb(m.rss),
                super::mb(*daemon_anon_kb)
            ),
            _ => "-".into(),
        },
    );
    row(&mut out, "daemon RSS per added pod (kB)", &|ti, li| {
        let (Some(f), Some(p)) = (fig(ti, li), li.checked_sub(1).and_then(|p| fig(ti, p))) else {
            return "-".into();
        };
        match (f.daemon, p.daemon) {
            (Some(a), Some(b)) if f.pods > p.pods => {
                format!(
                    "{:.0}",
                    (a.rss as f64 - b.rss as f64) / (f.pods - p.pods) as f64
                )
            }
            _ => "-".into(),
        }
    });
    row(
        &mut out,
        "shim PSS per pod (MB)",
        &|ti, li| match fig(ti, li) {
            Some(f) if f.shims > 0 => format!("{:.2}", super::mb(f.shim_pss_mean_kb)),
            _ => "-".into(),
        },
    );
    row(
        &mut out,
        "idle CPU % daemon / all shims",
        &|ti, li| match fig(ti, li) {
            Some(f) => format!("{:.2} / {:.2}", f.idle_daemon_cpu, f.idle_shims_cpu),
            None => "-".into(),
        },
    );
    row(
        &mut out,
        "idle wakeups/s daemon / all shims",
        &|ti, li| match fig(ti, li) {
            Some(f) => format!(
                "{:.1} / {:.1}",
                f.idle_daemon_switches, f.idle_shims_switches
            ),
            None => "-".into(),
        },
    );
    out
}

/// Reads a Stream* answer to its end; it must carry at least `n` items (`items` counts a
/// message's).
async fn read_stream<M>(
    mut s: tonic::Streaming<M>,
    n: usize,
    items: impl Fn(&M) -> usize,
) -> Result<(), tonic::Status> {
    let mut got = 0;
    while let Some(m) = s.message().await? {
        got += items(&m);
    }
    if got >= n {
        Ok(())
    } else {
        Err(tonic::Status::data_loss(format!(
            "the stream ended after {got} of at least {n} items"
        )))
    }
}
