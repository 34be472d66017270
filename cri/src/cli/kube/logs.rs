//! `peapod logs NAME [-c C] [-f] [--previous] [--tail N] [--timestamps]`: reads the container's
//! CRI log file (its path from CRI ContainerStatus; this CLI runs as root on the daemon's host).

use super::{crilog, parse_pod, Clients, KubeError, NamespaceArg};
use peapod_proto::pods as api;
use peapod_proto::v1 as cri;
use serde_json::Value;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::MetadataExt;
use std::time::Duration;

#[derive(clap::Args, Debug)]
pub struct LogsArgs {
    /// The pod (or `pod/NAME`).
    pub pod: String,
    /// The container (default: the pod's only app container).
    #[arg(short = 'c', long = "container")]
    pub container: Option<String>,
    /// Follow the log until the container exits.
    #[arg(short = 'f', long)]
    pub follow: bool,
    /// The previous instance of the container (before its last restart).
    #[arg(short = 'p', long)]
    pub previous: bool,
    /// Only the last N lines (-1: all).
    #[arg(long, default_value_t = -1, allow_negative_numbers = true)]
    pub tail: i64,
    /// Prefix each line with its time.
    #[arg(long)]
    pub timestamps: bool,
    #[command(flatten)]
    pub ns: NamespaceArg,
}

/// A container of a pod picked by name, with the CRI ids kubectl reads logs and execs through.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Picked {
    pub name: String,
    /// The current instance (None while it waits to be created).
    pub container_id: Option<String>,
    /// The instance before the last restart.
    pub previous_id: Option<String>,
    /// Why it is not running, when it waits.
    pub waiting_reason: Option<String>,
}

fn s<'a>(v: &'a Value, pointer: &str) -> &'a str {
    v.pointer(pointer).and_then(Value::as_str).unwrap_or("")
}

fn names(pod: &Value, pointer: &str) -> Vec<String> {
    pod.pointer(pointer)
        .and_then(Value::as_array)
        .map(|cs| cs.iter().map(|c| s(c, "/name").to_string()).collect())
        .unwrap_or_default()
}

/// `peapod://ID` (any scheme) to `ID`.
fn cri_id(container_id: &str) -> Option<String> {
    let id = container_id
        .split_once("://")
        .map(|(_, id)| id)
        .unwrap_or(container_id);
    (!id.is_empty()).then(|| id.to_string())
}

/// How a verb picks a container when none is named.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Default {
    /// `logs`: only when the pod has exactly one app container.
    OnlyOne,
    /// `exec`: kubectl's default-container annotation, else the first app container, with a
    /// notice (returned alongside) naming the others.
    First,
}

/// Picks the container `requested` (or the default) of `pod`; the notice, if any, is what
/// kubectl prints to stderr about the choice.
pub fn pick(
    pod: &Value,
    requested: Option<&str>,
    default: Default,
) -> Result<(Picked, Option<String>), KubeError> {
    let pod_name = s(pod, "/metadata/name");
    let apps = names(pod, "/spec/containers");
    let inits = names(pod, "/spec/initContainers");
    let mut notice = None;
    let name = match requested {
        Some(n) if apps.iter().chain(&inits).any(|c| c == n) => n.to_string(),
        Some(n) => {
            return Err(KubeError::Usage(format!(
                "container {n} is not valid for pod {pod_name}"
            )))
        }
        None if apps.len() == 1 => apps[0].clone(),
        None if apps.is_empty() => {
            return Err(KubeError::Usage(format!(
                "pod {pod_name} has no containers"
            )))
        }
        None => match default {
            Default::OnlyOne => {
                let mut msg = format!(
                    "a container name must be specified for pod {pod_name}, choose one of: [{}]",
                    apps.join(" ")
                );
                if !inits.is_empty() {
                    msg.push_str(&format!(
                        " or one of the init containers: [{}]",
                        inits.join(" ")
                    ));
                }
                return Err(KubeError::Usage(msg));
            }
            Default::First => {
                let annotated = s(
                    pod,
                    "/metadata/annotations/kubectl.kubernetes.io~1default-container",
                );
                let chosen = if apps.iter().any(|a| a == annotated) {
                    annotated.to_string()
                } else {
                    apps[0].clone()
                };
                let all: Vec<String> = apps
                    .iter()
                    .cloned()
                    .chain(inits.iter().map(|i| format!("{i} (init)")))
                    .collect();
                notice = Some(format!(
                    "Defaulted container \"{chosen}\" out of: {}",
                    all.join(", ")
                ));
                chosen
            }
        },
    };
    let status = ["/status/containerStatuses", "/status/initContainerStatuses"]
        .iter()
        .filter_map(|p| pod.pointer(p).and_then(Value::as_array))
        .flatten()
        .find(|st| s(st, "/name") == name);
    let picked = Picked {
        name,
        container_id: status.and_then(|st| cri_id(s(st, "/containerID"))),
        previous_id: status.and_then(|st| cri_id(s(st, "/lastState/terminated/containerID"))),
        waiting_reason: status
            .map(|st| s(st, "/state/waiting/reason").to_string())
            .filter(|r| !r.is_empty()),
    };
    Ok((picked, notice))
}

