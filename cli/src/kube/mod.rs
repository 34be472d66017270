//! kubectl-shaped verbs (`apply`, `get`, `describe`, `wait`, `logs`, `exec`, `delete`) over the
//! daemon's `peapod.pods.v1.Pods` service (and CRI, for logs and exec), printing what kubectl
//! prints. Rendering lives in pure modules (`table`, `describe`, `yaml`, `crilog`) tested on
//! fixture pods; the verb modules only fetch and print.

pub mod apply;
pub mod crilog;
pub mod delete;
pub mod describe;
pub mod describe_verb;
pub mod exec;
pub mod get;
pub mod json;
pub mod logs;
pub mod manifest;
pub mod selector;
pub mod table;
pub mod tabwriter;
pub mod target;
pub mod time;
pub mod wait;
pub mod yaml;

use peapod_proto::pods::pods_client::PodsClient;
use peapod_uds::client::Cri;
use std::path::PathBuf;
use tonic::transport::Channel;

/// The daemon's two services on one connection.
pub struct Clients {
    pub pods: PodsClient<Channel>,
    pub cri: Cri,
}

impl Clients {
    pub async fn connect(endpoint: &str) -> anyhow::Result<Clients> {
        use anyhow::Context;
        let path = PathBuf::from(endpoint.trim_start_matches("unix://"));
        let channel = peapod_uds::client::channel(&path).await.with_context(|| {
            format!("connect to peapod at {endpoint} (is `peapod serve` running?)")
        })?;
        Ok(Clients {
            pods: PodsClient::new(channel.clone()).max_decoding_message_size(64 << 20),
            cri: Cri::on(channel),
        })
    }
}

/// Errors printed as kubectl prints them (no "Error:" prefix from anyhow), exit status 1.
#[derive(Debug, thiserror::Error)]
pub enum KubeError {
    /// `Error from server (NotFound): pods "x" not found`.
    #[error("Error from server (NotFound): pods \"{0}\" not found")]
    PodNotFound(String),
    /// Any other status from the daemon, with kubectl's reason word for its code.
    #[error("Error from server ({reason}): {message}")]
    Server {
        reason: &'static str,
        message: String,
    },
    /// A client-side error, `error: ...` as kubectl words them.
    #[error("error: {0}")]
    Usage(String),
}

impl KubeError {
    /// A daemon status about pod `name` (empty when the call was not about one pod).
    pub fn from_status(status: tonic::Status, name: &str) -> KubeError {
        use tonic::Code;
        if status.code() == Code::NotFound && !name.is_empty() {
            return KubeError::PodNotFound(name.to_string());
        }
        let reason = match status.code() {
            Code::NotFound => "NotFound",
            Code::InvalidArgument => "Invalid",
            Code::AlreadyExists => "AlreadyExists",
            Code::FailedPrecondition | Code::Aborted => "Conflict",
            Code::PermissionDenied => "Forbidden",
            Code::Unauthenticated => "Unauthorized",
            Code::DeadlineExceeded => "Timeout",
            Code::Unimplemented => "MethodNotAllowed",
            Code::Unavailable => "ServiceUnavailable",
            _ => "InternalError",
        };
        let message = match (status.code(), status.message()) {
            (Code::Unimplemented, "") => {
                "this daemon does not serve pods (peapod.pods.v1.Pods): is it an older peapod?"
                    .to_string()
            }
            (_, m) => m.to_string(),
        };
        KubeError::Server { reason, message }
    }
}

/// Flags shared by every verb.
#[derive(clap::Args, Clone, Debug)]
pub struct NamespaceArg {
    /// The namespace.
    #[arg(short = 'n', long = "namespace", default_value = "default")]
    pub namespace: String,
}

/// `pods`, `pod` and `po` (and `pod/NAME`) name the one resource these verbs know.
pub fn check_resource(resource: &str) -> Result<(), KubeError> {
    match resource.to_ascii_lowercase().as_str() {
        "pods" | "pod" | "po" => Ok(()),
        other => Err(KubeError::Usage(format!(
            "the server doesn't have a resource type \"{other}\" (peapod serves pods only)"
        ))),
    }
}

/// The pod names a verb was given: `RESOURCE NAME...` or `pod/NAME NAME...` (kubectl's
/// forms), with the resource checked to be pods.
pub fn pod_names(resource: &str, names: &[String]) -> Result<Vec<String>, KubeError> {
    let mut out = names.to_vec();
    match resource.split_once('/') {
        Some((kind, name)) => {
            check_resource(kind)?;
            out.insert(0, name.to_string());
        }
        None => check_resource(resource)?,
    }
    Ok(out)
}

/// Parses a pod JSON string from the daemon.
pub fn parse_pod(json: &str) -> anyhow::Result<serde_json::Value> {
    use anyhow::Context;
    serde_json::from_str(json).context("the daemon sent a pod that is not JSON")
}

/// Runs a kubectl-shaped verb; returns the process exit status.
pub async fn run(verb: Verb, endpoint: &str) -> i32 {
    let result = async {
        let mut c = Clients::connect(endpoint).await?;
        match verb {
            Verb::Apply(a) => apply::run(&mut c, a).await.map(|()| 0),
            Verb::Get(a) => get::run(&mut c, a).await.map(|()| 0),
            Verb::Describe(a) => describe_verb::run(&mut c, a).await.map(|()| 0),
            Verb::Wait(a) => wait::run(&mut c, a).await.map(|()| 0),
            Verb::Logs(a) => logs::run(&mut c, a).await.map(|()| 0),
            Verb::Exec(a) => exec::run(&mut c, a).await,
            Verb::Delete(a) => delete::run(&mut c, a).await.map(|()| 0),
        }
    }
    .await;
    match result {
        Ok(code) => code,
        Err(e) => {
            match e.downcast_ref::<KubeError>() {
                Some(k) => eprintln!("{k}"),
                None => eprintln!("error: {e:#}"),
            }
            1
        }
    }
}

/// The kubectl-shaped verbs, as main's clap enum carries them.
pub enum Verb {
    Apply(apply::ApplyArgs),
    Get(get::GetArgs),
    Describe(describe_verb::DescribeArgs),
    Wait(wait::WaitArgs),
    Logs(logs::LogsArgs),
    Exec(exec::ExecArgs),
    Delete(delete::DeleteArgs),
}
