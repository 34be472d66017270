//! Tests of whole specs: what `container_spec` puts together, checked on its JSON.

use crate::*;
use peapod_proto::v1::{
    security_profile::ProfileType, Capability, ContainerMetadata, Device, IdMapping, ImageSpec,
    KeyValue, LinuxContainerConfig, LinuxContainerResources, LinuxContainerSecurityContext,
    LinuxPodSandboxConfig, LinuxSandboxSecurityContext, Mount, MountPropagation, NamespaceMode,
    NamespaceOption, PodSandboxMetadata, SecurityProfile, UserNamespace,
};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// A host where every bind source exists as given unless told otherwise.
#[derive(Default)]
struct FakeHost {
    resolved: HashMap<PathBuf, PathBuf>,
    failing: Vec<PathBuf>,
    propagation: HashMap<PathBuf, HostPropagation>,
    devices: HashMap<PathBuf, Vec<HostDevice>>,
    relabeled: Mutex<Vec<(PathBuf, String)>>,
}

impl HostPaths for FakeHost {
    fn mount_source(&self, host_path: &Path) -> io::Result<PathBuf> {
        if self.failing.iter().any(|p| p == host_path) {
            return Err(io::Error::new(io::ErrorKind::PermissionDenied, "denied"));
        }
        Ok(self
            .resolved
            .get(host_path)
            .cloned()
            .unwrap_or_else(|| host_path.to_path_buf()))
    }
    fn propagation(&self, path: &Path) -> io::Result<HostPropagation> {
        Ok(self
            .propagation
            .get(path)
            .copied()
            .unwrap_or(HostPropagation::Private))
    }
    fn devices(&self, host_path: &Path) -> io::Result<Vec<HostDevice>> {
        self.devices
            .get(host_path)
            .cloned()
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "no such device"))
    }
    fn relabel(&self, path: &Path, label: &str) -> io::Result<()> {
        self.relabeled
            .lock()
            .unwrap()
            .push((path.to_path_buf(), label.to_string()));
        Ok(())
    }
}

fn dev(path: &str, kind: char, major: i64, minor: i64) -> HostDevice {
    HostDevice {
        path: path.into(),
        kind,
        major,
        minor,
        file_mode: 0o666,
        uid: 0,
        gid: 0,
    }
}

/// This machine's bounding set (no CAP_SYS_RESOURCE).
fn host_facts() -> HostFacts {
    HostFacts {
        bounding_caps: capabilities_from_mask(0x1fffeffffff),
        oom_score_adj_floor: Some(0),
        swap_controller: true,
        host_devices: vec![dev("/dev/null", 'c', 1, 3), dev("/dev/sda", 'b', 8, 0)],
        ..Default::default()
    }
}

