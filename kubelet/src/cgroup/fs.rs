//! The cgroupfs driver's pod cgroups: directories under the cgroup mount, written directly.
//! cgroup v1 (cpu, cpuacct, memory, pids hierarchies) and v2 (one unified tree).

use crate::resources::{shares_to_weight, CgroupValues};
use std::io;
use std::path::{Path, PathBuf};

const V1_CONTROLLERS: [&str; 4] = ["cpu", "cpuacct", "memory", "pids"];

pub fn is_unified(root: &Path) -> bool {
    root.join("cgroup.controllers").exists()
}

fn dir(root: &Path, controller: Option<&str>, path: &str) -> PathBuf {
    let rel = path.trim_start_matches('/');
    match controller {
        Some(c) => root.join(c).join(rel),
        None => root.join(rel),
    }
}

fn write(dir: &Path, file: &str, value: &str) -> io::Result<()> {
    std::fs::write(dir.join(file), value).map_err(|e| {
        io::Error::new(
            e.kind(),
            format!("write {value:?} to {}: {e}", dir.join(file).display()),
        )
    })
}

/// Creates the pod cgroup at `path` with `values` (zero quota/memory: unlimited).
pub fn create(root: &Path, path: &str, values: &CgroupValues) -> io::Result<()> {
    if is_unified(root) {
        return create_v2(root, path, values);
    }
    for c in V1_CONTROLLERS {
        let base = root.join(c);
        if !base.is_dir() {
            continue;
        }
        let d = dir(root, Some(c), path);
        std::fs::create_dir_all(&d)
            .map_err(|e| io::Error::new(e.kind(), format!("create {}: {e}", d.display())))?;
        match c {
            "cpu" => {
                write(&d, "cpu.shares", &values.cpu_shares.to_string())?;
                if values.cpu_quota > 0 {
                    write(&d, "cpu.cfs_period_us", &values.cpu_period.to_string())?;
                    write(&d, "cpu.cfs_quota_us", &values.cpu_quota.to_string())?;
                }
            }
            "memory" if values.memory_limit > 0 => {
                write(
                    &d,
                    "memory.limit_in_bytes",
                    &values.memory_limit.to_string(),
                )?;
            }
            _ => {}
        }
    }
    Ok(())
}

fn create_v2(root: &Path, path: &str, values: &CgroupValues) -> io::Result<()> {
    let d = dir(root, None, path);
    std::fs::create_dir_all(&d)
        .map_err(|e| io::Error::new(e.kind(), format!("create {}: {e}", d.display())))?;
    // Every ancestor below the root must delegate the controllers to its children.
    let rel = Path::new(path.trim_start_matches('/'));
    let mut cur = root.to_path_buf();
    for comp in rel.components() {
        let ctl = cur.join("cgroup.subtree_control");
        if ctl.exists() {
            for c in ["+cpu", "+memory", "+pids"] {
                // A controller the kernel lacks is left out rather than failing the pod.
                let _ = std::fs::write(&ctl, c);
            }
        }
        cur.push(comp);
    }
    if d.join("cpu.weight").exists() || !d.join("cgroup.controllers").exists() {
        write(
            &d,
            "cpu.weight",
            &shares_to_weight(values.cpu_shares).to_string(),
        )?;
        let max = if values.cpu_quota > 0 {
            format!("{} {}", values.cpu_quota, values.cpu_period)
        } else {
            format!("max {}", crate::resources::QUOTA_PERIOD)
        };
        write(&d, "cpu.max", &max)?;
    }
    if values.memory_limit > 0 {
        write(&d, "memory.max", &values.memory_limit.to_string())?;
    }
    Ok(())
}

