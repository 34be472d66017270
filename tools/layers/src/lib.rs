//! Layers without circles: reads every crate of the workspace with `syn`, finds what each
//! module refers to (its `use`s, every path in its code, paths inside macro calls), and checks
//! that at every level of the module tree the children of a module form layers — no two
//! sibling modules (with what lies below them) reach each other through a chain of
//! references. A module and its own descendants are one unit at their parent's level, so a
//! child using its parent (`super::Thing`) is not a circle; two siblings using each other is.
//!
//! Code under `#[cfg(test)]` is left out: tests sit above every layer they test.
//!
//! Paths are resolved the way the compiler does for what matters here: `crate::`, `self::`,
//! `super::`, a first segment naming a child module, and names a module brings in with
//! `use` (so `crate::Error`, re-exported from `error`, counts as a reference to `error`).
//! What it cannot see: references made only through type inference or trait method calls on
//! a value (no path is written), which never create a module dependency on their own — the
//! type had to be named somewhere to get the value.

use proc_macro2::{TokenStream, TokenTree};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use syn::visit::Visit;

/// A module's absolute path inside its crate (empty: the crate root).
pub type ModPath = Vec<String>;

/// One reference from a module: where it points and where it is written.
#[derive(Debug, Clone)]
pub struct Ref {
    /// The path as written, made absolute where it can be (before re-exports are followed).
    pub target: Vec<String>,
    pub line: usize,
}

#[derive(Debug, Default)]
pub struct Module {
    pub file: PathBuf,
    /// The path as written and the line, with the module it was written in (relative forms
    /// are resolved later, once every module of the crate is known).
    raw: Vec<(Vec<String>, usize)>,
    /// Names this module binds with `use` (`use a::b as c` binds `c` to `a::b`), as written.
    aliases: BTreeMap<String, Vec<String>>,
    pub refs: Vec<Ref>,
}

/// One crate target (a library or a binary) and its modules.
#[derive(Debug)]
pub struct Crate {
    pub name: String,
    pub root: PathBuf,
    pub modules: BTreeMap<ModPath, Module>,
}

/// An edge between two siblings, with one place that makes it.
#[derive(Debug, Clone)]
pub struct Edge {
    pub from: String,
    pub to: String,
    pub file: PathBuf,
    pub line: usize,
}

/// Sibling modules of `parent` that reach each other, and the edges between them.
#[derive(Debug)]
pub struct Circle {
    pub crate_name: String,
    pub parent: ModPath,
    pub members: Vec<String>,
    pub edges: Vec<Edge>,
}

impl std::fmt::Display for Circle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let parent = if self.parent.is_empty() {
            "crate".to_string()
        } else {
            self.parent.join("::")
        };
        writeln!(
            f,
            "{}: a circle among the children of {}: {{{}}}",
            self.crate_name,
            parent,
            self.members.join(", ")
        )?;
        for e in &self.edges {
            writeln!(
                f,
                "    {} -> {}   ({}:{})",
                e.from,
                e.to,
                e.file.display(),
                e.line
            )?;
        }
        Ok(())
    }
}

#[derive(Debug)]
pub struct LoadError(pub String);

impl std::fmt::Display for LoadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for LoadError {}

/// Whether attributes say "only in tests" (`#[cfg(test)]`, `#[cfg(all(test, …))]`).
fn test_only(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| {
        if !a.path().is_ident("cfg") {
            return false;
        }
        let Ok(list) = a.meta.require_list() else {
            return false;
        };
        let text = list.tokens.to_string();
        text == "test"
            || (text.starts_with("all") && text.contains("test") && !text.contains("not"))
    })
}

fn path_attr(attrs: &[syn::Attribute]) -> Option<String> {
    attrs.iter().find_map(|a| {
        if !a.path().is_ident("path") {
            return None;
        }
        let nv = a.meta.require_name_value().ok()?;
        match &nv.value {
            syn::Expr::Lit(syn::ExprLit {
                lit: syn::Lit::Str(s),
                ..
            }) => Some(s.value()),
            _ => None,
        }
    })
}

