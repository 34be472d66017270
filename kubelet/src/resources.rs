//! The kubelet's requests/limits arithmetic as pure functions: QoS class
//! (pkg/apis/core/v1/helper/qos), oom_score_adj (pkg/kubelet/qos/policy.go), container and
//! pod cgroup values (pkg/kubelet/cm/helpers_linux.go) and the pod's effective requests
//! (k8s.io/component-helpers resource.PodRequests).

use crate::quantity;
use k8s_openapi::api::core::v1::{Container, PodSpec};

pub const MIN_SHARES: u64 = 2;
pub const MAX_SHARES: u64 = 262_144;
pub const QUOTA_PERIOD: u64 = 100_000;
pub const MIN_QUOTA_PERIOD: i64 = 1000;
pub const GUARANTEED_OOM_SCORE_ADJ: i64 = -997;
pub const BEST_EFFORT_OOM_SCORE_ADJ: i64 = 1000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QosClass {
    Guaranteed,
    Burstable,
    BestEffort,
}

impl QosClass {
    pub fn as_str(self) -> &'static str {
        match self {
            QosClass::Guaranteed => "Guaranteed",
            QosClass::Burstable => "Burstable",
            QosClass::BestEffort => "BestEffort",
        }
    }
    /// The QoS-level cgroup under `kubepods` ("" for Guaranteed pods, which sit directly in it).
    pub fn cgroup_dir(self) -> &'static str {
        match self {
            QosClass::Guaranteed => "",
            QosClass::Burstable => "burstable",
            QosClass::BestEffort => "besteffort",
        }
    }
}

/// CPU (millicores) and memory (bytes); 0 means unset.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Amounts {
    pub cpu_milli: i64,
    pub memory: i64,
}

impl Amounts {
    fn add(self, o: Amounts) -> Amounts {
        Amounts {
            cpu_milli: self.cpu_milli + o.cpu_milli,
            memory: self.memory + o.memory,
        }
    }
    fn max(self, o: Amounts) -> Amounts {
        Amounts {
            cpu_milli: self.cpu_milli.max(o.cpu_milli),
            memory: self.memory.max(o.memory),
        }
    }
}

fn amounts(
    map: Option<
        &std::collections::BTreeMap<
            String,
            k8s_openapi::apimachinery::pkg::api::resource::Quantity,
        >,
    >,
) -> Amounts {
    let Some(m) = map else {
        return Amounts::default();
    };
    Amounts {
        cpu_milli: m
            .get("cpu")
            .and_then(|q| quantity::milli_value(&q.0).ok())
            .unwrap_or(0),
        memory: m
            .get("memory")
            .and_then(|q| quantity::value(&q.0).ok())
            .unwrap_or(0),
    }
}

pub fn requests(c: &Container) -> Amounts {
    let r = amounts(c.resources.as_ref().and_then(|r| r.requests.as_ref()));
    // The API server copies limits into absent requests; do the same for undefaulted input.
    let l = limits(c);
    Amounts {
        cpu_milli: if r.cpu_milli == 0 && !has(c, "requests", "cpu") {
            l.cpu_milli
        } else {
            r.cpu_milli
        },
        memory: if r.memory == 0 && !has(c, "requests", "memory") {
            l.memory
        } else {
            r.memory
        },
    }
}

fn has(c: &Container, kind: &str, name: &str) -> bool {
    c.resources
        .as_ref()
        .and_then(|r| {
            if kind == "requests" {
                r.requests.as_ref()
            } else {
                r.limits.as_ref()
            }
        })
        .is_some_and(|m| m.contains_key(name))
}

pub fn limits(c: &Container) -> Amounts {
    amounts(c.resources.as_ref().and_then(|r| r.limits.as_ref()))
}

pub fn is_restartable_init(c: &Container) -> bool {
    c.restart_policy.as_deref() == Some("Always")
}

