//! `peapod get pods [NAME...] [-o wide|json|yaml|name] [-A]`.

use super::{
    check_resource, parse_pod, split_slash, table, time, yaml, Clients, KubeError, NamespaceArg,
};
use peapod_proto::pods as api;
use serde::Serialize;
use serde_json::{json, Value};

#[derive(clap::Args, Debug)]
pub struct GetArgs {
    /// `pods` (also `pod`, `po`, or `pod/NAME`).
    pub resource: String,
    /// Pod names (all pods of the namespace without one).
    pub names: Vec<String>,
    /// Output format: wide, json, yaml or name.
    #[arg(short = 'o', long = "output")]
    pub output: Option<String>,
    /// Pods of every namespace.
    #[arg(short = 'A', long = "all-namespaces")]
    pub all_namespaces: bool,
    #[command(flatten)]
    pub ns: NamespaceArg,
}

/// JSON with four-space indentation, as kubectl prints it.
pub fn to_json(v: &Value) -> String {
    let mut buf = Vec::new();
    let fmt = serde_json::ser::PrettyFormatter::with_indent(b"    ");
    let mut ser = serde_json::Serializer::with_formatter(&mut buf, fmt);
    if v.serialize(&mut ser).is_err() {
        return v.to_string();
    }
    String::from_utf8_lossy(&buf).into_owned()
}

/// What kubectl prints for a list of objects in json/yaml: a `List`.
fn as_list(pods: Vec<Value>) -> Value {
    json!({"apiVersion": "v1", "items": pods, "kind": "List", "metadata": {"resourceVersion": ""}})
}

pub async fn run(c: &mut Clients, a: GetArgs) -> anyhow::Result<()> {
    let mut names = a.names.clone();
    match split_slash(&a.resource) {
        Some((kind, name)) => {
            check_resource(kind)?;
            names.insert(0, name.to_string());
        }
        None => check_resource(&a.resource)?,
    }
    let output = a.output.as_deref().unwrap_or("");
    if !matches!(output, "" | "wide" | "json" | "yaml" | "name") {
        return Err(KubeError::Usage(format!(
            "unable to match a printer suitable for the output format \"{output}\", allowed formats are: json,name,wide,yaml"
        ))
        .into());
    }
    let single = names.len() == 1;
    let mut pods = Vec::new();
    let mut missing = None;
    if names.is_empty() {
        let list = c
            .pods
            .list(api::ListRequest {
                namespace: a.ns.namespace.clone(),
                all_namespaces: a.all_namespaces,
            })
            .await
            .map_err(|s| KubeError::from_status(s, ""))?
            .into_inner();
        for j in &list.pod_json {
            pods.push(parse_pod(j)?);
        }
    } else {
        for name in &names {
            match c
                .pods
                .get(api::GetRequest {
                    namespace: a.ns.namespace.clone(),
                    name: name.clone(),
                })
                .await
            {
                Ok(r) => pods.push(parse_pod(&r.into_inner().pod_json)?),
                // kubectl prints what it found, then the error for what it did not.
                Err(s) => {
                    let e = KubeError::from_status(s, name);
                    if matches!(e, KubeError::PodNotFound(_)) && missing.is_none() {
                        missing = Some(e);
                    } else if !matches!(e, KubeError::PodNotFound(_)) {
                        return Err(e.into());
                    } else {
                        eprintln!("{e}");
                    }
                }
            }
        }
    }
    match output {
        "json" if single && !pods.is_empty() => println!("{}", to_json(&pods[0])),
        "yaml" if single && !pods.is_empty() => print!("{}", yaml::to_yaml(&pods[0])),
        "json" if !single => println!("{}", to_json(&as_list(pods))),
        "yaml" if !single => print!("{}", yaml::to_yaml(&as_list(pods))),
        "name" => {
            for p in &pods {
                let name = p
                    .pointer("/metadata/name")
                    .and_then(Value::as_str)
                    .unwrap_or("");
                println!("pod/{name}");
            }
        }
        _ if pods.is_empty() => {
            if missing.is_none() {
                if a.all_namespaces {
                    eprintln!("No resources found");
                } else {
                    eprintln!("No resources found in {} namespace.", a.ns.namespace);
                }
            }
        }
        _ => print!(
            "{}",
            table::render(&pods, output == "wide", a.all_namespaces, time::now())
        ),
    }
    match missing {
        Some(e) => Err(e.into()),
        None => Ok(()),
    }
}
