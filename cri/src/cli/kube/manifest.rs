//! Reading manifests for `apply -f` and `delete -f`: files, directories (their *.yaml, *.yml
//! and *.json, sorted) and `-` for stdin; and, for `delete -f`, the pods a manifest names.

use anyhow::Context;
use serde_json::Value;
use std::io::Read;
use std::path::{Path, PathBuf};

/// One manifest source and its bytes.
pub struct Source {
    pub name: String,
    pub bytes: Vec<u8>,
}

/// Expands `-f` arguments into sources, in order.
pub fn read_sources(files: &[String]) -> anyhow::Result<Vec<Source>> {
    let mut out = Vec::new();
    for f in files {
        if f == "-" {
            let mut bytes = Vec::new();
            std::io::stdin()
                .read_to_end(&mut bytes)
                .context("read the manifest from stdin")?;
            out.push(Source {
                name: "STDIN".into(),
                bytes,
            });
            continue;
        }
        let path = Path::new(f);
        if path.is_dir() {
            let mut entries: Vec<PathBuf> = std::fs::read_dir(path)
                .with_context(|| format!("read directory {f}"))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| {
                    p.is_file()
                        && matches!(
                            p.extension().and_then(|e| e.to_str()),
                            Some("yaml" | "yml" | "json")
                        )
                })
                .collect();
            entries.sort();
            for p in entries {
                let bytes = std::fs::read(&p).with_context(|| format!("read {}", p.display()))?;
                out.push(Source {
                    name: p.display().to_string(),
                    bytes,
                });
            }
            continue;
        }
        let bytes = std::fs::read(path)
            .with_context(|| format!("the path \"{f}\" does not exist or cannot be read"))?;
        out.push(Source {
            name: f.clone(),
            bytes,
        });
    }
    Ok(out)
}

/// A pod a manifest names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodRef {
    pub namespace: String,
    pub name: String,
}

/// The pods named by the documents of `text` (YAML, several documents, or JSON); a document
/// of another kind, or one without a name, is an error naming it.
pub fn pod_refs(text: &str, source: &str, default_ns: &str) -> anyhow::Result<Vec<PodRef>> {
    let docs: Vec<Value> = if text.trim_start().starts_with('{') {
        vec![serde_json::from_str(text).with_context(|| format!("parse {source} as JSON"))?]
    } else {
        serde_saphyr::from_multiple::<Value>(text)
            .map_err(|e| anyhow::anyhow!("parse {source} as YAML: {e}"))?
    };
    let mut out = Vec::new();
    for (i, doc) in docs.into_iter().enumerate() {
        if doc.is_null() {
            continue;
        }
        let kind = doc.get("kind").and_then(Value::as_str).unwrap_or("");
        if kind == "List" {
            if let Some(items) = doc.get("items").and_then(Value::as_array) {
                for item in items {
                    let item_text = serde_json::to_string(item)?;
                    out.extend(pod_refs(&item_text, source, default_ns)?);
                }
            }
            continue;
        }
        if kind != "Pod" {
            anyhow::bail!(
                "{source}: document {}: kind {kind:?} is not supported: peapod runs kind: Pod only",
                i + 1
            );
        }
        let name = doc
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty())
            .with_context(|| {
                format!(
                    "{source}: document {}: metadata.name: Required value",
                    i + 1
                )
            })?;
        let namespace = doc
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty())
            .unwrap_or(default_ns);
        out.push(PodRef {
            namespace: namespace.to_string(),
            name: name.to_string(),
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_from_yaml_documents_and_json() {
        let yaml = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: a\n---\napiVersion: v1\nkind: Pod\nmetadata:\n  name: b\n  namespace: other\n";
        assert_eq!(
            pod_refs(yaml, "f", "default").unwrap(),
            vec![
                PodRef {
                    namespace: "default".into(),
                    name: "a".into()
                },
                PodRef {
                    namespace: "other".into(),
                    name: "b".into()
                },
            ]
        );
        let json = r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"j"}}"#;
        assert_eq!(pod_refs(json, "f", "ns").unwrap()[0].name, "j");
    }

    #[test]
    fn other_kinds_and_nameless_pods_are_refused() {
        let e = pod_refs(
            "kind: Deployment\nmetadata:\n  name: d\n",
            "f.yaml",
            "default",
        )
        .unwrap_err();
        assert!(e.to_string().contains("Deployment"), "{e}");
        let e = pod_refs("kind: Pod\nmetadata: {}\n", "f.yaml", "default").unwrap_err();
        assert!(e.to_string().contains("metadata.name"), "{e}");
    }
}
