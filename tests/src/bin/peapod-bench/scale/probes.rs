//! Node CPU under exec probes (`--probe-seconds S` with `--scale`): at each pod count, each
//! target in turn gets an ExecSync `true` in every one of its pods' containers once a second,
//! spread over the second, for S seconds, as a kubelet's exec probes with `periodSeconds: 1`
//! would make them. The machine's busy time over the window (/proc/stat: all that is not idle
//! or iowait, kernel work included), less this benchmark's own CPU and less the machine's
//! busy time in a quiet window just before (every runtime idle, pods up), is what the probes
//! cost the node; it is printed in % of one CPU, with the probes' latency.

use super::{exec_true, Live, Target};
use std::time::{Duration, Instant};

/// (busy, total) jiffies of the whole machine.
fn machine_jiffies() -> (u64, u64) {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let Some(line) = stat.lines().find(|l| l.starts_with("cpu ")) else {
        return (0, 0);
    };
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal (guest time is inside user).
    let total: u64 = v.iter().take(8).sum();
    let idle = v.get(3).copied().unwrap_or(0) + v.get(4).copied().unwrap_or(0);
    (total.saturating_sub(idle), total)
}

/// This process's CPU time, in jiffies.
fn own_jiffies() -> u64 {
    e2e::host::cpu_ticks("self").map_or(0, |(user, system)| user + system)
}

/// % of one CPU the machine spent over a window, less this process's share.
struct Window {
    busy: u64,
    total: u64,
    own: u64,
}

impl Window {
    fn start() -> Window {
        let (busy, total) = machine_jiffies();
        Window {
            busy,
            total,
            own: own_jiffies(),
        }
    }

    fn cpu_percent(&self) -> f64 {
        let (busy, total) = machine_jiffies();
        let own = own_jiffies().saturating_sub(self.own);
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
        let total = total.saturating_sub(self.total).max(1) as f64;
        let busy = busy.saturating_sub(self.busy).saturating_sub(own) as f64;
        100.0 * cpus * busy / total
    }
}

/// The probe load on `live`'s pods for `seconds`; prints the figures.
pub async fn run(t: &Target, live: &Live, seconds: u64) {
    let containers: Vec<String> = live.pods.iter().map(|(_, c)| c.clone()).collect();
    if containers.is_empty() || seconds == 0 {
        return;
    }
    let quiet = Window::start();
    tokio::time::sleep(Duration::from_secs(5)).await;
    let baseline = quiet.cpu_percent();

    let window = Window::start();
    let begin = tokio::time::Instant::now() + Duration::from_millis(100);
    let n = containers.len() as u32;
    let mut set = tokio::task::JoinSet::new();
    for second in 0..seconds {
        for (k, ctr) in containers.iter().enumerate() {
            let at = begin + Duration::from_secs(second) + Duration::from_secs(1) * k as u32 / n;
            let mut cri = live.cri.clone();
            let ctr = ctr.clone();
            set.spawn(async move {
                tokio::time::sleep_until(at).await;
                let start = Instant::now();
                let ok = exec_true(&mut cri, ctr).await.is_ok();
                (start.elapsed(), ok)
            });
        }
    }
    let mut times = Vec::new();
    let mut failed = 0;
    while let Some(r) = set.join_next().await {
        match r {
            Ok((took, true)) => times.push(took),
            _ => failed += 1,
        }
    }
    let cpu = window.cpu_percent();
    times.sort();
    let pct = |p: f64| {
        times
            .get(((times.len() as f64 - 1.0) * p).round() as usize)
            .map_or(0.0, |d| d.as_secs_f64() * 1000.0)
    };
    println!(
        "{}: {} pods exec-probed every second for {seconds} s: node CPU {:.1} % of one CPU ({:.1} % over the quiet {:.1} % before); probe p50 / p99 {:.2} / {:.2} ms; {} probes, {failed} failed",
        t.name,
        containers.len(),
        cpu,
        cpu - baseline,
        baseline,
        pct(0.5),
        pct(0.99),
        times.len()
    );
}
