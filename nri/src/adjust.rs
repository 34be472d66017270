//! Collecting the adjustments of several plugins into one, as containerd/nri does: plugins are
//! asked in order and each may adjust a field (an annotation, a mount destination, an env
//! variable, a resource limit, …) that no earlier plugin adjusted; two plugins adjusting the
//! same field is a conflict that fails the container's creation rather than letting the
//! order decide silently. Adjustments peapod cannot apply are refused by name.

use crate::api::{
    CompoundFieldOwners, ContainerAdjustment, Field, FieldOwners, Hooks, LinuxContainerAdjustment,
    LinuxCpu, LinuxMemory, LinuxResources,
};
use std::collections::BTreeMap;

/// Why an adjustment was refused.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum AdjustError {
    #[error("plugins {first} and {second} both adjust {field}")]
    Conflict {
        field: String,
        first: String,
        second: String,
    },
    #[error("plugin {plugin} asks for {field}, which peapod does not support")]
    Unsupported { plugin: String, field: &'static str },
    #[error("plugin {plugin}: invalid {field}: {why}")]
    Invalid {
        plugin: String,
        field: String,
        why: String,
    },
}

/// An adjusted field: containerd/nri's field number, and the key for fields with several
/// owners (an annotation's name, a mount's destination, an env variable, …).
type Claim = (Field, Option<String>);

/// The adjustments of the plugins asked so far, merged, with the plugin owning each field.
#[derive(Default, Debug)]
pub struct Merged {
    pub adjust: ContainerAdjustment,
    owners: BTreeMap<Claim, String>,
    /// Plugins that added OCI hooks (hooks add up, they do not conflict).
    hook_owners: Vec<String>,
}

/// A field as messages name it.
fn describe(field: Field, key: Option<&str>) -> String {
    let name = match field {
        Field::Annotations => "annotation",
        Field::Mounts => "mount",
        Field::Env => "env",
        Field::Rlimits => "rlimit",
        Field::Devices => "device",
        Field::Sysctl => "sysctl",
        Field::HugepageLimits => "hugepage limit",
        Field::CgroupsUnified => "unified",
        Field::Args => "args",
        Field::CgroupsPath => "cgroups path",
        Field::OomScoreAdj => "oom_score_adj",
        Field::MemLimit => "memory.limit",
        Field::MemReservation => "memory.reservation",
        Field::MemSwapLimit => "memory.swap",
        Field::MemKernelLimit => "memory.kernel",
        Field::MemTcpLimit => "memory.kernel_tcp",
        Field::MemSwappiness => "memory.swappiness",
        Field::MemDisableOomKiller => "memory.disable_oom_killer",
        Field::MemUseHierarchy => "memory.use_hierarchy",
        Field::CpuShares => "cpu.shares",
        Field::CpuQuota => "cpu.quota",
        Field::CpuPeriod => "cpu.period",
        Field::CpuRealtimeRuntime => "cpu.realtime_runtime",
        Field::CpuRealtimePeriod => "cpu.realtime_period",
        Field::CpuSetCpUs => "cpu.cpus",
        Field::CpuSetMems => "cpu.mems",
        Field::PidsLimit => "pids.limit",
        other => other.as_str_name(),
    };
    match key {
        Some(k) => format!("{name} {k}"),
        None => name.to_string(),
    }
}

/// The name a removal marker (`-name`) and its addition share.
fn unmarked(key: &str) -> &str {
    key.strip_prefix('-').unwrap_or(key)
}

impl Merged {
    fn claim(&mut self, field: Field, key: Option<&str>, plugin: &str) -> Result<(), AdjustError> {
        let claim = (field, key.map(String::from));
        match self.owners.get(&claim) {
            Some(owner) if owner != plugin => Err(AdjustError::Conflict {
                field: describe(field, key),
                first: owner.clone(),
                second: plugin.to_string(),
            }),
            _ => {
                self.owners.insert(claim, plugin.to_string());
                Ok(())
            }
        }
    }

