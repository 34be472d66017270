//! Reading manifests for `apply -f` and `delete -f`: files, directories (their *.yaml, *.yml
//! and *.json, sorted) and `-` for stdin; and, for `delete -f`, the pods a manifest names.

use anyhow::Context;
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

/// The pods named by the documents of a manifest (YAML, several documents, or JSON), parsed
/// as `apply` parses them (peapod-kubelet's manifest reader); a document of another kind, or a pod
/// without a name, is an error naming it.
pub fn pod_refs(bytes: &[u8], source: &str, default_ns: &str) -> anyhow::Result<Vec<PodRef>> {
    let names = peapod_kubelet::manifest::pod_names(bytes, source, default_ns)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    names
        .into_iter()
        .enumerate()
        .map(|(i, (namespace, name))| {
            if name.is_empty() {
                anyhow::bail!(
                    "{source}: document {}: metadata.name: Required value",
                    i + 1
                );
            }
            Ok(PodRef { namespace, name })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_from_yaml_documents_and_json() {
        let yaml = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: a\n---\napiVersion: v1\nkind: Pod\nmetadata:\n  name: b\n  namespace: other\n";
        assert_eq!(
            pod_refs(yaml.as_bytes(), "f", "default").unwrap(),
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
        assert_eq!(pod_refs(json.as_bytes(), "f", "ns").unwrap()[0].name, "j");
    }

    #[test]
    fn other_kinds_and_nameless_pods_are_refused() {
        let e = pod_refs(
            b"apiVersion: v1\nkind: Deployment\nmetadata:\n  name: d\n",
            "f.yaml",
            "default",
        )
        .unwrap_err();
        assert!(e.to_string().contains("Deployment"), "{e}");
        let e = pod_refs(
            b"apiVersion: v1\nkind: Pod\nmetadata: {}\n",
            "f.yaml",
            "default",
        )
        .unwrap_err();
        assert!(e.to_string().contains("metadata.name"), "{e}");
    }
}
