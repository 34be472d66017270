//! Security: privileged or not, seccomp, AppArmor, capabilities, no_new_privs and masked paths.

use super::*;

#[test]
fn unprivileged_versus_privileged() {
    let mut f = Fixture::new();
    f.sc().seccomp = Some(SecurityProfile {
        profile_type: ProfileType::RuntimeDefault as i32,
        localhost_ref: String::new(),
    });
    f.sc().capabilities = Some(Capability {
        drop_capabilities: vec!["ALL".into()],
        ..Default::default()
    });
    let s = f.json();
    assert!(s["linux"]["seccomp"].is_object());
    assert!(s["linux"].get("maskedPaths").is_some());
    assert_eq!(
        strs(&s["process"]["capabilities"]["bounding"]),
        Vec::<String>::new()
    );

    f.sc().privileged = true;
    assert!(
        f.err().contains("not privileged"),
        "a privileged container needs a privileged pod"
    );
    f.sandbox_sc().privileged = true;
    let s = f.json();
    assert!(
        s["linux"].get("seccomp").is_none(),
        "no seccomp when privileged"
    );
    assert!(s["linux"].get("maskedPaths").is_none());
    assert!(s["linux"].get("readonlyPaths").is_none());
    assert_eq!(
        strs(&mount_at(&s, "/sys").unwrap()["options"]),
        vec!["nosuid", "noexec", "nodev", "rw"]
    );
    assert!(strs(&mount_at(&s, "/sys/fs/cgroup").unwrap()["options"]).contains(&"rw".to_string()));
    let caps = sorted(strs(&s["process"]["capabilities"]["bounding"]));
    assert_eq!(
        caps,
        sorted(f.host.bounding_caps.clone()),
        "the host's bounding set, not ALL"
    );
    assert!(!caps.contains(&"CAP_SYS_RESOURCE".to_string()));
    assert_eq!(
        s["linux"]["resources"]["devices"],
        json!([{"allow": true, "access": "rwm"}])
    );
    let devices: Vec<&str> = s["linux"]["devices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["path"].as_str().unwrap())
        .collect();
    assert_eq!(devices, vec!["/dev/null", "/dev/sda"]);
    assert_eq!(s["linux"]["devices"][1]["type"], "b");
}

#[test]
fn seccomp_runtime_default_in_the_spec() {
    let mut f = Fixture::new();
    f.sc().seccomp = Some(SecurityProfile {
        profile_type: ProfileType::RuntimeDefault as i32,
        localhost_ref: String::new(),
    });
    let s = f.json();
    let sc = &s["linux"]["seccomp"];
    assert_eq!(sc["defaultAction"], "SCMP_ACT_ERRNO");
    let allows = |name: &str| {
        sc["syscalls"].as_array().unwrap().iter().any(|r| {
            r["action"] == "SCMP_ACT_ALLOW"
                && r.get("args").is_none()
                && r["names"].as_array().unwrap().iter().any(|n| n == name)
        })
    };
    assert!(!allows("unshare") && !allows("mount") && !allows("reboot"));
    assert!(allows("chroot"), "CAP_SYS_CHROOT is a default capability");
    f.sc().capabilities = Some(Capability {
        add_capabilities: vec!["SYS_ADMIN".into()],
        ..Default::default()
    });
    let s = f.json();
    let unlocked = s["linux"]["seccomp"]["syscalls"]
        .as_array()
        .unwrap()
        .iter()
        .any(|r| {
            r["names"]
                .as_array()
                .unwrap()
                .iter()
                .any(|n| n == "unshare")
        });
    assert!(unlocked, "CAP_SYS_ADMIN unlocks unshare");

    // The deprecated path form.
    f.sc().seccomp = None;
    #[allow(deprecated)]
    {
        f.sc().seccomp_profile_path = "runtime/default".into();
    }
    assert!(f.json()["linux"]["seccomp"].is_object());
    // A host without seccomp cannot honour it.
    f.host.seccomp_enabled = false;
    assert!(f.err().contains("seccomp"));
}

#[test]
fn seccomp_localhost_profile_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("deny-mkdir.json");
    std::fs::write(
        &path,
        r#"{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{"names":["mkdir","mkdirat"],"action":"SCMP_ACT_ERRNO"}]}"#,
    )
    .unwrap();
    let mut f = Fixture::new();
    f.sc().seccomp = Some(SecurityProfile {
        profile_type: ProfileType::Localhost as i32,
        localhost_ref: path.display().to_string(),
    });
    let s = f.json();
    assert_eq!(s["linux"]["seccomp"]["defaultAction"], "SCMP_ACT_ALLOW");
    assert_eq!(
        s["linux"]["seccomp"]["syscalls"][0]["names"],
        json!(["mkdir", "mkdirat"])
    );
    f.sc().seccomp = Some(SecurityProfile {
        profile_type: ProfileType::Localhost as i32,
        localhost_ref: dir.path().join("nope.json").display().to_string(),
    });
    assert!(f.err().contains("nope.json"));
}

