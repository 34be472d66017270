//! Version, Status, RuntimeConfig, UpdateRuntimeConfig.

use crate::config::CgroupDriver;
use crate::daemon::Daemon;
use crate::error::Result;
use peapod_proto::v1 as cri;
use std::collections::HashMap;

/// The CRI version peapod speaks.
pub const RUNTIME_API_VERSION: &str = "v1";
pub const RUNTIME_NAME: &str = "peapod";

pub fn version(_rt: &Daemon, _req: cri::VersionRequest) -> Result<cri::VersionResponse> {
    Ok(cri::VersionResponse {
        version: "0.1.0".into(),
        runtime_name: RUNTIME_NAME.into(),
        runtime_version: env!("CARGO_PKG_VERSION").into(),
        runtime_api_version: RUNTIME_API_VERSION.into(),
    })
}

pub fn status(daemon: &Daemon, req: cri::StatusRequest) -> Result<cri::StatusResponse> {
    let network = daemon.network.readiness();
    let conditions = vec![
        runtime_ready(
            &daemon.config.runtime.path,
            &daemon.config.runtime.shim_path,
        ),
        cri::RuntimeCondition {
            r#type: "NetworkReady".into(),
            status: network.ready,
            reason: network.reason,
            message: network.message,
        },
    ];
    // The default handler (no name) and each configured one. What was probed at start
    // (recursive read-only mounts; a user namespace owning a network namespace and an overlay
    // of idmapped layers) was probed with the default runtime: other runtimes offer neither.
    let handlers = daemon.sandboxes.runtime_handlers();
    let runtime_handlers = std::iter::once(handlers.default_handler())
        .chain(handlers.named())
        .map(|h| {
            let probed = handlers.runs_default_runtime(h);
            cri::RuntimeHandler {
                name: h.name.clone(),
                features: Some(cri::RuntimeHandlerFeatures {
                    recursive_read_only_mounts: probed && daemon.containers.rro_supported(),
                    user_namespaces: probed && daemon.sandboxes.user_namespaces_supported(),
                }),
            }
        })
        .collect();
    let mut info = HashMap::new();
    if req.verbose {
        let net = daemon.network.current().ok();
        let v = serde_json::json!({
            "config": daemon.config,
            "cni": {
                "network": net.as_ref().map(|n| &n.name),
                "source": net.as_ref().map(|n| &n.source),
                "plugins": net.as_ref().map(|n| n.plugin_types()),
                "podCIDR": daemon.network.pod_cidr(),
            },
            "runtimeHandler": daemon.sandboxes.runtime_handlers().default_alias(),
            "runtimeHandlers": handlers.named().iter()
                .map(|h| serde_json::json!({"name": h.name, "path": h.path, "root": h.root, "args": h.args}))
                .collect::<Vec<_>>(),
            // Why the runtime handler does or does not offer user namespaces.
            "userNamespaces": daemon.sandboxes.user_namespaces_support(),
            "shim": crate::shim::ShimManager::find_binary(&daemon.config.runtime.shim_path),
        });
        info.insert("config".to_string(), v.to_string());
    }
    Ok(cri::StatusResponse {
        status: Some(cri::RuntimeStatus { conditions }),
        info,
        runtime_handlers,
        features: Some(cri::RuntimeFeatures {
            // peapod-spec applies Merge and Strict, and ContainerStatus reports the user.
            supplemental_groups_policy: true,
            // A pod's user namespace owns the network namespace peapod makes for it; with the
            // host network there is none, and peapod-spec refuses user namespace POD with
            // network NODE.
            user_namespaces_host_network: false,
            // peapod-spec applies noexec, nosuid and nodev to CRI bind mounts (and refuses
            // any other option naming the field).
            mount_options: true,
        }),
    })
}

