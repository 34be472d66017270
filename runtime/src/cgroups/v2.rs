//! A container's cgroup on the unified (v2) hierarchy, made and written as runc 1.1's fs2
//! manager does (`libcontainer/cgroups/fs2`): the path made with every controller the root
//! has enabled in each ancestor's `cgroup.subtree_control` (`CreateCgroupPath`), the
//! resources written in runc's order (pids, memory, io, cpu, devices, cpuset, hugetlb,
//! unified) with runc's conversions of the v1-shaped spec (`cpu.weight` from shares,
//! `memory.swap.max` as swap minus memory, `io.weight` from the blkio weight), the device
//! rules as a BPF program ([`super::device_filter`]), the freezer through `cgroup.freeze`.
//!
//! What runc's fs2 manager leaves out of a v1-shaped spec is left out here too: realtime
//! CPU, swappiness, the OOM killer switch, a blkio leaf weight. What it cannot write is
//! told by `Cgroups::unsupported` before anything is made.

use super::devices;
use super::write;
use crate::spec::{BlockIo, Cpu, Memory, Resources};
use std::path::{Path, PathBuf};

/// The spec's `unified` map: file name -> value; a name with a slash or without a
/// controller's prefix is refused, as runc refuses it.
pub fn unified(resources: &Resources) -> Result<Vec<(&str, &str)>, String> {
    let Some(map) = resources.others.get("unified").filter(|v| !v.is_null()) else {
        return Ok(Vec::new());
    };
    let map = map
        .as_object()
        .ok_or("unified resources that are not a map")?;
    let mut out = Vec::new();
    for (k, v) in map {
        if k.contains('/') {
            return Err(format!(
                "unified resource {k:?} must be a file name (no slashes)"
            ));
        }
        if !k.contains('.') {
            return Err(format!(
                "unified resource {k:?} must be in the form CONTROLLER.PARAMETER"
            ));
        }
        let v = v
            .as_str()
            .ok_or_else(|| format!("unified resource {k:?}: not a string"))?;
        out.push((k.as_str(), v));
    }
    Ok(out)
}

/// runc's `numToStr`: zero is "not set", -1 "max".
fn num_to_str(value: i64) -> Option<String> {
    match value {
        0 => None,
        -1 => Some("max".into()),
        v => Some(v.to_string()),
    }
}

/// runc's `ConvertCPUSharesToCgroupV2Value`, in its unsigned arithmetic (shares below 2
/// wrap, and the kernel then refuses the weight, as with runc).
pub fn cpu_weight(shares: i64) -> u64 {
    if shares == 0 {
        return 0;
    }
    1u64.wrapping_add((shares as u64).wrapping_sub(2).wrapping_mul(9999) / 262_142)
}

/// runc's `ConvertMemorySwapToCgroupV2Value`: the spec's swap is memory plus swap; v2's
/// `memory.swap.max` is swap alone.
pub fn swap_max(swap: i64, memory: i64) -> Result<i64, String> {
    if memory == -1 && swap == 0 {
        return Ok(-1);
    }
    if swap == -1 || swap == 0 {
        return Ok(swap);
    }
    if memory == 0 || memory == -1 {
        return Err("unable to set swap limit without memory limit".into());
    }
    if memory < 0 {
        return Err(format!("invalid memory value: {memory}"));
    }
    if swap < memory {
        return Err("memory+swap limit should be >= memory limit".into());
    }
    Ok(swap - memory)
}

/// runc's `ConvertBlkIOToIOWeightValue`, in its unsigned arithmetic.
fn io_weight(blkio_weight: i64) -> u64 {
    1u64.wrapping_add((blkio_weight as u64).wrapping_sub(10).wrapping_mul(9999) / 990)
}

/// Makes cgroup `path` (relative to the hierarchy's root `root`) as runc's
/// `CreateCgroupPath` does: each level made where it is missing, and every controller the
/// root has enabled in the root's and each ancestor's `cgroup.subtree_control`, so that the
/// container's own files exist. Returns its directory.
pub fn make_path(root: &Path, path: &str) -> Result<PathBuf, String> {
    let rel = peapod_host::cgroup::below_root(path).map_err(|e| e.to_string())?;
    let available = std::fs::read_to_string(root.join("cgroup.controllers"))
        .map_err(|e| format!("read {}/cgroup.controllers: {e}", root.display()))?;
    let enable: Vec<String> = available
        .split_whitespace()
        .map(|c| format!("+{c}"))
        .collect();
    let parts: Vec<&str> = rel.split('/').filter(|p| !p.is_empty()).collect();
    let mut dir = root.to_path_buf();
    enable_controllers(&dir, &enable);
    for (i, part) in parts.iter().enumerate() {
        dir.push(part);
        match std::fs::create_dir(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(format!("mkdir {}: {e}", dir.display())),
        }
        let kind = std::fs::read_to_string(dir.join("cgroup.type")).unwrap_or_default();
        if !matches!(kind.trim(), "" | "domain") {
            // Threaded or invalid (a process in an inner cgroup): runc decides case by case.
            return Err(format!("cgroup {} is {}", dir.display(), kind.trim()));
        }
        if i + 1 < parts.len() {
            enable_controllers(&dir, &enable);
        }
    }
    Ok(dir)
}

