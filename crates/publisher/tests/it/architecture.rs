//! The dependency shape, checked on the source text (no server needed): no module imports a
//! module that imports it back, in the publisher, the binlog and the protocol crates.
//!
//! A module here is a top-level module of a crate (`pipeline`, `source`, `kafka`, ...); its
//! child files (`pipeline/tables.rs`) belong to it, and among the children of one module no
//! cycle is allowed either (`source::preflight` may use `source::server`, not both ways).
//! Edges are `crate::x` paths in code (comments, strings and the `tests` modules are left out:
//! a test may use whatever it tests). Rerun with the graph printed:
//!
//! ```text
//! cargo test -p sluice --test it architecture -- --nocapture
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Every `.rs` file under `dir`.
fn files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(files(&p));
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
    out.sort();
    out
}

/// The code of a file: without comments, string and char literals, and without its
/// `#[cfg(test)]` module at the end.
fn code(text: &str) -> String {
    let text = match text.find("#[cfg(test)]\nmod tests") {
        Some(i) => &text[..i],
        None => text,
    };
    let b = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'/' if b.get(i + 1) == Some(&b'/') => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                i += 2;
                while i + 1 < b.len() && !(b[i] == b'*' && b[i + 1] == b'/') {
                    i += 1;
                }
                i += 2;
            }
            b'"' => {
                i += 1;
                while i < b.len() && b[i] != b'"' {
                    i += if b[i] == b'\\' { 2 } else { 1 };
                }
                i += 1;
            }
            // raw strings r"..." and r#"..."# (the rest of the code here has no other `r#`)
            b'r' if b.get(i + 1) == Some(&b'#') && b.get(i + 2) == Some(&b'"') => {
                i += 3;
                while i + 1 < b.len() && !(b[i] == b'"' && b[i + 1] == b'#') {
                    i += 1;
                }
                i += 2;
            }
            c => {
                out.push(c as char);
                i += 1;
            }
        }
    }
    out
}

/// The module path of a file under `src`: `pipeline/tables.rs` -> `["pipeline", "tables"]`.
fn module_of(src: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).unwrap().with_extension("");
    let parts: Vec<String> = rel.iter().map(|p| p.to_string_lossy().into_owned()).collect();
    match parts.as_slice() {
        [root] if root == "lib" || root == "main" => Vec::new(),
        _ => parts,
    }
}

