//! Links a release program's functions in the order of a list (`--symbol-ordering-file`):
//! the functions a process runs, as traced by scripts/text-order, hottest first, ahead of
//! everything it never runs (other verbs, error paths, code linked in and not called).
//!
//! Why: most of a peapod process's memory is pages of its own program file. The kernel maps
//! a file's pages around each one a process touches (fault-around: 64 KiB windows, whole
//! large folios), so run code strewn over the daemon's 12 MB of text made 10.2 MB of it
//! resident for 3.6 MB ever run. Packed together, the run code fills few windows.
//! docs/performance.md has the figures.
//!
//! Only for release builds of the x86_64 Linux target linked by LLD (rustc's default there
//! since 1.90; `--symbol-ordering-file` is LLD's and mold's, not GNU ld's): another linker,
//! or `PEAPOD_TEXT_ORDER=0`, links in the default order. The lists name one build's symbols,
//! whose hashes come from each crate's metadata (the rustc, Cargo.lock, the features the
//! packages built together unify): names a build does not have are skipped without a word,
//! since the order is a layout, never a reason for a build to fail, and
//! `scripts/text-order --check` counts how many a build has.

use std::env;
use std::path::Path;

/// From a build script: link the package's program `bin` in the order of `list` (a path
/// relative to the package, one symbol per line), when the build is one it applies to.
pub fn link_in_order(bin: &str, list: &str) {
    println!("cargo:rerun-if-changed={list}");
    println!("cargo:rerun-if-env-changed=PEAPOD_TEXT_ORDER");
    let dir = env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| ".".into());
    let list = Path::new(&dir).join(list);
    if !list.is_file() || !applies() {
        return;
    }
    println!(
        "cargo:rustc-link-arg-bin={bin}=-Wl,--symbol-ordering-file={}",
        list.display()
    );
    println!("cargo:rustc-link-arg-bin={bin}=-Wl,--no-warn-symbol-ordering");
}

/// From a build script: link the package's program `bin` with its relative relocations packed
/// (`-z pack-relative-relocs`, glibc's DT_RELR), in the release builds [`link_in_order`] applies
/// to, where the C library the program will load is glibc 2.36 or later.
///
/// Why: a position-independent program carries one relocation for every pointer in its data
/// (`peapod`: 26,840 of them, 24 bytes each, a 649 kB `.rela.dyn`), which the loader reads
/// at every start, so those pages of the file and the pages around them stay resident for
/// the process's life. Packed, the same relocations take 8 kB (a bitmap of the words to
/// adjust): the daemon's RSS with 20 pods 11.8 -> 10.8 MB. The program keeps being
/// position-independent (its address randomised). Such a program needs glibc >= 2.36 to start
/// (its loader refuses the version `GLIBC_ABI_DT_RELR` otherwise), hence the check of the
/// glibc this build links against, which is the one it runs with where peapod is built on its
/// host (scripts/setup).
pub fn pack_relative_relocations(bin: &str) {
    let build = Build {
        glibc_version: glibc_version(),
        ..Build::from_env()
    };
    if build.packs_relocations() {
        println!("cargo:rustc-link-arg-bin={bin}=-Wl,-z,pack-relative-relocs");
    }
}

/// A release build for x86_64 Linux, by a rustc that links with its LLD, not switched off.
fn applies() -> bool {
    Build::from_env().orders_text()
}

/// What a build script knows of its build, as far as the order goes.
struct Build {
    profile: Option<String>,
    target: Option<String>,
    /// `PEAPOD_TEXT_ORDER`: "0" switches the order off.
    switch: Option<String>,
    rustflags: Option<String>,
    /// `rustc --version`'s line.
    rustc_version: Option<String>,
    /// `getconf GNU_LIBC_VERSION`'s line ("glibc 2.36"), when asked for.
    glibc_version: Option<String>,
}

impl Build {
    fn from_env() -> Build {
        let var = |name: &str| env::var(name).ok();
        Build {
            profile: var("PROFILE"),
            target: var("TARGET"),
            switch: var("PEAPOD_TEXT_ORDER"),
            rustflags: var("CARGO_ENCODED_RUSTFLAGS"),
            rustc_version: rustc_version(),
            glibc_version: None,
        }
    }

    fn orders_text(&self) -> bool {
        let wanted = self.switch.as_deref() != Some("0");
        wanted && self.release_linked_by_lld()
    }

    /// LLD packs relocations since 15; glibc loads them since 2.36.
    fn packs_relocations(&self) -> bool {
        let glibc = self
            .glibc_version
            .as_deref()
            .and_then(parse_glibc)
            .is_some_and(|v| v >= (2, 36));
        glibc && self.release_linked_by_lld()
    }