/// Collects the paths an item mentions, without going into nested modules.
struct Collector<'a> {
    module: &'a mut Module,
}

impl Collector<'_> {
    fn push(&mut self, segs: Vec<String>, line: usize) {
        if !segs.is_empty() {
            self.module.raw.push((segs, line));
        }
    }

    fn use_tree(&mut self, prefix: &[String], tree: &syn::UseTree) {
        match tree {
            syn::UseTree::Path(p) => {
                let mut next = prefix.to_vec();
                next.push(p.ident.to_string());
                self.use_tree(&next, &p.tree);
            }
            syn::UseTree::Name(n) => {
                let line = n.ident.span().start().line;
                let name = n.ident.to_string();
                let mut full = prefix.to_vec();
                if name != "self" {
                    full.push(name.clone());
                }
                let bound = if name == "self" {
                    prefix.last().cloned().unwrap_or_default()
                } else {
                    name
                };
                self.module.aliases.insert(bound, full.clone());
                self.push(full, line);
            }
            syn::UseTree::Rename(r) => {
                let line = r.ident.span().start().line;
                let mut full = prefix.to_vec();
                if r.ident != "self" {
                    full.push(r.ident.to_string());
                }
                self.module
                    .aliases
                    .insert(r.rename.to_string(), full.clone());
                self.push(full, line);
            }
            syn::UseTree::Glob(g) => {
                let line = g.star_token.span.start().line;
                self.push(prefix.to_vec(), line);
            }
            syn::UseTree::Group(g) => {
                for t in &g.items {
                    self.use_tree(prefix, t);
                }
            }
        }
    }

    /// Paths written inside a macro call (`format!`, `tracing::info!`, our own macros): every
    /// run `crate :: a :: b`, `super :: …`, `self :: …` or `$crate :: …` in its tokens.
    fn tokens(&mut self, tokens: TokenStream) {
        let trees: Vec<TokenTree> = tokens.into_iter().collect();
        let mut i = 0;
        while i < trees.len() {
            match &trees[i] {
                TokenTree::Group(g) => self.tokens(g.stream()),
                TokenTree::Ident(id) if id == "crate" || id == "super" || id == "self" => {
                    let line = id.span().start().line;
                    let mut segs = vec![id.to_string()];
                    let mut j = i + 1;
                    loop {
                        let colons = matches!(
                            (&trees.get(j), &trees.get(j + 1)),
                            (Some(TokenTree::Punct(a)), Some(TokenTree::Punct(b)))
                                if a.as_char() == ':' && b.as_char() == ':'
                        );
                        match (colons, trees.get(j + 2)) {
                            (true, Some(TokenTree::Ident(next))) => {
                                segs.push(next.to_string());
                                j += 3;
                            }
                            _ => break,
                        }
                    }
                    if segs.len() > 1 {
                        self.push(segs, line);
                    }
                    i = j.max(i + 1);
                    continue;
                }
                _ => {}
            }
            i += 1;
        }
    }
}