/// Enables `controllers` (`+cpu`...) for the children of `dir`: all at once, else one by
/// one, each that cannot be (a cgroup with processes of its own refuses them all) left off
/// as runc leaves it: a resource that needs one then fails to be written.
fn enable_controllers(dir: &Path, controllers: &[String]) {
    let file = dir.join("cgroup.subtree_control");
    if std::fs::write(&file, controllers.join(" ")).is_err() {
        for c in controllers {
            let _ = std::fs::write(&file, c);
        }
    }
}

/// Moves process `pid` into the cgroup at `dir`.
pub fn join(dir: &Path, pid: u32) -> Result<(), String> {
    write(dir, "cgroup.procs", &pid.to_string())
}

/// Writes `resources` to the cgroup at `dir`, in runc's order: at the container's create
/// (`at_create`: the device rules too) or at an update (`runc update`, which leaves devices
/// alone).
pub fn apply(dir: &Path, resources: &Resources, at_create: bool) -> Result<(), String> {
    // runc's zero is "not set"; -1 "max".
    if let Some(limit) = resources.pids.as_ref().and_then(|p| p.limit) {
        if let Some(v) = num_to_str(limit) {
            write(dir, "pids.max", &v)?;
        }
    }
    if let Some(m) = &resources.memory {
        memory(dir, m)?;
    }
    if let Some(b) = &resources.block_io {
        block_io(dir, b)?;
    }
    if let Some(c) = &resources.cpu {
        cpu(dir, c)?;
    }
    if at_create {
        let rules = devices::emulate(&resources.devices);
        let d = std::fs::File::open(dir).map_err(|e| format!("open {}: {e}", dir.display()))?;
        super::device_filter::install(&d, &rules)
            .map_err(|e| format!("cgroup {}: {e}", dir.display()))?;
    }
    if let Some(c) = &resources.cpu {
        for (value, file) in [(&c.cpus, "cpuset.cpus"), (&c.mems, "cpuset.mems")] {
            if let Some(v) = value.as_deref().filter(|v| !v.is_empty()) {
                write(dir, file, v)?;
            }
        }
    }
    for p in &resources.hugepage_limits {
        write(
            dir,
            &format!("hugetlb.{}.max", p.page_size),
            &p.limit.to_string(),
        )?;
    }
    for (file, value) in unified(resources)? {
        write(dir, file, value).map_err(|e| format!("unable to set unified resource: {e}"))?;
    }
    Ok(())
}

/// runc's `setMemory`: swap first (a lower memory.max with a swap.max that fits), then the
/// limit and the reservation (`memory.low`).
fn memory(dir: &Path, m: &Memory) -> Result<(), String> {
    let (limit, swap, low) = (
        m.limit.unwrap_or(0),
        m.swap.unwrap_or(0),
        m.reservation.unwrap_or(0),
    );
    if limit == 0 && swap == 0 && low == 0 {
        return Ok(());
    }
    let swap_v2 = swap_max(swap, limit)?;
    // Memory and swap the same: no swap at all, which is "0", not "not set".
    let swap_str = num_to_str(swap_v2).or_else(|| (swap_v2 == 0 && swap > 0).then(|| "0".into()));
    if let Some(s) = swap_str {
        write(dir, "memory.swap.max", &s)?;
    }
    if let Some(l) = num_to_str(limit) {
        write(dir, "memory.max", &l)?;
    }
    if let Some(r) = num_to_str(low) {
        write(dir, "memory.low", &r)?;
    }
    Ok(())
}

/// runc's `setCpu`: the weight from the shares, and `cpu.max` as "quota period" ("max" for
/// no quota, the kernel's default period when the spec gives none).
fn cpu(dir: &Path, c: &Cpu) -> Result<(), String> {
    let weight = cpu_weight(c.shares.unwrap_or(0));
    if weight != 0 {
        write(dir, "cpu.weight", &weight.to_string())?;
    }
    let (quota, period) = (c.quota.unwrap_or(0), c.period.unwrap_or(0));
    if quota != 0 || period != 0 {
        let quota = if quota > 0 {
            quota.to_string()
        } else {
            "max".into()
        };
        let period = if period == 0 { 100_000 } else { period };
        write(dir, "cpu.max", &format!("{quota} {period}"))?;
    }
    Ok(())
}

