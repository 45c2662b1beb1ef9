//! The crate's module structure: which top-level modules of `src/` depend on each other
//! (through `crate::` paths outside `#[cfg(test)]` code), and the dependency cycles among them.
//!
//! A cycle means that no module in it can be understood, tested or moved without the others,
//! so there is none: the layers (see the crate's documentation) only look down. A type two
//! stages share goes below both (`src/model/`), not into one of them.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read src") {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The file's text before its first `#[cfg(test)]` item: test modules may import anything.
fn non_test_code(text: &str) -> &str {
    text.find("#[cfg(test)]").map_or(text, |at| &text[..at])
}

/// The first identifiers of every `crate::` path in `code` (`crate::a::b` → `a`;
/// `crate::{a::x, b}` → `a`, `b`).
fn crate_roots(code: &str) -> BTreeSet<String> {
    let ident = |s: &str| -> String {
        s.trim_start()
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect()
    };
    let mut roots = BTreeSet::new();
    for (at, _) in code.match_indices("crate::") {
        let rest = &code[at + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            // Split the braced group at its top-level commas.
            let (mut depth, mut start) = (0usize, 0usize);
            for (i, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => {
                        roots.insert(ident(&group[start..i]));
                        break;
                    }
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        roots.insert(ident(&group[start..i]));
                        start = i + 1;
                    }
                    _ => {}
                }
            }
        } else {
            roots.insert(ident(rest));
        }
    }
    roots.retain(|r| !r.is_empty() && r != "self");
    roots
}

/// The top-level module graph of `src/`: module → the top-level modules it names.
fn module_graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in files {
        let rel = file.strip_prefix(src).expect("under src");
        let first = rel
            .components()
            .next()
            .expect("component")
            .as_os_str()
            .to_string_lossy()
            .into_owned();
        let module = first.trim_end_matches(".rs").to_string();
        if module == "lib" || module == "main" {
            continue;
        }
        let text = std::fs::read_to_string(&file).expect("read source");
        let deps = graph.entry(module.clone()).or_default();
        for root in crate_roots(non_test_code(&text)) {
            if root != module {
                deps.insert(root);
            }
        }
    }
    let modules: BTreeSet<String> = graph.keys().cloned().collect();
    for deps in graph.values_mut() {
        deps.retain(|d| modules.contains(d));
    }
    graph
}

/// Strongly connected components of more than one module (Tarjan's algorithm).
fn cycles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<BTreeSet<String>> {
    struct State<'a> {
        graph: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        out: Vec<BTreeSet<String>>,
    }
    fn visit<'a>(s: &mut State<'a>, v: &'a str) {
        let i = s.index.len();
        s.index.insert(v, i);
        s.low.insert(v, i);
        s.stack.push(v);
        s.on_stack.insert(v);
        for w in &s.graph[v] {
            let w = w.as_str();
            if !s.index.contains_key(w) {
                visit(s, w);
                let lw = s.low[w];
                let lv = s.low.get_mut(v).expect("low");
                *lv = (*lv).min(lw);
            } else if s.on_stack.contains(w) {
                let iw = s.index[w];
                let lv = s.low.get_mut(v).expect("low");
                *lv = (*lv).min(iw);
            }
        }
        if s.low[v] == s.index[v] {
            let mut component = BTreeSet::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack.remove(w);
                component.insert(w.to_string());
                if w == v {
                    break;
                }
            }
            if component.len() > 1 {
                s.out.push(component);
            }
        }
    }
    let mut state = State {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in graph.keys() {
        if !state.index.contains_key(v.as_str()) {
            visit(&mut state, v);
        }
    }
    state.out
}

#[test]
fn crate_roots_reads_plain_and_grouped_paths() {
    let code = "use crate::a::b;\nuse crate::{c::d, e, f::{g, h}};\nlet x = crate::i::j(crate::k);";
    let roots: Vec<String> = crate_roots(code).into_iter().collect();
    assert_eq!(roots, ["a", "c", "e", "f", "i", "k"]);
}

#[test]
fn cycles_finds_every_strongly_connected_component() {
    let graph: BTreeMap<String, BTreeSet<String>> = [
        ("a", vec!["b"]),
        ("b", vec!["c"]),
        ("c", vec!["a", "d"]),
        ("d", vec![]),
        ("e", vec!["f"]),
        ("f", vec!["e"]),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.into_iter().map(String::from).collect()))
    .collect();
    let found: Vec<Vec<String>> = cycles(&graph)
        .into_iter()
        .map(|c| c.into_iter().collect())
        .collect();
    assert_eq!(found, vec![vec!["a", "b", "c"], vec!["e", "f"]]);
}

#[test]
fn no_module_level_dependency_cycle() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let graph = module_graph(&src);
    // The graph is read, not empty: the engine names the stages it drives.
    assert!(graph["engine"].contains("render"), "{graph:?}");
    let found = cycles(&graph);
    let report = found
        .iter()
        .map(|c| c.iter().cloned().collect::<Vec<_>>().join(" "))
        .collect::<Vec<_>>()
        .join("\n  ");
    assert!(
        found.is_empty(),
        "top-level modules in a dependency cycle (move the shared piece below them):\n  {report}"
    );
}

/// The commands (files of `src/commands/`) that `code` names: `crate::commands::x`, or
/// `super::x` for a sibling `x` (a command's own `super::*` in its tests names none).
fn commands_named(code: &str, commands: &BTreeSet<String>) -> BTreeSet<String> {
    let mut named = BTreeSet::new();
    for prefix in ["crate::commands::", "super::"] {
        for (at, _) in code.match_indices(prefix) {
            let rest = &code[at + prefix.len()..];
            let names: Vec<&str> = match rest.strip_prefix('{') {
                Some(group) => group.split('}').next().unwrap_or("").split(',').collect(),
                None => vec![rest],
            };
            for name in names {
                let name: String = name
                    .trim_start()
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                if commands.contains(&name) {
                    named.insert(name);
                }
            }
        }
    }
    named
}

#[test]
fn commands_named_reads_both_spellings() {
    let commands: BTreeSet<String> = ["fetch", "stats"].map(String::from).into();
    let code =
        "use super::fetch::FetchBars;\nlet x = crate::commands::stats::load(p);\nuse super::*;";
    let named: Vec<String> = commands_named(code, &commands).into_iter().collect();
    assert_eq!(named, ["fetch", "stats"]);
    let grouped = "use super::{fetch::hinted, Other};";
    assert_eq!(commands_named(grouped, &commands).len(), 1);
}

/// Commands are glue over the engine and the stages: code two of them share goes below them
/// (`engine/`, `model/` or the stage it is about), so that each command reads on its own.
#[test]
fn no_command_imports_another() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/commands");
    let mut files = Vec::new();
    rust_files(&dir, &mut files);
    let commands: BTreeSet<String> = files
        .iter()
        .filter_map(|f| f.file_stem().map(|s| s.to_string_lossy().into_owned()))
        .filter(|name| name != "mod")
        .collect();
    assert!(commands.contains("build"), "{commands:?}");
    let mut found = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).expect("read source");
        let own = file.file_stem().map(|s| s.to_string_lossy().into_owned());
        for named in commands_named(non_test_code(&text), &commands) {
            if Some(&named) != own.as_ref() {
                found.push(format!("{} names commands::{named}", file.display()));
            }
        }
    }
    assert!(
        found.is_empty(),
        "a command imports another (move the shared code below them):\n  {}",
        found.join("\n  ")
    );
}
