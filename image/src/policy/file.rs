//! A `policy.json` as containers-policy.json(5) has it (CRI-O's, podman's, skopeo's), read
//! strictly: an unknown requirement type, a key file that does not load, or a feature peapod
//! does not have yet (GPG's `signedBy`, keyless `fulcio`, Rekor, `remapIdentity`) is an error
//! naming the file and the field, never a requirement quietly dropped.
//!
//! Only the `docker` transport is used (pulls from registries); the other transports' scopes
//! are read for their shape and otherwise ignored.

use super::identity::SignedIdentity;
use super::pubkey::PublicKey;
use super::{Policy, Requirement};
use crate::Error;
use base64::Engine as _;
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use std::path::Path;

pub(super) fn parse(file: &Path, text: &[u8]) -> Result<Policy, Error> {
    let bad = |field: &str, message: String| Error::PolicyConfig {
        file: file.to_path_buf(),
        field: field.to_string(),
        message,
    };
    let doc: Value = serde_json::from_slice(text).map_err(|e| bad("", format!("not JSON: {e}")))?;
    let Value::Object(top) = doc else {
        return Err(bad("", "must be a JSON object".into()));
    };
    let mut default = None;
    let mut docker = BTreeMap::new();
    for (key, v) in &top {
        match key.as_str() {
            "default" => default = Some(requirements(v, "default", &bad)?),
            "transports" => {
                let Value::Object(transports) = v else {
                    return Err(bad("transports", "must be an object of transports".into()));
                };
                for (transport, scopes) in transports {
                    let Value::Object(scopes) = scopes else {
                        return Err(bad(
                            &format!("transports.{transport}"),
                            "must be an object of scopes".into(),
                        ));
                    };
                    for (scope, reqs) in scopes {
                        let field = format!("transports.{transport}.{scope:?}");
                        let reqs = requirements(reqs, &field, &bad)?;
                        if transport == "docker" {
                            docker.insert(scope.clone(), reqs);
                        }
                    }
                }
            }
            other => return Err(bad(other, "unknown key (default, transports)".into())),
        }
    }
    let default =
        default.ok_or_else(|| bad("default", "is required (containers-policy.json(5))".into()))?;
    Ok(Policy {
        file: file.to_path_buf(),
        default,
        docker,
    })
}

fn requirements(
    v: &Value,
    field: &str,
    bad: &dyn Fn(&str, String) -> Error,
) -> Result<Vec<Requirement>, Error> {
    let Value::Array(list) = v else {
        return Err(bad(field, "must be a list of requirements".into()));
    };
    if list.is_empty() {
        return Err(bad(
            field,
            "an empty list of requirements (say insecureAcceptAnything or reject)".into(),
        ));
    }
    list.iter()
        .enumerate()
        .map(|(i, r)| requirement(r, &format!("{field}[{i}]"), bad))
        .collect()
}

fn requirement(
    v: &Value,
    field: &str,
    bad: &dyn Fn(&str, String) -> Error,
) -> Result<Requirement, Error> {
    let Value::Object(o) = v else {
        return Err(bad(field, "must be an object with a \"type\"".into()));
    };
    let ty = o.get("type").and_then(Value::as_str).unwrap_or_default();
    let only = |allowed: &[&str]| -> Result<(), Error> {
        match o.keys().find(|k| !allowed.contains(&k.as_str())) {
            Some(k) => Err(bad(
                &format!("{field}.{k}"),
                format!("unknown key for a {ty} requirement"),
            )),
            None => Ok(()),
        }
    };
    match ty {
        "insecureAcceptAnything" => {
            only(&["type"])?;
            Ok(Requirement::AcceptAnything)
        }
        "reject" => {
            only(&["type"])?;
            Ok(Requirement::Reject)
        }
        "sigstoreSigned" => sigstore_signed(o, field, bad),
        "signedBy" => Err(bad(
            &format!("{field}.type"),
            "signedBy (GPG simple signing) is not supported; sign with cosign and use sigstoreSigned".into(),
        )),
        "" => Err(bad(&format!("{field}.type"), "missing".into())),
        other => Err(bad(
            &format!("{field}.type"),
            format!("unknown requirement {other:?} (insecureAcceptAnything, reject, sigstoreSigned)"),
        )),
    }
}

