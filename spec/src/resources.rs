//! CRI `LinuxContainerResources` → OCI `linux.resources`.

use crate::error::{Result, SpecError};
use crate::host::HostFacts;
use oci_spec::runtime::LinuxResources;
use peapod_proto::v1::LinuxContainerResources;
use serde_json::{json, Map, Value};

/// The `linux.resources` JSON for `r`, containerd's mapping (zero/empty means "not set"):
///
/// * cpu: `period`, `quota`, `shares`, `cpus`, `mems`;
/// * memory: `limit`; `swap` = the requested swap limit, or, when only a memory limit is
///   given, the memory limit itself (so the container cannot swap); both only when the host
///   accounts swap (runc fails to write a missing `memsw`/`swap.max` file otherwise);
/// * `hugepageLimits`, only when the hugetlb controller exists (dropped otherwise, as
///   containerd tolerates by default);
/// * `unified`, only on cgroup v2 (runc refuses it on v1).
///
/// No device rules: `container_spec` adds those.
pub(crate) fn resources_json(
    r: &LinuxContainerResources,
    host: &HostFacts,
) -> Result<Map<String, Value>> {
    let field = "config.linux.resources";
    for (name, v) in [("cpu_period", r.cpu_period), ("cpu_shares", r.cpu_shares)] {
        if v < 0 {
            return Err(SpecError::invalid(format!(
                "{field}.{name}: {v} is negative"
            )));
        }
    }
    // -1 is "unlimited" for these (runc and the kernel take it); anything lower is nonsense.
    for (name, v) in [
        ("cpu_quota", r.cpu_quota),
        ("memory_limit_in_bytes", r.memory_limit_in_bytes),
        ("memory_swap_limit_in_bytes", r.memory_swap_limit_in_bytes),
    ] {
        if v < -1 {
            return Err(SpecError::invalid(format!(
                "{field}.{name}: {v} is below -1"
            )));
        }
    }
    let mut out = Map::new();
    let mut cpu = Map::new();
    if r.cpu_period != 0 {
        cpu.insert("period".into(), json!(r.cpu_period as u64));
    }
    if r.cpu_quota != 0 {
        cpu.insert("quota".into(), json!(r.cpu_quota));
    }
    if r.cpu_shares != 0 {
        cpu.insert("shares".into(), json!(r.cpu_shares as u64));
    }
    if !r.cpuset_cpus.is_empty() {
        cpu.insert("cpus".into(), json!(r.cpuset_cpus));
    }
    if !r.cpuset_mems.is_empty() {
        cpu.insert("mems".into(), json!(r.cpuset_mems));
    }
    if !cpu.is_empty() {
        out.insert("cpu".into(), Value::Object(cpu));
    }

    let mut memory = Map::new();
    if r.memory_limit_in_bytes != 0 {
        memory.insert("limit".into(), json!(r.memory_limit_in_bytes));
    }
    if host.swap_controller {
        if r.memory_swap_limit_in_bytes != 0 {
            memory.insert("swap".into(), json!(r.memory_swap_limit_in_bytes));
        } else if r.memory_limit_in_bytes != 0 {
            memory.insert("swap".into(), json!(r.memory_limit_in_bytes));
        }
    }
    if !memory.is_empty() {
        out.insert("memory".into(), Value::Object(memory));
    }

    if host.hugetlb_controller && !r.hugepage_limits.is_empty() {
        let limits: Vec<Value> = r
            .hugepage_limits
            .iter()
            .map(|h| json!({"pageSize": h.page_size, "limit": h.limit}))
            .collect();
        out.insert("hugepageLimits".into(), Value::Array(limits));
    }

    if host.cgroup_v2 && !r.unified.is_empty() {
        let unified: Map<String, Value> = r
            .unified
            .iter()
            .map(|(k, v)| (k.clone(), Value::String(v.clone())))
            .collect();
        out.insert("unified".into(), Value::Object(unified));
    }
    Ok(out)
}

/// The OCI `linux.resources` for a CRI resources message (for CreateContainer, and for
/// UpdateContainerResources → `runc update --resources`). See `resources_json` for the
/// mapping. Device rules are not included.
pub fn linux_resources(r: &LinuxContainerResources, host: &HostFacts) -> Result<LinuxResources> {
    serde_json::from_value(Value::Object(resources_json(r, host)?))
        .map_err(|e| SpecError::internal("linux.resources", e))
}