/// `path` in every hierarchy mounted under `root`: the OCI runtime makes the pod's cgroups in
/// all of them (blkio, devices, freezer, ... and the named ones), not only those we write.
fn in_every_hierarchy(root: &Path, path: &str) -> Vec<PathBuf> {
    if is_unified(root) {
        return vec![dir(root, None, path)];
    }
    let mut out: Vec<PathBuf> = std::fs::read_dir(root)
        .map(|d| {
            d.flatten()
                .map(|e| e.path())
                .filter(|p| p.is_dir())
                .map(|p| p.join(path.trim_start_matches('/')))
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}

/// Removes the pod cgroup (its children must be gone). Missing is fine.
pub fn remove(root: &Path, path: &str) -> io::Result<()> {
    for d in in_every_hierarchy(root, path) {
        // Leftover child cgroups (containers runc left) go first, deepest first.
        remove_tree(&d)?;
    }
    Ok(())
}

/// Removes the now empty QoS-level cgroups between the pod cgroup `path` and `parent`
/// (`kubepods`), and `parent` itself when empty, so a node without pods leaves no cgroup
/// behind. A directory still in use (another pod's) stays: rmdir refuses it.
pub fn prune_empty_parents(root: &Path, path: &str, parent: &str) {
    let parent = format!("/{}", parent.trim_matches('/'));
    let mut cur = Path::new(path).parent().map(Path::to_path_buf);
    while let Some(p) = cur {
        let ps = p.to_string_lossy().to_string();
        if !ps.starts_with(&parent) {
            break;
        }
        for d in in_every_hierarchy(root, &ps) {
            let _ = std::fs::remove_dir(d);
        }
        if ps == parent {
            break;
        }
        cur = p.parent().map(Path::to_path_buf);
    }
}

/// `kubepods` itself holds the node's allocatable (the kubelet's enforce-node-allocatable for
/// pods): cpu shares from the allocatable CPU, memory limited to the allocatable memory.
pub fn set_node_allocatable(root: &Path, parent: &str, cpu_milli: i64, memory: i64) {
    let shares = crate::resources::milli_cpu_to_shares(cpu_milli);
    let path = format!("/{}", parent.trim_matches('/'));
    let writes: Vec<(PathBuf, &str, String)> = if is_unified(root) {
        let d = dir(root, None, &path);
        vec![
            (
                d.clone(),
                "cpu.weight",
                shares_to_weight(shares).to_string(),
            ),
            (d, "memory.max", memory.to_string()),
        ]
    } else {
        vec![
            (
                dir(root, Some("cpu"), &path),
                "cpu.shares",
                shares.to_string(),
            ),
            (
                dir(root, Some("memory"), &path),
                "memory.limit_in_bytes",
                memory.to_string(),
            ),
        ]
    };
    for (d, file, value) in writes {
        if d.is_dir() && (memory > 0 || !file.starts_with("memory")) {
            if let Err(e) = write(&d, file, &value) {
                tracing::warn!(error = %e, "setting the node allocatable on the pods cgroup");
            }
        }
    }
}

/// The Burstable QoS cgroup's cpu shares: the sum of its pods' cpu requests, as the kubelet's
/// QoS manager keeps them (only when the cgroup exists).
pub fn set_burstable_shares(root: &Path, parent: &str, cpu_milli: i64) {
    let path = format!("/{}/burstable", parent.trim_matches('/'));
    let shares = crate::resources::milli_cpu_to_shares(cpu_milli);
    let (d, file, value) = if is_unified(root) {
        (
            dir(root, None, &path),
            "cpu.weight",
            shares_to_weight(shares).to_string(),
        )
    } else {
        (
            dir(root, Some("cpu"), &path),
            "cpu.shares",
            shares.to_string(),
        )
    };
    if d.is_dir() {
        if let Err(e) = write(&d, file, &value) {
            tracing::warn!(error = %e, "setting the burstable cgroup's cpu shares");
        }
    }
}

/// The BestEffort QoS cgroup gets the minimum cpu shares, as the kubelet's QoS manager sets.
pub fn set_besteffort_shares(root: &Path, parent: &str) {
    let path = format!("/{}/besteffort", parent.trim_matches('/'));
    let (d, file, value) = if is_unified(root) {
        (dir(root, None, &path), "cpu.weight", "1")
    } else {
        (dir(root, Some("cpu"), &path), "cpu.shares", "2")
    };
    if d.is_dir() {
        if let Err(e) = write(&d, file, value) {
            tracing::warn!(error = %e, "setting the besteffort cgroup's cpu shares");
        }
    }
}

fn remove_tree(d: &Path) -> io::Result<()> {
    let entries = match std::fs::read_dir(d) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    for e in entries.flatten() {
        if e.file_type().map(|t| t.is_dir()).unwrap_or(false) {
            remove_tree(&e.path())?;
        }
    }
    // The kernel may still be tearing down the last task's membership: retry briefly.
    for attempt in 0..50 {
        match std::fs::remove_dir(d) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) if attempt < 49 && e.raw_os_error() == Some(libc::EBUSY) => {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            Err(e) => {
                return Err(io::Error::new(
                    e.kind(),
                    format!("remove {}: {e}", d.display()),
                ))
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cgroup::pod_cgroup_path;
    use crate::resources::QosClass;

    /// A pod's values with the usual 100 ms CFS period.
    fn values(cpu_shares: u64, cpu_quota: i64, memory_limit: i64) -> CgroupValues {
        CgroupValues {
            cpu_shares,
            cpu_quota,
            cpu_period: 100000,
            memory_limit,
        }
    }

    fn read(path: impl AsRef<Path>) -> String {
        std::fs::read_to_string(path).unwrap()
    }

    #[test]
    fn paths_by_qos() {
        assert_eq!(
            pod_cgroup_path("/kubepods", QosClass::Guaranteed, "u1"),
            "/kubepods/podu1"
        );
        assert_eq!(
            pod_cgroup_path("kubepods/", QosClass::Burstable, "u1"),
            "/kubepods/burstable/podu1"
        );
        assert_eq!(
            pod_cgroup_path("/a/kubepods", QosClass::BestEffort, "u1"),
            "/a/kubepods/besteffort/podu1"
        );
    }

    // Fixture directories stand in for the cgroup filesystem (plain files, no kernel).
    #[test]
    fn v1_values_and_removal() {
        let t = tempfile::tempdir().unwrap();
        for c in V1_CONTROLLERS {
            std::fs::create_dir_all(t.path().join(c)).unwrap();
        }
        let v = values(768, 75000, 96 << 20);
        create(t.path(), "/kubepods/podu1", &v).unwrap();
        let cpu = t.path().join("cpu/kubepods/podu1");
        assert_eq!(read(cpu.join("cpu.shares")), "768");
        assert_eq!(read(cpu.join("cpu.cfs_quota_us")), "75000");
        assert_eq!(read(cpu.join("cpu.cfs_period_us")), "100000");
        let mem = t.path().join("memory/kubepods/podu1/memory.limit_in_bytes");
        assert_eq!(read(mem), (96u64 << 20).to_string());
        assert!(t.path().join("pids/kubepods/podu1").is_dir());
        // Fixture files make the dirs non-empty; real cgroupfs dirs hold only virtual files.
        for c in V1_CONTROLLERS {
            let d = t.path().join(c).join("kubepods/podu1");
            for f in std::fs::read_dir(&d).unwrap().flatten() {
                std::fs::remove_file(f.path()).unwrap();
            }
        }
        remove(t.path(), "/kubepods/podu1").unwrap();
        assert!(!t.path().join("cpu/kubepods/podu1").exists());
        remove(t.path(), "/kubepods/podu1").unwrap();
    }

    #[test]
    fn empty_qos_parents_are_pruned_but_busy_ones_stay() {
        let t = tempfile::tempdir().unwrap();
        for c in V1_CONTROLLERS {
            std::fs::create_dir_all(t.path().join(c).join("a/kubepods/burstable/podu1")).unwrap();
            std::fs::create_dir_all(t.path().join(c).join("a/kubepods/besteffort/podu2")).unwrap();
        }
        std::fs::remove_dir(t.path().join("cpu/a/kubepods/burstable/podu1")).unwrap();
        prune_empty_parents(t.path(), "/a/kubepods/burstable/podu1", "/a/kubepods");
        assert!(!t.path().join("cpu/a/kubepods/burstable").exists());
        // besteffort still holds a pod, so kubepods stays; /a is above the parent.
        assert!(t.path().join("cpu/a/kubepods/besteffort/podu2").is_dir());
        std::fs::remove_dir(t.path().join("cpu/a/kubepods/besteffort/podu2")).unwrap();
        prune_empty_parents(t.path(), "/a/kubepods/besteffort/podu2", "/a/kubepods");
        assert!(!t.path().join("cpu/a/kubepods").exists());
        assert!(t.path().join("cpu/a").is_dir());
        set_besteffort_shares(t.path(), "/a/kubepods");
        for c in V1_CONTROLLERS {
            std::fs::create_dir_all(t.path().join(c).join("a/kubepods")).unwrap();
        }
        set_node_allocatable(t.path(), "/a/kubepods", 2000, 1 << 30);
        assert_eq!(read(t.path().join("cpu/a/kubepods/cpu.shares")), "2048");
        assert_eq!(
            read(t.path().join("memory/a/kubepods/memory.limit_in_bytes")),
            (1u64 << 30).to_string()
        );
    }

    #[test]
    fn v2_values() {
        let t = tempfile::tempdir().unwrap();
        std::fs::write(t.path().join("cgroup.controllers"), "cpu memory pids").unwrap();
        std::fs::write(t.path().join("cgroup.subtree_control"), "").unwrap();
        let v = values(1024, 50000, 64 << 20);
        create(t.path(), "/kubepods/burstable/podu2", &v).unwrap();
        let d = t.path().join("kubepods/burstable/podu2");
        assert_eq!(read(d.join("cpu.weight")), "39");
        assert_eq!(read(d.join("cpu.max")), "50000 100000");
        assert_eq!(read(d.join("memory.max")), (64u64 << 20).to_string());
        assert_eq!(read(t.path().join("cgroup.subtree_control")), "+pids");
        let be = CgroupValues {
            cpu_shares: 2,
            ..Default::default()
        };
        create(t.path(), "/kubepods/besteffort/podu3", &be).unwrap();
        let d = t.path().join("kubepods/besteffort/podu3");
        assert_eq!(read(d.join("cpu.max")), "max 100000");
        assert!(!d.join("memory.max").exists());
    }
}