/// Gets the pod or kubectl's NotFound error.
pub async fn get_pod(c: &mut Clients, namespace: &str, name: &str) -> anyhow::Result<Value> {
    let r = c
        .pods
        .get(api::GetRequest {
            namespace: namespace.to_string(),
            name: name.to_string(),
        })
        .await
        .map_err(|s| KubeError::from_status(s, name))?;
    parse_pod(&r.into_inner().pod_json)
}

/// `pod/NAME` or `NAME`.
pub fn pod_name(arg: &str) -> Result<&str, KubeError> {
    match arg.split_once('/') {
        Some((kind, name)) => {
            super::check_resource(kind)?;
            Ok(name)
        }
        None => Ok(arg),
    }
}

async fn container_status(c: &mut Clients, id: &str) -> anyhow::Result<cri::ContainerStatus> {
    let r = c
        .cri
        .runtime
        .container_status(cri::ContainerStatusRequest {
            container_id: id.to_string(),
            verbose: false,
        })
        .await
        .map_err(|s| KubeError::from_status(s, ""))?;
    r.into_inner()
        .status
        .ok_or_else(|| anyhow::anyhow!("the daemon sent no status for container {id}"))
}

pub async fn run(c: &mut Clients, a: LogsArgs) -> anyhow::Result<()> {
    let name = pod_name(&a.pod)?;
    let pod = get_pod(c, &a.ns.namespace, name).await?;
    let (picked, _) = pick(&pod, a.container.as_deref(), Default::OnlyOne)?;
    let id = if a.previous {
        picked.previous_id.clone().ok_or_else(|| {
            KubeError::Usage(format!(
                "previous terminated container \"{}\" in pod \"{name}\" not found",
                picked.name
            ))
        })?
    } else {
        match &picked.container_id {
            Some(id) => id.clone(),
            None => {
                return Err(KubeError::Usage(format!(
                    "container \"{}\" in pod \"{name}\" is waiting to start: {}",
                    picked.name,
                    picked
                        .waiting_reason
                        .as_deref()
                        .unwrap_or("ContainerCreating")
                ))
                .into())
            }
        }
    };
    let status = container_status(c, &id).await?;
    if status.log_path.is_empty() {
        return Err(KubeError::Usage(format!(
            "container \"{}\" in pod \"{name}\" has no log file",
            picked.name
        ))
        .into());
    }
    let tail = usize::try_from(a.tail).ok();
    let follow = a.follow && !a.previous;
    print_log(c, &id, &status.log_path, tail, a.timestamps, follow).await
}

