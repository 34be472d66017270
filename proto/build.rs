//! Compiles the CRI API and peapod's pod API with tonic-prost.
//!
//! `proto/api.proto` is kept byte for byte as k8s.io/cri-api ships it. It marks secret fields
//! `[debug_redact = true]`, an option `google.protobuf.FieldOptions` only knows from protobuf
//! 22 on; Debian 12's protoc (3.21) refuses the file with it. So the build compiles a copy
//! with that option taken out, and — prost ignores the option anyway — makes the redaction
//! itself: every message with a redacted field gets no derived `Debug` (`src/lib.rs` writes
//! one that hides those fields) and the fields are never serialised by serde. The list of
//! redacted fields is written to `$OUT_DIR/redacted.rs` so that a test proves each is hidden.

use std::fmt::Write as _;
use std::path::PathBuf;

/// The messages whose hand-written `Debug` in `src/lib.rs` hides redacted fields. A newer
/// api.proto that redacts a field elsewhere fails the build until that message gets one.
const REDACTING_DEBUG: &[&str] = &["AuthConfig"];

/// The messages `src/runtime/v1/list_answers.rs` defines in place of the generated ones.
const LIST_ANSWERS: &[&str] = &[
    "ListPodSandboxResponse",
    "ListContainersResponse",
    "StreamPodSandboxesResponse",
    "StreamContainersResponse",
];

const OPTION: &str = "[debug_redact = true]";

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto/api.proto");
    println!("cargo:rerun-if-changed=proto/pods.proto");
    let out = PathBuf::from(std::env::var("OUT_DIR")?);
    let source = std::fs::read_to_string("proto/api.proto")?;

    // (message, field) of every redacted field; the copy without the option. `blocks` is
    // the stack of open braces, each with the message it opens (None: a service, enum, rpc).
    let mut redacted: Vec<(String, String)> = Vec::new();
    let mut blocks: Vec<Option<String>> = Vec::new();
    let mut stripped = String::with_capacity(source.len());
    for line in source.lines() {
        let code = line.split("//").next().unwrap_or_default();
        let words: Vec<&str> = code.split_whitespace().collect();
        if code.contains(OPTION) {
            // `type name = N [debug_redact = true];`
            let owner = blocks.iter().rev().find_map(|b| b.clone());
            let (Some(name), Some(owner)) = (words.get(1), owner) else {
                return Err(
                    format!("api.proto: cannot read the redacted field in {line:?}").into(),
                );
            };
            redacted.push((owner, name.to_string()));
            stripped.push_str(&line.replace(&format!(" {OPTION}"), ""));
        } else {
            stripped.push_str(line);
        }
        stripped.push('\n');
        for c in code.chars() {
            match c {
                '{' => blocks.push(
                    (words.first() == Some(&"message"))
                        .then(|| words.get(1).map(|n| n.trim_end_matches('{').to_string()))
                        .flatten(),
                ),
                '}' => {
                    blocks.pop();
                }
                _ => {}
            }
        }
    }
    if stripped.contains("debug_redact") {
        return Err("api.proto: a debug_redact option in a form build.rs does not read".into());
    }
    for (owner, field) in &redacted {
        if !REDACTING_DEBUG.contains(&owner.as_str()) {
            return Err(format!(
                "api.proto redacts {owner}.{field}: give {owner} a redacting Debug in src/lib.rs \
                 and add it to REDACTING_DEBUG in build.rs"
            )
            .into());
        }
    }
    let include = out.join("cri-proto");
    std::fs::create_dir_all(&include)?;
    std::fs::write(include.join("api.proto"), &stripped)?;
    std::fs::copy("proto/pods.proto", include.join("pods.proto"))?;

    let mut list =
        String::from("/// (message, field) of every `[debug_redact = true]` field of api.proto.\n");
    list.push_str("pub const REDACTED_FIELDS: &[(&str, &str)] = &[\n");
    for (owner, field) in &redacted {
        writeln!(list, "    ({owner:?}, {field:?}),")?;
    }
    list.push_str("];\n");
    std::fs::write(out.join("redacted.rs"), list)?;

    let mut builder = tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        // Records persist the CRI configs as JSON, and verbose status prints them.
        .type_attribute(".", "#[derive(serde::Serialize, serde::Deserialize)]")
        .message_attribute(".", "#[serde(default)]")
        // `KeyValue.value` (an env value) became `bytes` in cri-api 1.33; records written
        // before hold it as a JSON string, and JSON configs (`peapod runp`, crictl's files)
        // write it so: keep it a string in JSON (`src/lib.rs`, `bytes_as_text`).
        .field_attribute(
            ".runtime.v1.KeyValue.value",
            "#[serde(with = \"crate::bytes_as_text\")]",
        )
        .skip_debug(REDACTING_DEBUG.iter().map(|m| format!(".runtime.v1.{m}")));
    // The list answers are written by hand (`src/runtime/v1/list_answers.rs`): the same wire form, and
    // a server may give their items already encoded.
    for answer in LIST_ANSWERS {
        builder = builder.extern_path(
            format!(".runtime.v1.{answer}"),
            format!("crate::runtime::v1::list_answers::{answer}"),
        );
    }
    for (owner, field) in &redacted {
        builder = builder.field_attribute(
            format!(".runtime.v1.{owner}.{field}"),
            "#[serde(skip_serializing)]",
        );
    }
    builder.compile_protos(
        &[include.join("api.proto"), include.join("pods.proto")],
        &[include],
    )?;
    Ok(())
}
