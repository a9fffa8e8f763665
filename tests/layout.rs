//! The source tree's shape, as a newcomer depends on it: no file under `src/`, `udfs/src/` or
//! `python/src/` has more than 1,000 lines before its tests; no two modules import each
//! other, directly or through others (the graph of `use` and paths between source files has
//! no cycle); and the call engine (`udfs/src/llm/`) uses nothing from the judge
//! (`udfs/src/judge/`).
//!
//! The graph is read from the text: every `crate::…`, `super::…` and `self::…` path outside
//! comments and test modules, resolved to the longest module prefix that is a file.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// The most lines a source file may have before its tests.
const MAX_LINES: usize = 1000;

/// The source roots of the workspace's crates.
const CRATES: [&str; 3] = ["src", "udfs/src", "python/src"];

/// A module: its crate root and its path in the crate.
type Module = (&'static str, Vec<String>);

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Every source file of the workspace, by module.
fn modules() -> BTreeMap<Module, PathBuf> {
    let mut out = BTreeMap::new();
    for krate in CRATES {
        let root = Path::new(ROOT).join(krate);
        let mut files = Vec::new();
        rust_files(&root, &mut files);
        for file in files {
            let rel = file.strip_prefix(&root).unwrap().with_extension("");
            let mut path: Vec<String> = rel
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            match path.last().map(String::as_str) {
                Some("mod" | "lib") => {
                    path.pop();
                }
                // The binary is a crate of its own over the library.
                Some("main") => path = vec!["<main>".to_string()],
                _ => {}
            }
            out.insert((krate, path), file);
        }
    }
    out
}

/// A file's code before its tests, without comment lines.
fn code(file: &Path) -> String {
    let text = std::fs::read_to_string(file).unwrap();
    let before_tests = text.split("#[cfg(test)]").next().unwrap_or("");
    before_tests
        .lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// The paths a `crate::`/`super::`/`self::` path at the start of `text` names, each as its
/// segments (a `{a, b::c}` group gives one path per item).
fn paths_at(text: &str) -> Vec<Vec<String>> {
    let mut segments = Vec::new();
    let mut rest = text;
    loop {
        let len = rest.find(|c: char| !is_ident(c)).unwrap_or(rest.len());
        if len == 0 {
            break;
        }
        segments.push(rest[..len].to_string());
        rest = &rest[len..];
        let Some(after) = rest.strip_prefix("::") else {
            return vec![segments];
        };
        rest = after;
        if let Some(group) = rest.strip_prefix('{') {
            // The items of the group, split at top-level commas.
            let (mut depth, mut start, mut out) = (0, 0, Vec::new());
            for (i, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => {
                        out.push(&group[start..i]);
                        break;
                    }
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        out.push(&group[start..i]);
                        start = i + 1;
                    }
                    _ => {}
                }
            }
            return out
                .into_iter()
                .flat_map(|item| paths_at(item.trim()))
                .map(|tail| segments.iter().cloned().chain(tail).collect())
                .collect();
        }
    }
    vec![segments]
}

/// The modules `code` of `module` refers to.
fn references(module: &Module, code: &str, files: &BTreeMap<Module, PathBuf>) -> BTreeSet<Module> {
    let mut out = BTreeSet::new();
    let starts = ["crate::", "super::", "self::"]
        .iter()
        .flat_map(|kw| code.match_indices(kw).map(|(i, _)| i))
        // A path's first segment only: not `a::super::` or `other_crate::`.
        .filter(|&i| {
            !code[..i]
                .chars()
                .next_back()
                .is_some_and(|c| is_ident(c) || c == ':')
        });
    for start in starts {
        for path in paths_at(&code[start..]) {
            let mut at: Vec<String> = match path[0].as_str() {
                "crate" => Vec::new(),
                _ => module.1.clone(),
            };
            let mut rest = &path[1..];
            if path[0] == "super" {
                at.pop();
                while rest.first().is_some_and(|s| s == "super") {
                    at.pop();
                    rest = &rest[1..];
                }
            }
            at.extend(rest.iter().cloned());
            // The longest prefix that is a file.
            while !at.is_empty() && !files.contains_key(&(module.0, at.clone())) {
                at.pop();
            }
            let target = (module.0, at);
            if files.contains_key(&target) && &target != module {
                out.insert(target);
            }
        }
    }
    out
}

