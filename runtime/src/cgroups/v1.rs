//! A container's resources (runtime-spec `linux.resources`) written to its cgroup on a
//! cgroup v1 (or hybrid) host, as runc 1.1's cgroupfs manager writes them at create and at
//! `runc update` (runc 1.1 never writes `memory.kmem.*`): what lets the shim create and
//! update containers without runc.
//!
//! Only files of hierarchies the host has are written; a value for a controller the host
//! lacks is an error naming the file, as runc's would be. What this module does not write
//! is told by `Cgroups::unsupported`, before anything is made.

use super::{devices, write};
use crate::spec::{BlockIo, Cpu, Memory, Resources};
use std::path::{Path, PathBuf};

/// The directory of cgroup `path` in the v1 hierarchy of `controller` under `root`.
fn dir(root: &Path, controller: &str, path: &str) -> Option<PathBuf> {
    peapod_host::cgroup::v1_dir(root, controller, path)
}

/// The directory of `controller`, which must exist when a value is set for it.
fn need(root: &Path, controller: &str, path: &str, file: &str) -> Result<PathBuf, String> {
    dir(root, controller, path).ok_or_else(|| {
        format!(
            "write {file}: no {controller} cgroup {path} on this host (under {})",
            root.display()
        )
    })
}

/// Writes `resources` to cgroup `path` under `root` (`/sys/fs/cgroup`). `at_create`: at the
/// container's create (device rules are written); an update leaves devices alone, as
/// `runc update` does.
pub fn apply(
    root: &Path,
    path: &str,
    resources: &Resources,
    at_create: bool,
) -> Result<(), String> {
    if let Some(m) = &resources.memory {
        memory(root, path, m)?;
    }
    if let Some(c) = &resources.cpu {
        cpu(root, path, c)?;
    }
    // runc's zero is "not set"; below zero, no limit.
    if let Some(limit) = resources
        .pids
        .as_ref()
        .and_then(|p| p.limit)
        .filter(|l| *l != 0)
    {
        let d = need(root, "pids", path, "pids.max")?;
        let value = if limit > 0 {
            limit.to_string()
        } else {
            "max".into()
        };
        write(&d, "pids.max", &value)?;
    }
    for p in &resources.hugepage_limits {
        let file = format!("hugetlb.{}.limit_in_bytes", p.page_size);
        let d = need(root, "hugetlb", path, &file)?;
        write(&d, &file, &p.limit.to_string())?;
    }
    if let Some(b) = &resources.block_io {
        block_io(root, path, b)?;
    }
    if at_create {
        if let Some(d) = dir(root, "devices", path) {
            let rules = devices::emulate(&resources.devices);
            let (default_file, exception_file) = if rules.default_allow {
                ("devices.allow", "devices.deny")
            } else {
                ("devices.deny", "devices.allow")
            };
            write(&d, default_file, "a")?;
            for e in rules.exceptions {
                write(&d, exception_file, &e.line())?;
            }
        }
    }
    Ok(())
}

