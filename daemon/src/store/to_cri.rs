//! Records as the CRI messages that report them (statuses, list items, states), for the
//! status and list calls, events and stats alike.

use super::container::{ContainerRecord, ContainerState};
use super::sandbox::{SandboxRecord, SandboxState};
use peapod_proto::v1 as cri;
use peapod_proto::v1::{
    LinuxPodSandboxStatus, Namespace, NamespaceOption, PodIp, PodSandbox, PodSandboxNetworkStatus,
    PodSandboxState, PodSandboxStatus,
};
use std::collections::HashMap;

/// Whether `labels` has every pair of `selector`.
pub fn labels_match(labels: &HashMap<String, String>, selector: &HashMap<String, String>) -> bool {
    selector.iter().all(|(k, v)| labels.get(k) == Some(v))
}

pub fn sandbox_state(state: SandboxState) -> PodSandboxState {
    match state {
        SandboxState::Ready => PodSandboxState::SandboxReady,
        SandboxState::Creating | SandboxState::NotReady => PodSandboxState::SandboxNotready,
    }
}

pub fn sandbox_status(rec: &SandboxRecord) -> PodSandboxStatus {
    let options: NamespaceOption = rec
        .config
        .linux
        .as_ref()
        .and_then(|l| l.security_context.as_ref())
        .and_then(|s| s.namespace_options.clone())
        .unwrap_or_default();
    let network = (!rec.ips.is_empty()).then(|| PodSandboxNetworkStatus {
        ip: rec.ips[0].clone(),
        additional_ips: rec.ips[1..]
            .iter()
            .map(|ip| PodIp { ip: ip.clone() })
            .collect(),
    });
    PodSandboxStatus {
        id: rec.id.clone(),
        metadata: rec.config.metadata.clone(),
        state: sandbox_state(rec.state) as i32,
        created_at: rec.created_at_ns,
        network,
        linux: Some(LinuxPodSandboxStatus {
            namespaces: Some(Namespace {
                options: Some(options),
            }),
        }),
        labels: rec.config.labels.clone(),
        annotations: rec.config.annotations.clone(),
        runtime_handler: rec.runtime_handler.clone(),
    }
}

pub fn sandbox_list_item(rec: &SandboxRecord) -> PodSandbox {
    PodSandbox {
        id: rec.id.clone(),
        metadata: rec.config.metadata.clone(),
        state: sandbox_state(rec.state) as i32,
        created_at: rec.created_at_ns,
        labels: rec.config.labels.clone(),
        annotations: rec.config.annotations.clone(),
        runtime_handler: rec.runtime_handler.clone(),
    }
}

pub fn container_state(state: ContainerState) -> cri::ContainerState {
    match state {
        ContainerState::Creating | ContainerState::Created => cri::ContainerState::ContainerCreated,
        ContainerState::Running => cri::ContainerState::ContainerRunning,
        ContainerState::Exited => cri::ContainerState::ContainerExited,
        ContainerState::Unknown => cri::ContainerState::ContainerUnknown,
    }
}

fn image_spec(rec: &ContainerRecord) -> cri::ImageSpec {
    cri::ImageSpec {
        image: rec.image_name.clone(),
        annotations: rec
            .config
            .image
            .as_ref()
            .map(|i| i.annotations.clone())
            .unwrap_or_default(),
        ..Default::default()
    }
}

pub fn container_status(rec: &ContainerRecord) -> cri::ContainerStatus {
    cri::ContainerStatus {
        id: rec.id.clone(),
        metadata: rec.config.metadata.clone(),
        state: container_state(rec.state) as i32,
        created_at: rec.created_at_ns,
        started_at: rec.started_at_ns,
        finished_at: rec.finished_at_ns,
        exit_code: rec.exit_code,
        image: Some(image_spec(rec)),
        image_ref: rec.image_ref.clone(),
        reason: rec.reason.clone(),
        message: rec.message.clone(),
        labels: rec.config.labels.clone(),
        annotations: rec.config.annotations.clone(),
        mounts: rec.config.mounts.clone(),
        log_path: rec.log_path.clone(),
        resources: rec.resources.clone().map(|linux| cri::ContainerResources {
            linux: Some(linux),
            ..Default::default()
        }),
        image_id: rec.image_id.clone(),
        user: Some(cri::ContainerUser {
            linux: Some(cri::LinuxContainerUser {
                uid: i64::from(rec.uid),
                gid: i64::from(rec.gid),
                supplemental_groups: rec
                    .supplemental_groups
                    .iter()
                    .map(|g| i64::from(*g))
                    .collect(),
            }),
        }),
        stop_signal: stop_signal(rec) as i32,
    }
}

/// The stop signal ContainerStatus reports: the one decided at create, else (a record from
/// before it) the CRI name of the number StopContainer sends.
fn stop_signal(rec: &ContainerRecord) -> cri::Signal {
    cri::Signal::try_from(rec.stop_signal_cri)
        .ok()
        .filter(|s| *s != cri::Signal::RuntimeDefault)
        .or_else(|| peapod_spec::cri_signal(rec.stop_signal))
        .unwrap_or(cri::Signal::RuntimeDefault)
}

pub fn container_list_item(rec: &ContainerRecord) -> cri::Container {
    cri::Container {
        id: rec.id.clone(),
        pod_sandbox_id: rec.sandbox_id.clone(),
        metadata: rec.config.metadata.clone(),
        image: Some(image_spec(rec)),
        image_ref: rec.image_ref.clone(),
        state: container_state(rec.state) as i32,
        created_at: rec.created_at_ns,
        labels: rec.config.labels.clone(),
        annotations: rec.config.annotations.clone(),
        image_id: rec.image_id.clone(),
    }
}
