//! Linux capabilities: names, the default set, and the CRI add/drop arithmetic.

use crate::error::{Result, SpecError};
use crate::util::push_unique;
use peapod_proto::v1::Capability;

/// Every capability the OCI spec (and oci-spec 0.10) can name, in kernel bit order
/// (`CAP_CHOWN` is bit 0, `CAP_CHECKPOINT_RESTORE` bit 40).
pub const ALL_CAPABILITIES: &[&str] = peapod_host::capability::NAMES;

/// The capabilities an unprivileged container gets when the CRI config asks for nothing:
/// the set Docker and containerd 1.x have always granted (CRI-O and containerd 2.x main
/// have discussed trimming it; Kubernetes workloads, e.g. `ping`, still expect it).
pub const DEFAULT_CAPABILITIES: &[&str] = &[
    "CAP_CHOWN",
    "CAP_DAC_OVERRIDE",
    "CAP_FSETID",
    "CAP_FOWNER",
    "CAP_MKNOD",
    "CAP_NET_RAW",
    "CAP_SETGID",
    "CAP_SETUID",
    "CAP_SETFCAP",
    "CAP_SETPCAP",
    "CAP_NET_BIND_SERVICE",
    "CAP_SYS_CHROOT",
    "CAP_KILL",
    "CAP_AUDIT_WRITE",
];

/// The canonical `CAP_*` spelling of a capability name as the kubelet or a user passes it:
/// case-insensitive, with or without the `CAP_` prefix. `None` for a name no kernel has.
pub fn canonical_capability(name: &str) -> Option<&'static str> {
    let upper = name.trim().to_ascii_uppercase();
    let bare = upper.strip_prefix("CAP_").unwrap_or(&upper);
    ALL_CAPABILITIES
        .iter()
        .copied()
        .find(|c| c.strip_prefix("CAP_") == Some(bare))
}

/// The capability names for the bits set in a `/proc/<pid>/status` mask such as `CapBnd`.
/// Bits beyond the last capability the OCI spec knows are ignored.
pub fn capabilities_from_mask(mask: u64) -> Vec<String> {
    ALL_CAPABILITIES
        .iter()
        .enumerate()
        .filter(|(bit, _)| mask & (1u64 << bit) != 0)
        .map(|(_, c)| c.to_string())
        .collect()
}

/// The five capability sets of a process, ordered and without duplicates.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct CapSets {
    pub bounding: Vec<String>,
    pub effective: Vec<String>,
    pub permitted: Vec<String>,
    pub inheritable: Vec<String>,
    pub ambient: Vec<String>,
}

impl CapSets {
    fn uniform(caps: &[String]) -> Self {
        CapSets {
            bounding: caps.to_vec(),
            effective: caps.to_vec(),
            permitted: caps.to_vec(),
            inheritable: Vec::new(),
            ambient: Vec::new(),
        }
    }

    fn add(&mut self, cap: &str) {
        for set in [&mut self.bounding, &mut self.effective, &mut self.permitted] {
            push_unique(set, cap.to_string());
        }
    }

    fn add_ambient(&mut self, cap: &str) {
        self.add(cap);
        push_unique(&mut self.inheritable, cap.to_string());
        push_unique(&mut self.ambient, cap.to_string());
    }

    fn drop_cap(&mut self, cap: &str) {
        for set in [
            &mut self.bounding,
            &mut self.effective,
            &mut self.permitted,
            &mut self.inheritable,
            &mut self.ambient,
        ] {
            set.retain(|c| c != cap);
        }
    }
}

/// What "all capabilities" means on this host: the daemon's bounding set (runc refuses to
/// grant more, "unable to apply caps"); every known capability when the daemon did not say.
pub(crate) fn host_capabilities(bounding: &[String]) -> Vec<String> {
    if bounding.is_empty() {
        return ALL_CAPABILITIES.iter().map(|c| c.to_string()).collect();
    }
    let mut caps = Vec::new();
    for c in bounding {
        if let Some(c) = canonical_capability(c) {
            push_unique(&mut caps, c.to_string());
        }
    }
    caps
}

const FIELD: &str = "config.linux.security_context.capabilities";

fn is_all(name: &str) -> bool {
    name.trim().eq_ignore_ascii_case("ALL")
}

fn named(field: &str, name: &str, host: &[String], check_host: bool) -> Result<&'static str> {
    let cap = canonical_capability(name).ok_or_else(|| {
        SpecError::invalid(format!("{FIELD}.{field}: unknown capability {name:?}"))
    })?;
    if check_host && !host.iter().any(|h| h == cap) {
        return Err(SpecError::invalid(format!(
            "{FIELD}.{field}: capability {cap} is not in the runtime's bounding set, so it cannot be granted"
        )));
    }
    Ok(cap)
}

