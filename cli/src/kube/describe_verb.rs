//! `peapod describe pod [NAME...]`: fetches each pod and its events and prints
//! [`describe::describe_pod`] of them.

use super::{describe, parse_pod, pod_names, time, Clients, KubeError, NamespaceArg};

/// `peapod describe pod NAME...` (all pods of the namespace without a name).
#[derive(clap::Args, Debug)]
pub struct DescribeArgs {
    /// `pod` (or `pod/NAME`).
    pub resource: String,
    /// Pod names.
    pub names: Vec<String>,
    #[command(flatten)]
    pub ns: NamespaceArg,
}

pub async fn run(c: &mut Clients, a: DescribeArgs) -> anyhow::Result<()> {
    use peapod_proto::pods as api;
    let names = pod_names(&a.resource, &a.names)?;
    let pods: Vec<serde_json::Value> = if names.is_empty() {
        let list = c
            .pods
            .list(api::ListRequest {
                namespace: a.ns.namespace.clone(),
                all_namespaces: false,
            })
            .await
            .map_err(|s| KubeError::from_status(s, ""))?
            .into_inner();
        list.pod_json
            .iter()
            .map(|j| parse_pod(j))
            .collect::<anyhow::Result<_>>()?
    } else {
        let mut out = Vec::new();
        for name in &names {
            let got = c
                .pods
                .get(api::GetRequest {
                    namespace: a.ns.namespace.clone(),
                    name: name.clone(),
                })
                .await
                .map_err(|s| KubeError::from_status(s, name))?
                .into_inner();
            out.push(parse_pod(&got.pod_json)?);
        }
        out
    };
    let now = time::now();
    let mut first = true;
    for pod in pods {
        let name = pod
            .pointer("/metadata/name")
            .and_then(serde_json::Value::as_str)
            .unwrap_or("")
            .to_string();
        let namespace = pod
            .pointer("/metadata/namespace")
            .and_then(serde_json::Value::as_str)
            .unwrap_or(&a.ns.namespace)
            .to_string();
        let events = c
            .pods
            .events(api::EventsRequest {
                namespace,
                name: name.clone(),
            })
            .await
            .map_err(|s| KubeError::from_status(s, &name))?
            .into_inner()
            .event_json
            .iter()
            .filter_map(|j| serde_json::from_str(j).ok())
            .collect::<Vec<serde_json::Value>>();
        if !first {
            println!("\n");
        }
        first = false;
        print!("{}", describe::describe_pod(&pod, &events, now));
    }
    Ok(())
}
