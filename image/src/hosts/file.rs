//! One `hosts.toml`, read as containerd reads it (`core/remotes/docker/config/hosts.go`): the
//! `[host."URL"]` tables in the order the file has them, each tried before the `server`, whose
//! settings are the file's top-level keys. Stricter than containerd in one way: a file that
//! does not parse, a key that is not one of containerd's or a value of the wrong type is an
//! error naming the file and the field, where containerd logs it and falls back to the
//! directory's certificate files (a typo there would silently drop a CA or a mirror).

use super::{Capabilities, HostEntry};
use crate::Error;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The entries of `text` (the file at `file`, in the host directory `dir`): hosts first, in
/// file order, then the server.
pub(super) fn parse(file: &Path, dir: &Path, text: &str) -> Result<Vec<HostEntry>, Error> {
    let bad = |field: &str, message: String| Error::HostsConfig {
        file: file.to_path_buf(),
        field: field.to_string(),
        message,
    };
    #[derive(serde::Deserialize)]
    struct Doc {
        #[serde(default)]
        host: BTreeMap<String, toml::Spanned<toml::Table>>,
        #[serde(flatten)]
        top: toml::Table,
    }
    let doc: Doc = toml::from_str(text).map_err(|e| bad("", format!("not TOML: {e}")))?;
    // containerd tries hosts in the order the file lists them; a BTreeMap sorts them by name,
    // so the tables' positions in the text put them back in order.
    let mut hosts: Vec<(&String, &toml::Spanned<toml::Table>)> = doc.host.iter().collect();
    hosts.sort_by_key(|(_, t)| t.span().start);
    let mut out = Vec::with_capacity(hosts.len() + 1);
    for (url, table) in hosts {
        let field = format!("host.{url:?}");
        let mut entry = fields(table.get_ref(), dir, &field, &bad)?;
        let (scheme, host, path) =
            server_url(url, entry.override_path).map_err(|m| bad(&field, m))?;
        entry.scheme = Some(scheme);
        entry.host = Some(host);
        entry.path = path;
        entry.file = file.to_path_buf();
        entry.field = field;
        out.push(entry);
    }
    let mut top = doc.top;
    let server = match top.remove("server") {
        None => None,
        Some(toml::Value::String(s)) if !s.is_empty() => Some(s),
        Some(toml::Value::String(_)) => None,
        Some(v) => {
            return Err(bad(
                "server",
                format!("must be a string, not {}", v.type_str()),
            ))
        }
    };
    let mut entry = fields(&top, dir, "", &bad)?;
    entry.server = true;
    entry.file = file.to_path_buf();
    if let Some(s) = server {
        let (scheme, host, path) =
            server_url(&s, entry.override_path).map_err(|m| bad("server", m))?;
        entry.scheme = Some(scheme);
        entry.host = Some(host);
        entry.path = path;
    }
    out.push(entry);
    Ok(out)
}

/// `https://host[:port][/path]` (scheme https when none is given) -> (scheme, host, API root
/// path): `/v2` appended to the path unless it ends so, or `override_path` says the path is
/// the API root itself.
fn server_url(s: &str, override_path: bool) -> Result<(String, String, String), String> {
    let with_scheme = if s.starts_with("http://") || s.starts_with("https://") {
        s.to_string()
    } else if s.contains("://") {
        return Err(format!("{s:?}: only http and https are spoken"));
    } else {
        format!("https://{s}")
    };
    let u = reqwest::Url::parse(&with_scheme).map_err(|e| format!("{s:?} is not a URL: {e}"))?;
    let host = match (u.host_str(), u.port()) {
        (Some(h), Some(p)) => format!("{h}:{p}"),
        (Some(h), None) => h.to_string(),
        (None, _) => return Err(format!("{s:?} has no host")),
    };
    if u.query().is_some() || !u.username().is_empty() {
        return Err(format!(
            "{s:?}: a server is scheme://host[:port][/path], nothing more"
        ));
    }
    let mut path = u.path().trim_end_matches('/').to_string();
    if !override_path && !path.ends_with("/v2") {
        path.push_str("/v2");
    }
    Ok((u.scheme().to_string(), host, path))
}

