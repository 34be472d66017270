//! Manifest parsing: YAML (one or more documents) or JSON into core/v1 Pods, strictly.
//!
//! k8s-openapi's types accept unknown fields silently, so strictness is checked by
//! re-serialising the parsed Pod and reporting any input key that did not survive, with its
//! path (`spec.containers[0].imagee`), as the API server's strict decoding does.

use k8s_openapi::api::core::v1::Pod;
use serde_json::Value;
use thiserror::Error;

#[derive(Debug, Error, PartialEq, Eq)]
pub enum ManifestError {
    #[error("{source_name}: not UTF-8 text")]
    NotUtf8 { source_name: String },
    #[error("{source_name}: {message}")]
    Syntax {
        source_name: String,
        message: String,
    },
    #[error("{source_name}: document {index}: {message}")]
    Document {
        source_name: String,
        index: usize,
        message: String,
    },
    #[error("{source_name}: no Pod in the manifest")]
    Empty { source_name: String },
}

/// Splits `bytes` into documents (empty documents skipped) as JSON values.
pub fn documents(bytes: &[u8], source_name: &str) -> Result<Vec<Value>, ManifestError> {
    let text = std::str::from_utf8(bytes).map_err(|_| ManifestError::NotUtf8 {
        source_name: source_name.into(),
    })?;
    let trimmed = text.trim_start();
    let docs: Vec<Value> = if trimmed.starts_with('{') {
        // JSON: one object, or several concatenated.
        serde_json::Deserializer::from_str(text)
            .into_iter::<Value>()
            .collect::<Result<_, _>>()
            .map_err(|e| ManifestError::Syntax {
                source_name: source_name.into(),
                message: format!("invalid JSON: {e}"),
            })?
    } else {
        serde_saphyr::from_multiple::<Value>(text).map_err(|e| ManifestError::Syntax {
            source_name: source_name.into(),
            message: format!("invalid YAML: {e}"),
        })?
    };
    let docs: Vec<Value> = docs.into_iter().filter(|d| !d.is_null()).collect();
    if docs.is_empty() {
        return Err(ManifestError::Empty {
            source_name: source_name.into(),
        });
    }
    Ok(docs)
}

/// Parses one document into a Pod: `apiVersion: v1`, `kind: Pod`, no unknown field. The
/// status, if any, is dropped (the supervisor owns it), as the API server does on create.
pub fn pod_from_value(mut doc: Value) -> Result<Pod, String> {
    let obj = doc
        .as_object_mut()
        .ok_or_else(|| "a manifest document must be a mapping".to_string())?;
    let kind = obj.get("kind").and_then(Value::as_str).unwrap_or("");
    let api_version = obj.get("apiVersion").and_then(Value::as_str).unwrap_or("");
    if kind.is_empty() {
        return Err("kind: Required value: only kind Pod is supported".into());
    }
    if kind != "Pod" {
        return Err(format!(
            "kind: Unsupported value: {kind:?}: only kind Pod can be applied here (no API server or controllers run on this node)"
        ));
    }
    if api_version != "v1" {
        return Err(format!(
            "apiVersion: Unsupported value: {api_version:?}: supported values: \"v1\""
        ));
    }
    obj.remove("status");
    quantities_as_strings(&mut doc);
    // The path of a wrongly typed value (`spec.containers[1].name: invalid type: boolean`,
    // YAML's `y`/`no` being booleans) is what makes such an error findable.
    let pod: Pod = serde_path_to_error::deserialize(doc.clone()).map_err(|e| {
        let path = e.path().to_string();
        if path.is_empty() || path == "." {
            e.inner().to_string()
        } else {
            format!("{path}: {}", e.inner())
        }
    })?;
    let back = serde_json::to_value(&pod).map_err(|e| format!("{e}"))?;
    let mut unknown = Vec::new();
    unknown_fields(&doc, &back, "", &mut unknown);
    if !unknown.is_empty() {
        let list: Vec<String> = unknown
            .iter()
            .map(|p| format!("unknown field \"{p}\""))
            .collect();
        return Err(format!("strict decoding error: {}", list.join(", ")));
    }
    Ok(pod)
}

/// The (namespace, name) of every Pod in a manifest, for clients (`delete -f FILE`): the same
/// parsing and checks as apply, without defaulting or validation of the spec.
pub fn pod_names(
    bytes: &[u8],
    source_name: &str,
    default_namespace: &str,
) -> Result<Vec<(String, String)>, ManifestError> {
    let mut out = Vec::new();
    for (i, doc) in documents(bytes, source_name)?.into_iter().enumerate() {
        let pod = pod_from_value(doc).map_err(|message| ManifestError::Document {
            source_name: source_name.into(),
            index: i + 1,
            message,
        })?;
        let ns = pod
            .metadata
            .namespace
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| default_namespace.to_string());
        out.push((ns, pod.metadata.name.unwrap_or_default()));
    }
    Ok(out)
}

/// Keys of `input` (recursively) that `parsed` lacks; `path` is the dotted path so far.
fn unknown_fields(input: &Value, parsed: &Value, path: &str, out: &mut Vec<String>) {
    match (input, parsed) {
        (Value::Object(i), Value::Object(p)) => {
            for (k, v) in i {
                let sub = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                };
                match p.get(k) {
                    Some(pv) => unknown_fields(v, pv, &sub, out),
                    // Null or empty values may be dropped by serialisation; nothing is lost.
                    None if is_empty(v) => {}
                    None => out.push(sub),
                }
            }
        }
        (Value::Array(i), Value::Array(p)) => {
            for (n, (iv, pv)) in i.iter().zip(p.iter()).enumerate() {
                unknown_fields(iv, pv, &format!("{path}[{n}]"), out);
            }
        }
        _ => {}
    }
}