fn sandbox_config() -> PodSandboxConfig {
    PodSandboxConfig {
        metadata: Some(PodSandboxMetadata {
            name: "web".into(),
            uid: "pod-uid-1".into(),
            namespace: "default".into(),
            attempt: 0,
        }),
        hostname: "web-host".into(),
        linux: Some(LinuxPodSandboxConfig {
            cgroup_parent: "/kubepods/pod1".into(),
            security_context: Some(LinuxSandboxSecurityContext {
                namespace_options: Some(NamespaceOption::default()),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn container_config() -> ContainerConfig {
    ContainerConfig {
        metadata: Some(ContainerMetadata {
            name: "app".into(),
            attempt: 0,
        }),
        image: Some(ImageSpec {
            image: "sha256:abc".into(),
            user_specified_image: "docker.io/library/busybox:1.36".into(),
            ..Default::default()
        }),
        args: vec!["sleep".into(), "3600".into()],
        envs: vec![KeyValue {
            key: "MODE".into(),
            value: "test".into(),
        }],
        annotations: [
            (
                "io.kubernetes.container.hash".to_string(),
                "abc".to_string(),
            ),
            (
                "io.kubernetes.cri.sandbox-id".to_string(),
                "forged".to_string(),
            ),
            ("run.oci.keep_original_groups".to_string(), "1".to_string()),
        ]
        .into(),
        linux: Some(LinuxContainerConfig {
            resources: Some(LinuxContainerResources {
                cpu_period: 100_000,
                cpu_quota: 20_000,
                cpu_shares: 204,
                memory_limit_in_bytes: 32 << 20,
                oom_score_adj: -997,
                ..Default::default()
            }),
            security_context: Some(LinuxContainerSecurityContext {
                namespace_options: Some(NamespaceOption {
                    pid: NamespaceMode::Container as i32,
                    ..Default::default()
                }),
                ..Default::default()
            }),
        }),
        ..Default::default()
    }
}

fn image_config() -> ImageConfig {
    ImageConfig {
        env: vec!["PATH=/usr/bin:/bin".into()],
        entrypoint: vec![],
        cmd: vec!["sh".into()],
        working_dir: "/work".into(),
        ..Default::default()
    }
}

/// Owned inputs, borrowed into `ContainerInputs` by `spec()`.
struct Fixture {
    config: ContainerConfig,
    sandbox: PodSandboxConfig,
    image: ImageConfig,
    user: ResolvedUser,
    host: HostFacts,
    paths: FakeHost,
    netns: Option<PathBuf>,
    shm: Option<PathBuf>,
    target_pid: Option<u32>,
}

impl Fixture {
    fn new() -> Self {
        Fixture {
            config: container_config(),
            sandbox: sandbox_config(),
            image: image_config(),
            user: ResolvedUser {
                uid: 1000,
                gid: 1000,
                additional_gids: vec![10],
            },
            host: host_facts(),
            paths: FakeHost::default(),
            netns: Some("/run/peapod/netns/sb1".into()),
            shm: Some("/run/peapod/sandboxes/sb1/shm".into()),
            target_pid: None,
        }
    }

    fn sc(&mut self) -> &mut LinuxContainerSecurityContext {
        self.config
            .linux
            .get_or_insert_with(Default::default)
            .security_context
            .get_or_insert_with(Default::default)
    }

    fn container_ns(&mut self) -> &mut NamespaceOption {
        self.sc()
            .namespace_options
            .get_or_insert_with(Default::default)
    }

    fn sandbox_sc(&mut self) -> &mut LinuxSandboxSecurityContext {
        self.sandbox
            .linux
            .get_or_insert_with(Default::default)
            .security_context
            .get_or_insert_with(Default::default)
    }

    fn sandbox_ns(&mut self) -> &mut NamespaceOption {
        self.sandbox_sc()
            .namespace_options
            .get_or_insert_with(Default::default)
    }

    fn try_spec(&self) -> Result<oci_spec::runtime::Spec> {
        container_spec(&self.inputs())
    }

    fn inputs(&self) -> ContainerInputs<'_> {
        ContainerInputs {
            id: "c1",
            config: &self.config,
            sandbox: SandboxRef {
                id: "sb1",
                config: &self.sandbox,
                pause_pid: 4242,
                netns: self.netns.as_deref(),
                dir: Path::new("/run/peapod/sandboxes/sb1"),
                shm: self.shm.as_deref(),
            },
            image: &self.image,
            user: &self.user,
            rootfs: Path::new("/var/lib/peapod/containers/c1/rootfs"),
            cgroups_path: "/kubepods/pod1/c1",
            target_pid: self.target_pid,
            host: &self.host,
            paths: &self.paths,
        }
    }

    /// The spec as JSON, after checking that the OCI type keeps exactly what we wrote (no
    /// field dropped, no oci-spec default added) and that `spec_json` says the same.
    fn json(&self) -> Value {
        let mut built = crate::spec::build_value(&self.inputs())
            .unwrap_or_else(|e| panic!("container_spec: {e}"));
        let spec = self.try_spec().unwrap();
        let mut typed = serde_json::to_value(&spec).unwrap();
        crate::spec::sort_capabilities(&mut built);
        crate::spec::sort_capabilities(&mut typed);
        assert_eq!(typed, built, "the OCI type changed the spec");
        let written: Value = serde_json::from_slice(&spec_json(&spec).unwrap()).unwrap();
        assert_eq!(written, built);
        built
    }

    fn err(&self) -> String {
        match self.try_spec() {
            Err(SpecError::InvalidArgument(m)) => m,
            Err(e) => panic!("expected InvalidArgument, got Internal: {e}"),
            Ok(_) => panic!("expected an error"),
        }
    }
}

fn strs(v: &Value) -> Vec<String> {
    v.as_array()
        .unwrap_or(&Vec::new())
        .iter()
        .map(|s| s.as_str().unwrap().to_string())
        .collect()
}

fn sorted(mut v: Vec<String>) -> Vec<String> {
    v.sort();
    v
}

fn mount_at<'a>(spec: &'a Value, dest: &str) -> Option<&'a Value> {
    spec["mounts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["destination"] == dest)
}

fn destinations(spec: &Value) -> Vec<String> {
    spec["mounts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["destination"].as_str().unwrap().to_string())
        .collect()
}

fn namespaces(spec: &Value) -> Vec<(String, Option<String>)> {
    spec["linux"]["namespaces"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| {
            (
                n["type"].as_str().unwrap().to_string(),
                n.get("path").map(|p| p.as_str().unwrap().to_string()),
            )
        })
        .collect()
}

fn ns_path(spec: &Value, typ: &str) -> Option<Option<String>> {
    namespaces(spec)
        .into_iter()
        .find(|(t, _)| t == typ)
        .map(|(_, p)| p)
}

fn cri_mount(container: &str, host: &str) -> Mount {
    Mount {
        container_path: container.into(),
        host_path: host.into(),
        ..Default::default()
    }
}

#[test]
fn a_plain_container() {
    let f = Fixture::new();
    let s = f.json();
    assert_eq!(s["ociVersion"], OCI_VERSION);
    assert_eq!(
        s["root"],
        json!({"path": "/var/lib/peapod/containers/c1/rootfs", "readonly": false})
    );
    assert!(
        s.get("hostname").is_none(),
        "containers share the pause's UTS namespace"
    );
    let p = &s["process"];
    assert_eq!(strs(&p["args"]), vec!["sleep", "3600"]);
    assert_eq!(
        strs(&p["env"]),
        vec!["PATH=/usr/bin:/bin", "HOSTNAME=web-host", "MODE=test"]
    );
    assert_eq!(p["cwd"], "/work");
    assert_eq!(p["terminal"], false);
    assert_eq!(
        p["user"],
        json!({"uid": 1000, "gid": 1000, "additionalGids": [10, 1000]})
    );
    assert_eq!(p["noNewPrivileges"], false);
    assert_eq!(p["oomScoreAdj"], 0, "raised to the floor");
    assert!(p.get("rlimits").is_none(), "containerd sets no rlimits");
    assert!(p.get("apparmorProfile").is_none());
    assert!(p.get("selinuxLabel").is_none());
    assert!(p.get("consoleSize").is_none());
    let want_caps = sorted(DEFAULT_CAPABILITIES.iter().map(|c| c.to_string()).collect());
    for set in ["bounding", "effective", "permitted"] {
        assert_eq!(sorted(strs(&p["capabilities"][set])), want_caps, "{set}");
    }
    assert!(p["capabilities"].get("ambient").is_none());
    assert!(p["capabilities"].get("inheritable").is_none());

    let l = &s["linux"];
    assert_eq!(l["cgroupsPath"], "/kubepods/pod1/c1");
    assert_eq!(
        l["resources"],
        json!({
            "devices": [{"allow": false, "access": "rwm"}],
            "cpu": {"period": 100000, "quota": 20000, "shares": 204},
            "memory": {"limit": 33554432, "swap": 33554432},
        })
    );
    assert_eq!(
        sorted(strs(&l["maskedPaths"])),
        sorted(DEFAULT_MASKED_PATHS.iter().map(|s| s.to_string()).collect())
    );
    assert_eq!(
        strs(&l["readonlyPaths"]).len(),
        DEFAULT_READONLY_PATHS.len()
    );
    assert!(
        l.get("seccomp").is_none(),
        "no profile asked: unconfined, as the CRI default"
    );
    assert!(l.get("sysctl").is_none());
    assert!(l.get("devices").is_none());
    assert!(l.get("rootfsPropagation").is_none());
    assert!(l.get("uidMappings").is_none());

    let a = &s["annotations"];
    assert_eq!(a["io.kubernetes.cri.container-type"], "container");
    assert_eq!(
        a["io.kubernetes.cri.sandbox-id"], "sb1",
        "not the forged one"
    );
    assert_eq!(a["io.kubernetes.cri.sandbox-name"], "web");
    assert_eq!(a["io.kubernetes.cri.sandbox-namespace"], "default");
    assert_eq!(a["io.kubernetes.cri.sandbox-uid"], "pod-uid-1");
    assert_eq!(a["io.kubernetes.cri.container-name"], "app");
    assert_eq!(
        a["io.kubernetes.cri.image-name"],
        "docker.io/library/busybox:1.36"
    );
    assert_eq!(a["io.kubernetes.container.hash"], "abc");
    assert!(a.get("run.oci.keep_original_groups").is_none());
}

#[test]
fn process_table() {
    // (command, args, image entrypoint, image cmd, config workdir, image workdir, tty) -> args, cwd
    type Case<'a> = (
        &'a [&'a str],
        &'a [&'a str],
        &'a [&'a str],
        &'a [&'a str],
        &'a str,
        &'a str,
        &'a [&'a str],
        &'a str,
    );
    let cases: &[Case] = &[
        (&[], &[], &["/entry"], &["a"], "", "", &["/entry", "a"], "/"),
        (
            &["/bin/echo"],
            &[],
            &["/entry"],
            &["a"],
            "/cfg",
            "/img",
            &["/bin/echo"],
            "/cfg",
        ),
        (
            &[],
            &["b"],
            &["/entry"],
            &["a"],
            "",
            "/img",
            &["/entry", "b"],
            "/img",
        ),
        (&["/x"], &["y"], &[], &[], "", "", &["/x", "y"], "/"),
    ];
    for (command, args, ep, cmd, wd, iwd, want_args, want_cwd) in cases {
        let mut f = Fixture::new();
        f.config.command = command.iter().map(|s| s.to_string()).collect();
        f.config.args = args.iter().map(|s| s.to_string()).collect();
        f.config.working_dir = wd.to_string();
        f.image.entrypoint = ep.iter().map(|s| s.to_string()).collect();
        f.image.cmd = cmd.iter().map(|s| s.to_string()).collect();
        f.image.working_dir = iwd.to_string();
        let s = f.json();
        assert_eq!(strs(&s["process"]["args"]), *want_args);
        assert_eq!(s["process"]["cwd"], *want_cwd);
    }
    let mut f = Fixture::new();
    f.config.args.clear();
    f.image.cmd.clear();
    assert!(f.err().contains("no command"));
}