/// runc's `setIo`: the weight to BFQ's file where the kernel has it (and per device where
/// BFQ takes that), else to `io.weight` converted; the throttles to `io.max`.
fn block_io(dir: &Path, b: &BlockIo) -> Result<(), String> {
    let weight = b.weight.unwrap_or(0);
    let bfq = dir.join("io.bfq.weight");
    let has_bfq = bfq.exists();
    if weight != 0 {
        if has_bfq {
            write(dir, "io.bfq.weight", &weight.to_string())?;
        } else {
            write(dir, "io.weight", &io_weight(weight).to_string())?;
        }
    }
    // A kernel whose BFQ takes a weight per device (5.4) shows "default N" in the file, an
    // older one a bare number.
    let per_device = has_bfq
        && std::fs::read_to_string(&bfq)
            .map(|t| t.trim().parse::<i64>().is_err())
            .unwrap_or(false);
    if per_device {
        for d in &b.weight_device {
            let line = format!("{}:{} {}", d.major, d.minor, d.weight.unwrap_or(0));
            write(dir, "io.bfq.weight", &line)?;
        }
    }
    let throttles = [
        (&b.throttle_read_bps_device, "rbps"),
        (&b.throttle_write_bps_device, "wbps"),
        (&b.throttle_read_iops_device, "riops"),
        (&b.throttle_write_iops_device, "wiops"),
    ];
    for (list, key) in throttles {
        for d in list {
            let line = format!("{}:{} {key}={}", d.major, d.minor, d.rate);
            write(dir, "io.max", &line)?;
        }
    }
    Ok(())
}