/// The process capabilities of a container, containerd's way:
/// privileged → everything in the host's bounding set (the config's lists are ignored);
/// otherwise the default set, replaced by all host capabilities when `add` holds "ALL" and
/// emptied when `drop` holds "ALL", then the individual adds, the ambient adds (which go to
/// every set, as the CRI says), and last the individual drops (from every set).
pub(crate) fn capabilities(
    config: Option<&Capability>,
    privileged: bool,
    host_bounding: &[String],
) -> Result<CapSets> {
    let host = host_capabilities(host_bounding);
    if privileged {
        return Ok(CapSets::uniform(&host));
    }
    // Only refuse a capability as "not grantable" when the daemon told us its bounding set.
    let check_host = !host_bounding.is_empty();
    let defaults: Vec<String> = DEFAULT_CAPABILITIES
        .iter()
        .filter(|c| !check_host || host.iter().any(|h| h == *c))
        .map(|c| c.to_string())
        .collect();
    let Some(config) = config else {
        return Ok(CapSets::uniform(&defaults));
    };
    let mut sets = CapSets::uniform(&defaults);
    if config.add_capabilities.iter().any(|c| is_all(c)) {
        sets = CapSets::uniform(&host);
    }
    if config.drop_capabilities.iter().any(|c| is_all(c)) {
        sets = CapSets::default();
    }
    for name in config.add_capabilities.iter().filter(|c| !is_all(c)) {
        sets.add(named("add_capabilities", name, &host, check_host)?);
    }
    for name in config.add_ambient_capabilities.iter() {
        if is_all(name) {
            for cap in &host {
                sets.add_ambient(cap);
            }
            continue;
        }
        sets.add_ambient(named("add_ambient_capabilities", name, &host, check_host)?);
    }
    for name in config.drop_capabilities.iter().filter(|c| !is_all(c)) {
        // Dropping what the host lacks anyway is harmless: no host check.
        sets.drop_cap(named("drop_capabilities", name, &host, false)?);
    }
    Ok(sets)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caps(add: &[&str], drop: &[&str]) -> Capability {
        Capability {
            add_capabilities: add.iter().map(|s| s.to_string()).collect(),
            drop_capabilities: drop.iter().map(|s| s.to_string()).collect(),
            add_ambient_capabilities: Vec::new(),
        }
    }

    fn sorted(v: &[String]) -> Vec<String> {
        let mut v = v.to_vec();
        v.sort();
        v
    }

    fn strs(v: &[&str]) -> Vec<String> {
        let mut v: Vec<String> = v.iter().map(|s| s.to_string()).collect();
        v.sort();
        v
    }

    /// This machine's bounding set: everything but CAP_SYS_RESOURCE.
    fn host() -> Vec<String> {
        capabilities_from_mask(0x1fffeffffff)
    }

    #[test]
    fn canonical_names() {
        assert_eq!(canonical_capability("NET_ADMIN"), Some("CAP_NET_ADMIN"));
        assert_eq!(canonical_capability("cap_net_admin"), Some("CAP_NET_ADMIN"));
        assert_eq!(canonical_capability("Sys_Time"), Some("CAP_SYS_TIME"));
        assert_eq!(canonical_capability("CAP_BPF"), Some("CAP_BPF"));
        assert_eq!(canonical_capability("NOT_A_CAP"), None);
        assert_eq!(canonical_capability("CAP_"), None);
    }

    #[test]
    fn mask_decoding() {
        let h = host();
        assert_eq!(h.len(), 40);
        assert!(!h.contains(&"CAP_SYS_RESOURCE".to_string()));
        assert!(h.contains(&"CAP_CHECKPOINT_RESTORE".to_string()));
        assert_eq!(
            capabilities_from_mask(0b101),
            strs(&["CAP_CHOWN", "CAP_DAC_READ_SEARCH"])
        );
    }

    #[test]
    fn defaults_when_nothing_asked() {
        let s = capabilities(None, false, &host()).unwrap();
        assert_eq!(sorted(&s.bounding), strs(DEFAULT_CAPABILITIES));
        assert_eq!(s.bounding, s.effective);
        assert_eq!(s.bounding, s.permitted);
        assert!(s.inheritable.is_empty() && s.ambient.is_empty());
        let s = capabilities(Some(&caps(&[], &[])), false, &[]).unwrap();
        assert_eq!(sorted(&s.permitted), strs(DEFAULT_CAPABILITIES));
    }

    #[test]
    fn add_and_drop_individual() {
        let s = capabilities(
            Some(&caps(
                &["NET_ADMIN", "cap_sys_time"],
                &["CHOWN", "CAP_KILL"],
            )),
            false,
            &host(),
        )
        .unwrap();
        assert!(s.bounding.contains(&"CAP_NET_ADMIN".into()));
        assert!(s.effective.contains(&"CAP_SYS_TIME".into()));
        assert!(!s.permitted.contains(&"CAP_CHOWN".into()));
        assert!(!s.bounding.contains(&"CAP_KILL".into()));
        assert_eq!(s.bounding.len(), DEFAULT_CAPABILITIES.len());
    }

    #[test]
    fn add_all_then_drop_one() {
        let s = capabilities(Some(&caps(&["ALL"], &["CHOWN"])), false, &host()).unwrap();
        assert_eq!(s.bounding.len(), 39);
        assert!(!s.bounding.contains(&"CAP_CHOWN".into()));
        assert!(!s.bounding.contains(&"CAP_SYS_RESOURCE".into()));
        assert!(s.bounding.contains(&"CAP_SYS_ADMIN".into()));
    }

    #[test]
    fn drop_all_then_add_one() {
        let s = capabilities(Some(&caps(&["NET_BIND_SERVICE"], &["all"])), false, &host()).unwrap();
        assert_eq!(s.bounding, vec!["CAP_NET_BIND_SERVICE".to_string()]);
        assert_eq!(s.effective, s.bounding);
        assert_eq!(s.permitted, s.bounding);
        let s = capabilities(Some(&caps(&[], &["ALL"])), false, &host()).unwrap();
        assert_eq!(s, CapSets::default());
    }

    #[test]
    fn ambient_goes_everywhere_and_drops_win() {
        let mut c = caps(&[], &["ALL"]);
        c.add_ambient_capabilities = vec!["NET_RAW".into(), "KILL".into()];
        c.drop_capabilities.push("KILL".into());
        let s = capabilities(Some(&c), false, &host()).unwrap();
        for set in [
            &s.bounding,
            &s.effective,
            &s.permitted,
            &s.inheritable,
            &s.ambient,
        ] {
            assert_eq!(set, &vec!["CAP_NET_RAW".to_string()]);
        }
    }

    #[test]
    fn privileged_is_the_host_bounding_set_and_ignores_lists() {
        let s = capabilities(Some(&caps(&[], &["ALL"])), true, &host()).unwrap();
        assert_eq!(sorted(&s.bounding), sorted(&host()));
        assert_eq!(s.effective, s.bounding);
        assert!(s.ambient.is_empty());
        let s = capabilities(None, true, &[]).unwrap();
        assert_eq!(s.bounding.len(), ALL_CAPABILITIES.len());
    }

    #[test]
    fn unknown_names_are_invalid_arguments_naming_the_field() {
        let e = capabilities(Some(&caps(&["FLY"], &[])), false, &host()).unwrap_err();
        assert!(
            matches!(&e, SpecError::InvalidArgument(m)
            if m.contains("add_capabilities") && m.contains("FLY")),
            "{e}"
        );
        let e = capabilities(Some(&caps(&[], &["WALK"])), false, &host()).unwrap_err();
        assert!(matches!(&e, SpecError::InvalidArgument(m) if m.contains("drop_capabilities")));
        let mut c = caps(&[], &[]);
        c.add_ambient_capabilities = vec!["SWIM".into()];
        let e = capabilities(Some(&c), false, &host()).unwrap_err();
        assert!(matches!(&e, SpecError::InvalidArgument(m) if m.contains("add_ambient")));
    }

    #[test]
    fn capabilities_outside_the_host_bounding_set_are_refused() {
        let e = capabilities(Some(&caps(&["SYS_RESOURCE"], &[])), false, &host()).unwrap_err();
        assert!(matches!(&e, SpecError::InvalidArgument(m) if m.contains("CAP_SYS_RESOURCE")));
        // Dropping it is fine, and without host facts nothing is refused.
        capabilities(Some(&caps(&[], &["SYS_RESOURCE"])), false, &host()).unwrap();
        capabilities(Some(&caps(&["SYS_RESOURCE"], &[])), false, &[]).unwrap();
    }

    #[test]
    fn defaults_are_trimmed_to_the_host() {
        let host = vec!["CAP_CHOWN".to_string(), "CAP_KILL".to_string()];
        let s = capabilities(None, false, &host).unwrap();
        assert_eq!(sorted(&s.bounding), strs(&["CAP_CHOWN", "CAP_KILL"]));
    }
}
