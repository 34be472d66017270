//! crictl-shaped sandbox verbs: runp, pods, inspectp, stopp, rmp.

use anyhow::Context;
use peapod_proto::v1 as cri;
use peapod_uds::client::Cri;
use std::path::Path;

/// Runs a sandbox from a PodSandboxConfig in JSON (the file crictl runp takes).
pub async fn runp(c: &mut Cri, file: &Path, handler: &str) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(file).with_context(|| format!("read {}", file.display()))?;
    let config: cri::PodSandboxConfig = serde_json::from_str(&text)
        .with_context(|| format!("parse {} as a PodSandboxConfig", file.display()))?;
    let id = c
        .runtime
        .run_pod_sandbox(cri::RunPodSandboxRequest {
            config: Some(config),
            runtime_handler: handler.to_string(),
        })
        .await?
        .into_inner()
        .pod_sandbox_id;
    println!("{id}");
    Ok(())
}

pub async fn pods(c: &mut Cri) -> anyhow::Result<()> {
    let items = c
        .runtime
        .list_pod_sandbox(cri::ListPodSandboxRequest { filter: None })
        .await?
        .into_inner()
        .items;
    println!(
        "{:<14} {:<10} {:<24} {:<12}",
        "POD ID", "STATE", "NAME", "NAMESPACE"
    );
    for p in items {
        let m = p.metadata.unwrap_or_default();
        let state = if p.state == cri::PodSandboxState::SandboxReady as i32 {
            "Ready"
        } else {
            "NotReady"
        };
        println!(
            "{:<14} {:<10} {:<24} {:<12}",
            &p.id[..13.min(p.id.len())],
            state,
            m.name,
            m.namespace
        );
    }
    Ok(())
}

pub async fn inspectp(c: &mut Cri, id: &str) -> anyhow::Result<()> {
    let resp = c
        .runtime
        .pod_sandbox_status(cri::PodSandboxStatusRequest {
            pod_sandbox_id: id.to_string(),
            verbose: true,
        })
        .await?
        .into_inner();
    let info: serde_json::Value = resp
        .info
        .get("info")
        .and_then(|s| serde_json::from_str(s).ok())
        .unwrap_or_default();
    let out = serde_json::json!({ "status": resp.status, "info": info });
    println!("{}", serde_json::to_string_pretty(&out)?);
    Ok(())
}

pub async fn stopp(c: &mut Cri, id: &str) -> anyhow::Result<()> {
    c.runtime
        .stop_pod_sandbox(cri::StopPodSandboxRequest {
            pod_sandbox_id: id.to_string(),
        })
        .await?;
    println!("stopped {id}");
    Ok(())
}

pub async fn rmp(c: &mut Cri, id: &str) -> anyhow::Result<()> {
    c.runtime
        .remove_pod_sandbox(cri::RemovePodSandboxRequest {
            pod_sandbox_id: id.to_string(),
        })
        .await?;
    println!("removed {id}");
    Ok(())
}
