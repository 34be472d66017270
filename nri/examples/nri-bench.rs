//! Prints what NRI costs per event: a runtime and N plugins (stubs) in this process over a
//! real unix socket, and `--events` CreateContainer calls (each a ttrpc round trip to every
//! plugin, adjustments merged) and StartContainer calls, one after the other.
//!
//!   cargo run --release -p peapod-nri --example nri-bench -- [--events 5000] [--plugins 1]

use peapod_nri::api::*;
use peapod_nri::{Runtime, Settings};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Adds one annotation of its own (plugin `n`) to every container.
struct Adjuster(usize);

#[async_trait::async_trait]
impl peapod_nri::stub::Plugin for Adjuster {
    async fn create_container(
        &self,
        _pod: PodSandbox,
        c: Container,
    ) -> Result<ContainerAdjustment, String> {
        let mut adj = ContainerAdjustment::default();
        adj.annotations
            .insert(format!("bench-{}/{}", self.0, c.id), "1".into());
        Ok(adj)
    }
}

fn figures(name: &str, mut t: Vec<Duration>) {
    t.sort();
    let at = |q: f64| t[((t.len() - 1) as f64 * q) as usize].as_secs_f64() * 1e6;
    println!(
        "{name}: {} calls, min {:.0} us  p50 {:.0} us  p90 {:.0} us  p99 {:.0} us",
        t.len(),
        at(0.0),
        at(0.5),
        at(0.9),
        at(0.99)
    );
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow_free::Result {
    let mut events = 5000usize;
    let mut plugins = 1usize;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let v = args.next().unwrap_or_default();
        match a.as_str() {
            "--events" => events = v.parse().map_err(|_| "bad --events")?,
            "--plugins" => plugins = v.parse().map_err(|_| "bad --plugins")?,
            _ => return Err(format!("unknown flag {a}").into()),
        }
    }
    let dir = std::env::temp_dir().join(format!("nri-bench-{}", std::process::id()));
    let settings = Settings {
        socket_path: dir.join("nri.sock"),
        runtime_name: "bench".into(),
        runtime_version: "0".into(),
        registration_timeout: Duration::from_secs(5),
        request_timeout: Duration::from_secs(5),
    };
    let result = measure(&settings, events, plugins).await;
    let _ = std::fs::remove_dir_all(&dir);
    result
}

async fn measure(settings: &Settings, events: usize, plugins: usize) -> anyhow_free::Result {
    let rt = Runtime::start(settings.clone())?;
    let mut conns = Vec::new();
    for i in 0..plugins {
        let idx = format!("{:02}", 10 + i);
        conns.push(
            peapod_nri::stub::connect(&settings.socket_path, "bench", &idx, Arc::new(Adjuster(i)))
                .await
                .map_err(|e| e.to_string())?,
        );
    }
    while rt.plugin_names().len() < plugins {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    rt.run_pod_sandbox(PodSandbox {
        id: "pod".into(),
        ..Default::default()
    })
    .await?;
    let (mut create, mut start) = (Vec::new(), Vec::new());
    for i in 0..events {
        let c = Container {
            id: format!("c{i}"),
            pod_sandbox_id: "pod".into(),
            ..Default::default()
        };
        let t = Instant::now();
        rt.create_container(c).await?;
        create.push(t.elapsed());
        let t = Instant::now();
        rt.start_container(&format!("c{i}")).await?;
        start.push(t.elapsed());
    }
    println!("{plugins} plugin(s) over a unix socket, one event at a time:");
    figures("CreateContainer (adjustments merged)", create);
    figures("StartContainer", start);
    rt.shutdown().await;
    Ok(())
}

/// A boxed error for `?` without another dependency.
mod anyhow_free {
    pub type Result = std::result::Result<(), Box<dyn std::error::Error>>;
}
