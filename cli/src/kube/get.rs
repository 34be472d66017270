//! `peapod get pods [NAME...] [-o wide|json|yaml|name] [-A]`.

use super::{parse_pod, pod_names, table, time, yaml, Clients, KubeError, NamespaceArg};
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
    /// Only pods whose labels match (`k=v`, `k!=v`, `k`, `!k`, comma-separated).
    #[arg(short = 'l', long = "selector")]
    pub selector: Option<String>,
    /// Add a LABELS column.
    #[arg(long = "show-labels")]
    pub show_labels: bool,
    /// After the table, print a row whenever a pod changes (until interrupted).
    #[arg(short = 'w', long)]
    pub watch: bool,
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
    let names = pod_names(&a.resource, &a.names)?;
    let output = a.output.as_deref().unwrap_or("");
    if !matches!(output, "" | "wide" | "json" | "yaml" | "name") {
        return Err(KubeError::Usage(format!(
            "unable to match a printer suitable for the output format \"{output}\", allowed formats are: json,name,wide,yaml"
        ))
        .into());
    }
    let selector = super::selector::Selector::parse(a.selector.as_deref().unwrap_or(""))
        .map_err(KubeError::Usage)?;
    let single = names.len() == 1;
    let (mut pods, missing) = fetch(c, &a, &names, true).await?;
    pods.retain(|p| selector.matches(p));
    match output {
        "json" if single && !pods.is_empty() => println!("{}", to_json(&pods[0])),
        "yaml" if single && !pods.is_empty() => print!("{}", yaml::to_yaml(&pods[0])),
        "json" if !single => println!("{}", to_json(&as_list(pods.clone()))),
        "yaml" if !single => print!("{}", yaml::to_yaml(&as_list(pods.clone()))),
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
            table::render(
                &pods,
                table::Columns {
                    wide: output == "wide",
                    namespace: a.all_namespaces,
                    labels: a.show_labels,
                },
                time::now()
            )
        ),
    }
    if let Some(e) = missing {
        return Err(e.into());
    }
    if a.watch && matches!(output, "" | "wide") {
        watch(c, &a, &names, &selector, &pods, output == "wide").await?;
    }
    Ok(())
}

/// `-w`: polls once a second and prints the row of every pod that changed (its age aside),
/// aligned to the header's columns as kubectl's watch rows are.
async fn watch(
    c: &mut Clients,
    a: &GetArgs,
    names: &[String],
    selector: &super::selector::Selector,
    shown: &[Value],
    wide: bool,
) -> anyhow::Result<()> {
    use std::collections::HashMap;
    use std::io::Write;
    let key = |p: &Value| {
        let r = table::pod_row(p, 0);
        (r.namespace.clone(), r.name.clone())
    };
    let state = |p: &Value| {
        let mut r = table::pod_row(p, 0);
        r.age.clear();
        r.restarts = r.restarts.split(' ').next().unwrap_or("").to_string();
        r
    };
    let mut last: HashMap<(String, String), table::PodRow> =
        shown.iter().map(|p| (key(p), state(p))).collect();
    let columns = table::Columns {
        wide,
        namespace: a.all_namespaces,
        labels: a.show_labels,
    };
    loop {
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
        let (mut pods, _) = fetch(c, a, names, false).await?;
        pods.retain(|p| selector.matches(p));
        for p in &pods {
            let now_state = state(p);
            if last.get(&key(p)) == Some(&now_state) {
                continue;
            }
            last.insert(key(p), now_state);
            let text = table::render(std::slice::from_ref(p), columns, time::now());
            if let Some(row) = text.lines().nth(1) {
                let mut out = std::io::stdout().lock();
                writeln!(out, "{row}")?;
                out.flush()?;
            }
        }
    }
}

/// The pods asked for (all of the namespace without names) and the first NotFound, kubectl
/// printing the others as it goes (when `report`).
async fn fetch(
    c: &mut Clients,
    a: &GetArgs,
    names: &[String],
    report: bool,
) -> anyhow::Result<(Vec<Value>, Option<KubeError>)> {
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
        for name in names {
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
                        if report {
                            eprintln!("{e}");
                        }
                    }
                }
            }
        }
    }
    Ok((pods, missing))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_is_indented_by_four_spaces_as_kubectl() {
        let v = json!({"kind": "Pod", "metadata": {"name": "war"}});
        assert_eq!(
            to_json(&v),
            "{\n    \"kind\": \"Pod\",\n    \"metadata\": {\n        \"name\": \"war\"\n    }\n}"
        );
    }

    #[test]
    fn several_pods_print_as_a_list() {
        let list = as_list(vec![json!({"metadata": {"name": "a"}})]);
        assert_eq!(list["kind"], "List");
        assert_eq!(list["apiVersion"], "v1");
        assert_eq!(list["items"][0]["metadata"]["name"], "a");
        assert_eq!(list["metadata"]["resourceVersion"], "");
    }
}
