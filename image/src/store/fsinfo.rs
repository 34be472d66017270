//! Disk usage of the image and container filesystems (CRI ImageFsInfo, writable layers).

use super::types::{FsInfo, FsUsage};
use super::Store;
use crate::fsutil::{self};

impl Store {
    /// Usage of the image filesystem (blobs and unpacked layers, from the
    /// counts recorded at unpack time) and of the container filesystem
    /// (writable layers, walked).
    pub fn fs_info(&self) -> FsInfo {
        let (layer_bytes, layer_inodes, containers) = {
            let inner = self.inner();
            let b: u64 = inner.layers.values().map(|s| s.bytes).sum();
            let i: u64 = inner.layers.values().map(|s| s.inodes).sum();
            (b, i, inner.containers.keys().cloned().collect::<Vec<_>>())
        };
        let (blob_bytes, blob_inodes) = fsutil::disk_usage(&self.root.join("blobs"));
        let mut cb = 0;
        let mut ci = 0;
        for c in containers {
            let (b, i) = fsutil::disk_usage(&self.root.join("containers").join(c));
            cb += b;
            ci += i;
        }
        FsInfo {
            image: FsUsage {
                mountpoint: self.root.clone(),
                used_bytes: layer_bytes + blob_bytes,
                inodes_used: layer_inodes + blob_inodes,
            },
            container: FsUsage {
                mountpoint: self.root.join("containers"),
                used_bytes: cb,
                inodes_used: ci,
            },
        }
    }
}
