//! Mounts: the defaults, the pod's files, CRI mounts with their options, propagation and relabelling.

use super::*;

#[test]
fn default_mounts_and_pod_files() {
    let f = Fixture::new();
    let s = f.json();
    assert_eq!(
        destinations(&s),
        vec![
            "/proc",
            "/dev",
            "/dev/pts",
            "/dev/mqueue",
            "/sys",
            "/sys/fs/cgroup",
            "/etc/hostname",
            "/etc/hosts",
            "/etc/resolv.conf",
            "/dev/shm",
        ]
    );
    assert_eq!(
        strs(&mount_at(&s, "/sys").unwrap()["options"]),
        vec!["nosuid", "noexec", "nodev", "ro"]
    );
    assert!(strs(&mount_at(&s, "/sys/fs/cgroup").unwrap()["options"]).contains(&"ro".to_string()));
    assert_eq!(
        mount_at(&s, "/etc/hosts").unwrap(),
        &json!({"destination": "/etc/hosts", "type": "bind",
                "source": "/run/peapod/sandboxes/sb1/hosts", "options": ["rbind", "rprivate", "rw"]})
    );
    assert_eq!(
        mount_at(&s, "/etc/resolv.conf").unwrap()["source"],
        "/run/peapod/sandboxes/sb1/resolv.conf"
    );
    assert_eq!(
        mount_at(&s, "/etc/hostname").unwrap()["source"],
        "/run/peapod/sandboxes/sb1/hostname"
    );
    assert_eq!(
        mount_at(&s, "/dev/shm").unwrap(),
        &json!({"destination": "/dev/shm", "type": "bind",
                "source": "/run/peapod/sandboxes/sb1/shm", "options": ["rbind", "rprivate", "rw"]})
    );
    assert!(mount_at(&s, "/run").is_none());
}

#[test]
fn pod_files_follow_a_readonly_rootfs() {
    let mut f = Fixture::new();
    f.sc().readonly_rootfs = true;
    let s = f.json();
    assert_eq!(s["root"]["readonly"], true);
    for dest in ["/etc/hosts", "/etc/resolv.conf", "/etc/hostname"] {
        assert_eq!(
            strs(&mount_at(&s, dest).unwrap()["options"])
                .last()
                .unwrap(),
            "ro",
            "{dest}"
        );
    }
    assert_eq!(
        strs(&mount_at(&s, "/dev/shm").unwrap()["options"])
            .last()
            .unwrap(),
        "rw"
    );
}

#[test]
fn no_pod_shm_keeps_a_private_tmpfs() {
    let mut f = Fixture::new();
    f.shm = None;
    let s = f.json();
    let shm = mount_at(&s, "/dev/shm").unwrap();
    assert_eq!(shm["type"], "tmpfs");
    assert_eq!(shm["source"], "shm");
}

#[test]
fn cri_mounts_sorted_and_overriding() {
    let mut f = Fixture::new();
    let mut ro = cri_mount("/data/cache/deep", "/srv/cache");
    ro.readonly = true;
    f.config.mounts = vec![
        ro,
        cri_mount("/etc/hosts", "/var/lib/kubelet/pods/p/etc-hosts"),
        cri_mount("/data", "/srv/data"),
        cri_mount("/var/log/app/", "/srv/logs"),
    ];
    f.paths
        .resolved
        .insert("/srv/data".into(), "/mnt/real-data".into());
    let s = f.json();
    let d = destinations(&s);
    let tail: Vec<&str> = d[6..].iter().map(|s| s.as_str()).collect();
    assert_eq!(
        tail,
        vec![
            "/data",
            "/etc/hosts",
            "/etc/hostname",
            "/etc/resolv.conf",
            "/dev/shm",
            "/data/cache/deep",
            "/var/log/app",
        ],
        "parents before children; equal depths keep the CRI order, CRI before the pod's files"
    );
    assert_eq!(d.iter().filter(|x| *x == "/etc/hosts").count(), 1);
    assert_eq!(
        mount_at(&s, "/etc/hosts").unwrap()["source"],
        "/var/lib/kubelet/pods/p/etc-hosts"
    );
    assert_eq!(
        mount_at(&s, "/data").unwrap()["source"],
        "/mnt/real-data",
        "symlink resolved"
    );
    assert_eq!(
        strs(&mount_at(&s, "/data/cache/deep").unwrap()["options"]),
        vec!["rbind", "rprivate", "ro"]
    );
    assert_eq!(
        strs(&mount_at(&s, "/data").unwrap()["options"]),
        vec!["rbind", "rprivate", "rw"]
    );
}

