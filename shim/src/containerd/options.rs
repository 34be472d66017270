//! containerd's runtime options for a task, as runc-v2 reads them: which OCI runtime binary
//! (`BinaryName`), its state directory (`Root`) and whether it is run with `--systemd-cgroup`
//! (`SystemdCgroup`, what kubeadm-made nodes set).
//!
//! They arrive as a protobuf `Any`, on `start`'s stdin and in every CreateTaskRequest, in one of
//! two types:
//!
//! - `containerd.runc.v1.Options`: what a client of containerd's task API sends, and what the
//!   CRI plugin sends for `runtime_type = "io.containerd.runc.v2"` (so also with
//!   `runtime_path` naming this shim). Decoded here field by field (numbers from containerd's
//!   `api/types/runc/options/oci.proto`): a dozen-field message is no reason for generated code.
//! - `runtimeoptions.v1.Options`: what the CRI plugin sends for any other `runtime_type`, such
//!   as `io.containerd.peapod.v2`: containerd 1.7 and later put the runtime's `options` table
//!   in `config_body` (TOML), and `ConfigPath` in that table names a TOML file instead (which
//!   1.6, without `config_body`, needs; `ctr run --runtime-config-path` sends one too). The
//!   same keys are read from that TOML ([`toml_keys`]).
//!
//! Anything else a client sends is refused: options silently ignored are how a node ends up
//! with containers outside the cgroups it asked for.

use containerd_shim_protos::protobuf;
use containerd_shim_protos::protobuf::rt::WireType;
use containerd_shim_protos::protobuf::well_known_types::any::Any;
use containerd_shim_protos::protobuf::CodedInputStream;
use std::path::{Path, PathBuf};

pub const RUNC_OPTIONS: &str = "containerd.runc.v1.Options";
/// The OCI runtime without `BinaryName`: runc-compatible, on PATH.
const DEFAULT_BINARY: &str = "runc";
/// Where a shim's options are kept in each bundle, for `delete` after the shim is gone.
const SAVED: &str = "runtime-options.json";
pub const CRI_OPTIONS: &str = "runtimeoptions.v1.Options";
/// Bound of a `ConfigPath` file: it holds a few keys.
const MAX_CONFIG_FILE: u64 = 64 << 10;

/// The runtime options the shim honours; the default is runc on PATH, in containerd's state
/// directory of the namespace, with cgroupfs paths.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RuntimeOptions {
    /// `BinaryName`: the runc-compatible binary (a name looked up on PATH, or a path).
    pub binary: Option<String>,
    /// `Root`: the runtime's state directory, instead of `/run/containerd/runc/<namespace>`.
    pub root: Option<PathBuf>,
    /// `SystemdCgroup`: runc gets `--systemd-cgroup` (cgroupsPath `slice:prefix:name`).
    pub systemd_cgroup: bool,
}

impl RuntimeOptions {
    /// The runtime binary: `BinaryName`, else runc.
    pub fn binary(&self) -> &str {
        self.binary.as_deref().unwrap_or(DEFAULT_BINARY)
    }

    /// The runtime's state directory: `Root`, else runc-v2's for `namespace`
    /// (`/run/containerd/runc/<namespace>`, so that `runc --root … list` shows every container
    /// of the namespace, whichever shim runs it).
    pub fn root(&self, namespace: &str) -> PathBuf {
        self.root
            .clone()
            .unwrap_or_else(|| Path::new("/run/containerd/runc").join(namespace))
    }

    /// `serve`'s flags for these options ([`super::flags::Flags`] reads them).
    pub fn to_args(&self) -> Vec<String> {
        let mut args = Vec::new();
        if let Some(binary) = &self.binary {
            args.extend(["-runtime-binary".to_string(), binary.clone()]);
        }
        if let Some(root) = &self.root {
            args.extend(["-runtime-root".to_string(), root.display().to_string()]);
        }
        if self.systemd_cgroup {
            args.push("-systemd-cgroup".to_string());
        }
        args
    }

    /// Keeps these options in `bundle`, for [`RuntimeOptions::saved`].
    pub fn save(&self, bundle: &Path) -> Result<(), String> {
        let path = bundle.join(SAVED);
        let json =
            serde_json::to_vec(self).map_err(|e| format!("encode {}: {e}", path.display()))?;
        std::fs::write(&path, json).map_err(|e| format!("write {}: {e}", path.display()))
    }