/// The QoS class from every container's cpu and memory requests and limits.
pub fn qos_class(spec: &PodSpec) -> QosClass {
    let all: Vec<&Container> = spec
        .init_containers
        .iter()
        .flatten()
        .chain(spec.containers.iter())
        .collect();
    let mut req = Amounts::default();
    let mut lim = Amounts::default();
    let (mut req_cpu, mut req_mem, mut lim_cpu, mut lim_mem) = (false, false, false, false);
    let mut guaranteed = true;
    for c in &all {
        let r = requests(c);
        let l = limits(c);
        if r.cpu_milli > 0 {
            req_cpu = true;
            req.cpu_milli += r.cpu_milli;
        }
        if r.memory > 0 {
            req_mem = true;
            req.memory += r.memory;
        }
        if l.cpu_milli > 0 {
            lim_cpu = true;
            lim.cpu_milli += l.cpu_milli;
        }
        if l.memory > 0 {
            lim_mem = true;
            lim.memory += l.memory;
        }
        if l.cpu_milli == 0 || l.memory == 0 {
            guaranteed = false;
        }
    }
    if !req_cpu && !req_mem && !lim_cpu && !lim_mem {
        return QosClass::BestEffort;
    }
    if guaranteed {
        if (req_cpu && req.cpu_milli != lim.cpu_milli) || (req_mem && req.memory != lim.memory) {
            guaranteed = false;
        }
        let nreq = usize::from(req_cpu) + usize::from(req_mem);
        let nlim = usize::from(lim_cpu) + usize::from(lim_mem);
        if guaranteed && nreq == nlim {
            return QosClass::Guaranteed;
        }
    }
    QosClass::Burstable
}

/// The kubelet's oom_score_adj for a container, before the host's floor is applied.
pub fn oom_score_adj(qos: QosClass, c: &Container, memory_capacity: i64) -> i64 {
    match qos {
        QosClass::Guaranteed => GUARANTEED_OOM_SCORE_ADJ,
        QosClass::BestEffort => BEST_EFFORT_OOM_SCORE_ADJ,
        QosClass::Burstable => {
            if memory_capacity <= 0 {
                return 999;
            }
            let request = requests(c).memory;
            let adj = 1000 - (1000 * i128::from(request) / i128::from(memory_capacity)) as i64;
            // Burstable containers stay above Guaranteed ones and below BestEffort ones.
            adj.clamp(
                1000 + GUARANTEED_OOM_SCORE_ADJ,
                BEST_EFFORT_OOM_SCORE_ADJ - 1,
            )
        }
    }
}

/// MilliCPUToShares.
pub fn milli_cpu_to_shares(milli: i64) -> u64 {
    if milli <= 0 {
        return MIN_SHARES;
    }
    let shares = (milli as u64).saturating_mul(1024) / 1000;
    shares.clamp(MIN_SHARES, MAX_SHARES)
}

/// MilliCPUToQuota; 0 means no quota.
pub fn milli_cpu_to_quota(milli: i64, period: u64) -> i64 {
    if milli <= 0 {
        return 0;
    }
    let quota = milli.saturating_mul(period as i64) / 1000;
    quota.max(MIN_QUOTA_PERIOD)
}

/// Cgroup values for one container or one pod. Zero quota/memory: unlimited.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CgroupValues {
    pub cpu_shares: u64,
    pub cpu_quota: i64,
    pub cpu_period: u64,
    pub memory_limit: i64,
}

/// The container's values (kuberuntime calculateLinuxResources): shares from the request, or
/// from the limit when only a limit is set; quota from the limit; memory limit.
pub fn container_cgroup(c: &Container) -> CgroupValues {
    let req = amounts(c.resources.as_ref().and_then(|r| r.requests.as_ref()));
    let lim = limits(c);
    let cpu_shares = if req.cpu_milli == 0 && lim.cpu_milli > 0 {
        milli_cpu_to_shares(lim.cpu_milli)
    } else {
        milli_cpu_to_shares(req.cpu_milli)
    };
    let (cpu_quota, cpu_period) = if lim.cpu_milli > 0 {
        (
            milli_cpu_to_quota(lim.cpu_milli, QUOTA_PERIOD),
            QUOTA_PERIOD,
        )
    } else {
        (0, 0)
    };
    CgroupValues {
        cpu_shares,
        cpu_quota,
        cpu_period,
        memory_limit: lim.memory,
    }
}

