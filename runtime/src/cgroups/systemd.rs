//! The systemd cgroup driver (a `cgroupsPath` of `slice:prefix:name`): the container's
//! cgroup is the scope `<prefix>-<name>.scope` in that slice, made by systemd over D-Bus
//! (`peapod_host::systemd`) as runc 1.1's systemd v2 manager asks for it
//! (`libcontainer/cgroups/systemd/v2.go`): the process given by `PIDs`, `Delegate`,
//! accounting on, no default dependencies, and the resources systemd knows as unit
//! properties, which systemd then writes itself (and writes again whenever it realises the
//! unit). The rest goes to the scope's files as on any v2 host ([`super::v2`]).
//!
//! runc starts the scope and sets the resources with a second call; both are sent with the
//! start here, one round trip fewer to the same unit. runc's systemd version checks are not
//! made: the properties used need systemd 244 (Debian 11 has 247).

use super::devices::{self, DeviceRule};
use super::v2;
use crate::spec::Resources;
use peapod_host::dbus::Value;
use peapod_host::systemd::{scope_of, Systemd};
use std::time::Duration;

/// How long one call to systemd may take (milliseconds natively; seconds on a loaded or
/// emulated machine).
const CALL_TIMEOUT: Duration = Duration::from_secs(60);

/// A container's scope: its unit, its slice and its cgroup path (from the hierarchy's root).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scope {
    /// The container's name in it (runc's `Name`, the spec's last field).
    pub name: String,
    pub unit: String,
    pub slice: String,
    pub path: String,
}

impl Scope {
    /// The scope a spec's `slice:prefix:name` names; `None` when the path is not of that form
    /// or names a slice (runc then makes a slice of its own, not a scope).
    pub fn of(cgroups_path: &str) -> Option<Scope> {
        let (unit, path) = scope_of(cgroups_path)?;
        if !unit.ends_with(".scope") {
            return None;
        }
        let slice = match cgroups_path.split(':').next() {
            Some("") | None => "system.slice",
            Some(s) => s,
        };
        Some(Scope {
            name: cgroups_path
                .rsplit(':')
                .next()
                .unwrap_or_default()
                .to_string(),
            unit,
            slice: slice.to_string(),
            path,
        })
    }

    /// Starts the scope with process `pid` in it and `resources` (the device rules too) as
    /// its properties, and waits until systemd has moved the process.
    pub fn start(&self, pid: u32, resources: &Resources) -> Result<(), String> {
        let mut props = vec![
            // runc's words, so that `systemctl status` reads the same whoever made it.
            Value::property(
                "Description",
                Value::Str(format!("libcontainer container {}", self.name)),
            ),
            Value::property("Slice", Value::Str(self.slice.clone())),
            Value::property("Delegate", Value::Bool(true)),
            Value::property("PIDs", Value::Array("u".into(), vec![Value::U32(pid)])),
            Value::property("MemoryAccounting", Value::Bool(true)),
            Value::property("CPUAccounting", Value::Bool(true)),
            Value::property("IOAccounting", Value::Bool(true)),
            Value::property("TasksAccounting", Value::Bool(true)),
            Value::property("DefaultDependencies", Value::Bool(false)),
        ];
        props.extend(properties(resources, true)?);
        connect()?
            .start_transient_unit(&self.unit, props)
            .map_err(|e| format!("unable to start unit {:?}: {e}", self.unit))
    }

    /// `runc update`'s properties (its device rules stay as they are).
    pub fn update(&self, resources: &Resources) -> Result<(), String> {
        let props = properties(resources, false)?;
        connect()?
            .set_unit_properties(&self.unit, props)
            .map_err(|e| format!("unable to set unit properties of {:?}: {e}", self.unit))
    }

    /// Stops the scope (what still runs in it is killed by systemd) and waits for it; a scope
    /// systemd no longer has (its last process exited) is stopped already.
    pub fn stop(&self) -> Result<(), String> {
        connect()?
            .stop_unit(&self.unit)
            .map_err(|e| format!("unable to stop unit {:?}: {e}", self.unit))
    }
}