    /// The options saved in `bundle` (the defaults where none were: a bundle of an older shim).
    pub fn saved(bundle: &Path) -> RuntimeOptions {
        std::fs::read(bundle.join(SAVED))
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default()
    }
}

impl std::fmt::Display for RuntimeOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.binary {
            Some(binary) => write!(f, "BinaryName {binary:?}")?,
            None => write!(f, "BinaryName unset ({DEFAULT_BINARY})")?,
        }
        match &self.root {
            Some(root) => write!(f, ", Root {:?}", root.display().to_string())?,
            None => write!(f, ", Root unset")?,
        }
        write!(f, ", SystemdCgroup {}", self.systemd_cgroup)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum OptionsError {
    #[error("runtime options of type {0:?} are not read by peapod's shim (it reads {RUNC_OPTIONS} and {CRI_OPTIONS})")]
    UnknownType(String),
    #[error("decode {type_url}: {source}")]
    Decode {
        type_url: &'static str,
        source: protobuf::Error,
    },
    #[error("runtime options file {path}: {source}")]
    ConfigFile {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("runtime options {origin}, line {line}: {message}")]
    Toml {
        origin: String,
        line: usize,
        message: String,
    },
}

/// The message name of a type URL (`type.googleapis.com/x.y.Z` and `x.y.Z` alike).
fn message_name(type_url: &str) -> &str {
    type_url.rsplit('/').next().unwrap_or(type_url)
}

/// Whether `any` holds runtime options (of either type) rather than something else.
pub fn is_runtime_options(any: &Any) -> bool {
    matches!(message_name(&any.type_url), RUNC_OPTIONS | CRI_OPTIONS)
}

/// The options in `any`; `None` for no options at all.
pub fn decode(any: Option<&Any>) -> Result<RuntimeOptions, OptionsError> {
    let Some(any) = any.filter(|a| !a.type_url.is_empty() || !a.value.is_empty()) else {
        return Ok(RuntimeOptions::default());
    };
    match message_name(&any.type_url) {
        RUNC_OPTIONS => decode_runc(&any.value),
        CRI_OPTIONS => decode_cri(&any.value),
        _ => Err(OptionsError::UnknownType(any.type_url.clone())),
    }
}

/// The fields of `containerd.runc.v1.Options` that the shim reads; others are skipped.
fn decode_runc(bytes: &[u8]) -> Result<RuntimeOptions, OptionsError> {
    const BINARY_NAME: u32 = 6;
    const ROOT: u32 = 7;
    const SYSTEMD_CGROUP: u32 = 9;
    let err = |source| OptionsError::Decode {
        type_url: RUNC_OPTIONS,
        source,
    };
    let mut input = CodedInputStream::from_bytes(bytes);
    let mut options = RuntimeOptions::default();
    while let Some(tag) = input.read_raw_tag_or_eof().map_err(err)? {
        let (field, wire_type) = (tag >> 3, tag & 7);
        match (field, wire_type) {
            (BINARY_NAME, 2) => options.binary = non_empty(input.read_string().map_err(err)?),
            (ROOT, 2) => {
                options.root = non_empty(input.read_string().map_err(err)?).map(PathBuf::from)
            }
            (SYSTEMD_CGROUP, 0) => options.systemd_cgroup = input.read_bool().map_err(err)?,
            _ => skip(&mut input, field, wire_type).map_err(err)?,
        }
    }
    Ok(options)
}

/// Skips a field the shim does not read.
fn skip(input: &mut CodedInputStream, field: u32, wire_type: u32) -> protobuf::Result<()> {
    match WireType::new(wire_type) {
        Some(wire_type) => input.skip_field(wire_type),
        None => Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("field {field} has wire type {wire_type}, which does not exist"),
        )
        .into()),
    }
}

fn non_empty(s: String) -> Option<String> {
    (!s.is_empty()).then_some(s)
}

