//! The systemd driver's pod cgroups: transient slices (`kubepods-burstable-pod<uid>.slice`)
//! with the pod-level limits as unit properties, as the kubelet's systemd cgroup manager
//! makes them; systemd creates their parents (`kubepods.slice`, `kubepods-burstable.slice`)
//! as the slice's name implies.

use crate::resources::{milli_cpu_to_shares, shares_to_weight, CgroupValues};
use peapod_host::dbus::Value;
use peapod_host::systemd::{slice_name, slice_path, Systemd, UnitError};
use std::io;
use std::time::Duration;

/// The longest one unit call may take (systemd answers in milliseconds; a busy or emulated
/// machine in seconds).
const CALL_TIMEOUT: Duration = Duration::from_secs(30);

fn connect() -> io::Result<Systemd> {
    Systemd::connect(CALL_TIMEOUT).map_err(io::Error::other)
}

/// The properties of a pod slice holding `values`: cpu weight, quota per second (absent:
/// unlimited) with its period, memory maximum (absent: unlimited), and accounting on.
pub fn pod_properties(values: &CgroupValues) -> Vec<Value> {
    let mut p = vec![
        Value::property("CPUAccounting", Value::Bool(true)),
        Value::property("MemoryAccounting", Value::Bool(true)),
        Value::property("TasksAccounting", Value::Bool(true)),
        Value::property(
            "CPUWeight",
            Value::U64(shares_to_weight(values.cpu_shares).max(1)),
        ),
    ];
    if values.cpu_quota > 0 && values.cpu_period > 0 {
        // systemd takes a quota as CPU time per second of wall time.
        let per_sec = (values.cpu_quota as u64).saturating_mul(1_000_000) / values.cpu_period;
        p.push(Value::property("CPUQuotaPerSecUSec", Value::U64(per_sec)));
        p.push(Value::property(
            "CPUQuotaPeriodUSec",
            Value::U64(values.cpu_period),
        ));
    } else {
        p.push(Value::property("CPUQuotaPerSecUSec", Value::U64(u64::MAX)));
    }
    p.push(Value::property(
        "MemoryMax",
        Value::U64(if values.memory_limit > 0 {
            values.memory_limit as u64
        } else {
            u64::MAX
        }),
    ));
    p
}

fn is(e: &UnitError, name: &str) -> bool {
    e.remote_name() == Some(name)
}

/// Starts the pod's slice with its limits, or gives a running one (the daemon restarted) its
/// values.
pub fn create(path: &str, values: &CgroupValues) -> io::Result<()> {
    let slice = slice_name(path);
    let mut sd = connect()?;
    let mut props = pod_properties(values);
    props.push(Value::property(
        "Description",
        Value::Str(format!("peapod pod slice {path}")),
    ));
    // The pod's containers and sandbox are stopped by the runtime, not by the system's
    // shutdown ordering.
    props.push(Value::property("DefaultDependencies", Value::Bool(false)));
    match sd.start_transient_unit(&slice, props) {
        Ok(()) => Ok(()),
        Err(e) if is(&e, "org.freedesktop.systemd1.UnitExists") => sd
            .set_unit_properties(&slice, pod_properties(values))
            .map_err(io::Error::other),
        Err(e) => Err(io::Error::other(e)),
    }
}

/// Stops the pod's slice (and whatever is still in it); a slice systemd does not know is gone.
pub fn remove(path: &str) -> io::Result<()> {
    connect()?
        .stop_unit(&slice_name(path))
        .map_err(io::Error::other)
}

/// Sets properties of the QoS-level slice `path` when it is there (its cgroup exists once a
/// pod of that class was made; setting a property of a slice systemd has not started would
/// make it); a warning if systemd refuses.
fn set_existing(path: &str, props: Vec<Value>, what: &str) {
    let slice = slice_name(path);
    let there = slice_path(&slice).is_some_and(|p| {
        std::path::Path::new(peapod_host::cgroup::DEFAULT_ROOT)
            .join(p.trim_start_matches('/'))
            .is_dir()
    });
    if !there {
        return;
    }
    let result = connect()
        .map_err(UnitError::Connect)
        .and_then(|mut sd| sd.set_unit_properties(&slice, props));
    match result {
        Ok(()) => {}
        Err(e) if is(&e, "org.freedesktop.systemd1.NoSuchUnit") => {}
        Err(e) => tracing::warn!(slice = %slice, error = %e, "setting {what}"),
    }
}

pub fn set_node_allocatable(parent: &str, cpu_milli: i64, memory: i64) {
    let mut props = vec![Value::property(
        "CPUWeight",
        Value::U64(shares_to_weight(milli_cpu_to_shares(cpu_milli))),
    )];
    if memory > 0 {
        props.push(Value::property("MemoryMax", Value::U64(memory as u64)));
    }
    set_existing(parent, props, "the node allocatable on the pods slice");
}

pub fn set_burstable_shares(parent: &str, cpu_milli: i64) {
    let weight = shares_to_weight(milli_cpu_to_shares(cpu_milli));
    set_existing(
        &format!("/{}/burstable", parent.trim_matches('/')),
        vec![Value::property("CPUWeight", Value::U64(weight))],
        "the burstable slice's cpu weight",
    );
}

pub fn set_besteffort_shares(parent: &str) {
    set_existing(
        &format!("/{}/besteffort", parent.trim_matches('/')),
        vec![Value::property("CPUWeight", Value::U64(1))],
        "the besteffort slice's cpu weight",
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prop<'a>(props: &'a [Value], name: &str) -> Option<&'a Value> {
        props.iter().find_map(|p| match p {
            Value::Struct(f) if f.first() == Some(&Value::Str(name.into())) => match f.get(1) {
                Some(Value::Variant(v)) => Some(&**v),
                _ => None,
            },
            _ => None,
        })
    }

    #[test]
    fn pod_limits_as_unit_properties() {
        let limited = pod_properties(&CgroupValues {
            cpu_shares: 1024,
            cpu_quota: 50_000,
            cpu_period: 100_000,
            memory_limit: 128 << 20,
        });
        assert_eq!(prop(&limited, "CPUWeight"), Some(&Value::U64(39)));
        assert_eq!(
            prop(&limited, "CPUQuotaPerSecUSec"),
            Some(&Value::U64(500_000))
        );
        assert_eq!(
            prop(&limited, "CPUQuotaPeriodUSec"),
            Some(&Value::U64(100_000))
        );
        assert_eq!(prop(&limited, "MemoryMax"), Some(&Value::U64(128 << 20)));
        let open = pod_properties(&CgroupValues {
            cpu_shares: 2,
            ..Default::default()
        });
        assert_eq!(prop(&open, "CPUWeight"), Some(&Value::U64(1)));
        assert_eq!(
            prop(&open, "CPUQuotaPerSecUSec"),
            Some(&Value::U64(u64::MAX))
        );
        assert_eq!(prop(&open, "CPUQuotaPeriodUSec"), None);
        assert_eq!(prop(&open, "MemoryMax"), Some(&Value::U64(u64::MAX)));
    }
}
