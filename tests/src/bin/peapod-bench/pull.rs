//! The pull figure: PullImage of a 4-layer image of about 124 MB compressed (busybox, one
//! layer of 20,000 small files, two layers of one large file each; contents incompressible),
//! served by the benchmark's loopback registry, then RemoveImage; `rounds` times. The small
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

/// Pulls `reference` `rounds` times, removing it after each; prints each time and the p50.
pub async fn run(c: &mut Cri, reference: &str, rounds: usize) -> anyhow::Result<()> {
    let mut times = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        let start = Instant::now();
        let image_ref = crate::pull(c, reference).await?;
        times.push(start.elapsed());
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
    times.sort();
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
    }
    Ok(())
}