/// `runtimeoptions.v1.Options`: `config_path` (a TOML file) wins over `config_body` (the TOML
/// of the runtime's options table), as in containerd, where a body is only sent without a path.
fn decode_cri(bytes: &[u8]) -> Result<RuntimeOptions, OptionsError> {
    const CONFIG_PATH: u32 = 2;
    const CONFIG_BODY: u32 = 3;
    let err = |source| OptionsError::Decode {
        type_url: CRI_OPTIONS,
        source,
    };
    let mut input = CodedInputStream::from_bytes(bytes);
    let (mut path, mut body) = (String::new(), Vec::new());
    while let Some(tag) = input.read_raw_tag_or_eof().map_err(err)? {
        match (tag >> 3, tag & 7) {
            (CONFIG_PATH, 2) => path = input.read_string().map_err(err)?,
            (CONFIG_BODY, 2) => body = input.read_bytes().map_err(err)?,
            (field, wire_type) => skip(&mut input, field, wire_type).map_err(err)?,
        }
    }
    if !path.is_empty() {
        let text = read_config_file(Path::new(&path))?;
        return from_toml(&text, &path);
    }
    from_toml(
        &String::from_utf8_lossy(&body),
        "of the CRI runtime's options table",
    )
}

fn read_config_file(path: &Path) -> Result<String, OptionsError> {
    use std::io::Read;
    let err = |source| OptionsError::ConfigFile {
        path: path.to_path_buf(),
        source,
    };
    let mut text = String::new();
    std::fs::File::open(path)
        .map_err(err)?
        .take(MAX_CONFIG_FILE)
        .read_to_string(&mut text)
        .map_err(err)?;
    Ok(text)
}

/// The options in TOML text with runc's option names as keys (`BinaryName = "/usr/bin/runc"`).
fn from_toml(text: &str, origin: &str) -> Result<RuntimeOptions, OptionsError> {
    let mut options = RuntimeOptions::default();
    for (line, key, value) in toml_keys(text) {
        let err = |message: String| OptionsError::Toml {
            origin: origin.to_string(),
            line,
            message,
        };
        match key.as_str() {
            "BinaryName" => {
                options.binary = non_empty(
                    value
                        .string()
                        .map_err(|m| err(format!("BinaryName: {m}")))?,
                )
            }
            "Root" => {
                options.root = non_empty(value.string().map_err(|m| err(format!("Root: {m}")))?)
                    .map(PathBuf::from)
            }
            "SystemdCgroup" => {
                options.systemd_cgroup = value
                    .boolean()
                    .map_err(|m| err(format!("SystemdCgroup: {m}")))?
            }
            _ => {}
        }
    }
    Ok(options)
}

/// A TOML value as far as the shim's keys need one.
#[derive(Debug, PartialEq)]
enum Value {
    String(String),
    Bool(bool),
    /// Numbers, arrays, inline tables, dates: read by nobody here.
    Other(String),
}

impl Value {
    fn string(self) -> Result<String, String> {
        match self {
            Value::String(s) => Ok(s),
            other => Err(format!("expected a string, found {other:?}")),
        }
    }

    fn boolean(self) -> Result<bool, String> {
        match self {
            Value::Bool(b) => Ok(b),
            other => Err(format!("expected true or false, found {other:?}")),
        }
    }
}

/// The top-level `key = value` pairs of TOML text with their line numbers, as containerd
/// writes an options table (go-toml: one key a line, 'literal' or "basic" strings) and as a
/// person writes a small file; keys inside `[tables]` are not top-level and are skipped.
fn toml_keys(text: &str) -> Vec<(usize, String, Value)> {
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.starts_with('[') {
            // A table: nothing after it is a top-level key.
            break;
        }
        let Some((key, value)) = line.split_once('=') else {
            continue;
        };
        let key = key.trim().trim_matches(|c| c == '"' || c == '\'');
        if key.is_empty() || key.starts_with('#') {
            continue;
        }
        out.push((n + 1, key.to_string(), parse_value(value.trim())));
    }
    out
}

fn parse_value(text: &str) -> Value {
    let uncommented = |rest: &str| rest.trim().is_empty() || rest.trim().starts_with('#');
    if let Some(body) = text.strip_prefix('\'') {
        if let Some((s, rest)) = body.split_once('\'') {
            if uncommented(rest) {
                return Value::String(s.to_string());
            }
        }
    } else if let Some(body) = text.strip_prefix('"') {
        if let Some((s, rest)) = basic_string(body) {
            if uncommented(rest) {
                return Value::String(s);
            }
        }
    } else {
        let word = text.split('#').next().unwrap_or("").trim();
        match word {
            "true" => return Value::Bool(true),
            "false" => return Value::Bool(false),
            _ => {}
        }
    }
    Value::Other(text.to_string())
}