fn connect() -> Result<Systemd, String> {
    Systemd::connect(CALL_TIMEOUT).map_err(|e| e.to_string())
}

/// Why a container with this spec's annotations cannot have its scope made here, if so:
/// runc adds `org.systemd.property.*` annotations to the unit's properties.
pub fn unsupported_annotation<'a>(
    mut keys: impl Iterator<Item = &'a String>,
) -> Option<&'static str> {
    keys.any(|k| k.starts_with("org.systemd.property."))
        .then_some("systemd unit properties in annotations")
}

/// The unit properties runc's `genV2ResourcesProperties` makes of `resources`, with the
/// device rules (`devices`: at create; `runc update` skips them).
pub fn properties(resources: &Resources, devices: bool) -> Result<Vec<Value>, String> {
    let mut p = Vec::new();
    if devices {
        p.extend(device_properties(&devices::emulate(&resources.devices))?);
    }
    let u64_of = |v: i64| Value::U64(v as u64);
    if let Some(m) = &resources.memory {
        let (limit, swap, low) = (
            m.limit.unwrap_or(0),
            m.swap.unwrap_or(0),
            m.reservation.unwrap_or(0),
        );
        if limit != 0 {
            p.push(Value::property("MemoryMax", u64_of(limit)));
        }
        if low != 0 {
            p.push(Value::property("MemoryLow", u64_of(low)));
        }
        let swap = v2::swap_max(swap, limit)?;
        if swap != 0 {
            p.push(Value::property("MemorySwapMax", u64_of(swap)));
        }
    }
    if let Some(c) = &resources.cpu {
        let weight = v2::cpu_weight(c.shares.unwrap_or(0));
        if weight != 0 {
            p.push(Value::property("CPUWeight", Value::U64(weight)));
        }
        cpu_quota(
            &mut p,
            c.quota.unwrap_or(0),
            c.period.unwrap_or(0).max(0) as u64,
        );
    }
    if let Some(limit) = resources.pids.as_ref().and_then(|p| p.limit) {
        if limit > 0 || limit == -1 {
            p.push(Value::property("TasksMax", u64_of(limit)));
        }
    }
    if let Some(c) = &resources.cpu {
        for (value, name) in [(&c.cpus, "AllowedCPUs"), (&c.mems, "AllowedMemoryNodes")] {
            if let Some(v) = value.as_deref().filter(|v| !v.is_empty()) {
                p.push(Value::property(name, cpu_set(v)?));
            }
        }
    }
    for (key, value) in v2::unified(resources)? {
        unified_property(&mut p, key, value.trim())?;
    }
    Ok(p)
}

/// runc's `addCpuQuota`: the period where one is given; a quota per second of wall time,
/// rounded up to whole percents (systemd keeps a percentage, and a quota it rounded down
/// would not let the container's own cgroup have what the spec says).
fn cpu_quota(p: &mut Vec<Value>, quota: i64, period: u64) {
    if period != 0 {
        p.push(Value::property("CPUQuotaPeriodUSec", Value::U64(period)));
    }
    if quota != 0 || period != 0 {
        let mut per_sec = u64::MAX;
        if quota > 0 {
            let period = if period == 0 { 100_000 } else { period };
            per_sec = (quota.wrapping_mul(1_000_000) as u64) / period;
            if per_sec % 10_000 != 0 {
                per_sec = (per_sec / 10_000 + 1) * 10_000;
            }
        }
        p.push(Value::property("CPUQuotaPerSecUSec", Value::U64(per_sec)));
    }
}