/// runc's `setMemoryAndSwap` and the rest of its memory group.
fn memory(root: &Path, path: &str, m: &Memory) -> Result<(), String> {
    // runc's zero is "not set".
    let limit = m.limit.filter(|v| *v != 0);
    let mut swap = m.swap.filter(|v| *v != 0);
    if limit.is_some() || swap.is_some() {
        let d = need(root, "memory", path, "memory.limit_in_bytes")?;
        // An unlimited memory with swap unsaid: swap unlimited too, where the kernel counts it.
        if limit == Some(-1) && swap.is_none() && d.join("memory.memsw.limit_in_bytes").exists() {
            swap = Some(-1);
        }
        // The kernel keeps memsw at or above the memory limit at every step: swap first when
        // it is unlimited or above the current limit (runc's setMemoryAndSwap).
        let swap_first = match (limit, swap) {
            (Some(_), Some(s)) => {
                s == -1
                    || std::fs::read_to_string(d.join("memory.limit_in_bytes"))
                        .ok()
                        .and_then(|t| t.trim().parse::<u64>().ok())
                        .is_some_and(|cur| cur < s as u64)
            }
            _ => false,
        };
        let write_limit = |v: i64| write(&d, "memory.limit_in_bytes", &v.to_string());
        let write_swap = |v: i64| write(&d, "memory.memsw.limit_in_bytes", &v.to_string());
        if swap_first {
            if let Some(s) = swap {
                write_swap(s)?;
            }
            if let Some(l) = limit {
                write_limit(l)?;
            }
        } else {
            if let Some(l) = limit {
                write_limit(l)?;
            }
            if let Some(s) = swap {
                write_swap(s)?;
            }
        }
    }
    // A reservation of zero is "not set"; a swappiness of -1 too (0 is a value).
    let files = [
        (
            m.reservation.filter(|v| *v != 0),
            "memory.soft_limit_in_bytes",
        ),
        (m.swappiness.filter(|v| *v != -1), "memory.swappiness"),
    ];
    for (value, file) in files {
        if let Some(v) = value {
            let d = need(root, "memory", path, file)?;
            write(&d, file, &v.to_string())?;
        }
    }
    if m.disable_oom_killer == Some(true) {
        let d = need(root, "memory", path, "memory.oom_control")?;
        write(&d, "memory.oom_control", "1")?;
    }
    Ok(())
}

/// runc's cpu and cpuset groups: shares, then period before quota (a quota must fit the
/// period at each step), realtime period before runtime, then the CPU and memory sets.
fn cpu(root: &Path, path: &str, c: &Cpu) -> Result<(), String> {
    let files = [
        (c.shares, "cpu.shares"),
        (c.period, "cpu.cfs_period_us"),
        (c.quota, "cpu.cfs_quota_us"),
        (c.realtime_period, "cpu.rt_period_us"),
        (c.realtime_runtime, "cpu.rt_runtime_us"),
    ];
    for (value, file) in files {
        match value {
            // runc skips zero values: the kernel's default stays.
            Some(v) if v != 0 => {
                let d = need(root, "cpu", path, file)?;
                write(&d, file, &v.to_string())?;
            }
            _ => {}
        }
    }
    for (value, file) in [(&c.cpus, "cpuset.cpus"), (&c.mems, "cpuset.mems")] {
        if let Some(v) = value.as_deref().filter(|v| !v.is_empty()) {
            let d = need(root, "cpuset", path, file)?;
            write(&d, file, v)?;
        }
    }
    Ok(())
}

/// runc's blkio group.
fn block_io(root: &Path, path: &str, b: &BlockIo) -> Result<(), String> {
    for (value, file) in [
        (b.weight, "blkio.weight"),
        (b.leaf_weight, "blkio.leaf_weight"),
    ] {
        if let Some(v) = value.filter(|v| *v != 0) {
            let d = need(root, "blkio", path, file)?;
            write(&d, file, &v.to_string())?;
        }
    }
    for e in &b.weight_device {
        for (value, file) in [
            (e.weight, "blkio.weight_device"),
            (e.leaf_weight, "blkio.leaf_weight_device"),
        ] {
            if let Some(w) = value {
                let d = need(root, "blkio", path, file)?;
                write(&d, file, &format!("{}:{} {w}", e.major, e.minor))?;
            }
        }
    }
    let throttles = [
        (
            &b.throttle_read_bps_device,
            "blkio.throttle.read_bps_device",
        ),
        (
            &b.throttle_write_bps_device,
            "blkio.throttle.write_bps_device",
        ),
        (
            &b.throttle_read_iops_device,
            "blkio.throttle.read_iops_device",
        ),
        (
            &b.throttle_write_iops_device,
            "blkio.throttle.write_iops_device",
        ),
    ];
    for (list, file) in throttles {
        for e in list {
            let d = need(root, "blkio", path, file)?;
            write(&d, file, &format!("{}:{} {}", e.major, e.minor, e.rate))?;
        }
    }
    Ok(())
}

