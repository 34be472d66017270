//! AppArmor, SELinux, and the masked and read-only paths.

use crate::error::{Result, SpecError};
use crate::host::{HostFacts, HostPaths, DEFAULT_APPARMOR_PROFILE};
use peapod_proto::v1::{
    security_profile::ProfileType, LinuxContainerSecurityContext, SeLinuxOption,
};

/// Paths an unprivileged container cannot see (containerd's, and the kubelet's, defaults).
pub const DEFAULT_MASKED_PATHS: &[&str] = &[
    "/proc/acpi",
    "/proc/asound",
    "/proc/kcore",
    "/proc/keys",
    "/proc/latency_stats",
    "/proc/timer_list",
    "/proc/timer_stats",
    "/proc/sched_debug",
    "/proc/scsi",
    "/sys/firmware",
    "/sys/devices/virtual/powercap",
];

/// Paths an unprivileged container sees read-only (containerd's, and the kubelet's, defaults).
pub const DEFAULT_READONLY_PATHS: &[&str] = &[
    "/proc/bus",
    "/proc/fs",
    "/proc/irq",
    "/proc/sys",
    "/proc/sysrq-trigger",
];

/// `(maskedPaths, readonlyPaths)`: none when privileged; otherwise the config's lists as
/// given, an empty one meaning none.
///
/// The kubelet always sends both lists: its defaults (the same as [`DEFAULT_MASKED_PATHS`]
/// and [`DEFAULT_READONLY_PATHS`]), or two empty lists for `procMount: Unmasked` (an
/// unmasked /proc, for a user-namespaced pod that runs containers itself). proto3 cannot tell
/// an empty list from one not sent (crictl, critest), so "empty" must mean "none" for
/// Unmasked to work: containerd and CRI-O read it so, and so does peapod (its own `apply`
/// sends the kubelet's lists).
pub(crate) fn masked_and_readonly(
    sc: &LinuxContainerSecurityContext,
) -> Option<(Vec<String>, Vec<String>)> {
    if sc.privileged {
        return None;
    }
    Some((sc.masked_paths.clone(), sc.readonly_paths.clone()))
}

const APPARMOR_FIELD: &str = "config.linux.security_context.apparmor";

/// The AppArmor profile of the process, containerd's way:
///
/// * typed `apparmor` field, else the deprecated `apparmor_profile` string
///   ("runtime/default", "unconfined", "localhost/<name>"); neither: RuntimeDefault;
/// * on a host without AppArmor, no profile; asking for a Localhost one is an error;
/// * RuntimeDefault is [`DEFAULT_APPARMOR_PROFILE`], none for a privileged container;
///   Unconfined is none; Localhost is the named profile (privileged or not), which must be
///   loaded: a create naming one that is not fails here, with the field, rather than in the
///   runtime's init.
pub(crate) fn apparmor_profile(
    sc: &LinuxContainerSecurityContext,
    host: &HostFacts,
    paths: &dyn HostPaths,
) -> Result<Option<String>> {
    #[allow(deprecated)]
    let deprecated = sc.apparmor_profile.as_str();
    let (kind, name) = match &sc.apparmor {
        Some(p) => {
            let kind = ProfileType::try_from(p.profile_type).map_err(|_| {
                SpecError::invalid(format!(
                    "{APPARMOR_FIELD}.profile_type: unknown type {}",
                    p.profile_type
                ))
            })?;
            if kind != ProfileType::Localhost && !p.localhost_ref.is_empty() {
                return Err(SpecError::invalid(format!(
                    "{APPARMOR_FIELD}.localhost_ref must only be set when profile_type is Localhost"
                )));
            }
            (
                kind,
                p.localhost_ref.trim_start_matches("localhost/").to_string(),
            )
        }
        None => match deprecated {
            "" | "runtime/default" => (ProfileType::RuntimeDefault, String::new()),
            "unconfined" => (ProfileType::Unconfined, String::new()),
            other => match other.strip_prefix("localhost/") {
                Some(name) => (ProfileType::Localhost, name.to_string()),
                None => {
                    return Err(SpecError::invalid(format!(
                        "config.linux.security_context.apparmor_profile: invalid profile {other:?}"
                    )))
                }
            },
        },
    };
    if kind == ProfileType::Localhost && name.is_empty() {
        return Err(SpecError::invalid(format!(
            "{APPARMOR_FIELD}.localhost_ref is empty"
        )));
    }
    if !host.apparmor_enabled {
        if kind == ProfileType::Localhost {
            return Err(SpecError::invalid(format!(
                "{APPARMOR_FIELD}: profile {name:?} requested but AppArmor is not enabled on this host"
            )));
        }
        return Ok(None);
    }
    Ok(match kind {
        ProfileType::Unconfined => None,
        ProfileType::RuntimeDefault if sc.privileged => None,
        ProfileType::RuntimeDefault => Some(DEFAULT_APPARMOR_PROFILE.to_string()),
        ProfileType::Localhost => {
            let loaded = paths.apparmor_profile_loaded(&name).map_err(|e| {
                SpecError::invalid(format!(
                    "{APPARMOR_FIELD}: cannot tell whether profile {name:?} is loaded: {e}"
                ))
            })?;
            if !loaded {
                return Err(SpecError::invalid(format!(
                    "{APPARMOR_FIELD}: profile {name:?} is not loaded (load it with apparmor_parser first)"
                )));
            }
            Some(name)
        }
    })
}