    fn release_linked_by_lld(&self) -> bool {
        let release = self.profile.as_deref() == Some("release");
        let target = self.target.as_deref() == Some("x86_64-unknown-linux-gnu");
        // A linker chosen in the flags (`-C linker=`, `-C link-arg=-fuse-ld=`) may not be LLD.
        let own_linker = self
            .rustflags
            .as_deref()
            .is_none_or(|f| !f.contains("linker") && !f.contains("fuse-ld"));
        let lld_default = self
            .rustc_version
            .as_deref()
            .and_then(parse_minor)
            .is_some_and(|minor| minor >= 90);
        release && target && own_linker && lld_default
    }
}

fn rustc_version() -> Option<String> {
    let rustc = env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let out = std::process::Command::new(rustc)
        .arg("--version")
        .output()
        .ok()?;
    Some(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn glibc_version() -> Option<String> {
    let out = std::process::Command::new("getconf")
        .arg("GNU_LIBC_VERSION")
        .output()
        .ok()?;
    Some(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// "glibc 2.36" -> (2, 36).
fn parse_glibc(version: &str) -> Option<(u32, u32)> {
    let (name, number) = version.trim().split_once(' ')?;
    let (major, minor) = number.split_once('.')?;
    let minor = minor.split('.').next()?;
    (name == "glibc").then_some(())?;
    Some((major.parse().ok()?, minor.parse().ok()?))
}

/// "rustc 1.95.0 (59807616e 2026-04-14)" -> 95.
fn parse_minor(version: &str) -> Option<u32> {
    version
        .split_whitespace()
        .nth(1)?
        .split('.')
        .nth(1)?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::{parse_glibc, parse_minor, Build};

    #[test]
    fn reads_the_minor_version_of_rustc() {
        assert_eq!(parse_minor("rustc 1.95.0 (59807616e 2026-04-14)"), Some(95));
        assert_eq!(
            parse_minor("rustc 1.89.0-nightly (abc 2025-06-01)"),
            Some(89)
        );
        assert_eq!(parse_minor("rustc"), None);
        assert_eq!(parse_minor("rustc x.y"), None);
    }

    /// One way a build differs from [`release`].
    type Change = fn(&mut Build);

    fn release() -> Build {
        Build {
            profile: Some("release".into()),
            target: Some("x86_64-unknown-linux-gnu".into()),
            switch: None,
            rustflags: Some(String::new()),
            rustc_version: Some("rustc 1.95.0 (59807616e 2026-04-14)".into()),
            glibc_version: Some("glibc 2.36\n".into()),
        }
    }

    #[test]
    fn reads_the_glibc_version() {
        assert_eq!(parse_glibc("glibc 2.36\n"), Some((2, 36)));
        assert_eq!(parse_glibc("glibc 2.41.9000"), Some((2, 41)));
        assert_eq!(parse_glibc("musl 1.2"), None);
        assert_eq!(parse_glibc(""), None);
    }

    #[test]
    fn packs_relocations_where_glibc_can_load_them() {
        assert!(release().packs_relocations());
        let cases: [(&str, Change); 5] = [
            ("glibc 2.35", |b| {
                b.glibc_version = Some("glibc 2.35".into())
            }),
            ("no glibc", |b| b.glibc_version = None),
            ("a debug build", |b| b.profile = Some("debug".into())),
            ("a linker in the flags", |b| {
                b.rustflags = Some("-C\x1flinker=clang".into())
            }),
            ("a rustc before 1.90", |b| {
                b.rustc_version = Some("rustc 1.85.1 (x 2025-03-01)".into())
            }),
        ];
        for (what, change) in cases {
            let mut build = release();
            change(&mut build);
            assert!(!build.packs_relocations(), "{what}: packed");
        }
        let mut unordered = release();
        unordered.switch = Some("0".into());
        assert!(
            unordered.packs_relocations(),
            "PEAPOD_TEXT_ORDER=0 leaves the relocations packed"
        );
    }

    #[test]
    fn orders_only_release_builds_that_rustc_links_with_lld() {
        assert!(release().orders_text());
        let cases: [(&str, Change); 7] = [
            ("a debug build", |b| b.profile = Some("debug".into())),
            ("another target", |b| {
                b.target = Some("aarch64-unknown-linux-gnu".into())
            }),
            ("switched off", |b| b.switch = Some("0".into())),
            ("a linker in the flags", |b| {
                b.rustflags = Some("-C\x1flinker=clang".into())
            }),
            ("ld chosen in the flags", |b| {
                b.rustflags = Some("-Clink-arg=-fuse-ld=bfd".into())
            }),
            ("a rustc before 1.90", |b| {
                b.rustc_version = Some("rustc 1.85.1 (x 2025-03-01)".into())
            }),
            ("no rustc version", |b| b.rustc_version = None),
        ];
        for (what, change) in cases {
            let mut build = release();
            change(&mut build);
            assert!(!build.orders_text(), "{what}: ordered");
        }
        let mut on = release();
        on.switch = Some("1".into());
        assert!(on.orders_text(), "PEAPOD_TEXT_ORDER=1 is not off");
    }
}
