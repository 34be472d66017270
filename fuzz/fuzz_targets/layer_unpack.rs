//! Layer tars as a registry sends them, unpacked into a scratch directory: any archive is
//! unpacked or refused, and nothing is ever written outside the scratch directory — checked
//! on a sibling canary directory that seeds aim symlinks and `..` names at.
#![no_main]
use libfuzzer_sys::fuzz_target;
use peapod_image::tarball::Limits;
use std::path::Path;

/// A fixed place, so that seeds can name it in symlink targets.
const BASE: &str = "/tmp/peapod-fuzz-unpack";

fn entries(dir: &Path) -> usize {
    std::fs::read_dir(dir).map(|d| d.count()).unwrap_or(0)
}

static FRESH: std::sync::Once = std::sync::Once::new();

fuzz_target!(|data: &[u8]| {
    let base = Path::new(BASE);
    // What an earlier run left (a crash stops it mid-input) is not this run's finding.
    FRESH.call_once(|| {
        let _ = std::fs::remove_dir_all(base);
    });
    let canary = base.join("canary");
    let _ = std::fs::create_dir_all(&canary);
    let scratch = base.join("scratch");
    let _ = std::fs::remove_dir_all(&scratch);
    std::fs::create_dir(&scratch).expect("scratch directory");
    let limits = Limits {
        max_entry_size: 1 << 20,
        max_total_size: 8 << 20,
        max_meta_size: 64 << 10,
        max_entries: 10_000,
    };
    let _ = peapod_image::unpack::unpack(&mut &data[..], &scratch, limits);
    assert_eq!(entries(&canary), 0, "a layer wrote into the canary next to its directory");
    assert_eq!(entries(base), 2, "a layer wrote beside its directory");
    let _ = std::fs::remove_dir_all(&scratch);
});
