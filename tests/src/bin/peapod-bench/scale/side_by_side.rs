//! The pod lifecycle figures of every target, taking turns: pods brought up one at a time
//! (RunPodSandbox, CreateContainer, StartContainer of one `sleep` container, each timed) with
//! the targets alternating pod by pod, then stopped and removed in the same turns, then
//! fleets brought up `parallel` at a time, the targets alternating round by round.
//!
//! Measured one target after the other, the machine's drift lands on one of them: on this
//! VM a runtime's pod-up time moved by half between runs minutes apart, which moved the
//! ratios more than most changes did. Taking turns spreads the drift over all targets alike;
//! a pause before each turn keeps one runtime's after-work (containerd's garbage collection,
//! removals reaching the disk) out of the next one's figures.

use super::{down_one, down_one_timed, up_one_timed, up_parallel, Live, Phases, Target};
use crate::{ms, percentile};
use std::time::{Duration, Instant};

/// Pod numbers of these pods, far from the levels' (0..pods).
const FIRST_POD: usize = 1_000_000;

/// A pause before each turn, so that what a runtime still does after its calls returned
/// (containerd collects garbage, every runtime's removals reach the disk) lands before the
/// next runtime's turn, not in it. A fleet leaves more behind.
const SETTLE: Duration = Duration::from_millis(250);
const SETTLE_FLEET: Duration = Duration::from_secs(2);

pub struct Plan {
    /// Pods brought up one at a time, per target.
    pub pods: usize,
    /// Pods in one fleet, and fleets per target.
    pub fleet: usize,
    pub fleet_rounds: usize,
}

#[derive(Default)]
struct Figures {
    up: Vec<Phases>,
    down: Vec<(Duration, Duration)>,
    fleets: Vec<Duration>,
}

pub async fn run(
    targets: &[Target],
    lives: &[Live],
    plan: &Plan,
    parallel: usize,
    run_id: u32,
) -> anyhow::Result<()> {
    let mut figs: Vec<Figures> = targets.iter().map(|_| Figures::default()).collect();
    let mut pods: Vec<Vec<String>> = vec![Vec::new(); targets.len()];
    for i in 0..plan.pods {
        for (t, target) in targets.iter().enumerate() {
            tokio::time::sleep(SETTLE).await;
            let (phases, (pod, _)) = up_one_timed(
                lives[t].cri.clone(),
                run_id,
                FIRST_POD + i,
                target.cgroup_parent.clone(),
                target.handler.clone(),
                lives[t].image.clone(),
            )
            .await?;
            figs[t].up.push(phases);
            pods[t].push(pod);
        }
    }
    // The same turns down: each target's first pod, then each one's second, ...
    let mut queues: Vec<_> = pods.into_iter().map(Vec::into_iter).collect();
    for _ in 0..plan.pods {
        for (t, queue) in queues.iter_mut().enumerate() {
            if let Some(pod) = queue.next() {
                figs[t]
                    .down
                    .push(down_one_timed(lives[t].cri.clone(), pod).await?);
            }
        }
    }
    for round in 0..plan.fleet_rounds {
        for (t, target) in targets.iter().enumerate() {
            let first = FIRST_POD + plan.pods + round * plan.fleet;
            tokio::time::sleep(SETTLE_FLEET).await;
            let start = Instant::now();
            let (up, failed) = up_parallel(
                &lives[t].cri,
                run_id,
                first..first + plan.fleet,
                parallel,
                &target.cgroup_parent,
                &target.handler,
                &lives[t].image,
            )
            .await;
            let took = start.elapsed();
            for (pod, _) in up {
                down_one(lives[t].cri.clone(), pod).await?;
            }
            if let Some(why) = failed {
                anyhow::bail!("{}: a fleet's pod did not come up: {why}", target.name);
            }
            figs[t].fleets.push(took);
        }
    }
    print(targets, &mut figs, plan, parallel);
    Ok(())
}

/// "p50 (p90)" of `times`, sorted here.
fn cell(mut times: Vec<Duration>) -> String {
    if times.is_empty() {
        return "-".into();
    }
    times.sort();
    format!(
        "{} ({})",
        ms(percentile(&times, 0.5)),
        ms(percentile(&times, 0.9))
    )
}

fn p50(mut times: Vec<Duration>) -> Option<Duration> {
    times.sort();
    (!times.is_empty()).then(|| percentile(&times, 0.5))
}

fn print(targets: &[Target], figs: &mut [Figures], plan: &Plan, parallel: usize) {
    println!(
        "pod lifecycle side by side, the targets taking turns: {} pods each one at a time, then {} fleets each of {} pods {} at a time; p50 (p90); ratio: p50 of the first target / p50 of the last",
        plan.pods, plan.fleet_rounds, plan.fleet, parallel
    );
    let names: Vec<&str> = targets.iter().map(|t| t.name.as_str()).collect();
    println!("| figure | {} | ratio |", names.join(" | "));
    println!("|---|{}---|", "---|".repeat(names.len()));
    type Pick = fn(&Figures) -> Vec<Duration>;
    let rows: [(&str, Pick); 8] = [
        ("pod up (run + create + start)", |f| {
            f.up.iter().map(|p| p.run + p.create + p.start).collect()
        }),
        ("of which RunPodSandbox", |f| {
            f.up.iter().map(|p| p.run).collect()
        }),
        ("of which CreateContainer", |f| {
            f.up.iter().map(|p| p.create).collect()
        }),
        ("of which StartContainer", |f| {
            f.up.iter().map(|p| p.start).collect()
        }),
        ("stop + remove", |f| {
            f.down.iter().map(|d| d.0 + d.1).collect()
        }),
        ("of which StopPodSandbox", |f| {
            f.down.iter().map(|d| d.0).collect()
        }),
        ("of which RemovePodSandbox", |f| {
            f.down.iter().map(|d| d.1).collect()
        }),
        ("a fleet", |f| f.fleets.clone()),
    ];
    for (label, pick) in rows {
        let cells: Vec<String> = figs.iter().map(|f| cell(pick(f))).collect();
        let ratio = match (
            figs.first().and_then(|f| p50(pick(f))),
            figs.last().and_then(|f| p50(pick(f))),
        ) {
            (Some(a), Some(b)) if figs.len() > 1 && !b.is_zero() => {
                format!("{:.2}", a.as_secs_f64() / b.as_secs_f64())
            }
            _ => "-".into(),
        };
        println!("| {label} | {} | {ratio} |", cells.join(" | "));
    }
}