impl<'ast> Visit<'ast> for Collector<'_> {
    fn visit_item_mod(&mut self, _: &'ast syn::ItemMod) {
        // Nested modules are modules of their own: `load_items` visits them.
    }
    fn visit_item_use(&mut self, u: &'ast syn::ItemUse) {
        if !test_only(&u.attrs) {
            let prefix: Vec<String> = if u.leading_colon.is_some() {
                vec!["::".into()]
            } else {
                Vec::new()
            };
            self.use_tree(&prefix, &u.tree);
        }
    }
    fn visit_item_fn(&mut self, f: &'ast syn::ItemFn) {
        if !test_only(&f.attrs) {
            syn::visit::visit_item_fn(self, f);
        }
    }
    fn visit_item_impl(&mut self, i: &'ast syn::ItemImpl) {
        if !test_only(&i.attrs) {
            syn::visit::visit_item_impl(self, i);
        }
    }
    fn visit_impl_item_fn(&mut self, f: &'ast syn::ImplItemFn) {
        if !test_only(&f.attrs) {
            syn::visit::visit_impl_item_fn(self, f);
        }
    }
    fn visit_path(&mut self, p: &'ast syn::Path) {
        let mut segs: Vec<String> = Vec::new();
        if p.leading_colon.is_some() {
            segs.push("::".into());
        }
        segs.extend(p.segments.iter().map(|s| s.ident.to_string()));
        let line = p
            .segments
            .first()
            .map(|s| s.ident.span().start().line)
            .unwrap_or(0);
        // A one-segment path is a local name or one a `use` brought in (counted there).
        if segs.len() > 1 {
            self.push(segs, line);
        }
        syn::visit::visit_path(self, p);
    }
    fn visit_macro(&mut self, m: &'ast syn::Macro) {
        self.visit_path(&m.path);
        self.tokens(m.tokens.clone());
    }
}

fn read(file: &Path) -> Result<syn::File, LoadError> {
    let text = std::fs::read_to_string(file)
        .map_err(|e| LoadError(format!("read {}: {e}", file.display())))?;
    syn::parse_file(&text).map_err(|e| {
        let at = e.span().start();
        LoadError(format!(
            "parse {}:{}:{}: {e}",
            file.display(),
            at.line,
            at.column
        ))
    })
}

/// What `layers --modules` prints first (docs/modules.md's head).
pub const MODULE_MAP_HEADER: &str = "# Module map\n\nEach module file of each crate of the workspace, with the first sentence of its docs.\nGenerated: `cargo run -q -p peapod-layers -- --modules > docs/modules.md` (a test fails\nwhen this file and the tree differ).\n";

/// The phrase that opens a crate root's layer table (the daemon's `lib.rs`, the shim's
/// `main.rs`, the runtime's `lib.rs`): a root whose docs have it names every top-level
/// module of its crate there ([`Crate::unlisted_modules`]), so that the table cannot drift.
pub const LAYER_TABLE: &str = "Layers, each using only those below it";

impl Crate {
    /// The top-level modules the root's layer table leaves out: those its docs do not name
    /// in backticks (`name`, `name/`, `name::…`). None when the root has no layer table
    /// ([`LAYER_TABLE`]); test-only modules need no place in it.
    pub fn unlisted_modules(&self) -> Vec<String> {
        let text = std::fs::read_to_string(&self.root).unwrap_or_default();
        let doc: Vec<&str> = text.lines().map_while(|l| l.strip_prefix("//!")).collect();
        let doc = doc.join("\n");
        if !doc.contains(LAYER_TABLE) {
            return Vec::new();
        }
        let named: Vec<&str> = doc.split('`').skip(1).step_by(2).collect();
        let is_named = |m: &str| {
            named.iter().any(|n| {
                n.strip_prefix(m)
                    .is_some_and(|rest| rest.is_empty() || rest == "/" || rest.starts_with("::"))
            })
        };
        self.modules
            .keys()
            .filter(|p| p.len() == 1 && !is_named(&p[0]))
            .map(|p| p[0].clone())
            .collect()
    }

    /// The module map's section for this crate: one line per module file, its path in the
    /// crate, the file (relative to `workspace`), the first sentence of its docs.
    pub fn module_map(&self, workspace: &Path) -> String {
        let mut out = format!("\n## {}\n\n", self.name);
        let mut seen = std::collections::BTreeSet::new();
        for (path, module) in &self.modules {
            // Inline modules share their parent's file and docs.
            if !seen.insert(module.file.clone()) {
                continue;
            }
            let name = if path.is_empty() {
                self.name.replace('-', "_")
            } else {
                path.join("::")
            };
            let file = module.file.strip_prefix(workspace).unwrap_or(&module.file);
            let doc = std::fs::read_to_string(&module.file)
                .map(|text| first_sentence(&text))
                .unwrap_or_default();
            out.push_str(&format!("- `{name}` ({}): {doc}\n", file.display()));
        }
        out
    }

