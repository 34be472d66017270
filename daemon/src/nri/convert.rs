//! peapod's pods and containers as NRI messages, and CRI resources to and from NRI's.

use crate::store::container::{config_name, ContainerRecord, ContainerState};
use crate::store::sandbox::SandboxRecord;
use peapod_nri::api as nri;
use peapod_proto::v1::{ContainerConfig, HugepageLimit, LinuxContainerResources};
use serde_json::Value;

/// A pod as NRI plugins see it.
pub fn pod(rec: &SandboxRecord) -> nri::PodSandbox {
    let meta = rec.config.metadata.clone().unwrap_or_default();
    let namespaces = rec
        .netns
        .iter()
        .map(|p| nri::LinuxNamespace {
            r#type: "network".into(),
            path: p.to_string_lossy().into_owned(),
        })
        .collect();
    nri::PodSandbox {
        id: rec.id.clone(),
        name: meta.name,
        uid: meta.uid,
        namespace: meta.namespace,
        labels: rec.config.labels.clone(),
        annotations: rec.config.annotations.clone(),
        runtime_handler: rec.runtime_handler.clone(),
        linux: Some(nri::LinuxPodSandbox {
            cgroup_parent: rec.cgroup_parent.clone(),
            cgroups_path: rec.cgroups_path.clone(),
            namespaces,
            ..Default::default()
        }),
        pid: rec.pause_pid,
        ips: rec.ips.clone(),
    }
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

fn opt_i64(v: &Value) -> Option<nri::OptionalInt64> {
    v.as_i64().map(|value| nri::OptionalInt64 { value })
}

fn opt_u64(v: &Value) -> Option<nri::OptionalUInt64> {
    v.as_u64().map(|value| nri::OptionalUInt64 { value })
}

/// The resources of an OCI spec's `linux.resources`.
pub fn resources_from_spec(r: &Value) -> nri::LinuxResources {
    let mem = &r["memory"];
    let cpu = &r["cpu"];
    nri::LinuxResources {
        memory: mem.is_object().then(|| nri::LinuxMemory {
            limit: opt_i64(&mem["limit"]),
            reservation: opt_i64(&mem["reservation"]),
            swap: opt_i64(&mem["swap"]),
            swappiness: opt_u64(&mem["swappiness"]),
            ..Default::default()
        }),
        cpu: cpu.is_object().then(|| nri::LinuxCpu {
            shares: opt_u64(&cpu["shares"]),
            quota: opt_i64(&cpu["quota"]),
            period: opt_u64(&cpu["period"]),
            cpus: cpu["cpus"].as_str().unwrap_or_default().into(),
            mems: cpu["mems"].as_str().unwrap_or_default().into(),
            ..Default::default()
        }),
        hugepage_limits: r["hugepageLimits"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|h| nri::HugepageLimit {
                        page_size: h["pageSize"].as_str().unwrap_or_default().into(),
                        limit: h["limit"].as_u64().unwrap_or_default(),
                    })
                    .collect()
            })
            .unwrap_or_default(),
        unified: r["unified"]
            .as_object()
            .map(|m| {
                m.iter()
                    .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                    .collect()
            })
            .unwrap_or_default(),
        pids: r["pids"]["limit"]
            .as_i64()
            .map(|limit| nri::LinuxPids { limit }),
        ..Default::default()
    }
}