/// A TOML basic string after its opening quote: its value and what follows the closing quote.
fn basic_string(body: &str) -> Option<(String, &str)> {
    let mut out = String::new();
    let mut chars = body.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '"' => return Some((out, &body[i + 1..])),
            '\\' => {
                let (_, e) = chars.next()?;
                match e {
                    '"' => out.push('"'),
                    '\\' => out.push('\\'),
                    'n' => out.push('\n'),
                    't' => out.push('\t'),
                    'r' => out.push('\r'),
                    'b' => out.push('\u{8}'),
                    'f' => out.push('\u{c}'),
                    'u' | 'U' => {
                        let len = if e == 'u' { 4 } else { 8 };
                        let hex: String = (0..len)
                            .filter_map(|_| chars.next().map(|(_, h)| h))
                            .collect();
                        out.push(char::from_u32(u32::from_str_radix(&hex, 16).ok()?)?);
                    }
                    _ => return None,
                }
            }
            c => out.push(c),
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use containerd_shim_protos::protobuf::CodedOutputStream;

    /// `containerd.runc.v1.Options` as Go's protobuf writes it, fields in number order.
    fn runc_options(no_pivot: bool, binary: &str, root: &str, systemd: bool, criu: &str) -> Any {
        let mut value = Vec::new();
        {
            let mut out = CodedOutputStream::vec(&mut value);
            if no_pivot {
                out.write_bool(1, true).unwrap();
            }
            out.write_string(3, "/shim.slice").unwrap();
            out.write_uint32(4, 1000).unwrap();
            if !binary.is_empty() {
                out.write_string(6, binary).unwrap();
            }
            if !root.is_empty() {
                out.write_string(7, root).unwrap();
            }
            if systemd {
                out.write_bool(9, true).unwrap();
            }
            if !criu.is_empty() {
                out.write_string(10, criu).unwrap();
            }
            out.flush().unwrap();
        }
        let mut any = Any::new();
        any.type_url = RUNC_OPTIONS.into();
        any.value = value;
        any
    }

    fn cri_options(path: &str, body: &str) -> Any {
        let mut value = Vec::new();
        {
            let mut out = CodedOutputStream::vec(&mut value);
            out.write_string(1, "io.containerd.peapod.v2").unwrap();
            if !path.is_empty() {
                out.write_string(2, path).unwrap();
            }
            if !body.is_empty() {
                out.write_bytes(3, body.as_bytes()).unwrap();
            }
            out.flush().unwrap();
        }
        let mut any = Any::new();
        any.type_url = CRI_OPTIONS.into();
        any.value = value;
        any
    }

    #[test]
    fn reads_runcs_options_and_skips_the_fields_it_does_not_use() {
        let any = runc_options(true, "/opt/bin/crun", "/run/other", true, "/criu");
        assert_eq!(
            decode(Some(&any)).unwrap(),
            RuntimeOptions {
                binary: Some("/opt/bin/crun".into()),
                root: Some("/run/other".into()),
                systemd_cgroup: true,
            }
        );
        // Empty strings and false are the defaults, as proto3 leaves them out.
        let any = runc_options(false, "", "", false, "");
        assert_eq!(decode(Some(&any)).unwrap(), RuntimeOptions::default());
        // With the type URL's prefix, as typeurl's registry sometimes writes it.
        let mut any = runc_options(false, "runc", "", true, "");
        any.type_url = format!("type.googleapis.com/{RUNC_OPTIONS}");
        assert_eq!(decode(Some(&any)).unwrap().binary.as_deref(), Some("runc"));
        assert!(decode(Some(&any)).unwrap().systemd_cgroup);
    }

    #[test]
    fn no_options_are_the_defaults() {
        assert_eq!(decode(None).unwrap(), RuntimeOptions::default());
        assert_eq!(
            decode(Some(&Any::new())).unwrap(),
            RuntimeOptions::default()
        );
    }

    #[test]
    fn refuses_options_it_cannot_read() {
        let mut any = Any::new();
        any.type_url = "io.containerd.runhcs.v1.Options".into();
        any.value = vec![8, 1];
        let err = decode(Some(&any)).unwrap_err().to_string();
        assert!(err.contains("io.containerd.runhcs.v1.Options"), "{err}");
        // Truncated: a string field whose length runs past the end.
        let mut any = runc_options(false, "/usr/bin/runc", "", false, "");
        any.value.truncate(any.value.len() - 3);
        let err = decode(Some(&any)).unwrap_err().to_string();
        assert!(err.contains(RUNC_OPTIONS), "{err}");
        // A wire type that does not exist.
        let mut any = Any::new();
        any.type_url = RUNC_OPTIONS.into();
        any.value = vec![(11 << 3) | 7];
        assert!(decode(Some(&any)).is_err());
    }

    #[test]
    fn reads_the_cri_runtimes_options_table_as_containerd_sends_it() {
        // containerd 2.x's go-toml output of `[...runtimes.peapod.options]`.
        let body = "BinaryName = '/usr/local/bin/runc-logged'\nRoot = \"/run/peapod-runc\"\nSystemdCgroup = true\n";
        assert_eq!(
            decode(Some(&cri_options("", body))).unwrap(),
            RuntimeOptions {
                binary: Some("/usr/local/bin/runc-logged".into()),
                root: Some("/run/peapod-runc".into()),
                systemd_cgroup: true,
            }
        );
        // containerd 1.6 sends neither: the table's keys are lost (README says so).
        assert_eq!(
            decode(Some(&cri_options("", ""))).unwrap(),
            RuntimeOptions::default()
        );
    }

    #[test]
    fn a_config_path_names_a_toml_file_of_the_same_keys() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("peapod-runtime.toml");
        std::fs::write(
            &file,
            "# peapod under containerd\nSystemdCgroup = true # kubeadm's\nBinaryName = \"/usr/sbin/runc\"\n\n[other]\nSystemdCgroup = false\n",
        )
        .unwrap();
        let path = file.to_str().unwrap();
        let options = decode(Some(&cri_options(path, "SystemdCgroup = false"))).unwrap();
        assert!(
            options.systemd_cgroup,
            "the file wins, and [other] is not top-level"
        );
        assert_eq!(options.binary.as_deref(), Some("/usr/sbin/runc"));
        let err = decode(Some(&cri_options("/nonexistent/peapod.toml", "")))
            .unwrap_err()
            .to_string();
        assert!(err.contains("/nonexistent/peapod.toml"), "{err}");
    }

    #[test]
    fn a_key_of_the_wrong_kind_is_named() {
        let err = decode(Some(&cri_options("", "SystemdCgroup = \"yes\"\n")))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("SystemdCgroup") && err.contains("line 1"),
            "{err}"
        );
        let err = decode(Some(&cri_options("", "\nBinaryName = 3\n")))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("BinaryName") && err.contains("line 2"),
            "{err}"
        );
        // Keys the shim does not read may hold anything.
        assert_eq!(
            decode(Some(&cri_options(
                "",
                "IoUid = 1000\nShimCgroup = ''\nNoPivotRoot = false\n"
            )))
            .unwrap(),
            RuntimeOptions::default()
        );
    }

    #[test]
    fn serve_gets_them_as_flags_and_delete_from_the_bundle() {
        let options = RuntimeOptions {
            binary: Some("/opt/runc".into()),
            root: Some("/run/r".into()),
            systemd_cgroup: true,
        };
        assert_eq!(
            options.to_args(),
            [
                "-runtime-binary",
                "/opt/runc",
                "-runtime-root",
                "/run/r",
                "-systemd-cgroup"
            ]
        );
        assert!(RuntimeOptions::default().to_args().is_empty());
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(RuntimeOptions::saved(dir.path()), RuntimeOptions::default());
        options.save(dir.path()).unwrap();
        assert_eq!(RuntimeOptions::saved(dir.path()), options);
        assert_eq!(options.binary(), "/opt/runc");
        assert_eq!(RuntimeOptions::default().binary(), "runc");
        assert_eq!(
            RuntimeOptions::default().root("k8s.io"),
            Path::new("/run/containerd/runc/k8s.io")
        );
        assert_eq!(
            options.to_string(),
            r#"BinaryName "/opt/runc", Root "/run/r", SystemdCgroup true"#
        );
    }

    #[test]
    fn toml_strings_as_toml_escapes_them() {
        assert_eq!(
            parse_value(r#""a\"b\\c\u00e9" # note"#),
            Value::String("a\"b\\cé".into())
        );
        assert_eq!(
            parse_value(r"'C:\no\escapes'"),
            Value::String(r"C:\no\escapes".into())
        );
        assert_eq!(parse_value("true # yes"), Value::Bool(true));
        assert_eq!(
            parse_value("\"unterminated"),
            Value::Other("\"unterminated".into())
        );
        assert_eq!(parse_value("'a' b"), Value::Other("'a' b".into()));
    }
}