    /// Reads a crate from its root file (`src/lib.rs`, `src/main.rs`, a `src/bin/*.rs`).
    pub fn load(name: &str, root: &Path) -> Result<Crate, LoadError> {
        let mut krate = Crate {
            name: name.to_string(),
            root: root.to_path_buf(),
            modules: BTreeMap::new(),
        };
        let file = read(root)?;
        let dir = root.parent().unwrap_or(Path::new(".")).to_path_buf();
        krate.load_items(Vec::new(), root, &dir, &file.items)?;
        krate.resolve();
        Ok(krate)
    }

    /// Loads the items of the module at `path` (written in `file`), whose child module files
    /// live in `dir`.
    fn load_items(
        &mut self,
        path: ModPath,
        file: &Path,
        dir: &Path,
        items: &[syn::Item],
    ) -> Result<(), LoadError> {
        let mut module = Module {
            file: file.to_path_buf(),
            ..Default::default()
        };
        let mut children = Vec::new();
        {
            let mut c = Collector {
                module: &mut module,
            };
            for item in items {
                match item {
                    syn::Item::Mod(m) => {
                        if !test_only(&m.attrs) {
                            children.push(m);
                        }
                    }
                    other => c.visit_item(other),
                }
            }
        }
        self.modules.insert(path.clone(), module);
        for m in children {
            let name = m.ident.to_string();
            let mut child = path.clone();
            child.push(name.clone());
            match &m.content {
                Some((_, inner)) => self.load_items(child, file, &dir.join(&name), inner)?,
                None => {
                    let (child_file, child_dir) = match path_attr(&m.attrs) {
                        Some(p) => {
                            let f = dir.join(p);
                            let d = f.parent().unwrap_or(dir).to_path_buf();
                            (f, d)
                        }
                        None => {
                            let flat = dir.join(format!("{name}.rs"));
                            if flat.exists() {
                                (flat, dir.join(&name))
                            } else {
                                (dir.join(&name).join("mod.rs"), dir.join(&name))
                            }
                        }
                    };
                    let parsed = read(&child_file)?;
                    self.load_items(child, &child_file, &child_dir, &parsed.items)?;
                }
            }
        }
        Ok(())
    }

    /// Makes a written path absolute from module `at`; `None` when it leaves the crate.
    fn absolute(&self, at: &[String], segs: &[String]) -> Option<Vec<String>> {
        let first = segs.first()?;
        match first.as_str() {
            "crate" | "$crate" => Some(segs[1..].to_vec()),
            "self" => {
                let mut p = at.to_vec();
                p.extend_from_slice(&segs[1..]);
                Some(p)
            }
            "super" => {
                let mut p = at.to_vec();
                let mut rest = segs;
                while rest.first().map(String::as_str) == Some("super") {
                    p.pop()?;
                    rest = &rest[1..];
                }
                if rest.first().map(String::as_str) == Some("self") {
                    rest = &rest[1..];
                }
                p.extend_from_slice(rest);
                Some(p)
            }
            "::" | "Self" => None,
            name => {
                let mut child = at.to_vec();
                child.push(name.to_string());
                if self.modules.contains_key(&child) {
                    let mut p = at.to_vec();
                    p.extend_from_slice(segs);
                    return Some(p);
                }
                // A name the module brought in with `use` (a path's first segment).
                let alias = self.modules.get(at)?.aliases.get(name)?;
                if alias.first() == Some(first) {
                    return None; // `use foo;` of an external crate named like itself
                }
                let mut p = self.absolute(at, alias)?;
                p.extend_from_slice(&segs[1..]);
                Some(p)
            }
        }
    }