/// A container about to be created, from its CRI config and its generated OCI spec (what
/// it will really get: args, env, mounts, resources).
pub fn new_container(
    id: &str,
    pod_id: &str,
    config: &ContainerConfig,
    spec: &Value,
    created_at_ns: i64,
) -> nri::Container {
    let process = &spec["process"];
    let linux = &spec["linux"];
    let user = &process["user"];
    nri::Container {
        id: id.into(),
        pod_sandbox_id: pod_id.into(),
        name: config_name(config).to_string(),
        state: nri::ContainerState::ContainerUnknown as i32,
        labels: config.labels.clone(),
        annotations: config.annotations.clone(),
        args: strings(&process["args"]),
        env: strings(&process["env"]),
        mounts: spec["mounts"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|m| nri::Mount {
                        destination: m["destination"].as_str().unwrap_or_default().into(),
                        r#type: m["type"].as_str().unwrap_or_default().into(),
                        source: m["source"].as_str().unwrap_or_default().into(),
                        options: strings(&m["options"]),
                    })
                    .collect()
            })
            .unwrap_or_default(),
        linux: Some(nri::LinuxContainer {
            namespaces: linux["namespaces"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .map(|n| nri::LinuxNamespace {
                            r#type: n["type"].as_str().unwrap_or_default().into(),
                            path: n["path"].as_str().unwrap_or_default().into(),
                        })
                        .collect()
                })
                .unwrap_or_default(),
            resources: linux["resources"]
                .is_object()
                .then(|| resources_from_spec(&linux["resources"])),
            oom_score_adj: process["oomScoreAdj"]
                .as_i64()
                .map(|value| nri::OptionalInt { value }),
            cgroups_path: linux["cgroupsPath"].as_str().unwrap_or_default().into(),
            ..Default::default()
        }),
        rlimits: process["rlimits"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|r| nri::PosixRlimit {
                        r#type: r["type"].as_str().unwrap_or_default().into(),
                        hard: r["hard"].as_u64().unwrap_or_default(),
                        soft: r["soft"].as_u64().unwrap_or_default(),
                    })
                    .collect()
            })
            .unwrap_or_default(),
        created_at: created_at_ns,
        user: Some(nri::User {
            uid: user["uid"].as_u64().unwrap_or_default() as u32,
            gid: user["gid"].as_u64().unwrap_or_default() as u32,
            additional_gids: user["additionalGids"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|g| g.as_u64().map(|g| g as u32))
                        .collect()
                })
                .unwrap_or_default(),
        }),
        ..Default::default()
    }
}

/// A container the daemon already has (after a restart), as far as its record tells.
pub fn known_container(rec: &ContainerRecord) -> nri::Container {
    let state = match rec.state {
        ContainerState::Creating | ContainerState::Created => nri::ContainerState::ContainerCreated,
        ContainerState::Running => nri::ContainerState::ContainerRunning,
        ContainerState::Exited => nri::ContainerState::ContainerStopped,
        ContainerState::Unknown => nri::ContainerState::ContainerUnknown,
    };
    nri::Container {
        id: rec.id.clone(),
        pod_sandbox_id: rec.sandbox_id.clone(),
        name: config_name(&rec.config).to_string(),
        state: state as i32,
        labels: rec.config.labels.clone(),
        annotations: rec.config.annotations.clone(),
        args: rec
            .config
            .command
            .iter()
            .chain(&rec.config.args)
            .cloned()
            .collect(),
        env: rec
            .config
            .envs
            .iter()
            // Checked UTF-8 at create (peapod-spec refuses other values).
            .map(|e| format!("{}={}", e.key, String::from_utf8_lossy(&e.value)))
            .collect(),
        pid: rec.pid,
        created_at: rec.created_at_ns,
        started_at: rec.started_at_ns,
        finished_at: rec.finished_at_ns,
        exit_code: rec.exit_code,
        status_reason: rec.reason.clone(),
        status_message: rec.message.clone(),
        user: Some(nri::User {
            uid: rec.uid,
            gid: rec.gid,
            additional_gids: rec.supplemental_groups.clone(),
        }),
        ..Default::default()
    }
}