/// The pod's effective requests: app containers summed, restartable init containers added,
/// and each other init container (plus the sidecars started before it) as a floor.
pub fn pod_requests(spec: &PodSpec) -> Amounts {
    pod_sum(spec, requests)
}

/// The pod's effective limits, by the same rule.
pub fn pod_limits(spec: &PodSpec) -> Amounts {
    pod_sum(spec, limits)
}

fn pod_sum(spec: &PodSpec, f: fn(&Container) -> Amounts) -> Amounts {
    let mut total = spec
        .containers
        .iter()
        .map(f)
        .fold(Amounts::default(), Amounts::add);
    let mut sidecars = Amounts::default();
    let mut init_floor = Amounts::default();
    for c in spec.init_containers.iter().flatten() {
        if is_restartable_init(c) {
            total = total.add(f(c));
            sidecars = sidecars.add(f(c));
        } else {
            init_floor = init_floor.max(f(c).add(sidecars));
        }
    }
    let mut out = total.max(init_floor);
    if let Some(o) = &spec.overhead {
        out = out.add(amounts(Some(o)));
    }
    out
}

/// The pod cgroup's values (ResourceConfigForPod).
pub fn pod_cgroup(spec: &PodSpec) -> CgroupValues {
    let req = pod_requests(spec);
    let lim = pod_limits(spec);
    let all = || {
        spec.init_containers
            .iter()
            .flatten()
            .chain(spec.containers.iter())
    };
    let cpu_limits_declared = all().all(|c| limits(c).cpu_milli > 0);
    let memory_limits_declared = all().all(|c| limits(c).memory > 0);
    let shares = milli_cpu_to_shares(req.cpu_milli);
    let quota = milli_cpu_to_quota(lim.cpu_milli, QUOTA_PERIOD);
    match qos_class(spec) {
        QosClass::Guaranteed => CgroupValues {
            cpu_shares: shares,
            cpu_quota: quota,
            cpu_period: QUOTA_PERIOD,
            memory_limit: lim.memory,
        },
        QosClass::Burstable => CgroupValues {
            cpu_shares: shares,
            cpu_quota: if cpu_limits_declared { quota } else { 0 },
            cpu_period: if cpu_limits_declared { QUOTA_PERIOD } else { 0 },
            memory_limit: if memory_limits_declared {
                lim.memory
            } else {
                0
            },
        },
        QosClass::BestEffort => CgroupValues {
            cpu_shares: MIN_SHARES,
            ..Default::default()
        },
    }
}