#[test]
fn apparmor_in_the_spec() {
    let mut f = Fixture::new();
    f.host.apparmor_enabled = true;
    assert_eq!(
        f.json()["process"]["apparmorProfile"],
        DEFAULT_APPARMOR_PROFILE
    );
    f.sc().apparmor = Some(SecurityProfile {
        profile_type: ProfileType::Unconfined as i32,
        localhost_ref: String::new(),
    });
    assert!(f.json()["process"].get("apparmorProfile").is_none());
    f.sc().apparmor = Some(SecurityProfile {
        profile_type: ProfileType::Localhost as i32,
        localhost_ref: "k8s-nginx".into(),
    });
    assert_eq!(f.json()["process"]["apparmorProfile"], "k8s-nginx");
    f.host.apparmor_enabled = false;
    assert!(f.err().contains("AppArmor is not enabled"));
}

#[test]
fn capability_errors_surface() {
    let mut f = Fixture::new();
    f.sc().capabilities = Some(Capability {
        add_capabilities: vec!["CAP_TELEPORT".into()],
        ..Default::default()
    });
    let e = f.err();
    assert!(
        e.contains("config.linux.security_context.capabilities.add_capabilities")
            && e.contains("CAP_TELEPORT"),
        "{e}"
    );
}

#[test]
fn no_new_privs_and_masked_overrides() {
    let mut f = Fixture::new();
    f.sc().no_new_privs = true;
    f.sc().masked_paths = vec!["/proc/kcore".into()];
    f.sc().readonly_paths = vec!["/proc/sys".into(), "/proc/bus".into()];
    let s = f.json();
    assert_eq!(s["process"]["noNewPrivileges"], true);
    assert_eq!(s["linux"]["maskedPaths"], json!(["/proc/kcore"]));
    assert_eq!(
        s["linux"]["readonlyPaths"],
        json!(["/proc/sys", "/proc/bus"])
    );
}

#[test]
fn empty_masked_and_readonly_lists_mean_none() {
    // procMount: Unmasked, as the kubelet sends it: both lists empty.
    let mut f = Fixture::new();
    let s = f.json();
    let linux = &s["linux"];
    for key in ["maskedPaths", "readonlyPaths"] {
        assert!(
            linux.get(key).is_none_or(|v| v == &json!([])),
            "{key}: {linux}"
        );
    }
    // The kubelet's defaults, sent as the kubelet sends them, are applied as given.
    f.sc().masked_paths = peapod_spec_defaults(crate::DEFAULT_MASKED_PATHS);
    f.sc().readonly_paths = peapod_spec_defaults(crate::DEFAULT_READONLY_PATHS);
    let s = f.json();
    assert_eq!(
        s["linux"]["maskedPaths"],
        json!(crate::DEFAULT_MASKED_PATHS)
    );
}

fn peapod_spec_defaults(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}