/// Freezes (`runc pause`) or thaws (`runc resume`) cgroup `path`, waiting until the kernel
/// reports the state reached.
pub fn freeze(root: &Path, path: &str, frozen: bool) -> Result<(), String> {
    let d = need(root, "freezer", path, "freezer.state")?;
    let want = if frozen { "FROZEN" } else { "THAWED" };
    for _ in 0..2000 {
        write(&d, "freezer.state", want)?;
        let now = std::fs::read_to_string(d.join("freezer.state")).unwrap_or_default();
        if now.trim() == want {
            return Ok(());
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    Err(format!(
        "{} did not become {want}",
        d.join("freezer.state").display()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    /// Resources as a spec gives them.
    fn res(v: Value) -> Resources {
        serde_json::from_value(v).unwrap()
    }

    /// A v1 host under a temporary root: each controller's directory of cgroup `/k/c` with
    /// empty files.
    fn host(controllers: &[&str]) -> tempfile::TempDir {
        let root = tempfile::tempdir().unwrap();
        for c in controllers {
            let d = root.path().join(c).join("k/c");
            std::fs::create_dir_all(&d).unwrap();
            std::fs::write(root.path().join(c).join("cgroup.procs"), "").unwrap();
        }
        root
    }

    fn read(root: &Path, c: &str, file: &str) -> String {
        std::fs::read_to_string(root.join(c).join("k/c").join(file)).unwrap_or_default()
    }

    #[test]
    fn limits_are_written_where_runc_writes_them() {
        let root = host(&["memory", "cpu", "pids", "cpuset"]);
        let r = json!({
            "memory": {"limit": 1000000, "swap": 1000000, "reservation": 500000, "swappiness": null},
            "cpu": {"shares": 512, "period": 100000, "quota": 50000, "cpus": "0", "mems": ""},
            "pids": {"limit": -1}
        });
        apply(root.path(), "/k/c", &res(r), false).unwrap();
        let p = root.path();
        assert_eq!(read(p, "memory", "memory.limit_in_bytes"), "1000000");
        assert_eq!(read(p, "memory", "memory.memsw.limit_in_bytes"), "1000000");
        assert_eq!(read(p, "memory", "memory.soft_limit_in_bytes"), "500000");
        assert_eq!(read(p, "memory", "memory.swappiness"), "");
        assert_eq!(read(p, "cpu", "cpu.shares"), "512");
        assert_eq!(read(p, "cpu", "cpu.cfs_period_us"), "100000");
        assert_eq!(read(p, "cpu", "cpu.cfs_quota_us"), "50000");
        assert_eq!(read(p, "cpuset", "cpuset.cpus"), "0");
        assert_eq!(read(p, "cpuset", "cpuset.mems"), "");
        assert_eq!(read(p, "pids", "pids.max"), "max");
    }

    #[test]
    fn device_rules_come_after_the_specs_own_only_at_create() {
        let root = host(&["devices"]);
        let r = json!({"devices": [{"allow": false, "access": "rwm"},
            {"allow": true, "type": "c", "major": 10, "minor": 229, "access": "rw"}]});
        // The files are plain files here: each write replaces the last, so the test sees the
        // last rule written to each.
        apply(root.path(), "/k/c", &res(r.clone()), true).unwrap();
        assert_eq!(read(root.path(), "devices", "devices.deny"), "a");
        assert_eq!(read(root.path(), "devices", "devices.allow"), "c 136:* rwm");
        let again = host(&["devices"]);
        apply(again.path(), "/k/c", &res(r), false).unwrap();
        assert_eq!(read(again.path(), "devices", "devices.deny"), "");
    }

    #[test]
    fn a_value_for_a_missing_controller_names_the_file() {
        let root = host(&["memory"]);
        let e = apply(
            root.path(),
            "/k/c",
            &res(json!({"pids": {"limit": 5}})),
            false,
        )
        .unwrap_err();
        assert!(e.contains("pids.max"), "{e}");
        // Nothing set for it: nothing to write.
        apply(root.path(), "/k/c", &res(json!({"pids": null})), false).unwrap();
    }
}