#[test]
fn tty_and_env_override() {
    let mut f = Fixture::new();
    f.config.tty = true;
    f.config.stdin = true;
    f.image.env = vec!["MODE=image".into(), "TERM=vt100".into()];
    let s = f.json();
    assert_eq!(s["process"]["terminal"], true);
    let env = strs(&s["process"]["env"]);
    assert!(
        env.contains(&"MODE=test".to_string()),
        "config overrides image: {env:?}"
    );
    assert!(env.contains(&"TERM=vt100".to_string()));
    assert!(!env.contains(&"MODE=image".to_string()));
}

#[test]
fn user_and_groups() {
    let mut f = Fixture::new();
    f.sc().supplemental_groups = vec![2000, 10];
    let s = f.json();
    assert_eq!(
        s["process"]["user"]["additionalGids"],
        json!([10, 1000, 2000])
    );
    f.sc().supplemental_groups_policy = peapod_proto::v1::SupplementalGroupsPolicy::Strict as i32;
    let s = f.json();
    assert_eq!(
        s["process"]["user"]["additionalGids"],
        json!([10, 1000, 2000])
    );
    f.sc().supplemental_groups = vec![2000];
    let s = f.json();
    assert_eq!(s["process"]["user"]["additionalGids"], json!([1000, 2000]));
    f.sc().supplemental_groups = vec![-5];
    assert!(f.err().contains("supplemental_groups"));
}

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
fn resources_on_v1_and_v2() {
    let mut f = Fixture::new();
    let r = f.config.linux.as_mut().unwrap().resources.as_mut().unwrap();
    r.unified = [("memory.high".to_string(), "1000000".to_string())].into();
    r.cpuset_cpus = "0".into();
    r.memory_swap_limit_in_bytes = 64 << 20;
    r.oom_score_adj = 500;
    let s = f.json();
    assert!(
        s["linux"]["resources"].get("unified").is_none(),
        "no unified on v1"
    );
    assert_eq!(s["linux"]["resources"]["memory"]["swap"], 64 << 20);
    assert_eq!(s["linux"]["resources"]["cpu"]["cpus"], "0");
    assert_eq!(s["process"]["oomScoreAdj"], 500);
    f.host.cgroup_v2 = true;
    let s = f.json();
    assert_eq!(
        s["linux"]["resources"]["unified"],
        json!({"memory.high": "1000000"})
    );
    f.config.linux.as_mut().unwrap().resources = None;
    let s = f.json();
    assert!(s["process"].get("oomScoreAdj").is_none());
    assert_eq!(
        s["linux"]["resources"],
        json!({"devices": [{"allow": false, "access": "rwm"}]})
    );
}