    fn resolve(&mut self) {
        let mut resolved = BTreeMap::new();
        for (path, m) in &self.modules {
            let refs: Vec<Ref> = m
                .raw
                .iter()
                .filter_map(|(segs, line)| {
                    self.absolute(path, segs).map(|target| Ref {
                        target,
                        line: *line,
                    })
                })
                .collect();
            resolved.insert(path.clone(), refs);
        }
        for (path, refs) in resolved {
            if let Some(m) = self.modules.get_mut(&path) {
                m.refs = refs;
            }
        }
    }

    /// The module an absolute path lands in, following re-exports (`pub use`) of names.
    pub fn module_of(&self, target: &[String]) -> ModPath {
        let mut path = target.to_vec();
        for _ in 0..16 {
            let mut m: ModPath = Vec::new();
            let mut i = 0;
            while i < path.len() {
                let mut next = m.clone();
                next.push(path[i].clone());
                if !self.modules.contains_key(&next) {
                    break;
                }
                m = next;
                i += 1;
            }
            let Some(name) = path.get(i) else {
                return m;
            };
            let Some(alias) = self.modules.get(&m).and_then(|md| md.aliases.get(name)) else {
                return m;
            };
            let Some(mut via) = self.absolute(&m, alias) else {
                return m;
            };
            via.extend_from_slice(&path[i + 1..]);
            if via == path {
                return m;
            }
            path = via;
        }
        path
    }

    /// Every edge between siblings: for a reference from module A to module T whose lowest
    /// common ancestor is P (neither A nor T itself), an edge at P from A's child of P to T's.
    pub fn sibling_edges(&self) -> BTreeMap<ModPath, BTreeMap<(String, String), Edge>> {
        let mut out: BTreeMap<ModPath, BTreeMap<(String, String), Edge>> = BTreeMap::new();
        for (from, m) in &self.modules {
            for r in &m.refs {
                let to = self.module_of(&r.target);
                let common = from.iter().zip(&to).take_while(|(a, b)| a == b).count();
                if common == from.len() || common == to.len() {
                    continue;
                }
                let parent = from[..common].to_vec();
                let key = (from[common].clone(), to[common].clone());
                out.entry(parent)
                    .or_default()
                    .entry(key.clone())
                    .or_insert(Edge {
                        from: key.0,
                        to: key.1,
                        file: m.file.clone(),
                        line: r.line,
                    });
            }
        }
        out
    }

    /// The circles: at each level, the strongly connected sets of more than one sibling.
    pub fn circles(&self) -> Vec<Circle> {
        let mut circles = Vec::new();
        for (parent, edges) in self.sibling_edges() {
            let nodes: BTreeSet<&String> = edges.keys().flat_map(|(a, b)| [a, b]).collect();
            let nodes: Vec<&String> = nodes.into_iter().collect();
            let index: BTreeMap<&String, usize> =
                nodes.iter().enumerate().map(|(i, n)| (*n, i)).collect();
            let mut adj = vec![Vec::new(); nodes.len()];
            for (a, b) in edges.keys() {
                adj[index[a]].push(index[b]);
            }
            for scc in strongly_connected(&adj) {
                if scc.len() < 2 {
                    continue;
                }
                let members: BTreeSet<String> = scc.iter().map(|&i| nodes[i].clone()).collect();
                let inside: Vec<Edge> = edges
                    .values()
                    .filter(|e| members.contains(&e.from) && members.contains(&e.to))
                    .cloned()
                    .collect();
                circles.push(Circle {
                    crate_name: self.name.clone(),
                    parent: parent.clone(),
                    members: members.into_iter().collect(),
                    edges: inside,
                });
            }
        }
        circles
    }
}

