//! `layers [DIR]`: lists the import circles between sibling modules of every crate of the
//! workspace at DIR (default: the current directory) and exits 1 if there is one.
//! `layers --map [DIR]`: prints, for each module of each crate, the siblings it uses.
//! `layers --modules [DIR]`: prints the module map: each module file of each crate with the
//! first line of its docs (docs/modules.md is this output).

use std::path::PathBuf;

fn main() {
    let mut map = false;
    let mut modules = false;
    let mut dir = PathBuf::from(".");
    for arg in std::env::args().skip(1) {
        match arg.as_str() {
            "--map" => map = true,
            "--modules" => modules = true,
            "-h" | "--help" => {
                println!("usage: layers [--map | --modules] [WORKSPACE_DIR]");
                return;
            }
            other => dir = PathBuf::from(other),
        }
    }
    let targets = match peapod_layers::workspace_targets(&dir) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("layers: {e}");
            std::process::exit(2);
        }
    };
    if modules {
        print!("{}", peapod_layers::MODULE_MAP_HEADER);
    }
    let mut circles = 0;
    for (name, root) in targets {
        let krate = match peapod_layers::Crate::load(&name, &root) {
            Ok(k) => k,
            Err(e) => {
                eprintln!("layers: {name}: {e}");
                std::process::exit(2);
            }
        };
        if modules {
            print!("{}", krate.module_map(&dir));
            continue;
        }
        if map {
            println!("{name}");
            for (parent, edges) in krate.sibling_edges() {
                let mut uses: std::collections::BTreeMap<&str, Vec<&str>> = Default::default();
                for (a, b) in edges.keys() {
                    uses.entry(a).or_default().push(b);
                }
                let at = if parent.is_empty() {
                    String::new()
                } else {
                    format!("{}::", parent.join("::"))
                };
                for (a, bs) in uses {
                    println!("  {at}{a} -> {}", bs.join(", "));
                }
            }
        }
        for c in krate.circles() {
            circles += 1;
            print!("{c}");
        }
    }
    if circles > 0 {
        eprintln!("layers: {circles} circle(s) between sibling modules");
        std::process::exit(1);
    }
    if !map && !modules {
        println!("layers: no circle between sibling modules in any crate");
    }
}