#[test]
fn cri_devices() {
    let mut f = Fixture::new();
    f.paths
        .devices
        .insert("/dev/fuse".into(), vec![dev("/dev/fuse", 'c', 10, 229)]);
    f.paths.devices.insert(
        "/dev/snd".into(),
        vec![
            dev("/dev/snd/timer", 'c', 116, 33),
            dev("/dev/snd/by-x/pcm", 'c', 116, 2),
        ],
    );
    f.config.devices = vec![
        Device {
            container_path: "/dev/fuse".into(),
            host_path: "/dev/fuse".into(),
            permissions: "rw".into(),
        },
        Device {
            container_path: "/dev/sound".into(),
            host_path: "/dev/snd".into(),
            permissions: "mrw".into(),
        },
    ];
    let s = f.json();
    assert_eq!(
        s["linux"]["devices"],
        json!([
            {"path": "/dev/fuse", "type": "c", "major": 10, "minor": 229, "fileMode": 438, "uid": 0, "gid": 0},
            {"path": "/dev/sound/timer", "type": "c", "major": 116, "minor": 33, "fileMode": 438, "uid": 0, "gid": 0},
            {"path": "/dev/sound/by-x/pcm", "type": "c", "major": 116, "minor": 2, "fileMode": 438, "uid": 0, "gid": 0},
        ])
    );
    assert_eq!(
        s["linux"]["resources"]["devices"],
        json!([
            {"allow": false, "access": "rwm"},
            {"allow": true, "type": "c", "major": 10, "minor": 229, "access": "rw"},
            {"allow": true, "type": "c", "major": 116, "minor": 33, "access": "mrw"},
            {"allow": true, "type": "c", "major": 116, "minor": 2, "access": "mrw"},
        ])
    );
    f.config.devices[0].permissions = "rwx".into();
    assert!(f.err().contains("config.devices[0].permissions"));
    f.config.devices[0].permissions = "r".into();
    f.config.devices[0].host_path = "/dev/missing".into();
    assert!(f.err().contains("config.devices[0].host_path"));
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
fn cdi_devices_are_refused() {
    let mut f = Fixture::new();
    f.config.cdi_devices = vec![peapod_proto::v1::CdiDevice {
        name: "vendor.com/gpu=0".into(),
    }];
    assert!(f.err().contains("config.cdi_devices"));
}

#[test]
fn oom_score_adj_out_of_range() {
    let mut f = Fixture::new();
    f.config
        .linux
        .as_mut()
        .unwrap()
        .resources
        .as_mut()
        .unwrap()
        .oom_score_adj = 2000;
    assert!(f.err().contains("oom_score_adj"));
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
fn exec_processes_inherit_the_container_process() {
    let mut f = Fixture::new();
    f.sc().no_new_privs = true;
    let spec = f.try_spec().unwrap();
    let p = exec_process(&spec, &["ls".to_string(), "-l".to_string()], true).unwrap();
    let v = serde_json::to_value(&p).unwrap();
    assert_eq!(v["args"], json!(["ls", "-l"]));
    assert_eq!(v["terminal"], true);
    assert_eq!(v["user"]["uid"], 1000);
    assert_eq!(v["cwd"], "/work");
    assert_eq!(v["noNewPrivileges"], true);
    assert!(strs(&v["env"]).contains(&"TERM=xterm".to_string()));
    assert!(strs(&v["env"]).contains(&"MODE=test".to_string()));
    let base = serde_json::to_value(spec.process().as_ref().unwrap()).unwrap();
    assert_eq!(v["capabilities"], base["capabilities"]);
    let p = exec_process(&spec, &["true".to_string()], false).unwrap();
    let v = serde_json::to_value(&p).unwrap();
    assert_eq!(v["terminal"], false);
    assert!(!strs(&v["env"]).contains(&"TERM=xterm".to_string()));
    assert!(exec_process(&spec, &[], false).is_err());
}

#[test]
fn spec_json_is_deterministic() {
    let f = Fixture::new();
    let spec = f.try_spec().unwrap();
    let a = spec_json(&spec).unwrap();
    let b = spec_json(&f.try_spec().unwrap()).unwrap();
    assert_eq!(a, b);
    let v: Value = serde_json::from_slice(&a).unwrap();
    let caps = strs(&v["process"]["capabilities"]["bounding"]);
    assert_eq!(caps, sorted(caps.clone()));
}

/// Runs a generated spec under the real runc: `busybox true` in a bundle whose rootfs holds
/// only /bin/busybox, with a new network namespace instead of a pod's. Needs root, runc and
/// Debian's busybox-static at /bin/busybox:
/// `cargo test -p peapod-spec -- --ignored runc_accepts`.
#[test]
#[ignore = "needs root and runc; scripts/test runs it"]
fn runc_accepts_the_generated_spec() {
    use std::process::Command;
    let busybox = Path::new("/bin/busybox");
    if !busybox.exists() || Command::new("runc").arg("--version").output().is_err() {
        eprintln!("skipped: needs runc and /bin/busybox");
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let bundle = work.path().join("bundle");
    let rootfs = bundle.join("rootfs");
    for d in ["bin", "etc", "proc", "sys", "dev", "tmp"] {
        std::fs::create_dir_all(rootfs.join(d)).unwrap();
    }
    std::fs::copy(busybox, rootfs.join("bin/busybox")).unwrap();
    std::os::unix::fs::symlink("busybox", rootfs.join("bin/sh")).unwrap();
    std::fs::write(rootfs.join("etc/passwd"), "root:x:0:0:root:/root:/bin/sh\n").unwrap();
    let sandbox_dir = work.path().join("sandbox");
    std::fs::create_dir_all(&sandbox_dir).unwrap();
    std::fs::write(sandbox_dir.join("hostname"), "peapod-test\n").unwrap();
    std::fs::write(sandbox_dir.join("hosts"), "127.0.0.1 localhost\n").unwrap();
    std::fs::write(sandbox_dir.join("resolv.conf"), "nameserver 127.0.0.1\n").unwrap();
    let data = work.path().join("data");

    let host = HostFacts::detect(false);
    let run_as =
        |name: &str, config: ContainerConfig, user: ResolvedUser| -> std::process::Output {
            // A privileged container needs a privileged pod.
            let privileged = config
                .linux
                .as_ref()
                .and_then(|l| l.security_context.as_ref())
                .is_some_and(|s| s.privileged);
            let sandbox = PodSandboxConfig {
                linux: Some(LinuxPodSandboxConfig {
                    security_context: Some(LinuxSandboxSecurityContext {
                        privileged,
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            };
            let image = ImageConfig::default();
            let spec = container_spec(&ContainerInputs {
                id: name,
                config: &config,
                sandbox: SandboxRef {
                    id: "sb-test",
                    config: &sandbox,
                    pause_pid: std::process::id(),
                    netns: None,
                    dir: &sandbox_dir,
                    shm: None,
                },
                image: &image,
                user: &user,
                rootfs: &rootfs,
                cgroups_path: "",
                target_pid: None,
                host: &host,
                paths: &RealHost,
            })
            .unwrap();
            // No pod here: new network, IPC, UTS and PID namespaces instead of the pause's.
            let mut v: Value = serde_json::from_slice(&spec_json(&spec).unwrap()).unwrap();
            for n in v["linux"]["namespaces"].as_array_mut().unwrap() {
                if ["network", "ipc", "uts", "pid"].contains(&n["type"].as_str().unwrap()) {
                    n.as_object_mut().unwrap().remove("path");
                }
            }
            std::fs::write(
                bundle.join("config.json"),
                serde_json::to_vec_pretty(&v).unwrap(),
            )
            .unwrap();
            let root = work.path().join("runc");
            let out = Command::new("runc")
                .arg("--root")
                .arg(&root)
                .args(["run", "-b"])
                .arg(&bundle)
                .arg(name)
                .stdin(std::process::Stdio::null())
                .output()
                .unwrap();
            let _ = Command::new("runc")
                .arg("--root")
                .arg(&root)
                .args(["delete", "-f", name])
                .output();
            out
        };
    let run = |name: &str, config: ContainerConfig| run_as(name, config, ResolvedUser::default());
    let show = |o: &std::process::Output| {
        format!(
            "status {:?}\nstdout: {}\nstderr: {}",
            o.status,
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        )
    };

    let base = || ContainerConfig {
        command: vec!["/bin/busybox".into()],
        args: vec!["true".into()],
        linux: Some(LinuxContainerConfig {
            resources: Some(LinuxContainerResources {
                memory_limit_in_bytes: 64 << 20,
                cpu_shares: 256,
                oom_score_adj: 100,
                ..Default::default()
            }),
            security_context: Some(LinuxContainerSecurityContext {
                seccomp: Some(SecurityProfile {
                    profile_type: ProfileType::RuntimeDefault as i32,
                    localhost_ref: String::new(),
                }),
                namespace_options: Some(NamespaceOption {
                    pid: NamespaceMode::Container as i32,
                    ..Default::default()
                }),
                ..Default::default()
            }),
        }),
        mounts: vec![Mount {
            container_path: "/data".into(),
            host_path: data.display().to_string(),
            readonly: true,
            ..Default::default()
        }],
        ..Default::default()
    };
    let out = run("peapod-spec-true", base());
    assert!(out.status.success(), "{}", show(&out));

    // unshare(2) without CAP_SYS_ADMIN fails.
    let mut blocked = base();
    blocked.args = vec!["unshare".into(), "-m".into(), "true".into()];
    let out = run("peapod-spec-unshare", blocked);
    assert!(!out.status.success(), "{}", show(&out));

    // Seccomp itself, not a missing capability: with CAP_SYS_ADMIN granted, swapoff(2) is
    // still outside the default profile (EPERM), while unconfined it reaches the kernel
    // (which refuses a directory as a swap area with another error).
    let swapoff = |seccomp: ProfileType| {
        let mut c = base();
        c.args = vec!["swapoff".into(), "/data".into()];
        let sc = c.linux.as_mut().unwrap().security_context.as_mut().unwrap();
        sc.capabilities = Some(Capability {
            add_capabilities: vec!["SYS_ADMIN".into()],
            ..Default::default()
        });
        sc.seccomp.as_mut().unwrap().profile_type = seccomp as i32;
        c
    };
    let out = run("peapod-spec-swapoff", swapoff(ProfileType::RuntimeDefault));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("Operation not permitted"),
        "{}",
        show(&out)
    );
    let out = run("peapod-spec-swapoff2", swapoff(ProfileType::Unconfined));
    assert!(
        !String::from_utf8_lossy(&out.stderr).contains("Operation not permitted"),
        "{}",
        show(&out)
    );

    // What the container sees: its hostname file, a read-only /data, masked kcore, root.
    let mut look = base();
    look.args = vec![
        "sh".into(),
        "-c".into(),
        "cat /etc/hostname; touch /data/x 2>/dev/null || echo ro; \
         test -s /proc/kcore || echo masked; id -u"
            .into(),
    ];
    let out = run("peapod-spec-look", look);
    assert!(out.status.success(), "{}", show(&out));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "peapod-test\nro\nmasked\n0\n"
    );

    // Another user with supplementary groups, under the default seccomp profile.
    let mut user = base();
    user.args = vec!["sh".into(), "-c".into(), "id -u; id -g; id -G".into()];
    user.linux
        .as_mut()
        .unwrap()
        .security_context
        .as_mut()
        .unwrap()
        .supplemental_groups = vec![3000];
    let out = run_as(
        "peapod-spec-user",
        user,
        ResolvedUser {
            uid: 1000,
            gid: 1001,
            additional_gids: vec![44],
        },
    );
    assert!(out.status.success(), "{}", show(&out));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "1000\n1001\n1001 44 3000\n"
    );

    // Privileged: every capability of the daemon's bounding set, the host's devices,
    // a writable /sys.
    let mut privileged = base();
    privileged.args = vec![
        "sh".into(),
        "-c".into(),
        "test -c /dev/null && test -e /dev/kmsg && grep CapEff /proc/self/status; \
         grep -q ' /sys sysfs rw' /proc/mounts && echo sys-rw"
            .into(),
    ];
    let sc = privileged
        .linux
        .as_mut()
        .unwrap()
        .security_context
        .as_mut()
        .unwrap();
    sc.privileged = true;
    let out = run("peapod-spec-privileged", privileged);
    assert!(out.status.success(), "{}", show(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let eff = stdout
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .map(|m| u64::from_str_radix(m.trim(), 16).unwrap())
        .unwrap();
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let own = status
        .lines()
        .find_map(|l| l.strip_prefix("CapBnd:"))
        .map(|m| u64::from_str_radix(m.trim(), 16).unwrap())
        .unwrap();
    assert_eq!(eff, own, "{}", show(&out));
    assert!(stdout.contains("sys-rw"), "{}", show(&out));
    assert!(
        data.is_dir(),
        "a missing host path is created, as containerd does"
    );
}