/// The keys one host may have (the server's are the file's top level), checked by name and
/// type. Relative paths are relative to the host directory, as containerd makes them.
fn fields(
    t: &toml::Table,
    dir: &Path,
    prefix: &str,
    bad: &dyn Fn(&str, String) -> Error,
) -> Result<HostEntry, Error> {
    let name = |key: &str| {
        if prefix.is_empty() {
            key.to_string()
        } else {
            format!("{prefix}.{key}")
        }
    };
    let path_of = |p: &str| -> PathBuf {
        let p = Path::new(p);
        if p.is_absolute() {
            p.to_path_buf()
        } else {
            dir.join(p)
        }
    };
    let string_list = |key: &str, v: &toml::Value| -> Result<Vec<String>, Error> {
        match v {
            toml::Value::String(s) => Ok(vec![s.clone()]),
            toml::Value::Array(a) => a
                .iter()
                .enumerate()
                .map(|(i, x)| match x {
                    toml::Value::String(s) => Ok(s.clone()),
                    other => Err(bad(
                        &format!("{}[{i}]", name(key)),
                        format!("must be a string, not {}", other.type_str()),
                    )),
                })
                .collect(),
            other => Err(bad(
                &name(key),
                format!(
                    "must be a string or a list of strings, not {}",
                    other.type_str()
                ),
            )),
        }
    };
    let mut e = HostEntry::default();
    for (key, v) in t {
        match key.as_str() {
            "capabilities" => {
                let mut caps = Capabilities::default();
                for c in string_list(key, v)? {
                    match c.to_ascii_lowercase().as_str() {
                        "pull" => caps.pull = true,
                        "resolve" => caps.resolve = true,
                        // Pushes are not a runtime's business; accepted so that a file written
                        // for containerd reads the same.
                        "push" => {}
                        other => {
                            return Err(bad(
                                &name(key),
                                format!("unknown capability {other:?} (pull, resolve, push)"),
                            ))
                        }
                    }
                }
                e.capabilities = Some(caps);
            }
            "ca" => e.tls.ca = string_list(key, v)?.iter().map(|p| path_of(p)).collect(),
            "client" => e.tls.client = client_pairs(v, &name(key), &path_of, bad)?,
            "skip_verify" => match v {
                toml::Value::Boolean(b) => e.tls.skip_verify = Some(*b),
                other => {
                    return Err(bad(
                        &name(key),
                        format!("must be true or false, not {}", other.type_str()),
                    ))
                }
            },
            "override_path" => match v {
                toml::Value::Boolean(b) => e.override_path = *b,
                other => {
                    return Err(bad(
                        &name(key),
                        format!("must be true or false, not {}", other.type_str()),
                    ))
                }
            },
            "dial_timeout" => match v {
                toml::Value::String(s) => {
                    let d = peapod_host::duration::parse_go(s).ok_or_else(|| {
                        bad(
                            &name(key),
                            format!("{s:?} is not a duration such as \"500ms\", \"5s\" or \"1m30s\""),
                        )
                    })?;
                    e.tls.dial_timeout = Some(d);
                }
                other => {
                    return Err(bad(
                        &name(key),
                        format!("must be a duration such as \"5s\", not {}", other.type_str()),
                    ))
                }
            },
            "header" => {
                let toml::Value::Table(h) = v else {
                    return Err(bad(&name(key), "must be a table of header names".into()));
                };
                for (hk, hv) in h {
                    let field = format!("{}.{hk}", name(key));
                    reqwest::header::HeaderName::from_bytes(hk.as_bytes())
                        .map_err(|_| bad(&field, "not a valid HTTP header name".into()))?;
                    for value in string_list(&format!("{key}.{hk}"), hv)? {
                        reqwest::header::HeaderValue::from_str(&value)
                            .map_err(|_| bad(&field, "not a valid HTTP header value".into()))?;
                        e.headers.push((hk.clone(), value));
                    }
                }
            }
            other => {
                return Err(bad(
                    &name(other),
                    "unknown key (containerd's are server, capabilities, ca, client, skip_verify, header, override_path, dial_timeout and [host.\"URL\"] tables)".into(),
                ))
            }
        }
    }
    Ok(e)
}

