//! JSON as YAML in kubectl's `-o yaml` style (go-yaml v2 via sigs.k8s.io/yaml): keys sorted,
//! two-space indentation, sequences at their key's indentation, strings quoted only when a
//! plain scalar would read back as something else.

use serde_json::Value;

/// `value` as a YAML document (ends with a newline).
pub fn to_yaml(value: &Value) -> String {
    let mut out = String::new();
    match value {
        Value::Object(m) if !m.is_empty() => write_map(m, 0, &mut out),
        Value::Array(a) if !a.is_empty() => write_seq(a, 0, &mut out),
        other => {
            out.push_str(&scalar(other));
            out.push('\n');
        }
    }
    out
}

fn indent(n: usize, out: &mut String) {
    out.extend(std::iter::repeat_n(' ', n));
}

fn sorted(m: &serde_json::Map<String, Value>) -> Vec<(&String, &Value)> {
    let mut v: Vec<_> = m.iter().collect();
    v.sort_by(|a, b| a.0.cmp(b.0));
    v
}

fn write_map(m: &serde_json::Map<String, Value>, level: usize, out: &mut String) {
    for (i, (k, v)) in sorted(m).into_iter().enumerate() {
        // The first key of a map inside a sequence item follows the "- " already written.
        if i > 0 || !out.ends_with("- ") {
            indent(level, out);
        }
        out.push_str(&string(k));
        out.push(':');
        write_value_after_key(v, level, out);
    }
}

fn write_value_after_key(v: &Value, level: usize, out: &mut String) {
    match v {
        Value::Object(m) if !m.is_empty() => {
            out.push('\n');
            write_map(m, level + 2, out);
        }
        Value::Array(a) if !a.is_empty() => {
            out.push('\n');
            write_seq(a, level, out);
        }
        other => {
            out.push(' ');
            out.push_str(&scalar(other));
            out.push('\n');
        }
    }
}

fn write_seq(a: &[Value], level: usize, out: &mut String) {
    for (i, item) in a.iter().enumerate() {
        // The first item of a sequence inside a sequence item follows the outer "- ".
        if i > 0 || !out.ends_with("- ") {
            indent(level, out);
        }
        out.push_str("- ");
        match item {
            Value::Object(m) if !m.is_empty() => write_map(m, level + 2, out),
            Value::Array(inner) if !inner.is_empty() => write_seq(inner, level + 2, out),
            other => {
                out.push_str(&scalar(other));
                out.push('\n');
            }
        }
    }
}

fn scalar(v: &Value) -> String {
    match v {
        Value::Null => "null".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => string(s),
        Value::Array(_) => "[]".into(),
        Value::Object(_) => "{}".into(),
    }
}

/// A string as a plain scalar, or double-quoted (as go-yaml v2 quotes them, e.g. `"True"`,
/// `"3600"`, timestamps) when a plain scalar would read back as something else.
fn string(s: &str) -> String {
    if s.chars().any(|c| c.is_control()) || needs_quotes(s) {
        // JSON string escapes are valid in a YAML double-quoted scalar.
        return serde_json::to_string(s).unwrap_or_else(|_| format!("'{}'", s.replace('\'', "''")));
    }
    s.to_string()
}

fn needs_quotes(s: &str) -> bool {
    if s.is_empty() || s.starts_with(' ') || s.ends_with(' ') {
        return true;
    }
    let lower = s.to_ascii_lowercase();
    if matches!(
        lower.as_str(),
        "true" | "false" | "yes" | "no" | "on" | "off" | "y" | "n" | "null" | "~"
    ) {
        return true;
    }
    if looks_numeric(s) || looks_like_timestamp(s) {
        return true;
    }
    let first = s.chars().next().unwrap_or(' ');
    if "-?:,[]{}#&*!|>'\"%@`".contains(first) {
        // "-" alone or "- x" starts a sequence; a dash before a letter (e.g. "-c") is plain.
        let plain_dash = first == '-' && s.len() > 1 && !s[1..].starts_with(' ');
        if !plain_dash {
            return true;
        }
    }
    s.contains(": ") || s.contains(" #") || s.ends_with(':')
}

/// YAML 1.1 timestamps (`2026-11-30`, `2026-11-30T19:01:47Z`) would read back as times.
fn looks_like_timestamp(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() >= 10
        && b[..4].iter().all(u8::is_ascii_digit)
        && b[4] == b'-'
        && b[5..7].iter().all(u8::is_ascii_digit)
        && b[7] == b'-'
        && b[8..10].iter().all(u8::is_ascii_digit)
}

fn looks_numeric(s: &str) -> bool {
    let t = s.strip_prefix(['+', '-']).unwrap_or(s);
    if t.is_empty() {
        return false;
    }
    if t.parse::<f64>().is_ok() || matches!(t, ".inf" | ".Inf" | ".INF" | ".nan" | ".NaN") {
        return true;
    }
    t.starts_with("0x") || t.starts_with("0o")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn pod_shape_as_kubectl_prints_it() {
        let v = json!({
            "kind": "Pod",
            "apiVersion": "v1",
            "metadata": {"name": "war", "labels": {"app": "war"}, "annotations": {}},
            "spec": {"containers": [
                {"name": "web", "image": "busybox", "command": ["httpd", "-f", "-p", "8080"],
                 "ports": [{"containerPort": 8080}]}
            ], "volumes": []},
            "status": {"phase": "Running", "hostIP": "10.0.0.1"}
        });
        assert_eq!(
            to_yaml(&v),
            "apiVersion: v1\nkind: Pod\nmetadata:\n  annotations: {}\n  labels:\n    app: war\n  name: war\n\
             spec:\n  containers:\n  - command:\n    - httpd\n    - -f\n    - -p\n    - \"8080\"\n    image: busybox\n    name: web\n    ports:\n    - containerPort: 8080\n  volumes: []\n\
             status:\n  hostIP: 10.0.0.1\n  phase: Running\n"
        );
    }

    #[test]
    fn strings_that_would_change_meaning_are_quoted() {
        for (s, want) in [
            ("", "\"\""),
            ("true", "\"true\""),
            ("True", "\"True\""),
            ("10", "\"10\""),
            ("1.5", "\"1.5\""),
            ("a: b", "\"a: b\""),
            ("it's", "it's"),
            ("- x", "\"- x\""),
            ("*x", "\"*x\""),
            ("{x}", "\"{x}\""),
            ("2026-11-30T19:01:47Z", "\"2026-11-30T19:01:47Z\""),
            ("line\nnext", "\"line\\nnext\""),
            ("500m", "500m"),
            ("128Mi", "128Mi"),
            ("peapod://abc", "peapod://abc"),
        ] {
            assert_eq!(string(s), want, "{s:?}");
        }
    }

    #[test]
    fn nested_sequences_and_scalars() {
        let v = json!({"a": [[1, 2], "x"], "b": null, "c": false});
        assert_eq!(to_yaml(&v), "a:\n- - 1\n  - 2\n- x\nb: null\nc: false\n");
    }
}