    /// Who adjusted what, as ValidateContainerAdjustment reports it.
    pub fn field_owners(&self) -> FieldOwners {
        let mut out = FieldOwners::default();
        for ((field, key), plugin) in &self.owners {
            match key {
                None => {
                    out.simple.insert(*field as i32, plugin.clone());
                }
                Some(k) => {
                    out.compound
                        .entry(*field as i32)
                        .or_insert_with(CompoundFieldOwners::default)
                        .owners
                        .insert(k.clone(), plugin.clone());
                }
            }
        }
        if !self.hook_owners.is_empty() {
            out.simple
                .insert(Field::OciHooks as i32, self.hook_owners.join(","));
        }
        out
    }

    /// Adds `plugin`'s adjustment; nothing of it is kept when it is refused.
    pub fn add(&mut self, plugin: &str, adj: ContainerAdjustment) -> Result<(), AdjustError> {
        check(plugin, &adj)?;
        let before = self.owners.clone();
        let result = self.merge(plugin, adj);
        if result.is_err() {
            self.owners = before;
        }
        result
    }

    fn merge(&mut self, plugin: &str, adj: ContainerAdjustment) -> Result<(), AdjustError> {
        for key in adj.annotations.keys() {
            self.claim(Field::Annotations, Some(unmarked(key)), plugin)?;
        }
        for m in &adj.mounts {
            self.claim(Field::Mounts, Some(unmarked(&m.destination)), plugin)?;
        }
        for e in &adj.env {
            self.claim(Field::Env, Some(unmarked(&e.key)), plugin)?;
        }
        for r in &adj.rlimits {
            self.claim(Field::Rlimits, Some(&r.r#type), plugin)?;
        }
        if !adj.args.is_empty() {
            self.claim(Field::Args, None, plugin)?;
        }
        if let Some(linux) = &adj.linux {
            for d in &linux.devices {
                self.claim(Field::Devices, Some(unmarked(&d.path)), plugin)?;
            }
            if !linux.cgroups_path.is_empty() {
                self.claim(Field::CgroupsPath, None, plugin)?;
            }
            if linux.oom_score_adj.is_some() {
                self.claim(Field::OomScoreAdj, None, plugin)?;
            }
            for key in linux.sysctl.keys() {
                self.claim(Field::Sysctl, Some(unmarked(key)), plugin)?;
            }
            if let Some(r) = &linux.resources {
                for (field, key) in resource_fields(r) {
                    self.claim(field, key.as_deref(), plugin)?;
                }
            }
        }
        if adj.hooks.is_some() && !self.hook_owners.iter().any(|p| p == plugin) {
            self.hook_owners.push(plugin.to_string());
        }
        // Claims all held: now the values.
        let out = &mut self.adjust;
        out.annotations.extend(adj.annotations);
        out.mounts.extend(adj.mounts);
        out.env.extend(adj.env);
        out.rlimits.extend(adj.rlimits);
        if !adj.args.is_empty() {
            out.args = adj.args;
        }
        if let Some(h) = adj.hooks {
            let hooks = out.hooks.get_or_insert_with(Hooks::default);
            hooks.prestart.extend(h.prestart);
            hooks.create_runtime.extend(h.create_runtime);
            hooks.create_container.extend(h.create_container);
            hooks.start_container.extend(h.start_container);
            hooks.poststart.extend(h.poststart);
            hooks.poststop.extend(h.poststop);
        }
        if let Some(l) = adj.linux {
            let linux = out
                .linux
                .get_or_insert_with(LinuxContainerAdjustment::default);
            linux.devices.extend(l.devices);
            if !l.cgroups_path.is_empty() {
                linux.cgroups_path = l.cgroups_path;
            }
            if l.oom_score_adj.is_some() {
                linux.oom_score_adj = l.oom_score_adj;
            }
            linux.sysctl.extend(l.sysctl);
            if let Some(r) = l.resources {
                merge_resources(linux.resources.get_or_insert_with(Default::default), r);
            }
        }
        Ok(())
    }
}

/// The resource fields an adjustment sets (for ownership).
pub fn resource_fields(r: &LinuxResources) -> Vec<(Field, Option<String>)> {
    let mut out = Vec::new();
    if let Some(m) = &r.memory {
        let fields = [
            (Field::MemLimit, m.limit.is_some()),
            (Field::MemReservation, m.reservation.is_some()),
            (Field::MemSwapLimit, m.swap.is_some()),
            (Field::MemKernelLimit, m.kernel.is_some()),
            (Field::MemTcpLimit, m.kernel_tcp.is_some()),
            (Field::MemSwappiness, m.swappiness.is_some()),
            (Field::MemDisableOomKiller, m.disable_oom_killer.is_some()),
            (Field::MemUseHierarchy, m.use_hierarchy.is_some()),
        ];
        out.extend(fields.iter().filter(|f| f.1).map(|f| (f.0, None)));
    }
    if let Some(c) = &r.cpu {
        let fields = [
            (Field::CpuShares, c.shares.is_some()),
            (Field::CpuQuota, c.quota.is_some()),
            (Field::CpuPeriod, c.period.is_some()),
            (Field::CpuRealtimeRuntime, c.realtime_runtime.is_some()),
            (Field::CpuRealtimePeriod, c.realtime_period.is_some()),
            (Field::CpuSetCpUs, !c.cpus.is_empty()),
            (Field::CpuSetMems, !c.mems.is_empty()),
        ];
        out.extend(fields.iter().filter(|f| f.1).map(|f| (f.0, None)));
    }
    for h in &r.hugepage_limits {
        out.push((Field::HugepageLimits, Some(h.page_size.clone())));
    }
    for k in r.unified.keys() {
        out.push((Field::CgroupsUnified, Some(k.clone())));
    }
    if r.pids.is_some() {
        out.push((Field::PidsLimit, None));
    }
    out
}

/// `from`'s set fields over `into`.
pub fn merge_resources(into: &mut LinuxResources, from: LinuxResources) {
    if let Some(m) = from.memory {
        let to = into.memory.get_or_insert_with(LinuxMemory::default);
        macro_rules! take {
            ($($f:ident),*) => { $( if m.$f.is_some() { to.$f = m.$f; } )* };
        }
        take!(
            limit,
            reservation,
            swap,
            kernel,
            kernel_tcp,
            swappiness,
            disable_oom_killer,
            use_hierarchy
        );
    }
    if let Some(c) = from.cpu {
        let to = into.cpu.get_or_insert_with(LinuxCpu::default);
        macro_rules! take {
            ($($f:ident),*) => { $( if c.$f.is_some() { to.$f = c.$f; } )* };
        }
        take!(shares, quota, period, realtime_runtime, realtime_period);
        if !c.cpus.is_empty() {
            to.cpus = c.cpus;
        }
        if !c.mems.is_empty() {
            to.mems = c.mems;
        }
    }
    for h in from.hugepage_limits {
        into.hugepage_limits.retain(|x| x.page_size != h.page_size);
        into.hugepage_limits.push(h);
    }
    into.unified.extend(from.unified);
    if from.pids.is_some() {
        into.pids = from.pids;
    }
    into.devices.extend(from.devices);
}

const RLIMITS: &[&str] = &[
    "RLIMIT_AS",
    "RLIMIT_CORE",
    "RLIMIT_CPU",
    "RLIMIT_DATA",
    "RLIMIT_FSIZE",
    "RLIMIT_LOCKS",
    "RLIMIT_MEMLOCK",
    "RLIMIT_MSGQUEUE",
    "RLIMIT_NICE",
    "RLIMIT_NOFILE",
    "RLIMIT_NPROC",
    "RLIMIT_RSS",
    "RLIMIT_RTPRIO",
    "RLIMIT_RTTIME",
    "RLIMIT_SIGPENDING",
    "RLIMIT_STACK",
];

/// What one plugin asks for must make sense on its own, and be something peapod applies.
fn check(plugin: &str, adj: &ContainerAdjustment) -> Result<(), AdjustError> {
    let invalid = |field: String, why: &str| AdjustError::Invalid {
        plugin: plugin.to_string(),
        field,
        why: why.to_string(),
    };
    let unsupported = |field: &'static str| AdjustError::Unsupported {
        plugin: plugin.to_string(),
        field,
    };
    if !adj.cdi_devices.is_empty() {
        return Err(unsupported("CDI devices"));
    }
    for m in &adj.mounts {
        if !unmarked(&m.destination).starts_with('/') {
            return Err(invalid(
                format!("mount {:?}", m.destination),
                "destination must be an absolute path",
            ));
        }
    }
    for e in &adj.env {
        let name = unmarked(&e.key);
        if name.is_empty() || name.contains('=') {
            return Err(invalid(format!("env {:?}", e.key), "not a variable name"));
        }
    }
    for r in &adj.rlimits {
        if !RLIMITS.contains(&r.r#type.as_str()) {
            return Err(invalid(
                format!("rlimit {:?}", r.r#type),
                "unknown rlimit type",
            ));
        }
        if r.soft > r.hard {
            return Err(invalid(
                format!("rlimit {}", r.r#type),
                "soft limit over hard limit",
            ));
        }
    }
    if let Some(h) = &adj.hooks {
        let all = h
            .prestart
            .iter()
            .chain(&h.create_runtime)
            .chain(&h.create_container)
            .chain(&h.start_container)
            .chain(&h.poststart)
            .chain(&h.poststop);
        for hook in all {
            if !hook.path.starts_with('/') {
                return Err(invalid(
                    format!("hook {:?}", hook.path),
                    "path must be absolute",
                ));
            }
        }
    }
    let Some(l) = &adj.linux else {
        return Ok(());
    };
    for (present, field) in [
        (!l.io_priority.is_empty(), "linux.io_priority"),
        (!l.seccomp_policy.is_empty(), "linux.seccomp_policy"),
        (!l.namespaces.is_empty(), "linux.namespaces"),
        (!l.net_devices.is_empty(), "linux.net_devices"),
        (!l.scheduler.is_empty(), "linux.scheduler"),
        (!l.rdt.is_empty(), "linux.rdt"),
        (!l.memory_policy.is_empty(), "linux.memory_policy"),
    ] {
        if present {
            return Err(unsupported(field));
        }
    }
    if let Some(r) = &l.resources {
        if r.blockio_class.is_some() {
            return Err(unsupported("linux.resources.blockio_class"));
        }
        if r.rdt_class.is_some() {
            return Err(unsupported("linux.resources.rdt_class"));
        }
    }
    for d in &l.devices {
        let path = unmarked(&d.path);
        if !path.starts_with("/dev/") {
            return Err(invalid(
                format!("device {:?}", d.path),
                "path must be under /dev",
            ));
        }
        if !d.path.starts_with('-') && !matches!(d.r#type.as_str(), "b" | "c" | "u" | "p") {
            return Err(invalid(
                format!("device {:?}", d.path),
                "type must be b, c, u or p",
            ));
        }
    }
    if let Some(o) = &l.oom_score_adj {
        if !(-1000..=1000).contains(&o.value) {
            return Err(invalid(
                "oom_score_adj".into(),
                "must be within -1000..=1000",
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{KeyValue, LinuxPids, Mount, OptionalInt64};

    fn env(k: &str, v: &str) -> KeyValue {
        KeyValue {
            key: k.into(),
            value: v.into(),
        }
    }

    #[test]
    fn disjoint_adjustments_merge_in_order() {
        let mut m = Merged::default();
        let a = ContainerAdjustment {
            env: vec![env("A", "1")],
            annotations: [("x".to_string(), "1".to_string())].into(),
            ..Default::default()
        };
        let b = ContainerAdjustment {
            env: vec![env("B", "2")],
            mounts: vec![Mount {
                destination: "/data".into(),
                source: "/tmp".into(),
                r#type: "bind".into(),
                options: vec!["bind".into()],
            }],
            ..Default::default()
        };
        m.add("10-a", a).unwrap();
        m.add("20-b", b).unwrap();
        assert_eq!(m.adjust.env, vec![env("A", "1"), env("B", "2")]);
        assert_eq!(m.adjust.mounts.len(), 1);
        assert_eq!(m.adjust.annotations["x"], "1");
    }

    #[test]
    fn two_plugins_on_one_field_conflict_naming_both() {
        let mut m = Merged::default();
        m.add(
            "10-a",
            ContainerAdjustment {
                env: vec![env("A", "1")],
                ..Default::default()
            },
        )
        .unwrap();
        // A removal of the same variable is the same field.
        let err = m
            .add(
                "20-b",
                ContainerAdjustment {
                    env: vec![env("-A", "")],
                    ..Default::default()
                },
            )
            .unwrap_err();
        assert_eq!(
            err,
            AdjustError::Conflict {
                field: "env A".into(),
                first: "10-a".into(),
                second: "20-b".into()
            }
        );
        assert_eq!(
            m.adjust.env,
            vec![env("A", "1")],
            "the refused one left nothing"
        );
    }

    #[test]
    fn resource_fields_conflict_one_by_one() {
        let mem = |limit| LinuxResources {
            memory: Some(LinuxMemory {
                limit: Some(OptionalInt64 { value: limit }),
                ..Default::default()
            }),
            ..Default::default()
        };
        let pids = LinuxResources {
            pids: Some(LinuxPids { limit: 10 }),
            ..Default::default()
        };
        let adj = |r| ContainerAdjustment {
            linux: Some(LinuxContainerAdjustment {
                resources: Some(r),
                ..Default::default()
            }),
            ..Default::default()
        };
        let mut m = Merged::default();
        m.add("10-a", adj(mem(100))).unwrap();
        m.add("20-b", adj(pids)).unwrap();
        assert!(matches!(
            m.add("30-c", adj(mem(200))),
            Err(AdjustError::Conflict { .. })
        ));
        let r = m.adjust.linux.unwrap().resources.unwrap();
        assert_eq!(r.memory.unwrap().limit.unwrap().value, 100);
        assert_eq!(r.pids.unwrap().limit, 10);
    }

    #[test]
    fn owners_are_reported_by_containerd_nri_field_numbers() {
        let mut m = Merged::default();
        let a = ContainerAdjustment {
            env: vec![env("A", "1")],
            args: vec!["sh".into()],
            hooks: Some(Hooks::default()),
            ..Default::default()
        };
        let b = ContainerAdjustment {
            hooks: Some(Hooks::default()),
            ..Default::default()
        };
        m.add("10-a", a).unwrap();
        m.add("20-b", b).unwrap();
        let o = m.field_owners();
        assert_eq!(o.simple[&7], "10-a", "Args");
        assert_eq!(o.simple[&3], "10-a,20-b", "OCI hooks add up");
        assert_eq!(o.compound[&6].owners["A"], "10-a", "Env");
    }

    #[test]
    fn unsupported_and_invalid_adjustments_are_refused_by_name() {
        let mut m = Merged::default();
        let sched = ContainerAdjustment {
            linux: Some(LinuxContainerAdjustment {
                scheduler: vec![8, 1],
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(
            m.add("10-a", sched).unwrap_err().to_string(),
            "plugin 10-a asks for linux.scheduler, which peapod does not support"
        );
        let relative = ContainerAdjustment {
            mounts: vec![Mount {
                destination: "data".into(),
                ..Default::default()
            }],
            ..Default::default()
        };
        assert!(matches!(
            m.add("10-a", relative),
            Err(AdjustError::Invalid { .. })
        ));
    }
}