/// `client`: "both.pem" | ["a.pem", "b.pem"] | [["cert.pem", "key.pem"], ...].
fn client_pairs(
    v: &toml::Value,
    field: &str,
    path_of: &dyn Fn(&str) -> PathBuf,
    bad: &dyn Fn(&str, String) -> Error,
) -> Result<Vec<(PathBuf, Option<PathBuf>)>, Error> {
    let shape = "a file, a list of files, or a list of [cert, key] pairs";
    match v {
        toml::Value::String(s) => Ok(vec![(path_of(s), None)]),
        toml::Value::Array(a) => a
            .iter()
            .enumerate()
            .map(|(i, x)| match x {
                toml::Value::String(s) => Ok((path_of(s), None)),
                toml::Value::Array(pair) => match pair.as_slice() {
                    [toml::Value::String(c), toml::Value::String(k)] => {
                        Ok((path_of(c), Some(path_of(k))))
                    }
                    _ => Err(bad(
                        &format!("{field}[{i}]"),
                        "a pair must be two file names, [cert, key]".into(),
                    )),
                },
                other => Err(bad(
                    &format!("{field}[{i}]"),
                    format!("must be {shape}, not {}", other.type_str()),
                )),
            })
            .collect(),
        other => Err(bad(
            field,
            format!("must be {shape}, not {}", other.type_str()),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn parse_ok(text: &str) -> Vec<HostEntry> {
        parse(Path::new("/c/h/hosts.toml"), Path::new("/c/h"), text).unwrap()
    }

    fn parse_err(text: &str) -> String {
        parse(Path::new("/c/h/hosts.toml"), Path::new("/c/h"), text)
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn containerd_example_reads_in_file_order() {
        let hosts = parse_ok(
            r#"
server = "https://registry.example:5000"
ca = "ca.crt"
client = [["/abs/client.cert", "client.key"]]

[host."https://zz-mirror.example"]
  capabilities = ["pull", "resolve"]
  ca = ["m1.crt", "/etc/m2.crt"]
  skip_verify = true
  [host."https://zz-mirror.example".header]
    x-custom = "a"
    x-list = ["b", "c"]

[host."http://aa-mirror.example:8080/prefix"]
  capabilities = ["pull"]
  client = "both.pem"

[host."https://raw.example/api/v2x"]
  override_path = true
  dial_timeout = "1m30s"
"#,
        );
        assert_eq!(hosts.len(), 4);
        let h = &hosts[0];
        assert_eq!(h.host.as_deref(), Some("zz-mirror.example"));
        assert_eq!(h.scheme.as_deref(), Some("https"));
        assert_eq!(h.path, "/v2");
        assert_eq!(
            h.capabilities,
            Some(Capabilities {
                pull: true,
                resolve: true
            })
        );
        assert_eq!(
            h.tls.ca,
            vec![PathBuf::from("/c/h/m1.crt"), PathBuf::from("/etc/m2.crt")]
        );
        assert_eq!(h.tls.skip_verify, Some(true));
        assert_eq!(
            h.headers,
            vec![
                ("x-custom".to_string(), "a".to_string()),
                ("x-list".into(), "b".into()),
                ("x-list".into(), "c".into())
            ]
        );
        let h = &hosts[1];
        assert_eq!(h.host.as_deref(), Some("aa-mirror.example:8080"));
        assert_eq!(h.scheme.as_deref(), Some("http"));
        assert_eq!(h.path, "/prefix/v2");
        assert_eq!(
            h.capabilities,
            Some(Capabilities {
                pull: true,
                resolve: false
            })
        );
        assert_eq!(h.tls.client, vec![(PathBuf::from("/c/h/both.pem"), None)]);
        let h = &hosts[2];
        assert_eq!(h.path, "/api/v2x");
        assert_eq!(h.tls.dial_timeout, Some(Duration::from_secs(90)));
        let s = &hosts[3];
        assert!(s.server);
        assert_eq!(s.host.as_deref(), Some("registry.example:5000"));
        assert_eq!(s.tls.ca, vec![PathBuf::from("/c/h/ca.crt")]);
        assert_eq!(
            s.tls.client,
            vec![(
                PathBuf::from("/abs/client.cert"),
                Some(PathBuf::from("/c/h/client.key"))
            )]
        );
        assert_eq!(s.capabilities, None);
    }

    #[test]
    fn no_server_leaves_the_host_to_the_reference() {
        let hosts = parse_ok("ca = \"ca.crt\"\n");
        assert_eq!(hosts.len(), 1);
        assert!(hosts[0].server && hosts[0].host.is_none());
        assert!(parse_ok("")[0].host.is_none());
        assert_eq!(
            parse_ok("server = \"plain.example\"\n")[0]
                .scheme
                .as_deref(),
            Some("https")
        );
    }

    #[test]
    fn bad_input_names_file_and_field() {
        for (text, field) in [
            ("server = [\n", "/c/h/hosts.toml: not TOML"),
            ("sever = \"x\"\n", "/c/h/hosts.toml: sever: unknown key"),
            ("ca = 3\n", "/c/h/hosts.toml: ca: must be a string"),
            (
                "ca = [\"a\", 3]\n",
                "/c/h/hosts.toml: ca[1]: must be a string",
            ),
            (
                "[host.\"https://m\"]\ncapabilities = [\"pull\", \"fetch\"]\n",
                "host.\"https://m\".capabilities: unknown capability \"fetch\"",
            ),
            (
                "[host.\"https://m\"]\nclient = [[\"only-one\"]]\n",
                "host.\"https://m\".client[0]: a pair must be two file names",
            ),
            (
                "skip_verify = \"yes\"\n",
                "skip_verify: must be true or false",
            ),
            (
                "dial_timeout = \"soon\"\n",
                "dial_timeout: \"soon\" is not a duration",
            ),
            (
                "server = \"ftp://x\"\n",
                "server: \"ftp://x\": only http and https",
            ),
            (
                "[header]\n\"bad header\" = \"v\"\n",
                "header.bad header: not a valid HTTP header name",
            ),
        ] {
            let e = parse_err(text);
            assert!(e.contains(field), "{text:?}: {e}");
        }
    }
}