fn graph() -> BTreeMap<Module, BTreeSet<Module>> {
    let files = modules();
    files
        .iter()
        .map(|(module, file)| (module.clone(), references(module, &code(file), &files)))
        .collect()
}

fn name(m: &Module) -> String {
    format!("{}/{}", m.0, m.1.join("/"))
}

/// A cycle of the graph, if it has one.
fn find_cycle(graph: &BTreeMap<Module, BTreeSet<Module>>) -> Option<Vec<String>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        Open,
        Done,
    }
    fn visit(
        m: &Module,
        graph: &BTreeMap<Module, BTreeSet<Module>>,
        marks: &mut BTreeMap<Module, Mark>,
        stack: &mut Vec<Module>,
    ) -> Option<Vec<String>> {
        match marks.get(m) {
            Some(Mark::Done) => return None,
            Some(Mark::Open) => {
                let from = stack.iter().position(|s| s == m).unwrap();
                let mut cycle: Vec<String> = stack[from..].iter().map(name).collect();
                cycle.push(name(m));
                return Some(cycle);
            }
            None => {}
        }
        marks.insert(m.clone(), Mark::Open);
        stack.push(m.clone());
        for next in graph.get(m).into_iter().flatten() {
            if let Some(cycle) = visit(next, graph, marks, stack) {
                return Some(cycle);
            }
        }
        stack.pop();
        marks.insert(m.clone(), Mark::Done);
        None
    }
    let mut marks = BTreeMap::new();
    graph
        .keys()
        .find_map(|m| visit(m, graph, &mut marks, &mut Vec::new()))
}

#[test]
fn no_source_file_is_over_a_thousand_lines_before_its_tests() {
    let long: Vec<String> = modules()
        .values()
        .filter_map(|file| {
            let text = std::fs::read_to_string(file).unwrap();
            let lines = text
                .lines()
                .take_while(|l| !l.starts_with("#[cfg(test)]"))
                .count();
            (lines > MAX_LINES).then(|| format!("{} ({lines})", file.display()))
        })
        .collect();
    assert!(long.is_empty(), "over {MAX_LINES} lines: {long:?}");
}

#[test]
fn no_two_modules_import_each_other() {
    let graph = graph();
    // The reader must see the imports it is checking: the judge uses the call engine.
    assert!(
        graph[&(
            "udfs/src",
            vec!["judge".to_string(), "functions".to_string()]
        )]
            .iter()
            .any(|m| m.1.first().is_some_and(|s| s == "llm")),
        "the import reader found no use of llm in judge/functions.rs"
    );
    if let Some(cycle) = find_cycle(&graph) {
        panic!("modules import each other: {}", cycle.join(" -> "));
    }
}

#[test]
fn the_call_engine_uses_nothing_from_the_judge() {
    let graph = graph();
    let into_judge: Vec<String> = graph
        .iter()
        .filter(|(m, _)| m.0 == "udfs/src" && m.1.first().is_some_and(|s| s == "llm"))
        .flat_map(|(m, refs)| {
            refs.iter()
                .filter(|r| r.1.first().is_some_and(|s| s == "judge"))
                .map(move |r| format!("{} -> {}", name(m), name(r)))
        })
        .collect();
    assert!(into_judge.is_empty(), "llm/ uses judge/: {into_judge:?}");
}

#[test]
fn the_reader_resolves_groups_and_super() {
    assert_eq!(
        paths_at("crate::a::{b, c::{d, e}}"),
        vec![
            vec!["crate", "a", "b"],
            vec!["crate", "a", "c", "d"],
            vec!["crate", "a", "c", "e"],
        ]
    );
    let files: BTreeMap<Module, PathBuf> = [
        (("x", vec![]), PathBuf::new()),
        (("x", vec!["a".to_string()]), PathBuf::new()),
        (
            ("x", vec!["a".to_string(), "b".to_string()]),
            PathBuf::new(),
        ),
        (("x", vec!["c".to_string()]), PathBuf::new()),
    ]
    .into_iter()
    .collect();
    let module = ("x", vec!["a".to_string(), "b".to_string()]);
    let refs = references(
        &module,
        "use super::super::c::Item;\nlet v = super::f();",
        &files,
    );
    assert_eq!(
        refs,
        [("x", vec!["c".to_string()]), ("x", vec!["a".to_string()])]
            .into_iter()
            .collect()
    );
}
