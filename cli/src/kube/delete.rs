//! `peapod delete pod NAME... [--grace-period N] [--wait=true]` and `peapod delete -f FILE`:
//! graceful deletion through the daemon, printing `pod "NAME" deleted`.

use super::{manifest, pod_names, Clients, KubeError, NamespaceArg};
use peapod_proto::pods as api;

#[derive(clap::Args, Debug)]
pub struct DeleteArgs {
    /// `pod` (or `pod/NAME`); omitted with -f.
    pub resource: Option<String>,
    /// Pod names.
    pub names: Vec<String>,
    /// Delete the pods named in these manifests (file, directory or `-`); repeatable.
    #[arg(short = 'f', long = "filename")]
    pub files: Vec<String>,
    /// Seconds between SIGTERM and SIGKILL; negative: the pod's terminationGracePeriodSeconds.
    #[arg(long = "grace-period", default_value_t = -1, allow_negative_numbers = true)]
    pub grace_period: i64,
    /// Immediate deletion (grace period 1 second, as kubectl --now).
    #[arg(long)]
    pub now: bool,
    /// Return only once the pod is gone.
    #[arg(long, default_value_t = true, num_args = 0..=1, default_missing_value = "true", action = clap::ArgAction::Set)]
    pub wait: bool,
    /// Succeed for pods that do not exist.
    #[arg(long = "ignore-not-found")]
    pub ignore_not_found: bool,
    #[command(flatten)]
    pub ns: NamespaceArg,
}

pub async fn run(c: &mut Clients, a: DeleteArgs) -> anyhow::Result<()> {
    let mut targets: Vec<manifest::PodRef> = Vec::new();
    if !a.files.is_empty() {
        if a.resource.is_some() {
            return Err(
                KubeError::Usage("cannot specify both a resource and a file (-f)".into()).into(),
            );
        }
        for source in manifest::read_sources(&a.files)? {
            targets.extend(manifest::pod_refs(
                &source.bytes,
                &source.name,
                &a.ns.namespace,
            )?);
        }
    } else {
        let Some(resource) = a.resource.as_deref() else {
            return Err(KubeError::Usage(
                "You must provide one or more resources by argument or filename.".into(),
            )
            .into());
        };
        let names = pod_names(resource, &a.names)?;
        if names.is_empty() {
            return Err(KubeError::Usage(
                "resource(s) were provided, but no name was specified".into(),
            )
            .into());
        }
        targets.extend(names.into_iter().map(|name| manifest::PodRef {
            namespace: a.ns.namespace.clone(),
            name,
        }));
    }
    let grace = if a.now { 1 } else { a.grace_period };
    // As kubectl: every deletion is asked for first (so grace periods run in parallel), then,
    // with --wait, each pod is waited for until it is gone.
    let mut first_error = None;
    let mut deleted = Vec::new();
    for t in targets {
        match delete_one(c, &t, grace, false).await {
            Ok(_) => {
                println!("pod \"{}\" deleted", t.name);
                deleted.push(t);
            }
            Err(s) if s.code() == tonic::Code::NotFound && a.ignore_not_found => {}
            // kubectl goes on with the other pods and fails at the end.
            Err(s) => {
                let e = KubeError::from_status(s, &t.name);
                if first_error.is_some() {
                    eprintln!("{e}");
                } else {
                    first_error = Some(e);
                }
            }
        }
    }
    if a.wait {
        for t in deleted {
            // A second Delete with wait returns once the pod is gone (NotFound if it already is).
            match delete_one(c, &t, grace, true).await {
                Ok(_) => {}
                Err(s) if s.code() == tonic::Code::NotFound => {}
                Err(s) => return Err(KubeError::from_status(s, &t.name).into()),
            }
        }
    }
    match first_error {
        Some(e) => Err(e.into()),
        None => Ok(()),
    }
}

/// One Delete call for `t`; with `wait`, it returns once the pod is gone.
async fn delete_one(
    c: &mut Clients,
    t: &manifest::PodRef,
    grace: i64,
    wait: bool,
) -> Result<(), tonic::Status> {
    c.pods
        .delete(api::DeleteRequest {
            namespace: t.namespace.clone(),
            name: t.name.clone(),
            grace_period_seconds: grace,
            wait,
        })
        .await
        .map(drop)
}
