//! README's pointers: every repository path it names exists (a pattern — `queries/*.sql`,
//! `data/qa.{jsonl,csv,parquet}`, `udfs/src/text/<name>.rs` — matches at least one file),
//! and no section grows past what a reader takes in at once.

use std::path::{Path, PathBuf};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// The most lines one `##` section of README may have.
const SECTION_LINES: usize = 250;

/// Every `{a,b}` alternative spelled out.
fn expand_braces(pattern: &str) -> Vec<String> {
    let (Some(open), Some(close)) = (pattern.find('{'), pattern.find('}')) else {
        return vec![pattern.to_string()];
    };
    pattern[open + 1..close]
        .split(',')
        .flat_map(|alt| {
            expand_braces(&format!(
                "{}{alt}{}",
                &pattern[..open],
                &pattern[close + 1..]
            ))
        })
        .collect()
}

/// Whether `name` matches `pattern`, where `*` is any run of characters.
fn wildcard(pattern: &str, name: &str) -> bool {
    match pattern.split_once('*') {
        None => pattern == name,
        Some((head, tail)) => {
            name.starts_with(head)
                && (head.len()..=name.len())
                    .any(|i| name.is_char_boundary(i) && wildcard(tail, &name[i..]))
        }
    }
}

/// The paths under `base` that `segments` (each a name or a wildcard) lead to.
fn matches(base: &Path, segments: &[&str]) -> Vec<PathBuf> {
    let Some((first, rest)) = segments.split_first() else {
        return vec![base.to_path_buf()];
    };
    if first.is_empty() {
        return matches(base, rest);
    }
    let candidates: Vec<PathBuf> = if first.contains('*') {
        std::fs::read_dir(base)
            .map(|entries| {
                entries
                    .filter_map(|e| e.ok())
                    .filter(|e| wildcard(first, &e.file_name().to_string_lossy()))
                    .map(|e| e.path())
                    .collect()
            })
            .unwrap_or_default()
    } else {
        let path = base.join(first);
        if path.exists() { vec![path] } else { vec![] }
    };
    candidates.iter().flat_map(|c| matches(c, rest)).collect()
}

/// The repository paths a Markdown text names in code spans and links: those that start
/// with a top-level directory of the repository.
fn named_paths(text: &str) -> Vec<String> {
    let tops: Vec<String> = std::fs::read_dir(ROOT)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.path().is_dir())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|name| !name.starts_with('.') || name == ".ci")
        .filter(|name| name != "target")
        .collect();
    let mut found = Vec::new();
    let spans = text.split('`').skip(1).step_by(2).map(str::to_string);
    let links = text.match_indices("](").filter_map(|(at, _)| {
        let rest = &text[at + 2..];
        Some(rest[..rest.find(')')?].split('#').next()?.to_string())
    });
    for candidate in spans.chain(links) {
        let candidate = candidate.trim().trim_start_matches("./");
        if candidate.contains(char::is_whitespace) || !candidate.contains('/') {
            continue;
        }
        let first = candidate.split('/').next().unwrap_or_default();
        if tops.iter().any(|t| t == first) {
            found.push(candidate.to_string());
        }
    }
    found
}

#[test]
fn every_path_readme_names_exists() {
    for (file, base) in [("README.md", ""), ("benches/README.md", "benches")] {
        let text = std::fs::read_to_string(Path::new(ROOT).join(file)).unwrap();
        let base = Path::new(ROOT).join(base);
        let named = named_paths(&text);
        assert!(named.len() > 3, "{file}: too few paths found: {named:?}");
        let mut missing = Vec::new();
        for path in &named {
            // A placeholder (`<name>`) stands for any file of its directory.
            let pattern = path
                .split('/')
                .map(|s| if s.contains('<') { "*" } else { s })
                .collect::<Vec<_>>()
                .join("/");
            for spelled in expand_braces(&pattern) {
                let segments: Vec<&str> = spelled.split('/').collect();
                let found = !matches(Path::new(ROOT), &segments).is_empty()
                    || !matches(&base, &segments).is_empty();
                if !found {
                    missing.push(spelled);
                }
            }
        }
        assert!(
            missing.is_empty(),
            "{file} names paths that do not exist: {missing:?}"
        );
    }
}

#[test]
fn no_readme_section_is_over_250_lines() {
    let text = std::fs::read_to_string(Path::new(ROOT).join("README.md")).unwrap();
    let mut sections: Vec<(&str, usize)> = Vec::new();
    let mut in_code = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            in_code = !in_code;
        }
        if !in_code && line.starts_with("## ") {
            sections.push((line, 0));
        } else if let Some(last) = sections.last_mut() {
            last.1 += 1;
        }
    }
    assert!(sections.len() > 5, "{sections:?}");
    let long: Vec<_> = sections
        .iter()
        .filter(|(_, lines)| *lines > SECTION_LINES)
        .collect();
    assert!(
        long.is_empty(),
        "README sections over {SECTION_LINES} lines: {long:?}"
    );
}

#[test]
fn path_patterns_expand_and_match() {
    assert_eq!(
        expand_braces("data/qa.{jsonl,csv}"),
        ["data/qa.jsonl", "data/qa.csv"]
    );
    assert!(wildcard("*_functions.rs", "tool_call_functions.rs"));
    assert!(!wildcard("*_functions.rs", "trajectory.rs"));
    assert!(matches(Path::new(ROOT), &["tests", "readme.rs"]).len() == 1);
    assert!(matches(Path::new(ROOT), &["tests", "no-such-file.rs"]).is_empty());
}
