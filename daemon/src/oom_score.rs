//! The oom_score_adj the daemon may give a container: without CAP_SYS_RESOURCE, none below
//! its own.
//!
//! Lowering an oom_score_adj below the current value needs CAP_SYS_RESOURCE. Without it the
//! runtime would fail to start the container, so, as containerd's `restrict_oom_score_adj`
//! does, a requested value below the daemon's own is raised to the daemon's own, and this is
//! logged once.

use std::sync::{Once, OnceLock};

const CAP_SYS_RESOURCE: u32 = 24;

/// Whether `CapEff` in /proc/self/status text holds CAP_SYS_RESOURCE.
pub fn has_sys_resource(status: &str) -> bool {
    status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        .is_some_and(|caps| caps & (1 << CAP_SYS_RESOURCE) != 0)
}

/// The value to ask for, given the request, the daemon's own value and the capability.
pub fn clamp(requested: i32, own: i32, can_lower: bool) -> i32 {
    let requested = requested.clamp(-1000, 1000);
    if !can_lower && requested < own {
        own
    } else {
        requested
    }
}

struct Facts {
    own: i32,
    can_lower: bool,
}

fn facts() -> &'static Facts {
    static FACTS: OnceLock<Facts> = OnceLock::new();
    FACTS.get_or_init(|| Facts {
        own: std::fs::read_to_string("/proc/self/oom_score_adj")
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0),
        can_lower: std::fs::read_to_string("/proc/self/status")
            .map(|s| has_sys_resource(&s))
            .unwrap_or(false),
    })
}

/// The oom_score_adj to put in a runtime spec for `requested`.
pub fn restrict(requested: i32) -> i32 {
    let f = facts();
    let value = clamp(requested, f.own, f.can_lower);
    if value != requested.clamp(-1000, 1000) {
        static LOGGED: Once = Once::new();
        LOGGED.call_once(|| {
            tracing::warn!(
                requested,
                used = value,
                "no CAP_SYS_RESOURCE: oom_score_adj below the daemon's own ({}) is raised to it",
                f.own
            );
        });
    }
    value
}

/// The lowest oom_score_adj this daemon may give: its own value when it lacks
/// CAP_SYS_RESOURCE, `None` when it may lower freely.
pub fn floor() -> Option<i32> {
    let f = facts();
    (!f.can_lower).then_some(f.own)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_capability_bit() {
        assert!(!has_sys_resource("Name:\tx\nCapEff:\t000001fffeffffff\n"));
        assert!(has_sys_resource("CapEff:\t000001ffffffffff\n"));
        assert!(!has_sys_resource("nothing"));
    }

    #[test]
    fn clamps_only_when_lowering_without_the_capability() {
        assert_eq!(clamp(-998, 0, false), 0);
        assert_eq!(clamp(-998, -500, false), -500);
        assert_eq!(clamp(-998, 0, true), -998);
        assert_eq!(clamp(1000, 0, false), 1000);
        assert_eq!(clamp(5000, 0, false), 1000);
    }
}