fn sigstore_signed(
    o: &Map<String, Value>,
    field: &str,
    bad: &dyn Fn(&str, String) -> Error,
) -> Result<Requirement, Error> {
    let sub = |k: &str| format!("{field}.{k}");
    for k in o.keys() {
        match k.as_str() {
            "type" | "keyPath" | "keyPaths" | "keyData" | "keyDatas" | "signedIdentity" => {}
            "fulcio" | "pki" => {
                return Err(bad(
                    &sub(k),
                    "keyless verification (Fulcio certificates) is not supported yet; give a public key (keyPath, keyData)".into(),
                ))
            }
            "rekorPublicKeyPath" | "rekorPublicKeyPaths" | "rekorPublicKeyData"
            | "rekorPublicKeyDatas" => {
                return Err(bad(
                    &sub(k),
                    "Rekor (transparency log) verification is not supported yet; sign with --tlog-upload=false and leave it out".into(),
                ))
            }
            other => return Err(bad(&sub(other), "unknown key for a sigstoreSigned requirement".into())),
        }
    }
    let string = |k: &str, v: &Value| -> Result<String, Error> {
        v.as_str()
            .map(str::to_string)
            .ok_or_else(|| bad(&sub(k), "must be a string".into()))
    };
    let strings = |k: &str, v: &Value| -> Result<Vec<String>, Error> {
        match v {
            Value::Array(a) if !a.is_empty() => a
                .iter()
                .enumerate()
                .map(|(i, x)| {
                    x.as_str()
                        .map(str::to_string)
                        .ok_or_else(|| bad(&format!("{}[{i}]", sub(k)), "must be a string".into()))
                })
                .collect(),
            _ => Err(bad(&sub(k), "must be a non-empty list of strings".into())),
        }
    };
    // Exactly one source of keys, as containers-policy.json(5) requires.
    let given: Vec<&str> = ["keyPath", "keyPaths", "keyData", "keyDatas"]
        .into_iter()
        .filter(|k| o.contains_key(*k))
        .collect();
    let (k, v) = match given.as_slice() {
        [k] => (*k, &o[*k]),
        [] => {
            return Err(bad(
                field,
                "a sigstoreSigned requirement needs a public key: keyPath, keyPaths, keyData or keyDatas".into(),
            ))
        }
        _ => {
            return Err(bad(
                field,
                format!("only one of keyPath, keyPaths, keyData, keyDatas may be given, not {}", given.join(" and ")),
            ))
        }
    };
    let mut keys = Vec::new();
    let load_path = |i: Option<usize>, p: &str| -> Result<PublicKey, Error> {
        let f = match i {
            Some(i) => format!("{}[{i}]", sub(k)),
            None => sub(k),
        };
        if !Path::new(p).is_absolute() {
            return Err(bad(&f, format!("{p:?} must be an absolute path")));
        }
        let pem = std::fs::read(p).map_err(|e| bad(&f, format!("{p}: cannot be read: {e}")))?;
        PublicKey::from_pem(&pem).map_err(|e| bad(&f, format!("{p}: {e}")))
    };
    let load_data = |i: Option<usize>, b64: &str| -> Result<PublicKey, Error> {
        let f = match i {
            Some(i) => format!("{}[{i}]", sub(k)),
            None => sub(k),
        };
        let pem = base64::engine::general_purpose::STANDARD
            .decode(b64.trim())
            .map_err(|e| bad(&f, format!("not base64 (of a PEM public key): {e}")))?;
        PublicKey::from_pem(&pem).map_err(|e| bad(&f, e))
    };
    match k {
        "keyPath" => keys.push(load_path(None, &string(k, v)?)?),
        "keyData" => keys.push(load_data(None, &string(k, v)?)?),
        "keyPaths" => {
            for (i, p) in strings(k, v)?.iter().enumerate() {
                keys.push(load_path(Some(i), p)?);
            }
        }
        _ => {
            for (i, d) in strings(k, v)?.iter().enumerate() {
                keys.push(load_data(Some(i), d)?);
            }
        }
    }
    let identity = match o.get("signedIdentity") {
        None => SignedIdentity::MatchRepoDigestOrExact,
        Some(v) => SignedIdentity::parse(v).map_err(|m| bad(&sub("signedIdentity"), m))?,
    };
    Ok(Requirement::SigstoreSigned { keys, identity })
}
