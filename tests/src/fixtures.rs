//! CRI request builders for tests.

use peapod_proto::v1 as cri;
use std::collections::HashMap;

/// A sandbox config with a unique name, its own hostname, and the test's cgroup parent.
pub fn sandbox_config(name: &str, cgroup_parent: &str) -> cri::PodSandboxConfig {
    cri::PodSandboxConfig {
        metadata: Some(cri::PodSandboxMetadata {
            name: name.to_string(),
            uid: format!("uid-{name}"),
            namespace: "e2e".into(),
            attempt: 0,
        }),
        hostname: name.to_string(),
        log_directory: String::new(),
        dns_config: Some(cri::DnsConfig {
            servers: vec!["10.96.0.10".into()],
            searches: vec!["e2e.svc.cluster.local".into(), "svc.cluster.local".into()],
            options: vec!["ndots:5".into()],
        }),
        labels: HashMap::from([
            ("app".to_string(), name.to_string()),
            ("suite".to_string(), "e2e".to_string()),
        ]),
        annotations: HashMap::from([("peapod.test/annotation".to_string(), format!("for {name}"))]),
        linux: Some(cri::LinuxPodSandboxConfig {
            cgroup_parent: cgroup_parent.to_string(),
            security_context: Some(cri::LinuxSandboxSecurityContext {
                namespace_options: Some(cri::NamespaceOption {
                    network: cri::NamespaceMode::Pod as i32,
                    pid: cri::NamespaceMode::Container as i32,
                    ipc: cri::NamespaceMode::Pod as i32,
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The `info` JSON of a verbose status (PodSandboxStatus's or ContainerStatus's `info` map);
/// Null when there is none.
pub fn verbose_info(info: &std::collections::HashMap<String, String>) -> serde_json::Value {
    info.get("info")
        .and_then(|s| serde_json::from_str(s).ok())
        .unwrap_or(serde_json::Value::Null)
}
