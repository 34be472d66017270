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

pub fn status(rt: &Daemon, req: cri::StatusRequest) -> Result<cri::StatusResponse> {
    let network = rt.network.readiness();
    let conditions = vec![
        cri::RuntimeCondition {
            r#type: "RuntimeReady".into(),
            status: true,
            reason: String::new(),
            message: String::new(),
        },
        cri::RuntimeCondition {
            r#type: "NetworkReady".into(),
            status: network.ready,
            reason: network.reason,
            message: network.message,
        },
    ];
    let mut info = HashMap::new();
    if req.verbose {
        let net = rt.network.current().ok();
        let v = serde_json::json!({
            "config": rt.config,
            "cni": {
                "network": net.as_ref().map(|n| &n.name),
                "source": net.as_ref().map(|n| &n.source),
                "plugins": net.as_ref().map(|n| n.plugin_types()),
                "podCIDR": rt.network.pod_cidr(),
            },
            "runtimeHandler": rt.sandboxes.runtime_handler_name(),
            "shim": crate::shim::ShimManager::find_binary(&rt.config.runtime.shim_path),
        });
        info.insert("config".to_string(), v.to_string());
    }
    Ok(cri::StatusResponse {
        status: Some(cri::RuntimeStatus { conditions }),
        info,
        runtime_handlers: vec![cri::RuntimeHandler {
            name: String::new(),
            features: Some(cri::RuntimeHandlerFeatures {
                recursive_read_only_mounts: false,
                user_namespaces: false,
            }),
        }],
        features: Some(cri::RuntimeFeatures {
            supplemental_groups_policy: false,
        }),
    })
}

pub fn runtime_config(
    rt: &Daemon,
    _req: cri::RuntimeConfigRequest,
) -> Result<cri::RuntimeConfigResponse> {
    let driver = match rt.config.cgroup.driver {
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
    rt: &Daemon,
    req: cri::UpdateRuntimeConfigRequest,
) -> Result<cri::UpdateRuntimeConfigResponse> {
    let cidr = req
        .runtime_config
        .and_then(|c| c.network_config)
        .map(|n| n.pod_cidr)
        .unwrap_or_default();
    for part in cidr.split(',').filter(|p| !p.is_empty()) {
        let valid = part.split_once('/').is_some_and(|(ip, len)| {
            ip.parse::<std::net::IpAddr>().is_ok() && len.parse::<u8>().is_ok()
        });
        if !valid {
            return Err(crate::Error::invalid(format!(
                "runtime_config.network_config.pod_cidr {part:?} is not a CIDR"
            )));
        }
    }
    // Only the first CIDR (IPv4 in dual-stack) is used by the default IPAM range.
    let first = cidr.split(',').next().unwrap_or_default();
    tracing::info!(pod_cidr = first, "pod CIDR updated");
    rt.network.set_pod_cidr(first);
    Ok(cri::UpdateRuntimeConfigResponse {})
}
