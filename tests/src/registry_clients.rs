//! The registry clients the trust tests drive (cosign, oras), built by
//! `scripts/registry-clients` (which `scripts/setup` runs) into a cache outside the tree; and
//! how any tool a script builds so is found.

use std::path::PathBuf;
use std::process::Command;

/// The path of client `name`; panics, saying how to get it, when it was not built: a test
/// that needs it must not pass without it.
pub fn bin(name: &str) -> PathBuf {
    built_by("registry-clients", name)
}

/// The path of tool `name` that `scripts/SCRIPT` builds into its cache (`SCRIPT --print`
/// names the directory); panics, saying how to get it, when it was not built.
pub fn built_by(script: &str, name: &str) -> PathBuf {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../scripts")
        .join(script);
    let out = Command::new(&script)
        .arg("--print")
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e}", script.display()));
    assert!(
        out.status.success(),
        "{name} is not built: run {} (scripts/setup does)",
        script.display()
    );
    let dir = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let path = PathBuf::from(dir).join(name);
    assert!(
        path.is_file(),
        "{} is missing: run {}",
        path.display(),
        script.display()
    );
    path
}
