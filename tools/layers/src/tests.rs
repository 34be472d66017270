use super::*;

/// Writes `files` (path, text) under a fresh directory and loads the crate rooted at lib.rs.
fn krate(files: &[(&str, &str)]) -> (tempfile::TempDir, Crate) {
    let dir = tempfile::tempdir().unwrap();
    for (path, text) in files {
        let p = dir.path().join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, text).unwrap();
    }
    let k = Crate::load("fixture", &dir.path().join("lib.rs")).unwrap();
    (dir, k)
}

fn members(k: &Crate) -> Vec<Vec<String>> {
    k.circles().into_iter().map(|c| c.members).collect()
}

#[test]
fn two_siblings_using_each_other_are_a_circle() {
    let (_d, k) = krate(&[
        ("lib.rs", "mod a; mod b; mod c;"),
        ("a.rs", "use crate::b::B; pub struct A;"),
        (
            "b.rs",
            "pub struct B; fn f() -> crate::a::A { crate::a::A }",
        ),
        ("c.rs", "use crate::a::A;"),
    ]);
    assert_eq!(members(&k), vec![vec!["a".to_string(), "b".to_string()]]);
    let c = &k.circles()[0];
    assert_eq!(c.edges.len(), 2, "{c}");
    assert!(c.to_string().contains("a -> b"), "{c}");
}

#[test]
fn a_chain_through_a_third_module_is_a_circle() {
    let (_d, k) = krate(&[
        ("lib.rs", "mod a; mod b; mod c;"),
        ("a.rs", "use super::b::B;"),
        ("b.rs", "pub struct B; use crate::c::*;"),
        ("c.rs", "fn f() { let _ = crate::a::g(); }"),
    ]);
    assert_eq!(members(&k), vec![vec!["a", "b", "c"]]);
}

#[test]
fn layers_that_only_point_down_are_no_circle() {
    let (_d, k) = krate(&[
        ("lib.rs", "pub mod top; pub mod mid; pub mod low;"),
        ("top.rs", "use crate::mid::M; use crate::low::L;"),
        ("mid.rs", "pub struct M(crate::low::L);"),
        ("low.rs", "pub struct L;"),
    ]);
    assert!(k.circles().is_empty(), "{:?}", k.circles());
    let edges = k.sibling_edges();
    let root: Vec<_> = edges[&Vec::<String>::new()].keys().cloned().collect();
    assert_eq!(
        root,
        [("mid", "low"), ("top", "low"), ("top", "mid")]
            .map(|(a, b)| (a.to_string(), b.to_string()))
    );
}

#[test]
fn a_child_using_its_parent_is_no_circle() {
    let (_d, k) = krate(&[
        ("lib.rs", "mod svc;"),
        (
            "svc/mod.rs",
            "mod run; mod stop; pub struct Service; pub use run::Ran;",
        ),
        ("svc/run.rs", "use super::Service; pub struct Ran;"),
        ("svc/stop.rs", "impl super::Service { fn stop(&self) {} }"),
    ]);
    assert!(k.circles().is_empty(), "{:?}", k.circles());
}

#[test]
fn circles_deeper_in_the_tree_are_found() {
    let (_d, k) = krate(&[
        ("lib.rs", "mod svc;"),
        ("svc/mod.rs", "mod run; mod stop;"),
        ("svc/run.rs", "use super::stop::Stopped; pub struct Ran;"),
        ("svc/stop.rs", "pub struct Stopped(super::run::Ran);"),
    ]);
    let c = k.circles();
    assert_eq!(c.len(), 1);
    assert_eq!(c[0].parent, vec!["svc".to_string()]);
    assert_eq!(c[0].members, vec!["run", "stop"]);
}

#[test]
fn a_re_export_counts_for_the_module_that_defines_it() {
    // `crate::Error` is `error::Error`: `error` using `store` while `store` names
    // `crate::Error` is a circle even though `store` never writes `error`.
    let (_d, k) = krate(&[
        ("lib.rs", "mod error; mod store; pub use error::Error;"),
        ("error.rs", "pub struct Error(crate::store::Record);"),
        (
            "store.rs",
            "pub struct Record; fn f() -> crate::Error { todo!() }",
        ),
    ]);
    assert_eq!(members(&k), vec![vec!["error", "store"]]);
}

#[test]
fn paths_inside_macros_count() {
    let (_d, k) = krate(&[
        ("lib.rs", "mod a; mod b;"),
        ("a.rs", "use crate::b::B;"),
        (
            "b.rs",
            "pub struct B; fn f() { tracing::info!(x = ?crate::a::X, \"y\"); }",
        ),
    ]);
    assert_eq!(members(&k), vec![vec!["a", "b"]]);
}

#[test]
fn test_code_is_left_out() {
    let (_d, k) = krate(&[
        ("lib.rs", "mod a; mod b; #[cfg(test)] mod testing;"),
        ("a.rs", "use crate::b::B; #[cfg(test)] mod tests { use crate::a; }"),
        (
            "b.rs",
            "pub struct B; #[cfg(test)] fn helper() { crate::a::f(); } #[cfg(test)] use crate::a::A;",
        ),
        ("testing.rs", "use crate::a::A; use crate::b::B;"),
    ]);
    assert!(k.circles().is_empty(), "{:?}", k.circles());
}

#[test]
fn a_first_segment_naming_a_child_module_is_relative() {
    let (_d, k) = krate(&[
        ("lib.rs", "mod a; mod b; use a::A;"),
        ("a.rs", "pub struct A; fn f() { b(); } fn b() {}"),
        ("b.rs", "fn f() -> crate::a::A { todo!() }"),
    ]);
    // `b()` in `a` is a local function, not the module `b`: no edge a -> b.
    assert!(k.circles().is_empty(), "{:?}", k.circles());
}

/// The check CI runs: every crate of this workspace, at every level of its module tree.
#[test]
fn the_workspace_has_no_module_circles() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let targets = workspace_targets(&root).unwrap();
    assert!(
        targets.iter().any(|(n, _)| n == "peapod-daemon"),
        "the daemon crate is checked: {targets:?}"
    );
    let mut found = String::new();
    for (name, file) in targets {
        let k = Crate::load(&name, &file).unwrap_or_else(|e| panic!("{name}: {e}"));
        if name == "peapod-daemon" {
            assert!(
                k.modules.len() > 50,
                "{name}: {} modules read",
                k.modules.len()
            );
        }
        for c in k.circles() {
            found.push_str(&c.to_string());
        }
    }
    assert!(
        found.is_empty(),
        "import circles between sibling modules (layers must only point down; \
         `cargo run -p peapod-layers --bin layers -- --map` shows who uses whom):\n{found}"
    );
}

#[test]
fn a_layer_table_must_name_every_top_level_module() {
    let table = "//! Layers, each using only those below it:\n//! 1. `a`, `b/` and `c::C`\n";
    let (_d, k) = krate(&[
        (
            "lib.rs",
            &format!("{table}mod a; mod b; mod c; mod d; #[cfg(test)] mod testing;"),
        ),
        ("a.rs", ""),
        ("b/mod.rs", "mod inner;"),
        ("b/inner.rs", ""),
        ("c.rs", ""),
        ("d.rs", ""),
    ]);
    assert_eq!(k.unlisted_modules(), vec!["d".to_string()]);
    // No table, nothing to name.
    let (_d, k) = krate(&[("lib.rs", "//! A crate.\nmod a;"), ("a.rs", "")]);
    assert!(k.unlisted_modules().is_empty());
}