fn has_any(o: &SeLinuxOption) -> bool {
    !(o.user.is_empty() && o.role.is_empty() && o.r#type.is_empty() && o.level.is_empty())
}

/// `(process label, mount label)` from the container's SELinux options, else the pod's.
/// Only when SELinux is enabled and options were given (without options a runtime would
/// allocate a unique MCS level, which needs the host's SELinux configuration; peapod does
/// not). Unset parts default to `system_u`, `system_r`/`object_r`, `container_t`/
/// `container_file_t` and `s0`. A privileged container gets no process label.
pub(crate) fn selinux_labels(
    container: Option<&SeLinuxOption>,
    pod: Option<&SeLinuxOption>,
    privileged: bool,
    host: &HostFacts,
) -> (Option<String>, Option<String>) {
    if !host.selinux_enabled {
        return (None, None);
    }
    let Some(o) = container
        .filter(|o| has_any(o))
        .or(pod.filter(|o| has_any(o)))
    else {
        return (None, None);
    };
    let or = |v: &str, d: &str| {
        if v.is_empty() {
            d.to_string()
        } else {
            v.to_string()
        }
    };
    let user = or(&o.user, "system_u");
    let level = or(&o.level, "s0");
    let process = format!(
        "{user}:{}:{}:{level}",
        or(&o.role, "system_r"),
        or(&o.r#type, "container_t")
    );
    let mount = format!("{user}:object_r:container_file_t:{level}");
    ((!privileged).then_some(process), Some(mount))
}

#[cfg(test)]
mod tests {
    use super::*;
    use peapod_proto::v1::SecurityProfile;

    fn aa(t: ProfileType, r: &str) -> Option<SecurityProfile> {
        Some(SecurityProfile {
            profile_type: t as i32,
            localhost_ref: r.into(),
        })
    }

    /// A host whose kernel has exactly these AppArmor profiles loaded.
    struct Loaded(&'static [&'static str]);

    impl HostPaths for Loaded {
        fn mount_source(&self, p: &std::path::Path) -> std::io::Result<std::path::PathBuf> {
            Ok(p.to_path_buf())
        }
        fn propagation(&self, _: &std::path::Path) -> std::io::Result<crate::HostPropagation> {
            Ok(crate::HostPropagation::Private)
        }
        fn devices(&self, _: &std::path::Path) -> std::io::Result<Vec<crate::HostDevice>> {
            Ok(Vec::new())
        }
        fn apparmor_profile_loaded(&self, name: &str) -> std::io::Result<bool> {
            Ok(self.0.contains(&name))
        }
    }

    #[test]
    fn apparmor_choices() {
        let on = HostFacts {
            apparmor_enabled: true,
            ..Default::default()
        };
        let off = HostFacts::default();
        let sc = |p: Option<SecurityProfile>, privileged: bool| LinuxContainerSecurityContext {
            apparmor: p,
            privileged,
            ..Default::default()
        };
        let loaded = Loaded(&["my-prof", "p"]);
        let def = Some(DEFAULT_APPARMOR_PROFILE.to_string());
        assert_eq!(
            apparmor_profile(&sc(None, false), &on, &loaded).unwrap(),
            def
        );
        assert_eq!(
            apparmor_profile(&sc(None, false), &off, &loaded).unwrap(),
            None
        );
        assert_eq!(
            apparmor_profile(
                &sc(aa(ProfileType::RuntimeDefault, ""), false),
                &on,
                &loaded
            )
            .unwrap(),
            def
        );
        assert_eq!(
            apparmor_profile(&sc(aa(ProfileType::RuntimeDefault, ""), true), &on, &loaded).unwrap(),
            None
        );
        assert_eq!(
            apparmor_profile(
                &sc(aa(ProfileType::RuntimeDefault, ""), false),
                &off,
                &loaded
            )
            .unwrap(),
            None
        );
        assert_eq!(
            apparmor_profile(&sc(aa(ProfileType::Unconfined, ""), false), &on, &loaded).unwrap(),
            None
        );
        assert_eq!(
            apparmor_profile(
                &sc(aa(ProfileType::Localhost, "localhost/my-prof"), true),
                &on,
                &loaded
            )
            .unwrap(),
            Some("my-prof".into())
        );
        assert!(apparmor_profile(
            &sc(aa(ProfileType::Localhost, "my-prof"), false),
            &off,
            &loaded
        )
        .is_err());
        assert!(
            apparmor_profile(&sc(aa(ProfileType::Unconfined, "x"), false), &on, &loaded).is_err()
        );
        #[allow(deprecated)]
        let old = |s: &str| LinuxContainerSecurityContext {
            apparmor_profile: s.into(),
            ..Default::default()
        };
        assert_eq!(
            apparmor_profile(&old("unconfined"), &on, &loaded).unwrap(),
            None
        );
        assert_eq!(
            apparmor_profile(&old("localhost/p"), &on, &loaded).unwrap(),
            Some("p".into())
        );
        assert_eq!(
            apparmor_profile(&old("runtime/default"), &on, &loaded).unwrap(),
            def
        );
        assert!(apparmor_profile(&old("bogus"), &on, &loaded).is_err());
        // A Localhost profile that is not loaded is refused at create, naming the field.
        let err = apparmor_profile(&old("localhost/gone"), &on, &loaded).unwrap_err();
        assert!(
            err.to_string()
                .contains("apparmor: profile \"gone\" is not loaded"),
            "{err}"
        );
        assert!(
            apparmor_profile(&sc(aa(ProfileType::Localhost, "gone"), true), &on, &loaded).is_err()
        );
    }

    #[test]
    fn selinux() {
        let on = HostFacts {
            selinux_enabled: true,
            ..Default::default()
        };
        let opts = SeLinuxOption {
            level: "s0:c1,c2".into(),
            ..Default::default()
        };
        let pod = SeLinuxOption {
            r#type: "spc_t".into(),
            ..Default::default()
        };
        assert_eq!(
            selinux_labels(Some(&opts), Some(&pod), false, &on),
            (
                Some("system_u:system_r:container_t:s0:c1,c2".into()),
                Some("system_u:object_r:container_file_t:s0:c1,c2".into())
            )
        );
        assert_eq!(
            selinux_labels(None, Some(&pod), false, &on).0,
            Some("system_u:system_r:spc_t:s0".into())
        );
        assert_eq!(selinux_labels(Some(&opts), None, true, &on).0, None);
        assert_eq!(
            selinux_labels(Some(&opts), None, false, &HostFacts::default()),
            (None, None)
        );
        assert_eq!(selinux_labels(None, None, false, &on), (None, None));
    }

    #[test]
    fn masked_paths() {
        let mut sc = LinuxContainerSecurityContext::default();
        let (m, r) = masked_and_readonly(&sc).unwrap();
        assert!(
            m.is_empty() && r.is_empty(),
            "empty lists are none (Unmasked)"
        );
        sc.masked_paths = vec!["/proc/x".into()];
        let (m, r) = masked_and_readonly(&sc).unwrap();
        assert_eq!(m, vec!["/proc/x".to_string()]);
        assert!(r.is_empty());
        sc.privileged = true;
        assert!(masked_and_readonly(&sc).is_none());
    }
}
