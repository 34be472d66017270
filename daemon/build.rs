//! Builds the static pause binary that the daemon embeds (see `pause/pause.rs`).
//!
//! It is compiled here with `rustc` directly rather than as a workspace crate because it must be
//! linked with `+crt-static`, and cargo has no per-package way to ask for that.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    let source = "pause/pause.rs";
    println!("cargo:rerun-if-changed={source}");
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let version = std::env::var("CARGO_PKG_VERSION").unwrap_or_default();
    let status = Command::new(rustc)
        .args(["--edition", "2021", "--crate-name", "pause"])
        .args([
            "-C",
            "opt-level=2",
            "-C",
            "panic=abort",
            "-C",
            "strip=symbols",
        ])
        .args(["-C", "target-feature=+crt-static", "-C", "debuginfo=0"])
        .arg(source)
        .arg("-o")
        .arg(out.join("pause"))
        .env("CARGO_PKG_VERSION", version)
        .status()
        .expect("run rustc for the pause binary");
    assert!(status.success(), "building the static pause binary failed");
}
