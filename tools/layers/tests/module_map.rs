//! docs/modules.md is what `layers --modules` prints for this workspace: a module added,
//! moved or re-documented without regenerating it fails here.

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
