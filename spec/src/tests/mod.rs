//! Tests of whole specs: what `container_spec` puts together, checked on its JSON. This file
//! holds the fixtures (a fake host, default configs, the `Case` builder) and JSON helpers; the
//! tests are split by topic into the modules below.

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

mod cdi;
mod mounts;
mod namespaces;
mod process;
mod resources;
mod security;
mod whole;

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
    cdi: CdiRegistry,
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
            cdi: CdiRegistry::empty(),
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
            cdi: &self.cdi,
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