pub fn runtime_config(
    daemon: &Daemon,
    _req: cri::RuntimeConfigRequest,
) -> Result<cri::RuntimeConfigResponse> {
    let driver = match daemon.config.cgroup.driver {
        CgroupDriver::Cgroupfs => cri::CgroupDriver::Cgroupfs,
        CgroupDriver::Systemd => cri::CgroupDriver::Systemd,
    };
    Ok(cri::RuntimeConfigResponse {
        linux: Some(cri::LinuxRuntimeConfiguration {
            cgroup_driver: driver as i32,
        }),
    })
}

pub fn update_runtime_config(
    daemon: &Daemon,
    req: cri::UpdateRuntimeConfigRequest,
) -> Result<cri::UpdateRuntimeConfigResponse> {
    let cidr = req
        .runtime_config
        .and_then(|c| c.network_config)
        .map(|n| n.pod_cidr)
        .unwrap_or_default();
    for part in cidr.split(',').filter(|p| !p.is_empty()) {
        if !crate::network::is_cidr(part) {
            return Err(crate::Error::invalid(format!(
                "runtime_config.network_config.pod_cidr {part:?} is not a CIDR"
            )));
        }
    }
    // Only the first CIDR (IPv4 in dual-stack) is used by the default IPAM range.
    let first = cidr.split(',').next().unwrap_or_default();
    tracing::info!(pod_cidr = first, "pod CIDR updated");
    daemon.network.set_pod_cidr(first)?;
    Ok(cri::UpdateRuntimeConfigResponse {})
}

/// An executable file at `name` (a path) or in one of `$PATH`'s directories (a bare name).
fn find_executable(name: &str) -> Option<std::path::PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let is_exec = |p: &std::path::Path| {
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if name.contains('/') {
        let p = std::path::PathBuf::from(name);
        return is_exec(&p).then_some(p);
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| is_exec(p))
}

/// RuntimeReady, checked rather than assumed: the OCI runtime CLI and the shim must be there
/// and executable, or no container can start.
fn runtime_ready(runtime: &str, shim_path: &str) -> cri::RuntimeCondition {
    let shim = crate::shim::ShimManager::find_binary(shim_path);
    let mut missing = Vec::new();
    if find_executable(runtime).is_none() {
        missing.push(format!("the OCI runtime {runtime:?} (runtime.path)"));
    }
    if find_executable(&shim.to_string_lossy()).is_none() {
        missing.push(format!(
            "the shim {:?} (runtime.shim_path)",
            shim.display().to_string()
        ));
    }
    if missing.is_empty() {
        return cri::RuntimeCondition {
            r#type: "RuntimeReady".into(),
            status: true,
            reason: String::new(),
            message: String::new(),
        };
    }
    cri::RuntimeCondition {
        r#type: "RuntimeReady".into(),
        status: false,
        reason: "RuntimeBinaryNotFound".into(),
        message: format!("not found or not executable: {}", missing.join("; ")),
    }
}

#[cfg(test)]
mod ready_tests {
    use super::*;

    #[test]
    fn runtime_ready_needs_runtime_and_shim_executables() {
        // /bin/sh stands for any executable.
        let ok = runtime_ready("/bin/sh", "/bin/sh");
        assert!(ok.status, "{ok:?}");
        let no_runtime = runtime_ready("/nonexistent/runc", "/bin/sh");
        assert!(!no_runtime.status);
        assert_eq!(no_runtime.reason, "RuntimeBinaryNotFound");
        assert!(
            no_runtime.message.contains("runtime.path"),
            "{}",
            no_runtime.message
        );
        // A file that is not executable does not count.
        let dir = tempfile::tempdir().unwrap();
        let plain = dir.path().join("not-executable");
        std::fs::write(&plain, "#!/bin/sh\n").unwrap();
        let no_shim = runtime_ready("/bin/sh", &plain.to_string_lossy());
        assert!(!no_shim.status);
        assert!(
            no_shim.message.contains("runtime.shim_path"),
            "{}",
            no_shim.message
        );
        assert!(find_executable("sh").is_some());
        assert!(find_executable("no-such-binary-here").is_none());
    }
}
