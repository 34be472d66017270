//! The shim's programs are linked as position-dependent executables (`-no-pie`). One shim runs
//! per pod, so its private memory counts per pod: in a position-independent executable the
//! dynamic loader writes every absolute address in the program's data at start, which makes
//! those pages private to each shim; linked at a fixed address they stay shared, read-only
//! pages of the file. The code is the same (position-independent code runs anywhere). The
//! cost: the program's own image is not placed at a random address (its heap, stack and
//! libraries still are), as with Go programs such as containerd-shim-runc-v2, which are not
//! PIE either. Measured: 0.73 -> 0.57 MB PSS per shim with 20 pods.
//!
//! They are also linked statically, glibc included ([`link_statically`]).
//!
//! `peapod-shim`'s code is laid out in the order of `text-order.txt` (scripts/text-order):
//! the code a shim runs packed together, see peapod_link_order.

use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    println!("cargo:rustc-link-arg-bins=-no-pie");
    link_statically();
    peapod_link_order::link_in_order("peapod-shim", "text-order.txt");
}

/// Links the shim's programs against the static glibc (libc.a) and gcc's static unwinder
/// (libgcc_eh.a), as `-C target-feature=+crt-static` would, but for these programs alone.
///
/// Why: a dynamically linked shim paid, in every pod, for the loader and libc's relocated
/// data and bss (about 60 kB of private pages), and mapped the whole of libc's code where
/// it runs a few functions of it. Static, the libc functions it runs are pages of its own
/// file, shared by every shim; measured with 20 pods: 0.33 -> 0.29 MB PSS and 0.19 -> 0.15 MB
/// private per shim (docs/performance.md). The shim needs nothing of glibc's that a static
/// program cannot have: it resolves no user or host names (no NSS) and loads no library
/// (libseccomp is linked in too, runtime/src/seccomp.rs).
///
/// How: `crt-static` is a flag of the whole build in Cargo (it would make the daemon static
/// too, whose registry pulls resolve host names through NSS, and it breaks proc-macro crates
/// unless every build names its target), so this gives the linker what it needs for these
/// programs only: `-static` (gcc's static start files, no program interpreter) and a
/// directory searched before the system's, holding the static archives under the names the
/// standard library asks the linker for (`-lc -lm -ldl -lpthread -lrt -lutil -lgcc_s`): the
/// system's own `.a` files, and for `libgcc_s` (which has none: it is the shared unwinder)
/// a linker script naming libgcc_eh.a and libgcc.a, as crt-static links them.
fn link_statically() {
    let target = std::env::var("TARGET").unwrap_or_default();
    if !target.contains("-linux-gnu") {
        return;
    }
    let Some(out) = std::env::var_os("OUT_DIR").map(PathBuf::from) else {
        panic!("OUT_DIR is not set");
    };
    let dir = out.join("static-libs");
    if let Err(e) = std::fs::create_dir_all(&dir) {
        panic!("create {}: {e}", dir.display());
    }
    for lib in ["c", "m", "dl", "pthread", "rt", "util"] {
        let name = format!("lib{lib}.a");
        let archive = static_archive(&name);
        let link = dir.join(&name);
        let _ = std::fs::remove_file(&link);
        if let Err(e) = std::os::unix::fs::symlink(&archive, &link) {
            panic!("link {} to {}: {e}", link.display(), archive.display());
        }
    }
    // A linker script: archives are searched in the order the script names them.
    if let Err(e) = std::fs::write(dir.join("libgcc_s.a"), "INPUT(-lgcc_eh -lgcc)\n") {
        panic!("write {}: {e}", dir.join("libgcc_s.a").display());
    }
    println!("cargo:rustc-link-arg-bins=-static");
    println!("cargo:rustc-link-arg-bins=-L{}", dir.display());
}

/// Where the C compiler finds the static archive `name` (libc6-dev installs glibc's).
fn static_archive(name: &str) -> PathBuf {
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let found = Command::new(&cc)
        .arg(format!("-print-file-name={name}"))
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()));
    match found {
        // Not found, the compiler prints the bare name back.
        Some(path) if path.is_absolute() && Path::new(&path).is_file() => path,
        _ => panic!(
            "{name} not found by `{cc} -print-file-name`: the shim links glibc statically \
             (install libc6-dev)"
        ),
    }
}