/// cgroup v2 cpu.weight from v1 shares (the OCI/runc conversion).
pub fn shares_to_weight(shares: u64) -> u64 {
    if shares == 0 {
        return 0;
    }
    1 + ((shares.clamp(MIN_SHARES, MAX_SHARES) - 2) * 9999) / 262_142
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn container(req: serde_json::Value, lim: serde_json::Value) -> serde_json::Value {
        json!({"name": "c", "image": "x", "resources": {"requests": req, "limits": lim}})
    }

    fn spec(containers: Vec<serde_json::Value>, inits: Vec<serde_json::Value>) -> PodSpec {
        serde_json::from_value(json!({"containers": containers, "initContainers": inits})).unwrap()
    }

    // pkg/kubelet/cm/helpers_linux_test.go TestMilliCPUToQuota and shares.
    #[test]
    fn kubelet_cpu_conversions() {
        for (milli, quota) in [
            (0, 0),
            (5, 1000),
            (9, 1000),
            (10, 1000),
            (200, 20000),
            (500, 50000),
            (1000, 100000),
            (1500, 150000),
        ] {
            assert_eq!(milli_cpu_to_quota(milli, QUOTA_PERIOD), quota, "{milli}");
        }
        for (milli, shares) in [
            (0, 2),
            (1, 2),
            (2, 2),
            (100, 102),
            (250, 256),
            (500, 512),
            (1000, 1024),
            (2000, 2048),
            (1_000_000, 262_144),
        ] {
            assert_eq!(milli_cpu_to_shares(milli), shares, "{milli}");
        }
        assert_eq!(shares_to_weight(2), 1);
        assert_eq!(shares_to_weight(1024), 39);
        assert_eq!(shares_to_weight(262_144), 10000);
    }

    // pkg/apis/core/v1/helper/qos/qos_test.go shapes.
    #[test]
    fn qos_classes() {
        let cases = [
            (
                vec![container(json!({}), json!({}))],
                vec![],
                QosClass::BestEffort,
            ),
            (
                vec![container(
                    json!({"cpu": "100m", "memory": "100Mi"}),
                    json!({"cpu": "100m", "memory": "100Mi"}),
                )],
                vec![],
                QosClass::Guaranteed,
            ),
            (
                vec![container(
                    json!({}),
                    json!({"cpu": "100m", "memory": "100Mi"}),
                )],
                vec![],
                QosClass::Guaranteed,
            ),
            (
                vec![container(json!({"cpu": "100m"}), json!({}))],
                vec![],
                QosClass::Burstable,
            ),
            (
                vec![container(
                    json!({"cpu": "100m", "memory": "100Mi"}),
                    json!({"cpu": "200m", "memory": "100Mi"}),
                )],
                vec![],
                QosClass::Burstable,
            ),
            (
                vec![
                    container(
                        json!({"cpu": "100m", "memory": "100Mi"}),
                        json!({"cpu": "100m", "memory": "100Mi"}),
                    ),
                    container(json!({}), json!({})),
                ],
                vec![],
                QosClass::Burstable,
            ),
            (
                vec![container(json!({}), json!({"cpu": "100m"}))],
                vec![],
                QosClass::Burstable,
            ),
            (
                vec![container(
                    json!({"cpu": "100m", "memory": "100Mi"}),
                    json!({"cpu": "100m", "memory": "100Mi"}),
                )],
                vec![container(json!({}), json!({}))],
                QosClass::Burstable,
            ),
            (
                vec![container(
                    json!({"cpu": "100m", "memory": "100Mi"}),
                    json!({"cpu": "100m", "memory": "100Mi"}),
                )],
                vec![container(
                    json!({"cpu": "1", "memory": "1Gi"}),
                    json!({"cpu": "1", "memory": "1Gi"}),
                )],
                QosClass::Guaranteed,
            ),
            (
                vec![container(json!({"memory": "0"}), json!({}))],
                vec![],
                QosClass::BestEffort,
            ),
        ];
        for (i, (cs, inits, want)) in cases.into_iter().enumerate() {
            assert_eq!(qos_class(&spec(cs, inits)), want, "case {i}");
        }
    }

    // pkg/kubelet/qos/policy_test.go: capacity 4000000000 bytes.
    #[test]
    fn oom_score_adj_by_qos() {
        let cap = 4_000_000_000;
        let c = |req: serde_json::Value, lim: serde_json::Value| -> Container {
            serde_json::from_value(container(req, lim)).unwrap()
        };
        let be = c(json!({}), json!({}));
        assert_eq!(oom_score_adj(QosClass::BestEffort, &be, cap), 1000);
        let g = c(
            json!({"cpu": "1", "memory": "10G"}),
            json!({"cpu": "1", "memory": "10G"}),
        );
        assert_eq!(oom_score_adj(QosClass::Guaranteed, &g, cap), -997);
        // critical request: memory request equal to capacity -> clamped to 3.
        let b = c(json!({"memory": "4000000000"}), json!({}));
        assert_eq!(oom_score_adj(QosClass::Burstable, &b, cap), 3);
        // half the capacity -> 500.
        let b = c(json!({"memory": "2000000000"}), json!({}));
        assert_eq!(oom_score_adj(QosClass::Burstable, &b, cap), 500);
        // a tiny request stays below BestEffort.
        let b = c(json!({"cpu": "1"}), json!({}));
        assert_eq!(oom_score_adj(QosClass::Burstable, &b, cap), 999);
        // more than capacity -> 3.
        let b = c(json!({"memory": "9000000000"}), json!({}));
        assert_eq!(oom_score_adj(QosClass::Burstable, &b, cap), 3);
    }

    #[test]
    fn container_cgroup_values() {
        let c = |req: serde_json::Value, lim: serde_json::Value| -> Container {
            serde_json::from_value(container(req, lim)).unwrap()
        };
        assert_eq!(
            container_cgroup(&c(
                json!({"cpu": "250m", "memory": "64Mi"}),
                json!({"cpu": "500m", "memory": "128Mi"})
            )),
            CgroupValues {
                cpu_shares: 256,
                cpu_quota: 50000,
                cpu_period: 100000,
                memory_limit: 128 << 20
            }
        );
        // Only a limit: shares from the limit.
        assert_eq!(
            container_cgroup(&c(json!({}), json!({"cpu": "1"}))),
            CgroupValues {
                cpu_shares: 1024,
                cpu_quota: 100000,
                cpu_period: 100000,
                memory_limit: 0
            }
        );
        assert_eq!(
            container_cgroup(&c(json!({}), json!({}))),
            CgroupValues {
                cpu_shares: 2,
                ..Default::default()
            }
        );
        assert_eq!(
            container_cgroup(&c(json!({}), json!({"cpu": "5m"}))).cpu_quota,
            1000
        );
    }

    #[test]
    fn pod_requests_count_init_containers_as_a_floor_and_sidecars_as_extra() {
        let mut sidecar = container(json!({"cpu": "100m", "memory": "10Mi"}), json!({}));
        sidecar["restartPolicy"] = json!("Always");
        let s = spec(
            vec![
                container(json!({"cpu": "200m", "memory": "20Mi"}), json!({})),
                container(json!({"cpu": "300m"}), json!({})),
            ],
            vec![
                container(json!({"cpu": "1", "memory": "5Mi"}), json!({})),
                sidecar.clone(),
            ],
        );
        assert_eq!(
            pod_requests(&s),
            Amounts {
                cpu_milli: 1000,
                memory: 30 << 20
            }
        );
        // An init container after a sidecar counts with the sidecar.
        let s = spec(
            vec![container(json!({"cpu": "100m"}), json!({}))],
            vec![sidecar, container(json!({"cpu": "1"}), json!({}))],
        );
        assert_eq!(pod_requests(&s).cpu_milli, 1100);
    }

    #[test]
    fn pod_cgroup_values_by_qos() {
        let g = spec(
            vec![
                container(
                    json!({"cpu": "500m", "memory": "64Mi"}),
                    json!({"cpu": "500m", "memory": "64Mi"}),
                ),
                container(
                    json!({"cpu": "250m", "memory": "32Mi"}),
                    json!({"cpu": "250m", "memory": "32Mi"}),
                ),
            ],
            vec![],
        );
        assert_eq!(
            pod_cgroup(&g),
            CgroupValues {
                cpu_shares: 768,
                cpu_quota: 75000,
                cpu_period: 100000,
                memory_limit: 96 << 20
            }
        );
        // Burstable with cpu limits on every container but memory limits on none.
        let b = spec(
            vec![container(json!({"cpu": "100m"}), json!({"cpu": "200m"}))],
            vec![],
        );
        assert_eq!(
            pod_cgroup(&b),
            CgroupValues {
                cpu_shares: 102,
                cpu_quota: 20000,
                cpu_period: 100000,
                memory_limit: 0
            }
        );
        // Burstable where one container has no limits: shares only.
        let b = spec(
            vec![
                container(json!({"cpu": "100m"}), json!({"cpu": "200m"})),
                container(json!({}), json!({})),
            ],
            vec![],
        );
        assert_eq!(
            pod_cgroup(&b),
            CgroupValues {
                cpu_shares: 102,
                ..Default::default()
            }
        );
        let be = spec(vec![container(json!({}), json!({}))], vec![]);
        assert_eq!(
            pod_cgroup(&be),
            CgroupValues {
                cpu_shares: 2,
                ..Default::default()
            }
        );
    }
}
