//! The pull figure: PullImage of a 4-layer image of about 124 MB compressed (busybox, one
//! layer of 20,000 small files, two layers of one large file each; contents incompressible),
//! served by the benchmark's loopback registry, then RemoveImage; `rounds` times, each from a
//! synced and quiet disk (`quiet_disks`) and timed also with the sync after it. The small
//! files make it disk-bound on this machine (creating a file on ext4 costs about 0.7 ms of
//! system time), the large ones measure download, digest and decompression.

use crate::{ms, percentile};
use e2e::Cri;
use peapod_image::testsupport::{Compression, ImageSpec, Layer};
use peapod_proto::v1 as cri;
use std::time::Instant;

const SMALL_FILES: usize = 20_000;
const SMALL_FILE_BYTES: usize = 1024;
const LARGE_FILE_BYTES: usize = 51 << 20;

/// Bytes that gzip cannot shrink (xorshift64), so the layers are as large on the wire as on
/// disk, like the binaries and compressed assets that make real images large.
struct Noise(u64);

impl Noise {
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        let mut out = Vec::with_capacity(n + 8);
        while out.len() < n {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            out.extend_from_slice(&self.0.to_le_bytes());
        }
        out.truncate(n);
        out
    }
}

pub fn image() -> ImageSpec {
    let mut noise = Noise(0x9e37_79b9_7f4a_7c15);
    let mut small = Layer::new(Compression::Gzip).dir("data", 0o755);
    for d in 0..SMALL_FILES / 1000 {
        small = small.dir(&format!("data/{d:02}"), 0o755);
        for f in 0..1000 {
            small = small.file(
                &format!("data/{d:02}/{f:04}"),
                noise.bytes(SMALL_FILE_BYTES),
                0o644,
            );
        }
    }
    let large = |noise: &mut Noise, name: &str| {
        Layer::new(Compression::Gzip).dir("opt", 0o755).file(
            &format!("opt/{name}"),
            noise.bytes(LARGE_FILE_BYTES),
            0o644,
        )
    };
    ImageSpec::busybox()
        .layer(small)
        .layer(large(&mut noise, "large-1"))
        .layer(large(&mut noise, "large-2"))
        .cmd(&["sleep", "1000000"])
}

/// Flushes every dirty page of the machine to disk (sync(2)), off the async runtime.
async fn sync() {
    // SAFETY: sync has no arguments and cannot fail.
    let _ = tokio::task::spawn_blocking(|| unsafe { libc::sync() }).await;
}

/// The I/O counters of every block device (/sys/block/*/stat: requests, sectors, in flight,
/// discards), summed field by field.
fn block_counters() -> Vec<u64> {
    let mut sum = Vec::new();
    let Ok(devices) = std::fs::read_dir("/sys/block") else {
        return sum;
    };
    for d in devices.flatten() {
        let text = std::fs::read_to_string(d.path().join("stat")).unwrap_or_default();
        for (i, v) in text.split_whitespace().enumerate() {
            let v: u64 = v.parse().unwrap_or(0);
            if sum.len() <= i {
                sum.push(0);
            }
            sum[i] += v;
        }
    }
    sum
}

/// Waits (up to a minute) until no block device has done anything for a second: a removed
/// image's blocks are discarded by the filesystem after its deletion returned (ext4 mounted
/// with `discard`, as here), and that work would otherwise land in the next pull.
async fn quiet_disks() {
    let deadline = Instant::now() + std::time::Duration::from_secs(60);
    let mut last = block_counters();
    while Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
        let now = block_counters();
        if now == last {
            return;
        }
        last = now;
    }
}

/// CPU time (user, system) the processes whose command line holds `daemon_match` have used
/// so far, in seconds: what a pull costs the runtime whatever the disk does meanwhile.
fn daemon_cpu(daemon_match: &str) -> (f64, f64) {
    let tick = e2e::host::ticks_per_second();
    e2e::host::processes_with(daemon_match)
        .into_iter()
        .filter_map(|pid| e2e::host::cpu_ticks(&pid.to_string()))
        .fold((0.0, 0.0), |(u, s), (du, ds)| {
            (u + du as f64 / tick, s + ds as f64 / tick)
        })
}

/// Pulls `reference` `rounds` times, removing it after each; prints each time and the p50,
/// of the pull alone and of the pull and the sync after it, and the daemon's CPU time per
/// pull. Each round starts from a synced disk, and the second figure counts what a runtime
/// leaves for the kernel to write back later (which the first would otherwise charge to
/// whatever runs next).
pub async fn run(
    c: &mut Cri,
    reference: &str,
    rounds: usize,
    daemon_match: &str,
) -> anyhow::Result<()> {
    let mut times = Vec::with_capacity(rounds);
    let mut durable = Vec::with_capacity(rounds);
    let mut user = Vec::with_capacity(rounds);
    let mut system = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        sync().await;
        quiet_disks().await;
        let cpu_before = daemon_cpu(daemon_match);
        let start = Instant::now();
        let image_ref = crate::pull(c, reference).await?;
        times.push(start.elapsed());
        let cpu_after = daemon_cpu(daemon_match);
        user.push(cpu_after.0 - cpu_before.0);
        system.push(cpu_after.1 - cpu_before.1);
        sync().await;
        durable.push(start.elapsed());
        c.image
            .remove_image(cri::RemoveImageRequest {
                image: Some(cri::ImageSpec {
                    image: image_ref,
                    ..Default::default()
                }),
            })
            .await?;
    }
    let each: Vec<String> = times.iter().map(|t| ms(*t)).collect();
    let each_durable: Vec<String> = durable.iter().map(|t| ms(*t)).collect();
    times.sort();
    durable.sort();
    println!(
        "PullImage of a 4-layer image (20,000 small files; about 124 MB), pulled and removed {} times:",
        times.len()
    );
    if !times.is_empty() {
        println!(
            "  p50 {}  (each: {})",
            ms(percentile(&times, 0.5)),
            each.join(", ")
        );
        println!(
            "  with the sync after it: p50 {}  (each: {})",
            ms(percentile(&durable, 0.5)),
            each_durable.join(", ")
        );
        user.sort_by(f64::total_cmp);
        system.sort_by(f64::total_cmp);
        println!(
            "  the daemon's CPU per pull: user p50 {:.2} s, system p50 {:.2} s",
            user[user.len() / 2],
            system[system.len() / 2]
        );
    }
    Ok(())
}
