//! Namespaces: per CRI mode, host network and IPC, cgroup namespaces, the pod's user namespace.

use super::*;

#[test]
fn namespaces_per_mode() {
    let mut f = Fixture::new();
    // CONTAINER: a new PID namespace.
    let s = f.json();
    assert_eq!(
        namespaces(&s),
        vec![
            ("mount".to_string(), None),
            (
                "network".to_string(),
                Some("/run/peapod/netns/sb1".to_string())
            ),
            ("uts".to_string(), Some("/proc/4242/ns/uts".to_string())),
            ("ipc".to_string(), Some("/proc/4242/ns/ipc".to_string())),
            ("pid".to_string(), None),
        ]
    );
    // POD: the pause's.
    f.container_ns().pid = NamespaceMode::Pod as i32;
    assert_eq!(
        ns_path(&f.json(), "pid"),
        Some(Some("/proc/4242/ns/pid".into()))
    );
    // NODE: the host's (no namespace entry).
    f.container_ns().pid = NamespaceMode::Node as i32;
    assert_eq!(ns_path(&f.json(), "pid"), None);
    // TARGET: the target's, which must be known.
    f.container_ns().pid = NamespaceMode::Target as i32;
    f.container_ns().target_id = "c0".into();
    let e = f.err();
    assert!(e.contains("target_id") && e.contains("c0"), "{e}");
    f.target_pid = Some(777);
    assert_eq!(
        ns_path(&f.json(), "pid"),
        Some(Some("/proc/777/ns/pid".into()))
    );
    // Without a pinned netns, the pause's.
    f.netns = None;
    assert_eq!(
        ns_path(&f.json(), "network"),
        Some(Some("/proc/4242/ns/net".into()))
    );
}

#[test]
fn host_network_and_ipc() {
    let mut f = Fixture::new();
    f.sandbox_ns().network = NamespaceMode::Node as i32;
    f.sandbox_ns().ipc = NamespaceMode::Node as i32;
    f.container_ns().ipc = NamespaceMode::Node as i32;
    f.shm = None;
    let s = f.json();
    assert_eq!(ns_path(&s, "network"), None);
    assert_eq!(ns_path(&s, "uts"), None);
    assert_eq!(ns_path(&s, "ipc"), None);
    let shm = mount_at(&s, "/dev/shm").unwrap();
    assert_eq!(shm["source"], "/dev/shm");
    assert_eq!(shm["type"], "bind");
}

#[test]
fn cgroup_namespace_only_on_v2_unprivileged() {
    let mut f = Fixture::new();
    assert_eq!(ns_path(&f.json(), "cgroup"), None);
    f.host.cgroup_v2 = true;
    assert_eq!(ns_path(&f.json(), "cgroup"), Some(None));
    f.sc().privileged = true;
    f.sandbox_sc().privileged = true;
    assert_eq!(ns_path(&f.json(), "cgroup"), None);
}

#[test]
fn a_container_joins_its_pods_user_namespace_with_the_mappings() {
    let mut f = Fixture::new();
    let pod_userns = UserNamespace {
        mode: NamespaceMode::Pod as i32,
        uids: vec![IdMapping {
            container_id: 0,
            host_id: 100000,
            length: 65536,
        }],
        gids: vec![IdMapping {
            container_id: 0,
            host_id: 200000,
            length: 65536,
        }],
    };
    f.sandbox_ns().userns_options = Some(pod_userns.clone());
    f.container_ns().userns_options = Some(pod_userns);
    let s = f.json();
    assert_eq!(ns_path(&s, "user"), Some(Some("/proc/4242/ns/user".into())));
    assert_eq!(
        s["linux"]["uidMappings"],
        json!([{"containerID": 0, "hostID": 100000, "size": 65536}])
    );
    assert_eq!(s["linux"]["gidMappings"][0]["hostID"], 200000);
    // An id the mapping does not cover is refused before the runtime fails on it.
    f.user.uid = 70000;
    assert!(f.err().contains("uid 70000"), "{}", f.err());
    f.user.uid = 0;
    f.user.additional_gids = vec![66000];
    assert!(f.err().contains("gid 66000"), "{}", f.err());
    // Another mode than the pod's, or CONTAINER, is refused naming the field.
    f.user.additional_gids = vec![];
    f.container_ns().userns_options = Some(UserNamespace {
        mode: NamespaceMode::Node as i32,
        ..Default::default()
    });
    assert!(f.err().contains("userns_options.mode"), "{}", f.err());
}

#[test]
fn node_user_namespace_adds_nothing() {
    let mut f = Fixture::new();
    f.container_ns().userns_options = Some(UserNamespace {
        mode: NamespaceMode::Node as i32,
        ..Default::default()
    });
    let s = f.json();
    assert_eq!(ns_path(&s, "user"), None);
    assert!(s["linux"].get("uidMappings").is_none());
    f.container_ns().userns_options = Some(UserNamespace {
        mode: NamespaceMode::Container as i32,
        ..Default::default()
    });
    assert!(f.err().contains("userns_options.mode"), "{}", f.err());
}