fn is_empty(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Object(o) => o.is_empty(),
        Value::Array(a) => a.is_empty(),
        _ => false,
    }
}

/// YAML `cpu: 1` and `memory: 1024` are numbers; Kubernetes quantities accept them.
fn quantities_as_strings(doc: &mut Value) {
    fn stringify_map(v: Option<&mut Value>) {
        if let Some(Value::Object(m)) = v {
            for q in m.values_mut() {
                if let Value::Number(n) = q {
                    *q = Value::String(n.to_string());
                }
            }
        }
    }
    let Some(spec) = doc.get_mut("spec") else {
        return;
    };
    stringify_map(spec.get_mut("overhead"));
    for list in ["containers", "initContainers"] {
        if let Some(Value::Array(cs)) = spec.get_mut(list) {
            for c in cs {
                if let Some(r) = c.get_mut("resources") {
                    for k in ["requests", "limits"] {
                        stringify_map(r.get_mut(k));
                    }
                }
            }
        }
    }
    if let Some(Value::Array(vols)) = spec.get_mut("volumes") {
        for v in vols {
            if let Some(Value::Object(ed)) = v.get_mut("emptyDir") {
                if let Some(q @ Value::Number(_)) = ed.get_mut("sizeLimit") {
                    *q = Value::String(q.to_string());
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TWO: &str = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: a\nspec:\n  containers:\n  - name: c\n    image: busybox:1\n    resources:\n      limits:\n        cpu: 1\n        memory: 64Mi\n---\n---\napiVersion: v1\nkind: Pod\nmetadata:\n  name: b\nspec:\n  containers:\n  - name: c\n    image: busybox:1\n";

    #[test]
    fn several_yaml_documents_and_numeric_quantities() {
        let docs = documents(TWO.as_bytes(), "t.yaml").unwrap();
        assert_eq!(docs.len(), 2);
        let a = pod_from_value(docs[0].clone()).unwrap();
        assert_eq!(a.metadata.name.as_deref(), Some("a"));
        let c = &a.spec.unwrap().containers[0];
        let limits = c.resources.as_ref().unwrap().limits.as_ref().unwrap();
        assert_eq!(limits["cpu"].0, "1");
    }

    #[test]
    fn names_for_clients() {
        let y = format!("{TWO}---\napiVersion: v1\nkind: Pod\nmetadata: {{name: c, namespace: other}}\nspec: {{containers: []}}\n");
        assert_eq!(
            pod_names(y.as_bytes(), "t", "ns").unwrap(),
            [
                ("ns".to_string(), "a".to_string()),
                ("ns".into(), "b".into()),
                ("other".into(), "c".into())
            ]
        );
        assert!(matches!(
            pod_names(b"apiVersion: v1\nkind: Service\n", "t", "ns"),
            Err(ManifestError::Document { index: 1, .. })
        ));
    }

    #[test]
    fn json_is_accepted() {
        let j = r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"j"},"spec":{"containers":[{"name":"c","image":"x:1"}]}}"#;
        let docs = documents(j.as_bytes(), "t.json").unwrap();
        assert_eq!(
            pod_from_value(docs[0].clone())
                .unwrap()
                .metadata
                .name
                .as_deref(),
            Some("j")
        );
    }

    #[test]
    fn unknown_fields_are_named_with_their_path() {
        let y = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: a\nspec:\n  containers:\n  - name: c\n    imagee: busybox\n";
        let docs = documents(y.as_bytes(), "t").unwrap();
        let e = pod_from_value(docs[0].clone()).unwrap_err();
        assert!(
            e.contains("unknown field \"spec.containers[0].imagee\""),
            "{e}"
        );
        let y = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: a\n  labelz: {x: y}\nspec:\n  containers: []\n";
        let e = pod_from_value(documents(y.as_bytes(), "t").unwrap().remove(0)).unwrap_err();
        assert!(e.contains("metadata.labelz"), "{e}");
    }

    #[test]
    fn other_kinds_and_bad_syntax_are_refused() {
        let y = "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: d\n";
        let e = pod_from_value(documents(y.as_bytes(), "t").unwrap().remove(0)).unwrap_err();
        assert!(
            e.contains("Deployment") && e.contains("only kind Pod"),
            "{e}"
        );
        assert!(matches!(
            documents(b"a: [\n", "t"),
            Err(ManifestError::Syntax { .. })
        ));
        assert!(matches!(
            documents(b"", "t"),
            Err(ManifestError::Empty { .. })
        ));
        assert!(matches!(
            documents(&[0xff, 0xfe], "t"),
            Err(ManifestError::NotUtf8 { .. })
        ));
    }

    #[test]
    fn wrongly_typed_values_name_their_path() {
        // YAML 1.1 (as kubectl reads it) makes `y` a boolean.
        let y = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: a\nspec:\n  containers:\n  - name: x\n  - name: y\n";
        let e = pod_from_value(documents(y.as_bytes(), "t").unwrap().remove(0)).unwrap_err();
        assert!(
            e.starts_with("spec.containers[1].name: invalid type: boolean"),
            "{e}"
        );
    }

    #[test]
    fn status_in_the_input_is_ignored() {
        let y = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: a\nspec:\n  containers:\n  - name: c\n    image: x:1\nstatus:\n  phase: Running\n";
        let p = pod_from_value(documents(y.as_bytes(), "t").unwrap().remove(0)).unwrap();
        assert!(p.status.is_none());
    }
}