/// Tarjan's algorithm, iterative enough for module graphs (a few hundred nodes).
fn strongly_connected(adj: &[Vec<usize>]) -> Vec<Vec<usize>> {
    struct State<'a> {
        adj: &'a [Vec<usize>],
        index: Vec<Option<usize>>,
        low: Vec<usize>,
        on_stack: Vec<bool>,
        stack: Vec<usize>,
        next: usize,
        out: Vec<Vec<usize>>,
    }
    fn visit(s: &mut State, v: usize) {
        s.index[v] = Some(s.next);
        s.low[v] = s.next;
        s.next += 1;
        s.stack.push(v);
        s.on_stack[v] = true;
        for i in 0..s.adj[v].len() {
            let w = s.adj[v][i];
            match s.index[w] {
                None => {
                    visit(s, w);
                    s.low[v] = s.low[v].min(s.low[w]);
                }
                Some(iw) if s.on_stack[w] => s.low[v] = s.low[v].min(iw),
                _ => {}
            }
        }
        if Some(s.low[v]) == s.index[v] {
            let mut scc = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack[w] = false;
                scc.push(w);
                if w == v {
                    break;
                }
            }
            s.out.push(scc);
        }
    }
    let n = adj.len();
    let mut s = State {
        adj,
        index: vec![None; n],
        low: vec![0; n],
        on_stack: vec![false; n],
        stack: Vec::new(),
        next: 0,
        out: Vec::new(),
    };
    for v in 0..n {
        if s.index[v].is_none() {
            visit(&mut s, v);
        }
    }
    s.out
}

/// The crate targets of the workspace at `root`: each member's library and binaries (not
/// its tests, examples or build script).
pub fn workspace_targets(root: &Path) -> Result<Vec<(String, PathBuf)>, LoadError> {
    let manifest = |p: &Path| -> Result<toml::Value, LoadError> {
        let text = std::fs::read_to_string(p)
            .map_err(|e| LoadError(format!("read {}: {e}", p.display())))?;
        text.parse::<toml::Value>()
            .map_err(|e| LoadError(format!("parse {}: {e}", p.display())))
    };
    let ws = manifest(&root.join("Cargo.toml"))?;
    let members = ws
        .get("workspace")
        .and_then(|w| w.get("members"))
        .and_then(|m| m.as_array())
        .cloned()
        .unwrap_or_default();
    let mut out = Vec::new();
    for member in members.iter().filter_map(|m| m.as_str()) {
        let dir = root.join(member);
        let m = manifest(&dir.join("Cargo.toml"))?;
        let name = m
            .get("package")
            .and_then(|p| p.get("name"))
            .and_then(|n| n.as_str())
            .unwrap_or(member)
            .to_string();
        let lib = m
            .get("lib")
            .and_then(|l| l.get("path"))
            .and_then(|p| p.as_str())
            .map(|p| dir.join(p))
            .unwrap_or_else(|| dir.join("src/lib.rs"));
        if lib.exists() {
            out.push((name.clone(), lib));
        }
        let mut bins: BTreeSet<PathBuf> = BTreeSet::new();
        for bin in m
            .get("bin")
            .and_then(|b| b.as_array())
            .into_iter()
            .flatten()
        {
            if let Some(p) = bin.get("path").and_then(|p| p.as_str()) {
                bins.insert(dir.join(p));
            }
        }
        if dir.join("src/main.rs").exists() {
            bins.insert(dir.join("src/main.rs"));
        }
        if let Ok(entries) = std::fs::read_dir(dir.join("src/bin")) {
            for e in entries.flatten() {
                let p = e.path();
                if p.extension().is_some_and(|x| x == "rs") {
                    bins.insert(p);
                } else if p.join("main.rs").exists() {
                    bins.insert(p.join("main.rs"));
                }
            }
        }
        for bin in bins {
            let stem = bin.strip_prefix(&dir).unwrap_or(&bin).display().to_string();
            out.push((format!("{name} ({stem})"), bin));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests;

/// The first sentence of a file's `//!` docs (its first paragraph when no sentence ends in it).
fn first_sentence(text: &str) -> String {
    let mut para = String::new();
    for line in text.lines() {
        let Some(d) = line.strip_prefix("//!") else {
            break;
        };
        let d = d.trim();
        if d.is_empty() {
            break;
        }
        if !para.is_empty() {
            para.push(' ');
        }
        para.push_str(d);
    }
    match para.find(". ") {
        Some(end) => para[..=end].to_string(),
        None => para,
    }
}