/// Prints the log (the last `tail` lines), then with `follow` keeps printing what is appended,
/// across rotation (a new file at the same path), until the container has exited.
async fn print_log(
    c: &mut Clients,
    id: &str,
    path: &str,
    tail: Option<usize>,
    timestamps: bool,
    follow: bool,
) -> anyhow::Result<()> {
    use anyhow::Context;
    let mut file = std::fs::File::open(path).with_context(|| format!("open log {path}"))?;
    let mut text = String::new();
    file.read_to_string(&mut text)
        .with_context(|| format!("read log {path}"))?;
    // Only complete lines now; a trailing incomplete one is read again when it completes.
    let complete = text.rfind('\n').map(|i| i + 1).unwrap_or(0);
    let mut out = std::io::stdout().lock();
    let mut assembler = crilog::Assembler::default();
    let initial: Vec<crilog::Line> = if follow {
        text[..complete]
            .lines()
            .filter_map(|l| assembler.push(l))
            .collect()
    } else {
        crilog::lines(&text, None)
    };
    let skip = tail.map(|n| initial.len().saturating_sub(n)).unwrap_or(0);
    for l in &initial[skip..] {
        out.write_all(l.render(timestamps).as_bytes())?;
    }
    out.flush()?;
    if !follow {
        return Ok(());
    }
    drop(out);
    let mut pos = complete as u64;
    let mut inode = file.metadata()?.ino();
    let mut carry = Vec::new();
    loop {
        file.seek(SeekFrom::Start(pos))?;
        let mut chunk = Vec::new();
        file.read_to_end(&mut chunk)?;
        pos += chunk.len() as u64;
        carry.extend_from_slice(&chunk);
        if let Some(end) = carry.iter().rposition(|b| *b == b'\n') {
            let lines: Vec<u8> = carry.drain(..=end).collect();
            let mut out = std::io::stdout().lock();
            for raw in String::from_utf8_lossy(&lines).lines() {
                if let Some(l) = assembler.push(raw) {
                    out.write_all(l.render(timestamps).as_bytes())?;
                }
            }
            out.flush()?;
        }
        if !chunk.is_empty() {
            continue;
        }
        // At the end: a rotated file (new inode, or truncated) is reopened from its start.
        if let Ok(meta) = std::fs::metadata(path) {
            if meta.ino() != inode || meta.len() < pos {
                if let Ok(f) = std::fs::File::open(path) {
                    file = f;
                    inode = meta.ino();
                    pos = 0;
                    continue;
                }
            }
        }
        let exited = container_status(c, id)
            .await
            .map(|st| st.state == cri::ContainerState::ContainerExited as i32)
            .unwrap_or(true);
        if exited {
            // One last read: output written just before the exit.
            file.seek(SeekFrom::Start(pos))?;
            let mut rest = Vec::new();
            file.read_to_end(&mut rest)?;
            carry.extend_from_slice(&rest);
            let mut out = std::io::stdout().lock();
            for raw in String::from_utf8_lossy(&carry).lines() {
                if let Some(l) = assembler.push(raw) {
                    out.write_all(l.render(timestamps).as_bytes())?;
                }
            }
            for l in assembler.finish() {
                out.write_all(l.render(timestamps).as_bytes())?;
            }
            out.flush()?;
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod() -> Value {
        json!({"metadata": {"name": "war"},
            "spec": {"initContainers": [{"name": "install"}],
                     "containers": [{"name": "web"}, {"name": "shipper"}]},
            "status": {
                "initContainerStatuses": [{"name": "install", "containerID": "peapod://i1",
                    "state": {"terminated": {"exitCode": 0}}}],
                "containerStatuses": [
                    {"name": "web", "containerID": "peapod://w2",
                     "lastState": {"terminated": {"containerID": "peapod://w1"}},
                     "state": {"running": {}}},
                    {"name": "shipper", "state": {"waiting": {"reason": "ContainerCreating"}}}]}})
    }

    #[test]
    fn picks_named_containers_with_their_ids() {
        let (p, notice) = pick(&pod(), Some("web"), Default::OnlyOne).unwrap();
        assert_eq!(p.container_id.as_deref(), Some("w2"));
        assert_eq!(p.previous_id.as_deref(), Some("w1"));
        assert!(notice.is_none());
        let (p, _) = pick(&pod(), Some("install"), Default::OnlyOne).unwrap();
        assert_eq!(p.container_id.as_deref(), Some("i1"));
        let (p, _) = pick(&pod(), Some("shipper"), Default::OnlyOne).unwrap();
        assert_eq!(
            (p.container_id, p.waiting_reason.as_deref()),
            (None, Some("ContainerCreating"))
        );
        let e = pick(&pod(), Some("nope"), Default::OnlyOne).unwrap_err();
        assert_eq!(
            e.to_string(),
            "error: container nope is not valid for pod war"
        );
    }

    #[test]
    fn several_app_containers_need_a_name_for_logs_and_default_for_exec() {
        let e = pick(&pod(), None, Default::OnlyOne).unwrap_err();
        assert_eq!(
            e.to_string(),
            "error: a container name must be specified for pod war, choose one of: [web shipper] or one of the init containers: [install]"
        );
        let (p, notice) = pick(&pod(), None, Default::First).unwrap();
        assert_eq!(p.name, "web");
        assert_eq!(
            notice.as_deref(),
            Some("Defaulted container \"web\" out of: web, shipper, install (init)")
        );
        let single = json!({"metadata": {"name": "one"}, "spec": {"containers": [{"name": "a"}]}});
        assert_eq!(pick(&single, None, Default::OnlyOne).unwrap().0.name, "a");
    }
}