/// Freezes (`runc pause`) or thaws (`runc resume`) the cgroup at `dir` through
/// `cgroup.freeze`, and for a freeze waits until `cgroup.events` says `frozen 1` (every
/// process stopped), as runc does.
pub fn freeze(dir: &Path, frozen: bool) -> Result<(), String> {
    let file = dir.join("cgroup.freeze");
    if !file.exists() {
        // A kernel before 5.2: nothing to thaw, and no way to freeze.
        if !frozen {
            return Ok(());
        }
        return Err(format!("freezer not supported: no {}", file.display()));
    }
    write(dir, "cgroup.freeze", if frozen { "1" } else { "0" })?;
    let now = std::fs::read_to_string(&file).unwrap_or_default();
    match (now.trim(), frozen) {
        ("0", false) => return Ok(()),
        ("1", true) => {}
        (state, _) => {
            return Err(format!(
                "expected {} to be {} but it is {state:?}",
                file.display(),
                u8::from(frozen)
            ))
        }
    }
    let events = dir.join("cgroup.events");
    for _ in 0..1000 {
        let text = std::fs::read_to_string(&events)
            .map_err(|e| format!("read {}: {e}", events.display()))?;
        if text.lines().any(|l| l.trim() == "frozen 1") {
            return Ok(());
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    Err(format!(
        "timeout of 10s reached waiting for {} to freeze",
        dir.display()
    ))
}

/// SIGKILL to every process of the cgroup at `dir` and below, at once (`cgroup.kill`, 5.14);
/// false when the kernel has no such file.
pub fn kill(dir: &Path) -> bool {
    match std::fs::write(dir.join("cgroup.kill"), "1") {
        Ok(()) => true,
        // A cgroup already gone has nothing left to kill.
        Err(_) => !dir.exists(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn res(v: serde_json::Value) -> Resources {
        serde_json::from_value(v).unwrap()
    }

    fn read(dir: &Path, file: &str) -> String {
        std::fs::read_to_string(dir.join(file)).unwrap_or_default()
    }

    /// A cgroup directory with the files a v2 container's has, empty.
    fn cgroup(files: &[&str]) -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        for f in files {
            std::fs::write(d.path().join(f), "").unwrap();
        }
        d
    }

    #[test]
    fn runcs_conversions() {
        assert_eq!(cpu_weight(0), 0);
        assert_eq!(cpu_weight(2), 1);
        assert_eq!(cpu_weight(1024), 39);
        assert_eq!(cpu_weight(262_144), 10_000);
        assert!(cpu_weight(1) > 10_000, "wraps as runc's does");
        assert_eq!(swap_max(0, 100), Ok(0));
        assert_eq!(swap_max(0, -1), Ok(-1));
        assert_eq!(swap_max(-1, 100), Ok(-1));
        assert_eq!(swap_max(300, 100), Ok(200));
        assert_eq!(swap_max(100, 100), Ok(0));
        assert!(swap_max(50, 100).is_err());
        assert!(swap_max(50, 0).is_err());
        assert_eq!(io_weight(10), 1);
        assert_eq!(io_weight(1000), 10_000);
        assert_eq!(io_weight(500), 1 + 490 * 9999 / 990);
    }

    #[test]
    fn limits_are_written_where_runc_writes_them() {
        let d = cgroup(&[
            "pids.max",
            "memory.max",
            "memory.swap.max",
            "memory.low",
            "cpu.weight",
            "cpu.max",
            "cpuset.cpus",
            "cpuset.mems",
            "hugetlb.2MB.max",
            "memory.high",
            "io.weight",
            "io.max",
        ]);
        let r = res(json!({
            "memory": {"limit": 1000000, "swap": 3000000, "reservation": 500000, "swappiness": 10},
            "cpu": {"shares": 1024, "quota": 50000, "cpus": "0", "mems": "", "realtimeRuntime": 5},
            "pids": {"limit": -1},
            "blockIO": {"weight": 10, "throttleReadBpsDevice": [{"major": 8, "minor": 0, "rate": 100}]},
            "hugepageLimits": [{"pageSize": "2MB", "limit": 4194304}],
            "unified": {"memory.high": "2000000"}
        }));
        apply(d.path(), &r, false).unwrap();
        let p = d.path();
        assert_eq!(read(p, "pids.max"), "max");
        assert_eq!(read(p, "memory.max"), "1000000");
        assert_eq!(read(p, "memory.swap.max"), "2000000");
        assert_eq!(read(p, "memory.low"), "500000");
        assert_eq!(read(p, "cpu.weight"), "39");
        assert_eq!(read(p, "cpu.max"), "50000 100000");
        assert_eq!(read(p, "cpuset.cpus"), "0");
        assert_eq!(read(p, "cpuset.mems"), "");
        assert_eq!(read(p, "hugetlb.2MB.max"), "4194304");
        assert_eq!(read(p, "memory.high"), "2000000");
        assert_eq!(read(p, "io.weight"), "1");
        assert_eq!(read(p, "io.max"), "8:0 rbps=100");
    }

    #[test]
    fn swap_equal_to_memory_is_no_swap_and_a_period_alone_is_no_quota() {
        let d = cgroup(&["memory.max", "memory.swap.max", "cpu.max"]);
        let r = res(json!({"memory": {"limit": 100, "swap": 100}, "cpu": {"period": 50000}}));
        apply(d.path(), &r, false).unwrap();
        assert_eq!(read(d.path(), "memory.swap.max"), "0");
        assert_eq!(read(d.path(), "cpu.max"), "max 50000");
        // Unlimited memory, swap unsaid: both unlimited.
        let r = res(json!({"memory": {"limit": -1}}));
        apply(d.path(), &r, false).unwrap();
        assert_eq!(read(d.path(), "memory.swap.max"), "max");
        assert_eq!(read(d.path(), "memory.max"), "max");
        let bad = res(json!({"memory": {"limit": 100, "swap": 50}}));
        assert!(apply(d.path(), &bad, false)
            .unwrap_err()
            .contains(">= memory"));
    }

    #[test]
    fn a_file_that_cannot_be_written_is_an_error_naming_it() {
        let d = cgroup(&[]);
        let gone = d.path().join("gone");
        let e = apply(&gone, &res(json!({"pids": {"limit": 5}})), false).unwrap_err();
        assert!(e.contains("pids.max"), "{e}");
        // Nothing set: nothing written.
        apply(
            &gone,
            &res(json!({"pids": {"limit": 0}, "memory": {}})),
            false,
        )
        .unwrap();
    }

    #[test]
    fn a_path_is_made_with_controllers_enabled_above_it() {
        let root = cgroup(&["cgroup.controllers", "cgroup.subtree_control"]);
        std::fs::write(root.path().join("cgroup.controllers"), "cpu memory pids\n").unwrap();
        let dir = make_path(root.path(), "/a/b").unwrap();
        assert_eq!(dir, root.path().join("a/b"));
        assert_eq!(
            read(root.path(), "cgroup.subtree_control"),
            "+cpu +memory +pids"
        );
        // A plain directory has no cgroup.subtree_control of its own: the write made one.
        assert_eq!(
            read(&root.path().join("a"), "cgroup.subtree_control"),
            "+cpu +memory +pids"
        );
        assert!(!root.path().join("a/b/cgroup.subtree_control").exists());
        assert!(make_path(root.path(), "/").is_err());
        assert!(make_path(root.path(), "/a/../..").is_err());
    }
}