/// A `unified` file as the unit property systemd has for it (runc's
/// `unifiedResToSystemdProps`); a file systemd has none for is only written.
fn unified_property(p: &mut Vec<Value>, key: &str, value: &str) -> Result<(), String> {
    let bad = |e: &dyn std::fmt::Display| format!("unified resource {key:?} value {value:?}: {e}");
    let max_or_number = || -> Result<u64, String> {
        if value == "max" {
            Ok(u64::MAX)
        } else {
            value.parse::<u64>().map_err(|e| bad(&e))
        }
    };
    let named = |name: &str, v: Value| Value::property(name, v);
    match key {
        "cpu.max" => {
            let fields: Vec<&str> = value.split_whitespace().collect();
            if fields.is_empty() || fields.len() > 2 {
                return Err(bad(&"not \"quota [period]\""));
            }
            let quota = match fields[0] {
                "max" => 0,
                q => q.parse::<i64>().map_err(|e| bad(&e))?,
            };
            let period = match fields.get(1) {
                Some(f) => f.parse::<u64>().map_err(|e| bad(&e))?,
                None => 100_000,
            };
            cpu_quota(p, quota, period);
        }
        "cpu.weight" => p.push(named(
            "CPUWeight",
            Value::U64(value.parse::<u64>().map_err(|e| bad(&e))?),
        )),
        "cpuset.cpus" => p.push(named("AllowedCPUs", cpu_set(value)?)),
        "cpuset.mems" => p.push(named("AllowedMemoryNodes", cpu_set(value)?)),
        "memory.high" | "memory.low" | "memory.min" | "memory.max" | "memory.swap.max" => {
            let name = match key {
                "memory.high" => "MemoryHigh",
                "memory.low" => "MemoryLow",
                "memory.min" => "MemoryMin",
                "memory.max" => "MemoryMax",
                _ => "MemorySwapMax",
            };
            p.push(named(name, Value::U64(max_or_number()?)));
        }
        "pids.max" => p.push(named("TasksMax", Value::U64(max_or_number()?))),
        _ => {}
    }
    Ok(())
}

/// A cpuset list (`0-2,4`) as systemd's `AllowedCPUs` takes it: a bit mask, CPU 0 the low
/// bit of the first byte. (runc 1.1.5 sent the bytes in the other order, fixed in 1.1.6;
/// both agree up to eight CPUs.)
fn cpu_set(list: &str) -> Result<Value, String> {
    let mut bytes: Vec<u8> = Vec::new();
    let mut set = |n: u32| {
        let i = (n / 8) as usize;
        if bytes.len() <= i {
            bytes.resize(i + 1, 0);
        }
        bytes[i] |= 1 << (n % 8);
    };
    let num = |s: &str| {
        s.trim()
            .parse::<u32>()
            .map_err(|e| format!("cpuset {list:?}: {e}"))
    };
    for part in list.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (num(a)?, num(b)?);
                if a > b {
                    return Err(format!("cpuset {list:?}: invalid range {part}"));
                }
                (a..=b).for_each(&mut set);
            }
            None => set(num(part)?),
        }
    }
    if bytes.is_empty() {
        return Err(format!("cpuset {list:?}: empty"));
    }
    Ok(Value::Array(
        "y".into(),
        bytes.into_iter().map(Value::Byte).collect(),
    ))
}

/// runc's `generateDeviceProperties`: systemd's strict policy with an allow list made of the
/// rules, which systemd can only say for a whole type (`char-*`), a major it names in
/// /proc/devices (`char-pts`) or a device node that exists (`/dev/char/1:3`); a rule it
/// cannot say is left to the BPF program written after. A deny list is allow-all when it
/// denies nothing and deny-all (for the BPF program to replace) otherwise.
fn device_properties(rules: &devices::Emulated) -> Result<Vec<Value>, String> {
    let allow =
        |entries: Vec<Value>| Value::property("DeviceAllow", Value::Array("(ss)".into(), entries));
    if rules.default_allow {
        let policy = if rules.exceptions.is_empty() {
            "auto"
        } else {
            "strict"
        };
        return Ok(vec![
            Value::property("DevicePolicy", Value::Str(policy.into())),
            allow(Vec::new()),
        ]);
    }
    let proc_devices = std::fs::read_to_string("/proc/devices").unwrap_or_default();
    let mut entries = Vec::new();
    for rule in &rules.exceptions {
        if let Some(path) = device_allow_path(rule, &proc_devices)? {
            entries.push(Value::Struct(vec![
                Value::Str(path),
                Value::Str(rule.access.clone()),
            ]));
        }
    }
    Ok(vec![
        Value::property("DevicePolicy", Value::Str("strict".into())),
        allow(Vec::new()),
        allow(entries),
    ])
}

