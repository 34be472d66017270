//! docs/modules.md is what `layers --modules` prints for this workspace: a module added,
//! moved or re-documented without regenerating it fails here. And a crate root with a layer
//! table (`peapod_layers::LAYER_TABLE`) names every module of its crate in it.

use std::path::Path;

#[test]
fn docs_modules_md_is_the_workspace_module_map() {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut map = peapod_layers::MODULE_MAP_HEADER.to_string();
    for (name, root) in peapod_layers::workspace_targets(&workspace).expect("workspace") {
        let krate = peapod_layers::Crate::load(&name, &root).expect("crate");
        map.push_str(&krate.module_map(&workspace));
    }
    let committed = std::fs::read_to_string(workspace.join("docs/modules.md")).unwrap_or_default();
    assert!(
        committed == map,
        "docs/modules.md is not the module map of this tree; regenerate it with\n  cargo run -q -p peapod-layers -- --modules > docs/modules.md"
    );
}

/// The roots whose docs are their crate's layer table.
const TABLES: [&str; 3] = [
    "daemon/src/lib.rs",
    "shim/src/main.rs",
    "runtime/src/lib.rs",
];

#[test]
fn every_layer_table_names_every_module_of_its_crate() {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    for table in TABLES {
        let text = std::fs::read_to_string(workspace.join(table)).expect("crate root");
        assert!(
            text.contains(peapod_layers::LAYER_TABLE),
            "{table} no longer has its layer table (\"{}\")",
            peapod_layers::LAYER_TABLE
        );
    }
    for (name, root) in peapod_layers::workspace_targets(&workspace).expect("workspace") {
        let krate = peapod_layers::Crate::load(&name, &root).expect("crate");
        let left_out = krate.unlisted_modules();
        assert!(
            left_out.is_empty(),
            "the layer table of {name} ({}) leaves out {left_out:?}",
            root.display()
        );
    }
}
