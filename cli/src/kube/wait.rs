//! `peapod wait pod NAME --for condition=Ready[=false] | --for=delete [--timeout 30s]`.

use super::{parse_pod, pod_names, Clients, KubeError, NamespaceArg};
use peapod_proto::pods as api;
use serde_json::Value;
use std::time::{Duration, Instant};

#[derive(clap::Args, Debug)]
pub struct WaitArgs {
    /// `pod` (or `pod/NAME`).
    pub resource: String,
    /// Pod names.
    pub names: Vec<String>,
    /// `condition=NAME`, `condition=NAME=VALUE` or `delete`.
    #[arg(long = "for", required = true)]
    pub for_: String,
    /// How long to wait (Go duration: 30s, 2m, 1h30m); 0 checks once.
    #[arg(long, default_value = "30s")]
    pub timeout: String,
    #[command(flatten)]
    pub ns: NamespaceArg,
}

/// What `--for` asks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WaitFor {
    Delete,
    /// Condition type and wanted status, both compared case-insensitively as kubectl does.
    Condition {
        kind: String,
        status: String,
    },
}

pub fn parse_for(s: &str) -> Result<WaitFor, KubeError> {
    if s.eq_ignore_ascii_case("delete") {
        return Ok(WaitFor::Delete);
    }
    if let Some(rest) = s.strip_prefix("condition=") {
        let (kind, status) = match rest.split_once('=') {
            Some((k, v)) => (k, v),
            None => (rest, "true"),
        };
        if kind.is_empty() {
            return Err(KubeError::Usage("condition name is empty in --for".into()));
        }
        return Ok(WaitFor::Condition {
            kind: kind.to_string(),
            status: status.to_string(),
        });
    }
    Err(KubeError::Usage(format!(
        "unrecognized condition: \"{s}\" (peapod knows condition=NAME[=VALUE] and delete)"
    )))
}

/// A Go duration (`90s`, `1m30s`, `500ms`, `2h`); a bare number is seconds.
pub fn parse_duration(s: &str) -> Result<Duration, KubeError> {
    let bad = || {
        KubeError::Usage(format!(
            "invalid --timeout {s:?}: expected e.g. 30s, 2m, 1h"
        ))
    };
    if let Ok(secs) = s.parse::<u64>() {
        return Ok(Duration::from_secs(secs));
    }
    peapod_host::duration::parse_go(s).ok_or_else(bad)
}

/// Whether `pod` meets the condition (`type` matched case-insensitively, as kubectl does).
pub fn condition_met(pod: &Value, kind: &str, status: &str) -> bool {
    pod.pointer("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|cs| {
            cs.iter().any(|c| {
                c.get("type")
                    .and_then(Value::as_str)
                    .is_some_and(|t| t.eq_ignore_ascii_case(kind))
                    && c.get("status")
                        .and_then(Value::as_str)
                        .is_some_and(|s| s.eq_ignore_ascii_case(status))
            })
        })
}

const POLL: Duration = Duration::from_millis(250);

pub async fn run(c: &mut Clients, a: WaitArgs) -> anyhow::Result<()> {
    let names = pod_names(&a.resource, &a.names)?;
    if names.is_empty() {
        return Err(KubeError::Usage("resource name may not be empty".into()).into());
    }
    let what = parse_for(&a.for_)?;
    let deadline = Instant::now() + parse_duration(&a.timeout)?;
    for name in &names {
        loop {
            let got = c
                .pods
                .get(api::GetRequest {
                    namespace: a.ns.namespace.clone(),
                    name: name.clone(),
                })
                .await;
            let done = match (&what, got) {
                (WaitFor::Delete, Err(s)) if s.code() == tonic::Code::NotFound => {
                    println!("pod/{name} deleted");
                    true
                }
                (WaitFor::Delete, Ok(_)) => false,
                (WaitFor::Condition { kind, status }, Ok(r)) => {
                    let pod = parse_pod(&r.into_inner().pod_json)?;
                    if condition_met(&pod, kind, status) {
                        println!("pod/{name} condition met");
                        true
                    } else {
                        false
                    }
                }
                (_, Err(s)) => return Err(KubeError::from_status(s, name).into()),
            };
            if done {
                break;
            }
            if Instant::now() >= deadline {
                return Err(KubeError::Usage(format!(
                    "timed out waiting for the condition on pods/{name}"
                ))
                .into());
            }
            tokio::time::sleep(POLL.min(deadline.saturating_duration_since(Instant::now()))).await;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn for_forms() {
        assert_eq!(parse_for("delete").unwrap(), WaitFor::Delete);
        assert_eq!(
            parse_for("condition=Ready").unwrap(),
            WaitFor::Condition {
                kind: "Ready".into(),
                status: "true".into()
            }
        );
        assert_eq!(
            parse_for("condition=Ready=false").unwrap(),
            WaitFor::Condition {
                kind: "Ready".into(),
                status: "false".into()
            }
        );
        assert!(parse_for("jsonpath={.x}").is_err());
        assert!(parse_for("condition=").is_err());
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("60s").unwrap(), Duration::from_secs(60));
        assert_eq!(parse_duration("1m30s").unwrap(), Duration::from_secs(90));
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("2h").unwrap(), Duration::from_secs(7200));
        assert_eq!(parse_duration("45").unwrap(), Duration::from_secs(45));
        assert_eq!(parse_duration("0").unwrap(), Duration::ZERO);
        assert!(parse_duration("10x").is_err());
        assert!(parse_duration("").is_err());
    }

    #[test]
    fn conditions_match_case_insensitively() {
        let pod = json!({"status": {"conditions": [
            {"type": "Ready", "status": "True"}, {"type": "ContainersReady", "status": "False"}]}});
        assert!(condition_met(&pod, "ready", "true"));
        assert!(!condition_met(&pod, "Ready", "false"));
        assert!(condition_met(&pod, "ContainersReady", "False"));
        assert!(!condition_met(&pod, "Initialized", "true"));
    }
}