#[test]
fn a_supplied_dev_replaces_everything_under_dev() {
    let mut f = Fixture::new();
    f.config.mounts = vec![cri_mount("/dev", "/dev")];
    f.config.tty = true;
    f.paths
        .devices
        .insert("/dev/console".into(), vec![dev("/dev/console", 'c', 5, 1)]);
    let s = f.json();
    let d = destinations(&s);
    assert!(!d.contains(&"/dev/pts".to_string()));
    assert!(!d.contains(&"/dev/mqueue".to_string()));
    assert_eq!(
        d.iter().filter(|x| x.starts_with("/dev")).count(),
        2,
        "{d:?}"
    );
    assert_eq!(mount_at(&s, "/dev").unwrap()["type"], "bind");
    // tty with the host's /dev: the console device is added, as containerd does.
    assert_eq!(s["linux"]["devices"][0]["path"], "/dev/console");
}

#[test]
fn recursive_read_only() {
    let mut f = Fixture::new();
    let mut m = cri_mount("/ro", "/srv/ro");
    m.readonly = true;
    m.recursive_read_only = true;
    f.config.mounts = vec![m.clone()];
    let e = f.err();
    assert!(
        e.contains("config.mounts[0].recursive_read_only") && e.contains("not supported"),
        "{e}"
    );
    f.host.rro_supported = true;
    assert_eq!(
        strs(&mount_at(&f.json(), "/ro").unwrap()["options"]),
        vec!["rbind", "rprivate", "rro"]
    );

    let mut rw = m.clone();
    rw.readonly = false;
    f.config.mounts = vec![rw];
    assert!(f.err().contains("requires readonly"));

    let mut slave = m.clone();
    slave.propagation = MountPropagation::PropagationHostToContainer as i32;
    f.config.mounts = vec![slave];
    assert!(f.err().contains("PROPAGATION_PRIVATE"));
}

#[test]
fn propagation() {
    let mut f = Fixture::new();
    let mut slave = cri_mount("/in", "/srv/in");
    slave.propagation = MountPropagation::PropagationHostToContainer as i32;
    f.config.mounts = vec![slave.clone()];
    let e = f.err();
    assert!(e.contains("shared or slave"), "{e}");
    f.paths
        .propagation
        .insert("/srv/in".into(), HostPropagation::Slave);
    let s = f.json();
    assert_eq!(
        strs(&mount_at(&s, "/in").unwrap()["options"]),
        vec!["rbind", "rslave", "rw"]
    );
    assert_eq!(s["linux"]["rootfsPropagation"], "rslave");

    let mut shared = cri_mount("/both", "/srv/both");
    shared.propagation = MountPropagation::PropagationBidirectional as i32;
    f.config.mounts = vec![shared.clone(), slave];
    f.paths
        .propagation
        .insert("/srv/both".into(), HostPropagation::Slave);
    assert!(f.err().contains("shared mount"));
    f.paths
        .propagation
        .insert("/srv/both".into(), HostPropagation::Shared);
    let s = f.json();
    assert_eq!(
        strs(&mount_at(&s, "/both").unwrap()["options"]),
        vec!["rbind", "rshared", "rw"]
    );
    assert_eq!(
        s["linux"]["rootfsPropagation"], "rshared",
        "rshared wins over rslave"
    );

    let mut bad = cri_mount("/x", "/srv/x");
    bad.propagation = 9;
    f.config.mounts = vec![bad];
    assert!(f.err().contains("config.mounts[0].propagation"));
}

