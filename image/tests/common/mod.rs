//! Shared helpers of the integration tests.
#![allow(dead_code)]

use peapod_image::{RegistryConfig, Store};
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub fn init_tracing() {
    let _ = tracing_subscriber::fmt()
        .with_test_writer()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("peapod_image=debug")),
        )
        .try_init();
}

pub async fn open_store(dir: &Path) -> Arc<Store> {
    open_store_with(dir, RegistryConfig::default()).await
}

pub async fn open_store_with(dir: &Path, cfg: RegistryConfig) -> Arc<Store> {
    init_tracing();
    Store::open(&dir.join("root"), cfg)
        .await
        .expect("open store")
}

/// Names in a directory (sorted), empty if it does not exist.
pub fn ls(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// Unmounts anything left under `dir` when a test fails half-way, so the
/// temp dir can be removed and no mount leaks into the next test.
pub struct MountGuard(pub PathBuf);

impl Drop for MountGuard {
    fn drop(&mut self) {
        let Ok(info) = std::fs::read_to_string("/proc/self/mountinfo") else {
            return;
        };
        let prefix = self.0.to_string_lossy().into_owned();
        let mut mounts: Vec<String> = info
            .lines()
            .filter_map(|l| l.split(' ').nth(4).map(String::from))
            .filter(|m| m.starts_with(&prefix))
            .collect();
        mounts.sort_by_key(|m| std::cmp::Reverse(m.len()));
        for m in mounts {
            let _ = nix::mount::umount2(m.as_str(), nix::mount::MntFlags::MNT_DETACH);
        }
    }
}
