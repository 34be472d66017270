//! Applying the plugins' merged adjustment to a container's OCI spec, in the spec's JSON form
//! (the runtime-spec's own field names, so each NRI field maps to one documented key).
//! Names starting with `-` (annotations, env, mounts, devices) remove, as in containerd/nri.

use peapod_nri::api as nri;
use serde_json::{json, Map, Value};

fn object<'a>(v: &'a mut Value, key: &str) -> &'a mut Map<String, Value> {
    if !v[key].is_object() {
        v[key] = json!({});
    }
    v[key].as_object_mut().expect("just made an object")
}

fn array<'a>(v: &'a mut Value, key: &str) -> &'a mut Vec<Value> {
    if !v[key].is_array() {
        v[key] = json!([]);
    }
    v[key].as_array_mut().expect("just made an array")
}

fn hooks_json(hooks: &[nri::Hook]) -> Vec<Value> {
    hooks
        .iter()
        .map(|h| {
            let mut v = json!({ "path": h.path });
            if !h.args.is_empty() {
                v["args"] = json!(h.args);
            }
            if !h.env.is_empty() {
                v["env"] = json!(h.env);
            }
            if let Some(t) = &h.timeout {
                v["timeout"] = json!(t.value);
            }
            v
        })
        .collect()
}

fn depth(mount: &Value) -> usize {
    mount["destination"]
        .as_str()
        .map(|d| d.split('/').filter(|c| !c.is_empty()).count())
        .unwrap_or_default()
}