/// `crate::a::b` references of a file's code: the paths' module parts.
fn references(code: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let mut rest = code;
    while let Some(i) = rest.find("crate::") {
        let after = &rest[i + "crate::".len()..];
        let path: Vec<String> = after
            .split(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
            .next()
            .unwrap_or_default()
            .split("::")
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .collect();
        // `use crate::{a, b}` lists
        if after.starts_with('{') {
            let list = &after[1..after.find('}').unwrap_or(after.len())];
            for item in list.split(',') {
                let p: Vec<String> = item.trim().split("::").map(|s| s.trim().to_string()).collect();
                if p.first().is_some_and(|s| !s.is_empty()) {
                    out.push(p);
                }
            }
        } else if !path.is_empty() {
            out.push(path);
        }
        rest = after;
    }
    out
}

/// A cycle in `graph`, if there is one.
fn cycle(graph: &Graph) -> Option<Vec<String>> {
    fn visit(n: &str, graph: &Graph, state: &mut BTreeMap<String, u8>, stack: &mut Vec<String>) -> Option<Vec<String>> {
        state.insert(n.to_string(), 1);
        stack.push(n.to_string());
        for m in graph.get(n).into_iter().flatten() {
            match state.get(m.as_str()).copied().unwrap_or(0) {
                1 => {
                    let from = stack.iter().position(|s| s == m).unwrap_or(0);
                    let mut c = stack[from..].to_vec();
                    c.push(m.clone());
                    return Some(c);
                }
                0 => {
                    if let Some(c) = visit(m, graph, state, stack) {
                        return Some(c);
                    }
                }
                _ => {}
            }
        }
        stack.pop();
        state.insert(n.to_string(), 2);
        None
    }
    let mut state = BTreeMap::new();
    for n in graph.keys() {
        if state.get(n.as_str()).copied().unwrap_or(0) == 0 {
            if let Some(c) = visit(n, graph, &mut state, &mut Vec::new()) {
                return Some(c);
            }
        }
    }
    None
}

/// Module name -> the modules it imports.
type Graph = BTreeMap<String, BTreeSet<String>>;

/// The graph of a crate's top-level modules, and of each module's children among themselves.
fn graphs(src: &Path) -> (Graph, BTreeMap<String, Graph>) {
    let mut top = Graph::new();
    let mut inner: BTreeMap<String, Graph> = BTreeMap::new();
    let modules: BTreeSet<String> = files(src).iter().filter_map(|f| module_of(src, f).first().cloned()).collect();
    for f in files(src) {
        let m = module_of(src, &f);
        let Some(first) = m.first().cloned() else { continue };
        if m.last().is_some_and(|l| l == "tests") {
            continue;
        }
        let text = code(&std::fs::read_to_string(&f).unwrap());
        top.entry(first.clone()).or_default();
        for r in references(&text) {
            let Some(target) = r.first() else { continue };
            if !modules.contains(target) {
                continue; // a macro or an item of the crate root
            }
            if *target != first {
                top.entry(first.clone()).or_default().insert(target.clone());
            } else if m.len() >= 2 && r.len() >= 2 && r[1] != m[1] && modules_has_child(src, &first, &r[1]) {
                // a child of `first` using a sibling
                inner.entry(first.clone()).or_default().entry(m[1].clone()).or_default().insert(r[1].clone());
            }
        }
        // `super::x` from a child's child file names a sibling of the child
        if m.len() == 2 {
            for line in text.lines() {
                let Some(i) = line.find("super::") else { continue };
                let name: String = line[i + 7..].chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
                if name != m[1] && modules_has_child(src, &first, &name) {
                    inner.entry(first.clone()).or_default().entry(m[1].clone()).or_default().insert(name);
                }
            }
        }
    }
    (top, inner)
}

fn modules_has_child(src: &Path, module: &str, child: &str) -> bool {
    src.join(module).join(format!("{child}.rs")).exists() || src.join(module).join(child).is_dir()
}

fn check(crate_dir: &str) {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(crate_dir).join("src");
    let (top, inner) = graphs(&src);
    println!("{crate_dir}:");
    for (m, deps) in &top {
        println!("  {m} -> {}", deps.iter().cloned().collect::<Vec<_>>().join(", "));
    }
    assert!(top.len() >= 5, "{crate_dir}: expected its modules under {}", src.display());
    if let Some(c) = cycle(&top) {
        panic!("{crate_dir}: modules import each other in a circle: {}", c.join(" -> "));
    }
    for (m, g) in &inner {
        if let Some(c) = cycle(g) {
            panic!("{crate_dir}: the children of {m} import each other in a circle: {}", c.join(" -> "));
        }
    }
}

#[test]
fn dependencies_point_one_way() {
    check("publisher");
    check("binlog");
    check("protocol");
}

/// The checker itself finds a cycle, and only where there is one.
#[test]
fn the_cycle_finder_finds_cycles() {
    let g = |edges: &[(&str, &str)]| {
        let mut m = Graph::new();
        for (a, b) in edges {
            m.entry(a.to_string()).or_default().insert(b.to_string());
            m.entry(b.to_string()).or_default();
        }
        m
    };
    assert_eq!(cycle(&g(&[("a", "b"), ("b", "c")])), None);
    assert_eq!(
        cycle(&g(&[("a", "b"), ("b", "c"), ("c", "a")])),
        Some(vec!["a".into(), "b".into(), "c".into(), "a".into()])
    );
    assert_eq!(
        references(&code(
            "use crate::{config::Config, kafka};\n// crate::nope\nlet x = \"crate::nope\"; crate::source::run();"
        )),
        vec![vec!["config".to_string(), "Config".into()], vec!["kafka".into()], vec!["source".into(), "run".into()]]
    );
}
