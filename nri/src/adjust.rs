//! Collecting the adjustments of several plugins into one, as containerd/nri does: plugins are
//! asked in order and each may adjust a field (an annotation, a mount destination, an env
//! variable, a resource limit, …) that no earlier plugin adjusted; two plugins adjusting the
//! same field is a conflict that fails the container's creation rather than letting the
//! order decide silently. Adjustments peapod cannot apply are refused by name.

use crate::api::{
    ContainerAdjustment, Hooks, LinuxContainerAdjustment, LinuxCpu, LinuxMemory, LinuxResources,
};
use std::collections::HashMap;

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

/// The adjustments of the plugins asked so far, merged, with the plugin owning each field.
#[derive(Default, Debug)]
pub struct Merged {
    pub adjust: ContainerAdjustment,
    owners: HashMap<String, String>,
}

/// The name a removal marker (`-name`) and its addition share.
fn unmarked(key: &str) -> &str {
    key.strip_prefix('-').unwrap_or(key)
}

impl Merged {
    fn claim(&mut self, field: String, plugin: &str) -> Result<(), AdjustError> {
        match self.owners.get(&field) {
            Some(owner) if owner != plugin => Err(AdjustError::Conflict {
                field,
                first: owner.clone(),
                second: plugin.to_string(),
            }),
            _ => {
                self.owners.insert(field, plugin.to_string());
                Ok(())
            }
        }
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
            self.claim(format!("annotation {}", unmarked(key)), plugin)?;
        }
        for m in &adj.mounts {
            self.claim(format!("mount {}", unmarked(&m.destination)), plugin)?;
        }
        for e in &adj.env {
            self.claim(format!("env {}", unmarked(&e.key)), plugin)?;
        }
        for r in &adj.rlimits {
            self.claim(format!("rlimit {}", r.r#type), plugin)?;
        }
        if !adj.args.is_empty() {
            self.claim("args".into(), plugin)?;
        }
        if let Some(linux) = &adj.linux {
            for d in &linux.devices {
                self.claim(format!("device {}", unmarked(&d.path)), plugin)?;
            }
            if !linux.cgroups_path.is_empty() {
                self.claim("cgroups path".into(), plugin)?;
            }
            if linux.oom_score_adj.is_some() {
                self.claim("oom_score_adj".into(), plugin)?;
            }
            for key in linux.sysctl.keys() {
                self.claim(format!("sysctl {}", unmarked(key)), plugin)?;
            }
            if let Some(r) = &linux.resources {
                for field in resource_fields(r) {
                    self.claim(field, plugin)?;
                }
            }
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

/// The resource fields an adjustment sets, by name (for ownership).
pub fn resource_fields(r: &LinuxResources) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(m) = &r.memory {
        let fields = [
            ("memory.limit", m.limit.is_some()),
            ("memory.reservation", m.reservation.is_some()),
            ("memory.swap", m.swap.is_some()),
            ("memory.kernel", m.kernel.is_some()),
            ("memory.kernel_tcp", m.kernel_tcp.is_some()),
            ("memory.swappiness", m.swappiness.is_some()),
            ("memory.disable_oom_killer", m.disable_oom_killer.is_some()),
            ("memory.use_hierarchy", m.use_hierarchy.is_some()),
        ];
        out.extend(fields.iter().filter(|f| f.1).map(|f| f.0.to_string()));
    }
    if let Some(c) = &r.cpu {
        let fields = [
            ("cpu.shares", c.shares.is_some()),
            ("cpu.quota", c.quota.is_some()),
            ("cpu.period", c.period.is_some()),
            ("cpu.realtime_runtime", c.realtime_runtime.is_some()),
            ("cpu.realtime_period", c.realtime_period.is_some()),
            ("cpu.cpus", !c.cpus.is_empty()),
            ("cpu.mems", !c.mems.is_empty()),
        ];
        out.extend(fields.iter().filter(|f| f.1).map(|f| f.0.to_string()));
    }
    for h in &r.hugepage_limits {
        out.push(format!("hugepage limit {}", h.page_size));
    }
    for k in r.unified.keys() {
        out.push(format!("unified {k}"));
    }
    if r.pids.is_some() {
        out.push("pids.limit".into());
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
