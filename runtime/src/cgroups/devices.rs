//! A container's device rules (runtime-spec `linux.resources.devices`) as runc 1.1's devices
//! emulator leaves them: the spec's rules and then runc's defaults, folded into a default
//! (allow or deny every device) and the exceptions to it. Every driver writes the same
//! result its own way: v1 as `devices.allow`/`devices.deny` lines ([`super::v1`]), v2 as a
//! BPF program ([`super::device_filter`]), systemd as `DevicePolicy`/`DeviceAllow`
//! ([`super::systemd`]).

use crate::spec::DeviceRule as SpecRule;

/// runc 1.1's default device rules (libcontainer/specconv `AllowedDevices`), added after the
/// spec's own at create: `mknod` of any device, the standard character devices (null,
/// random, full, tty, zero, urandom), the pty slaves and ptmx, and /dev/net/tun.
pub const DEFAULT_DEVICE_RULES: [&str; 11] = [
    "c *:* m",
    "b *:* m",
    "c 1:3 rwm",
    "c 1:8 rwm",
    "c 1:7 rwm",
    "c 5:0 rwm",
    "c 1:5 rwm",
    "c 1:9 rwm",
    "c 136:* rwm",
    "c 5:2 rwm",
    "c 10:200 rwm",
];

/// One device rule, parsed: a type (`a`, `b`, `c`), major and minor (`None`: any), access.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct DeviceRule {
    pub kind: char,
    pub major: Option<i64>,
    pub minor: Option<i64>,
    /// Some of `rwm`, in that order.
    pub access: String,
}

impl DeviceRule {
    fn parse(rule: &SpecRule) -> (bool, DeviceRule) {
        let kind = rule
            .kind
            .as_deref()
            .and_then(|t| t.chars().next())
            .unwrap_or('a');
        let access = rule
            .access
            .as_deref()
            .filter(|a| !a.is_empty())
            .unwrap_or("rwm");
        let parsed = DeviceRule {
            kind,
            major: rule.major.filter(|n| *n >= 0),
            minor: rule.minor.filter(|n| *n >= 0),
            access: canonical_access(access),
        };
        (rule.allow, parsed)
    }

    fn parse_line(line: &str) -> DeviceRule {
        let mut parts = line.split(' ');
        let kind = parts.next().and_then(|t| t.chars().next()).unwrap_or('a');
        let (major, minor) = parts
            .next()
            .and_then(|n| n.split_once(':'))
            .unwrap_or(("*", "*"));
        let num = |n: &str| n.parse::<i64>().ok();
        DeviceRule {
            kind,
            major: num(major),
            minor: num(minor),
            access: canonical_access(parts.next().unwrap_or("rwm")),
        }
    }

    fn whole_list(&self) -> bool {
        self.kind == 'a' && self.major.is_none() && self.minor.is_none()
    }

    /// As the v1 devices files take it: `c 1:3 rwm`.
    pub fn line(&self) -> String {
        let n = |v: Option<i64>| v.map_or("*".to_string(), |v| v.to_string());
        format!(
            "{} {}:{} {}",
            self.kind,
            n(self.major),
            n(self.minor),
            self.access
        )
    }
}

fn canonical_access(access: &str) -> String {
    "rwm".chars().filter(|c| access.contains(*c)).collect()
}

/// The device state a container's cgroup ends in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Emulated {
    /// Every device is allowed but the exceptions (a deny list), or the reverse.
    pub default_allow: bool,
    /// Sorted (the order runc writes them in, and so the kernel's `devices.list`).
    pub exceptions: Vec<DeviceRule>,
}

/// The cgroup's device state after the spec's rules and then runc's defaults, as runc's
/// devices emulator computes it.
pub fn emulate(spec_rules: &[SpecRule]) -> Emulated {
    let mut default_allow = true;
    let mut exceptions: Vec<DeviceRule> = Vec::new();
    let defaults = DEFAULT_DEVICE_RULES
        .iter()
        .map(|l| (true, DeviceRule::parse_line(l)));
    for (allow, rule) in spec_rules.iter().map(DeviceRule::parse).chain(defaults) {
        if rule.whole_list() {
            default_allow = allow;
            exceptions.clear();
            continue;
        }
        let same = exceptions
            .iter()
            .position(|e| e.kind == rule.kind && e.major == rule.major && e.minor == rule.minor);
        if allow != default_allow {
            // An exception to the default: added, or its access widened.
            match same {
                Some(i) => {
                    let merged = format!("{}{}", exceptions[i].access, rule.access);
                    exceptions[i].access = canonical_access(&merged);
                }
                None => exceptions.push(rule),
            }
        } else if let Some(i) = same {
            // Back to the default for this access.
            let left: String = exceptions[i]
                .access
                .chars()
                .filter(|c| !rule.access.contains(*c))
                .collect();
            if left.is_empty() {
                exceptions.remove(i);
            } else {
                exceptions[i].access = left;
            }
        }
    }
    exceptions.sort();
    Emulated {
        default_allow,
        exceptions,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::Resources;
    use serde_json::json;

    fn rules(v: serde_json::Value) -> Vec<SpecRule> {
        serde_json::from_value::<Resources>(v).unwrap().devices
    }

    #[test]
    fn device_rules_end_as_runcs_emulator_leaves_them() {
        let e = emulate(&rules(json!({"devices": [
            {"allow": false, "access": "rwm"},
            {"allow": true, "type": "c", "major": 10, "minor": 229, "access": "rw"},
            {"allow": true, "type": "c", "major": 1, "minor": 3, "access": "r"},
        ]})));
        assert!(!e.default_allow);
        let lines: Vec<String> = e.exceptions.iter().map(DeviceRule::line).collect();
        assert_eq!(
            lines,
            [
                "b *:* m",
                "c *:* m",
                "c 1:3 rwm",
                "c 1:5 rwm",
                "c 1:7 rwm",
                "c 1:8 rwm",
                "c 1:9 rwm",
                "c 5:0 rwm",
                "c 5:2 rwm",
                "c 10:200 rwm",
                "c 10:229 rw",
                "c 136:* rwm"
            ]
        );
        // Privileged: every device, and nothing after it narrows that.
        let all = emulate(&rules(
            json!({"devices": [{"allow": true, "access": "rwm"}]}),
        ));
        assert!(all.default_allow);
        assert!(all.exceptions.is_empty(), "{all:?}");
        // A deny list: access taken away from one device.
        let deny = emulate(&rules(json!({"devices": [
            {"allow": true, "access": "rwm"},
            {"allow": false, "type": "b", "major": 8, "minor": 0, "access": "w"},
        ]})));
        assert!(deny.default_allow);
        assert_eq!(deny.exceptions.len(), 1);
        assert_eq!(deny.exceptions[0].line(), "b 8:0 w");
    }
}