/// How systemd's `DeviceAllow` names the devices of `rule`, if it can.
fn device_allow_path(rule: &DeviceRule, proc_devices: &str) -> Result<Option<String>, String> {
    let (prefix, dir, section) = match rule.kind {
        'c' => ("char-", "char", "Character devices:"),
        'b' => ("block-", "block", "Block devices:"),
        other => return Err(format!("a device rule of type {other:?} for systemd")),
    };
    Ok(match (rule.major, rule.minor) {
        (None, None) => Some(format!("{prefix}*")),
        (None, Some(_)) => None,
        (Some(major), None) => {
            device_group(proc_devices, section, major).map(|g| format!("{prefix}{g}"))
        }
        (Some(major), Some(minor)) => {
            let path = format!("/dev/{dir}/{major}:{minor}");
            let exists = std::path::Path::new(&path).exists()
                || std::path::Path::new(&format!("/sys{path}")).exists();
            exists.then_some(path)
        }
    })
}

/// The name /proc/devices gives major `major` in `section`.
fn device_group<'a>(proc_devices: &'a str, section: &str, major: i64) -> Option<&'a str> {
    let mut in_section = false;
    for line in proc_devices.lines().map(str::trim) {
        if line.ends_with(':') {
            in_section = line == section;
            continue;
        }
        let mut f = line.split_whitespace();
        if let (true, Some(n), Some(name)) = (in_section, f.next(), f.next()) {
            if n.parse::<i64>().ok() == Some(major) {
                return Some(name);
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn res(v: serde_json::Value) -> Resources {
        serde_json::from_value(v).unwrap()
    }

    fn prop(p: &[Value], name: &str) -> Option<Value> {
        p.iter().rev().find_map(|v| match v {
            Value::Struct(f) if f[0] == Value::Str(name.into()) => match &f[1] {
                Value::Variant(v) => Some((**v).clone()),
                _ => None,
            },
            _ => None,
        })
    }

    #[test]
    fn a_scope_is_named_by_the_paths_prefix_and_name() {
        let s = Scope::of("kubepods-pod1.slice:peapod:abc").unwrap();
        assert_eq!(s.unit, "peapod-abc.scope");
        assert_eq!(s.slice, "kubepods-pod1.slice");
        assert_eq!(
            s.path,
            "/kubepods.slice/kubepods-pod1.slice/peapod-abc.scope"
        );
        assert_eq!(Scope::of(":peapod:x").unwrap().slice, "system.slice");
        assert_eq!(
            Scope::of("a.slice:p:own.slice"),
            None,
            "a slice, not a scope"
        );
        assert_eq!(Scope::of("/kubepods/abc"), None);
    }

    #[test]
    fn resources_become_runcs_properties() {
        let p = properties(
            &res(json!({
                "memory": {"limit": 67108864, "swap": 134217728, "reservation": 1000},
                "cpu": {"shares": 1024, "quota": 33333, "period": 100000, "cpus": "0-1,9"},
                "pids": {"limit": 100},
                "unified": {"memory.high": "50000000", "pids.max": "max", "io.weight": "default 50"}
            })),
            false,
        )
        .unwrap();
        assert_eq!(prop(&p, "MemoryMax"), Some(Value::U64(67108864)));
        assert_eq!(prop(&p, "MemoryLow"), Some(Value::U64(1000)));
        assert_eq!(prop(&p, "MemorySwapMax"), Some(Value::U64(67108864)));
        assert_eq!(prop(&p, "CPUWeight"), Some(Value::U64(39)));
        assert_eq!(prop(&p, "CPUQuotaPeriodUSec"), Some(Value::U64(100000)));
        // 333330 us a second, rounded up to whole percents.
        assert_eq!(prop(&p, "CPUQuotaPerSecUSec"), Some(Value::U64(340000)));
        assert_eq!(prop(&p, "MemoryHigh"), Some(Value::U64(50000000)));
        // The unified pids.max comes after the spec's limit, as in runc's list.
        assert_eq!(prop(&p, "TasksMax"), Some(Value::U64(u64::MAX)));
        assert_eq!(
            prop(&p, "AllowedCPUs"),
            Some(Value::Array(
                "y".into(),
                vec![Value::Byte(0b11), Value::Byte(0b10)]
            ))
        );
        assert!(
            prop(&p, "DevicePolicy").is_none(),
            "no devices at an update"
        );
        // Unlimited: infinity; a period alone: no quota.
        let p = properties(
            &res(json!({"memory": {"limit": -1}, "cpu": {"period": 50000}})),
            false,
        )
        .unwrap();
        assert_eq!(prop(&p, "MemoryMax"), Some(Value::U64(u64::MAX)));
        assert_eq!(prop(&p, "MemorySwapMax"), Some(Value::U64(u64::MAX)));
        assert_eq!(prop(&p, "CPUQuotaPerSecUSec"), Some(Value::U64(u64::MAX)));
        assert!(properties(&res(json!({"unified": {"memory.high": "lots"}})), false).is_err());
    }

    #[test]
    fn device_rules_as_systemd_says_them() {
        let pause = res(json!({"devices": [{"allow": false, "access": "rwm"}]}));
        let p = properties(&pause, true).unwrap();
        assert_eq!(prop(&p, "DevicePolicy"), Some(Value::Str("strict".into())));
        let Some(Value::Array(_, entries)) = prop(&p, "DeviceAllow") else {
            panic!("{p:?}")
        };
        let paths: Vec<String> = entries
            .iter()
            .map(|e| match e {
                Value::Struct(f) => {
                    format!("{} {}", f[0].as_str().unwrap(), f[1].as_str().unwrap())
                }
                _ => panic!(),
            })
            .collect();
        assert!(paths.contains(&"char-* m".to_string()), "{paths:?}");
        assert!(paths.contains(&"block-* m".to_string()), "{paths:?}");
        let all = res(json!({"devices": [{"allow": true, "access": "rwm"}]}));
        let p = properties(&all, true).unwrap();
        assert_eq!(prop(&p, "DevicePolicy"), Some(Value::Str("auto".into())));
    }

    #[test]
    fn device_groups_come_from_proc_devices() {
        let text = "Character devices:\n  1 mem\n136 pts\n\nBlock devices:\n  8 sd\n";
        assert_eq!(device_group(text, "Character devices:", 136), Some("pts"));
        assert_eq!(device_group(text, "Block devices:", 8), Some("sd"));
        assert_eq!(device_group(text, "Block devices:", 1), None);
    }

    #[test]
    fn cpu_sets_are_systemds_bit_masks() {
        let bytes = |l: &str| match cpu_set(l).unwrap() {
            Value::Array(_, b) => b,
            _ => panic!(),
        };
        assert_eq!(bytes("0"), vec![Value::Byte(1)]);
        assert_eq!(bytes("8"), vec![Value::Byte(0), Value::Byte(1)]);
        assert_eq!(bytes("1-3, 5"), vec![Value::Byte(0b101110)]);
        assert!(cpu_set("").is_err());
        assert!(cpu_set("3-1").is_err());
    }

    #[test]
    fn annotations_with_unit_properties_are_refused() {
        let keys = [
            "a".to_string(),
            "org.systemd.property.CollectMode".to_string(),
        ];
        assert!(unsupported_annotation(keys.iter()).is_some());
        assert!(unsupported_annotation(keys[..1].iter()).is_none());
    }
}
