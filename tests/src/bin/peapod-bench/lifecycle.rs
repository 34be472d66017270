//! Pod lifecycle figures of one endpoint: a pod brought up (RunPodSandbox, CreateContainer,
//! StartContainer of one `sleep` container, each phase timed), stopped and removed
//! (StopPodSandbox + RemovePodSandbox), and a fleet of pods brought up `parallel` at a time.
//! The pods are the scale run's (kubelet-like labels and annotations).

use crate::scale::{down_one, down_one_timed, up_one_timed, up_parallel, Phases};
use crate::{ms, percentile};
use e2e::Cri;
use std::time::{Duration, Instant};

pub struct LifecycleArgs<'a> {
    pub runs: usize,
    pub fleet: usize,
    pub parallel: usize,
    pub cgroup_parent: &'a str,
    pub handler: &'a str,
    pub image: &'a str,
}

/// min / p50 / p90 / max of `times` (sorted here).
fn line(times: &mut [Duration]) -> String {
    times.sort();
    match (times.first(), times.last()) {
        (Some(min), Some(max)) => format!(
            "min {}  p50 {}  p90 {}  max {}",
            ms(*min),
            ms(percentile(times, 0.5)),
            ms(percentile(times, 0.9)),
            ms(*max)
        ),
        _ => "no runs".into(),
    }
}

pub async fn run(c: &Cri, a: &LifecycleArgs<'_>, run_id: u32) -> anyhow::Result<()> {
    // One pod at a time: each kept up until all are, then each stopped and removed.
    let mut phases: Vec<Phases> = Vec::with_capacity(a.runs);
    let mut pods = Vec::with_capacity(a.runs);
    for i in 0..a.runs {
        let (p, (pod, _)) = up_one_timed(
            c.clone(),
            run_id,
            i,
            a.cgroup_parent.to_string(),
            a.handler.to_string(),
            a.image.to_string(),
        )
        .await?;
        phases.push(p);
        pods.push(pod);
    }
    let mut downs = Vec::with_capacity(pods.len());
    for pod in pods {
        downs.push(down_one_timed(c.clone(), pod).await?);
    }
    if !phases.is_empty() {
        let of = |f: fn(&Phases) -> Duration| phases.iter().map(f).collect::<Vec<_>>();
        println!(
            "pod up (RunPodSandbox + CreateContainer + StartContainer) over {} pods, one at a time:",
            phases.len()
        );
        println!("  {}", line(&mut of(|p| p.run + p.create + p.start)));
        println!("  RunPodSandbox    {}", line(&mut of(|p| p.run)));
        println!("  CreateContainer  {}", line(&mut of(|p| p.create)));
        println!("  StartContainer   {}", line(&mut of(|p| p.start)));
        println!("stop + remove (StopPodSandbox + RemovePodSandbox) of those pods:");
        let of_downs =
            |f: fn(&(Duration, Duration)) -> Duration| downs.iter().map(f).collect::<Vec<_>>();
        println!("  {}", line(&mut of_downs(|d| d.0 + d.1)));
        println!("  StopPodSandbox   {}", line(&mut of_downs(|d| d.0)));
        println!("  RemovePodSandbox {}", line(&mut of_downs(|d| d.1)));
    }

    if a.fleet > 0 {
        let start = Instant::now();
        let (up, failed) = up_parallel(
            c,
            run_id,
            a.runs..a.runs + a.fleet,
            a.parallel,
            a.cgroup_parent,
            a.handler,
            a.image,
        )
        .await;
        let took = start.elapsed();
        for (pod, _) in up {
            down_one(c.clone(), pod).await?;
        }
        if let Some(why) = failed {
            anyhow::bail!("fleet: a pod did not come up: {why}");
        }
        println!(
            "{} pods, {} at a time: {:.2} s",
            a.fleet,
            a.parallel,
            took.as_secs_f64()
        );
    }
    Ok(())
}