/// The process oom_score_adj for the CRI value: must be in [-1000, 1000]; raised to the
/// host's floor when the daemon cannot lower its children's score.
pub(crate) fn oom_score_adj(requested: i64, floor: Option<i32>) -> Result<i32> {
    if !(-1000..=1000).contains(&requested) {
        return Err(SpecError::invalid(format!(
            "config.linux.resources.oom_score_adj: {requested} is outside [-1000, 1000]"
        )));
    }
    let adj = requested as i32;
    Ok(match floor {
        Some(f) if adj < f => f,
        _ => adj,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use peapod_proto::v1::HugepageLimit;

    fn full() -> LinuxContainerResources {
        LinuxContainerResources {
            cpu_period: 100_000,
            cpu_quota: 50_000,
            cpu_shares: 512,
            memory_limit_in_bytes: 64 << 20,
            oom_score_adj: 100,
            cpuset_cpus: "0-1".into(),
            cpuset_mems: "0".into(),
            hugepage_limits: vec![HugepageLimit {
                page_size: "2MB".into(),
                limit: 4 << 20,
            }],
            unified: [("memory.high".to_string(), "50000000".to_string())].into(),
            memory_swap_limit_in_bytes: 0,
        }
    }

    fn v1_host() -> HostFacts {
        HostFacts {
            swap_controller: true,
            hugetlb_controller: true,
            ..Default::default()
        }
    }

    fn v2_host() -> HostFacts {
        HostFacts {
            cgroup_v2: true,
            ..v1_host()
        }
    }

    #[test]
    fn v1_fixture() {
        let got = Value::Object(resources_json(&full(), &v1_host()).unwrap());
        assert_eq!(
            got,
            json!({
                "cpu": {"period": 100000, "quota": 50000, "shares": 512, "cpus": "0-1", "mems": "0"},
                "memory": {"limit": 67108864, "swap": 67108864},
                "hugepageLimits": [{"pageSize": "2MB", "limit": 4194304}],
            })
        );
        // Round trip through the oci-spec type loses nothing and adds nothing.
        let typed = linux_resources(&full(), &v1_host()).unwrap();
        assert_eq!(serde_json::to_value(&typed).unwrap(), got);
    }

    #[test]
    fn v2_fixture_has_unified() {
        let mut r = full();
        r.memory_swap_limit_in_bytes = 128 << 20;
        let got = Value::Object(resources_json(&r, &v2_host()).unwrap());
        assert_eq!(got["unified"], json!({"memory.high": "50000000"}));
        assert_eq!(got["memory"], json!({"limit": 67108864, "swap": 134217728}));
        let typed = linux_resources(&r, &v2_host()).unwrap();
        assert_eq!(serde_json::to_value(&typed).unwrap(), got);
    }

    #[test]
    fn missing_controllers_drop_swap_and_hugepages() {
        let got = Value::Object(resources_json(&full(), &HostFacts::default()).unwrap());
        assert_eq!(got["memory"], json!({"limit": 67108864}));
        assert!(got.get("hugepageLimits").is_none());
        assert!(got.get("unified").is_none());
    }

    #[test]
    fn empty_is_empty() {
        let got = resources_json(&LinuxContainerResources::default(), &v2_host()).unwrap();
        assert!(got.is_empty());
        let typed = linux_resources(&LinuxContainerResources::default(), &v2_host()).unwrap();
        assert_eq!(serde_json::to_value(&typed).unwrap(), json!({}));
    }

    #[test]
    fn swap_alone() {
        let r = LinuxContainerResources {
            memory_swap_limit_in_bytes: 1 << 30,
            ..Default::default()
        };
        let got = Value::Object(resources_json(&r, &v1_host()).unwrap());
        assert_eq!(got, json!({"memory": {"swap": 1073741824}}));
    }

    #[test]
    fn negative_values() {
        let bad = [
            LinuxContainerResources {
                cpu_period: -1,
                ..Default::default()
            },
            LinuxContainerResources {
                cpu_shares: -2,
                ..Default::default()
            },
            LinuxContainerResources {
                cpu_quota: -2,
                ..Default::default()
            },
            LinuxContainerResources {
                memory_limit_in_bytes: -5,
                ..Default::default()
            },
        ];
        for r in bad {
            assert!(linux_resources(&r, &v1_host()).is_err(), "{r:?}");
        }
        let unlimited = LinuxContainerResources {
            cpu_quota: -1,
            memory_limit_in_bytes: -1,
            ..Default::default()
        };
        let got = Value::Object(resources_json(&unlimited, &HostFacts::default()).unwrap());
        assert_eq!(got, json!({"cpu": {"quota": -1}, "memory": {"limit": -1}}));
    }

    #[test]
    fn oom_floor() {
        assert_eq!(oom_score_adj(-998, Some(0)).unwrap(), 0);
        assert_eq!(oom_score_adj(-998, None).unwrap(), -998);
        assert_eq!(oom_score_adj(1000, Some(0)).unwrap(), 1000);
        assert_eq!(oom_score_adj(500, Some(600)).unwrap(), 600);
        assert!(oom_score_adj(1001, None).is_err());
        assert!(oom_score_adj(-1001, Some(0)).is_err());
    }
}