#[test]
fn bad_cri_mounts() {
    let mut f = Fixture::new();
    let mut image = cri_mount("/img", "");
    image.image = Some(ImageSpec {
        image: "sha256:def".into(),
        ..Default::default()
    });
    f.config.mounts = vec![image];
    assert!(f.err().contains("config.mounts[0].image"));
    f.config.mounts = vec![cri_mount("relative", "/srv")];
    assert!(f.err().contains("config.mounts[0].container_path"));
    f.config.mounts = vec![cri_mount("/a", "/srv/a"), cri_mount("/b", "")];
    assert!(f.err().contains("config.mounts[1].host_path"));
    f.config.mounts = vec![cri_mount("/a", "/srv/denied")];
    f.paths.failing.push("/srv/denied".into());
    let e = f.err();
    assert!(
        e.contains("config.mounts[0].host_path") && e.contains("denied"),
        "{e}"
    );
}

#[test]
fn mount_options_are_appended_to_the_bind() {
    let mut f = Fixture::new();
    let mut data = cri_mount("/data", "/srv/data");
    data.mount_options = vec!["noexec".into(), "nosuid".into(), "noexec".into()];
    let mut ro = cri_mount("/ro", "/srv/ro");
    ro.readonly = true;
    ro.mount_options = vec!["nodev".into()];
    f.config.mounts = vec![data, ro, cri_mount("/plain", "/srv/plain")];
    let s = f.json();
    assert_eq!(
        strs(&mount_at(&s, "/data").unwrap()["options"]),
        ["rbind", "rprivate", "rw", "noexec", "nosuid"]
    );
    assert_eq!(
        strs(&mount_at(&s, "/ro").unwrap()["options"]),
        ["rbind", "rprivate", "ro", "nodev"]
    );
    assert_eq!(
        strs(&mount_at(&s, "/plain").unwrap()["options"]),
        ["rbind", "rprivate", "rw"]
    );
}

#[test]
fn unknown_mount_options_are_refused() {
    let mut f = Fixture::new();
    for bad in ["exec", "suid", "rw", "bind", "size=1m", "NOEXEC", ""] {
        let mut m = cri_mount("/data", "/srv/data");
        m.mount_options = vec!["nodev".into(), bad.into()];
        f.config.mounts = vec![cri_mount("/ok", "/srv/ok"), m];
        let e = f.err();
        assert!(
            e.contains("config.mounts[1].mount_options[1]"),
            "{bad:?}: {e}"
        );
        assert!(e.contains(&format!("{bad:?}")), "{bad:?}: {e}");
    }
}

#[test]
fn selinux_relabel_only_when_enabled() {
    let mut f = Fixture::new();
    let mut m = cri_mount("/data", "/srv/data");
    m.selinux_relabel = true;
    f.config.mounts = vec![m];
    f.sc().selinux_options = Some(peapod_proto::v1::SeLinuxOption {
        level: "s0:c1,c2".into(),
        ..Default::default()
    });
    f.json();
    assert!(f.paths.relabeled.lock().unwrap().is_empty());
    f.host.selinux_enabled = true;
    let s = f.json();
    assert_eq!(
        s["process"]["selinuxLabel"],
        "system_u:system_r:container_t:s0:c1,c2"
    );
    assert_eq!(
        s["linux"]["mountLabel"],
        "system_u:object_r:container_file_t:s0:c1,c2"
    );
    let relabeled = f.paths.relabeled.lock().unwrap();
    assert!(relabeled.iter().any(|(p, _)| p == Path::new("/srv/data")));
    assert!(relabeled
        .iter()
        .any(|(p, _)| p == Path::new("/run/peapod/sandboxes/sb1/hosts")));
}