/// CRI resources (UpdateContainerResources) as NRI's.
pub fn resources_from_cri(r: &LinuxContainerResources) -> nri::LinuxResources {
    let pos = |v: i64| (v > 0).then_some(v);
    nri::LinuxResources {
        memory: Some(nri::LinuxMemory {
            limit: pos(r.memory_limit_in_bytes).map(|value| nri::OptionalInt64 { value }),
            swap: pos(r.memory_swap_limit_in_bytes).map(|value| nri::OptionalInt64 { value }),
            ..Default::default()
        }),
        cpu: Some(nri::LinuxCpu {
            shares: pos(r.cpu_shares).map(|v| nri::OptionalUInt64 { value: v as u64 }),
            quota: pos(r.cpu_quota).map(|value| nri::OptionalInt64 { value }),
            period: pos(r.cpu_period).map(|v| nri::OptionalUInt64 { value: v as u64 }),
            cpus: r.cpuset_cpus.clone(),
            mems: r.cpuset_mems.clone(),
            ..Default::default()
        }),
        hugepage_limits: r
            .hugepage_limits
            .iter()
            .map(|h| nri::HugepageLimit {
                page_size: h.page_size.clone(),
                limit: h.limit,
            })
            .collect(),
        unified: r.unified.clone(),
        ..Default::default()
    }
}

/// NRI resources back into CRI's: the fields `r` sets, over `base`.
pub fn resources_to_cri(
    r: &nri::LinuxResources,
    base: &LinuxContainerResources,
) -> LinuxContainerResources {
    let mut out = base.clone();
    if let Some(m) = &r.memory {
        if let Some(l) = &m.limit {
            out.memory_limit_in_bytes = l.value;
        }
        if let Some(s) = &m.swap {
            out.memory_swap_limit_in_bytes = s.value;
        }
    }
    if let Some(c) = &r.cpu {
        if let Some(s) = &c.shares {
            out.cpu_shares = s.value as i64;
        }
        if let Some(q) = &c.quota {
            out.cpu_quota = q.value;
        }
        if let Some(p) = &c.period {
            out.cpu_period = p.value as i64;
        }
        if !c.cpus.is_empty() {
            out.cpuset_cpus = c.cpus.clone();
        }
        if !c.mems.is_empty() {
            out.cpuset_mems = c.mems.clone();
        }
    }
    for h in &r.hugepage_limits {
        out.hugepage_limits.retain(|x| x.page_size != h.page_size);
        out.hugepage_limits.push(HugepageLimit {
            page_size: h.page_size.clone(),
            limit: h.limit,
        });
    }
    out.unified
        .extend(r.unified.iter().map(|(k, v)| (k.clone(), v.clone())));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cri_resources_round_trip_through_nri() {
        let cri = LinuxContainerResources {
            cpu_period: 100_000,
            cpu_quota: 50_000,
            cpu_shares: 512,
            memory_limit_in_bytes: 64 << 20,
            cpuset_cpus: "0".into(),
            oom_score_adj: 5,
            ..Default::default()
        };
        let back = resources_to_cri(&resources_from_cri(&cri), &cri);
        assert_eq!(back, cri);
        // Only what NRI sets changes.
        let only_memory = nri::LinuxResources {
            memory: Some(nri::LinuxMemory {
                limit: Some(nri::OptionalInt64 { value: 1 << 30 }),
                ..Default::default()
            }),
            ..Default::default()
        };
        let over = resources_to_cri(&only_memory, &cri);
        assert_eq!(over.memory_limit_in_bytes, 1 << 30);
        assert_eq!((over.cpu_shares, over.cpuset_cpus.as_str()), (512, "0"));
    }

    #[test]
    fn spec_resources_are_read_with_their_json_names() {
        let r = serde_json::json!({
            "memory": {"limit": 1024, "swap": 2048},
            "cpu": {"shares": 2, "quota": 1000, "period": 100000, "cpus": "0-1"},
            "pids": {"limit": 10},
            "hugepageLimits": [{"pageSize": "2MB", "limit": 0}],
        });
        let n = resources_from_spec(&r);
        assert_eq!(n.memory.unwrap().limit.unwrap().value, 1024);
        let cpu = n.cpu.unwrap();
        assert_eq!((cpu.shares.unwrap().value, cpu.cpus.as_str()), (2, "0-1"));
        assert_eq!(n.pids.unwrap().limit, 10);
        assert_eq!(n.hugepage_limits[0].page_size, "2MB");
    }
}