/// `adj` over `spec`.
pub fn apply(spec: &mut Value, adj: &nri::ContainerAdjustment) {
    for (k, v) in &adj.annotations {
        let annotations = object(spec, "annotations");
        match k.strip_prefix('-') {
            Some(name) => {
                annotations.remove(name);
            }
            None => {
                annotations.insert(k.clone(), json!(v));
            }
        }
    }
    if !adj.args.is_empty() {
        spec["process"]["args"] = json!(adj.args);
    }
    for e in &adj.env {
        let name = e.key.strip_prefix('-').unwrap_or(&e.key);
        let prefix = format!("{name}=");
        let env = array(&mut spec["process"], "env");
        env.retain(|x| {
            x.as_str()
                .is_none_or(|s| !s.starts_with(&prefix) && s != name)
        });
        if !e.key.starts_with('-') {
            env.push(json!(format!("{name}={}", e.value)));
        }
    }
    for r in &adj.rlimits {
        let rlimits = array(&mut spec["process"], "rlimits");
        rlimits.retain(|x| x["type"] != json!(r.r#type));
        rlimits.push(json!({ "type": r.r#type, "hard": r.hard, "soft": r.soft }));
    }
    if !adj.mounts.is_empty() {
        let mounts = array(spec, "mounts");
        for m in &adj.mounts {
            let dest = m.destination.strip_prefix('-').unwrap_or(&m.destination);
            mounts.retain(|x| x["destination"] != json!(dest));
            if !m.destination.starts_with('-') {
                mounts.push(json!({
                    "destination": dest,
                    "type": m.r#type,
                    "source": m.source,
                    "options": m.options,
                }));
            }
        }
        // Parents before children, the order otherwise kept (a stable sort).
        mounts.sort_by_key(depth);
    }
    if let Some(h) = &adj.hooks {
        let hooks = object(spec, "hooks");
        for (key, list) in [
            ("prestart", &h.prestart),
            ("createRuntime", &h.create_runtime),
            ("createContainer", &h.create_container),
            ("startContainer", &h.start_container),
            ("poststart", &h.poststart),
            ("poststop", &h.poststop),
        ] {
            if list.is_empty() {
                continue;
            }
            let entry = hooks.entry(key).or_insert_with(|| json!([]));
            if let Some(a) = entry.as_array_mut() {
                a.extend(hooks_json(list));
            }
        }
    }
    let Some(l) = &adj.linux else { return };
    let linux = &mut spec["linux"];
    for d in &l.devices {
        let path = d.path.strip_prefix('-').unwrap_or(&d.path);
        let devices = array(linux, "devices");
        devices.retain(|x| x["path"] != json!(path));
        if d.path.starts_with('-') {
            continue;
        }
        let mut dev = json!({ "path": path, "type": d.r#type, "major": d.major, "minor": d.minor });
        if let Some(m) = &d.file_mode {
            dev["fileMode"] = json!(m.value);
        }
        if let Some(u) = &d.uid {
            dev["uid"] = json!(u.value);
        }
        if let Some(g) = &d.gid {
            dev["gid"] = json!(g.value);
        }
        devices.push(dev);
        // The device cgroup must let the container use it, as containerd allows it.
        let rules = array(object_value(linux, "resources"), "devices");
        rules.push(json!({
            "allow": true, "type": d.r#type, "major": d.major, "minor": d.minor, "access": "rwm"
        }));
    }
    if !l.cgroups_path.is_empty() {
        linux["cgroupsPath"] = json!(l.cgroups_path);
    }
    if let Some(o) = &l.oom_score_adj {
        spec["process"]["oomScoreAdj"] = json!(o.value);
    }
    let linux = &mut spec["linux"];
    for (k, v) in &l.sysctl {
        let sysctl = object(linux, "sysctl");
        match k.strip_prefix('-') {
            Some(name) => {
                sysctl.remove(name);
            }
            None => {
                sysctl.insert(k.clone(), json!(v));
            }
        }
    }
    if let Some(r) = &l.resources {
        apply_resources(object_value(linux, "resources"), r);
    }
}

fn object_value<'a>(v: &'a mut Value, key: &str) -> &'a mut Value {
    object(v, key);
    &mut v[key]
}

/// The set fields of `r` over an OCI `linux.resources`.
fn apply_resources(res: &mut Value, r: &nri::LinuxResources) {
    if let Some(m) = &r.memory {
        let mem = object_value(res, "memory");
        let set = |mem: &mut Value, key: &str, v: Option<Value>| {
            if let Some(v) = v {
                mem[key] = v;
            }
        };
        set(mem, "limit", m.limit.as_ref().map(|x| json!(x.value)));
        set(
            mem,
            "reservation",
            m.reservation.as_ref().map(|x| json!(x.value)),
        );
        set(mem, "swap", m.swap.as_ref().map(|x| json!(x.value)));
        set(mem, "kernel", m.kernel.as_ref().map(|x| json!(x.value)));
        set(
            mem,
            "kernelTCP",
            m.kernel_tcp.as_ref().map(|x| json!(x.value)),
        );
        set(
            mem,
            "swappiness",
            m.swappiness.as_ref().map(|x| json!(x.value)),
        );
        set(
            mem,
            "disableOOMKiller",
            m.disable_oom_killer.as_ref().map(|x| json!(x.value)),
        );
        set(
            mem,
            "useHierarchy",
            m.use_hierarchy.as_ref().map(|x| json!(x.value)),
        );
    }
    if let Some(c) = &r.cpu {
        let cpu = object_value(res, "cpu");
        let pairs = [
            ("shares", c.shares.as_ref().map(|x| json!(x.value))),
            ("quota", c.quota.as_ref().map(|x| json!(x.value))),
            ("period", c.period.as_ref().map(|x| json!(x.value))),
            (
                "realtimeRuntime",
                c.realtime_runtime.as_ref().map(|x| json!(x.value)),
            ),
            (
                "realtimePeriod",
                c.realtime_period.as_ref().map(|x| json!(x.value)),
            ),
            ("cpus", (!c.cpus.is_empty()).then(|| json!(c.cpus))),
            ("mems", (!c.mems.is_empty()).then(|| json!(c.mems))),
        ];
        for (key, v) in pairs {
            if let Some(v) = v {
                cpu[key] = v;
            }
        }
    }
    for h in &r.hugepage_limits {
        let list = array(res, "hugepageLimits");
        list.retain(|x| x["pageSize"] != json!(h.page_size));
        list.push(json!({ "pageSize": h.page_size, "limit": h.limit }));
    }
    for (k, v) in &r.unified {
        object(res, "unified").insert(k.clone(), json!(v));
    }
    if let Some(p) = &r.pids {
        res["pids"] = json!({ "limit": p.limit });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> Value {
        json!({
            "ociVersion": "1.0.2",
            "process": {"args": ["sh"], "env": ["PATH=/bin", "KEEP=1", "DROP=x"], "cwd": "/",
                        "user": {"uid": 0, "gid": 0}},
            "root": {"path": "rootfs"},
            "mounts": [{"destination": "/proc", "type": "proc", "source": "proc"},
                       {"destination": "/dev/shm", "type": "bind", "source": "/x", "options": ["rbind"]}],
            "annotations": {"old": "1"},
            "linux": {"resources": {"memory": {"limit": 100}}, "cgroupsPath": "/p/c"}
        })
    }

    #[test]
    fn every_supported_adjustment_lands_in_its_spec_field() {
        let mut s = spec();
        let adj = nri::ContainerAdjustment {
            annotations: [
                ("new".to_string(), "2".to_string()),
                ("-old".to_string(), String::new()),
            ]
            .into(),
            env: vec![
                nri::KeyValue {
                    key: "ADDED".into(),
                    value: "yes".into(),
                },
                nri::KeyValue {
                    key: "PATH".into(),
                    value: "/usr/bin".into(),
                },
                nri::KeyValue {
                    key: "-DROP".into(),
                    value: String::new(),
                },
            ],
            mounts: vec![nri::Mount {
                destination: "/data".into(),
                r#type: "bind".into(),
                source: "/srv".into(),
                options: vec!["rbind".into(), "ro".into()],
            }],
            hooks: Some(nri::Hooks {
                prestart: vec![nri::Hook {
                    path: "/bin/true".into(),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            rlimits: vec![nri::PosixRlimit {
                r#type: "RLIMIT_NOFILE".into(),
                hard: 100,
                soft: 50,
            }],
            linux: Some(nri::LinuxContainerAdjustment {
                devices: vec![nri::LinuxDevice {
                    path: "/dev/fuse".into(),
                    r#type: "c".into(),
                    major: 10,
                    minor: 229,
                    ..Default::default()
                }],
                resources: Some(nri::LinuxResources {
                    cpu: Some(nri::LinuxCpu {
                        cpus: "0".into(),
                        ..Default::default()
                    }),
                    pids: Some(nri::LinuxPids { limit: 64 }),
                    ..Default::default()
                }),
                cgroups_path: "/nri/c".into(),
                oom_score_adj: Some(nri::OptionalInt { value: 500 }),
                ..Default::default()
            }),
            ..Default::default()
        };
        apply(&mut s, &adj);
        assert_eq!(s["annotations"], json!({"new": "2"}));
        assert_eq!(
            s["process"]["env"],
            json!(["KEEP=1", "ADDED=yes", "PATH=/usr/bin"])
        );
        // Parents first: /data (one level) goes before /dev/shm (two).
        let dests: Vec<_> = s["mounts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["destination"].clone())
            .collect();
        assert_eq!(dests, [json!("/proc"), json!("/data"), json!("/dev/shm")]);
        assert_eq!(s["hooks"]["prestart"][0]["path"], "/bin/true");
        assert_eq!(
            s["process"]["rlimits"],
            json!([{"type": "RLIMIT_NOFILE", "hard": 100, "soft": 50}])
        );
        assert_eq!(s["linux"]["devices"][0]["path"], "/dev/fuse");
        assert_eq!(s["linux"]["resources"]["devices"][0]["access"], "rwm");
        assert_eq!(
            s["linux"]["resources"]["memory"]["limit"], 100,
            "untouched fields stay"
        );
        assert_eq!(s["linux"]["resources"]["cpu"]["cpus"], "0");
        assert_eq!(s["linux"]["resources"]["pids"]["limit"], 64);
        assert_eq!(s["linux"]["cgroupsPath"], "/nri/c");
        assert_eq!(s["process"]["oomScoreAdj"], 500);
        // Still a valid OCI spec.
        let _: oci_spec::runtime::Spec = serde_json::from_value(s).unwrap();
    }
}
