//! That the layers of `docs/development.md` hold: every `crate::` path in a file of `src/`
//! names its own layer or one below it. A file that imports against the table fails this
//! test, with the path and the line.

use std::path::{Path, PathBuf};

/// The layers, top first, and the layers each may use (the core, `lock_core`, a crate
/// of its own, is under all).
const LAYERS: [(&str, &[&str]); 6] = [
    (
        "lib.rs",
        &["commands", "server", "keyspace", "datatype", "ffi"],
    ),
    ("commands", &["commands", "keyspace", "datatype", "ffi"]),
    ("server", &["server", "keyspace", "datatype", "ffi"]),
    ("keyspace", &["keyspace", "datatype", "ffi"]),
    ("datatype", &["datatype", "ffi"]),
    ("ffi", &["ffi"]),
];

/// Test-only files, which may reach any layer to test it.
const TESTS: [&str; 2] = ["properties.rs", "layers.rs"];

fn sources(dir: &Path, found: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("src/ reads") {
        let path = entry.expect("an entry").path();
        if path.is_dir() {
            sources(&path, found);
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            found.push(path);
        }
    }
}

/// The layer a file of `src/` is in: its folder, or its own name at the top.
fn layer_of(relative: &Path) -> String {
    let first = relative.components().next().expect("a path");
    first.as_os_str().to_string_lossy().into_owned()
}

/// Every layer named by a `crate::` path in `text`, with its line number.
fn uses(text: &str) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    for (number, line) in text.lines().enumerate() {
        let code = line.split("//").next().unwrap_or_default();
        let mut rest = code;
        while let Some(at) = rest.find("crate::") {
            let after = &rest[at + "crate::".len()..];
            let name: String = after
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            let preceded = rest[..at]
                .chars()
                .last()
                .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
            if !preceded && !name.is_empty() {
                found.push((number + 1, name));
            }
            rest = after;
        }
    }
    found
}

#[test]
fn every_import_follows_the_layers() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&root, &mut files);
    let mut wrong = Vec::new();
    let mut checked = 0;
    for file in &files {
        let relative = file.strip_prefix(&root).expect("under src/");
        let name = relative.to_string_lossy();
        if TESTS.contains(&name.as_ref()) {
            continue;
        }
        let layer = layer_of(relative);
        let allowed = LAYERS
            .iter()
            .find(|(own, _)| *own == layer)
            .map(|(_, allowed)| *allowed)
            .unwrap_or_else(|| panic!("{name} is in no layer of docs/development.md"));
        let text = std::fs::read_to_string(file).expect("a source file reads");
        for (line, used) in uses(&text) {
            checked += 1;
            if !allowed.contains(&used.as_str()) {
                wrong.push(format!("src/{name}:{line}: {layer} uses crate::{used}"));
            }
        }
    }
    assert!(checked > 100, "only {checked} paths read");
    assert!(
        wrong.is_empty(),
        "imports against the layers:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn the_core_is_used_under_one_name() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&root, &mut files);
    let mut named = 0;
    for file in &files {
        if file.ends_with("layers.rs") {
            continue;
        }
        let text = std::fs::read_to_string(file).expect("a source file reads");
        named += text.matches("lock_core::").count();
        for other in ["crate::state", "lock_core as "] {
            assert!(
                !text.contains(other),
                "{} names the core otherwise ({other}): it is lock_core",
                file.display()
            );
        }
    }
    assert!(named > 100, "lock_core named only {named} times");
}

#[test]
fn the_reader_finds_layers_in_code() {
    let found =
        uses("use crate::ffi::{self, Key};\n// crate::server in a comment\nx(crate::datatype::a);");
    assert_eq!(
        found,
        vec![(1, "ffi".to_string()), (3, "datatype".to_string())]
    );
    assert_eq!(layer_of(Path::new("keyspace/store.rs")), "keyspace");
    assert_eq!(layer_of(Path::new("lib.rs")), "lib.rs");
}

/// The files of `src/` that `file` (in `dir`, a folder of `src/`) imports: every
/// `crate::` path resolved to the deepest file it names (`crate::keyspace::waiting::queues`
/// is `keyspace/waiting/queues.rs`, `crate::keyspace::{session, store}` two files), every
/// `super::x`, and a `mod.rs`'s paths into its own children (`handoff::x`).
fn imports(root: &Path, file: &Path, text: &str) -> Vec<PathBuf> {
    let code: String = text
        .lines()
        .map(|line| line.split("//").next().unwrap_or_default())
        .collect::<Vec<_>>()
        .join("\n");
    let mut found = Vec::new();
    let dir = file.parent().expect("a folder");
    let is_mod = file.ends_with("mod.rs");
    for (at, _) in code.match_indices("crate::") {
        let path = path_at(&code[at + "crate::".len()..]);
        for segments in path {
            found.extend(deepest(root, &segments));
        }
    }
    let parent = if is_mod {
        dir.parent().unwrap_or(dir)
    } else {
        dir
    };
    for (at, _) in code.match_indices("super::") {
        for segments in path_at(&code[at + "super::".len()..]) {
            found.extend(deepest(parent, &segments));
        }
    }
    if is_mod {
        for (at, _) in code.match_indices("::") {
            let before: String = code[..at]
                .chars()
                .rev()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect();
            let preceded = code[..at - before.len()].ends_with("::");
            if !before.is_empty() && !preceded {
                found.extend(deepest(dir, std::slice::from_ref(&before)));
            }
        }
    }
    found.retain(|path| path != file);
    found.sort();
    found.dedup();
    found
}

/// The module paths written at the start of `rest` (after `crate::` or `super::`): one,
/// or one per item of a `{...}` list, nested lists included (`a::{b, c::{self, d}}` is
/// `a::b`, `a::c` and `a::c::d`).
fn path_at(rest: &str) -> Vec<Vec<String>> {
    let word = |s: &str| -> String {
        s.chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect()
    };
    let mut segments: Vec<String> = Vec::new();
    let mut rest = rest;
    loop {
        if rest.starts_with('{') {
            let mut items = Vec::new();
            let (mut depth, mut start) = (0, 1);
            for (at, c) in rest.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' | ',' if depth == 1 => {
                        items.push(rest[start..at].trim());
                        start = at + 1;
                        if c == '}' {
                            break;
                        }
                    }
                    '}' => depth -= 1,
                    _ => {}
                }
            }
            return items
                .into_iter()
                .filter(|item| !item.is_empty())
                .flat_map(path_at)
                .map(|tail| segments.iter().cloned().chain(tail).collect())
                .collect();
        }
        let name = word(rest);
        if name.is_empty() {
            return vec![segments];
        }
        rest = &rest[name.len()..];
        if name != "self" {
            segments.push(name);
        }
        match rest.strip_prefix("::") {
            Some(more) => rest = more,
            None => return vec![segments],
        }
    }
}

/// The deepest file of `src/` (from `dir`) that `segments` name: `a.rs` or `a/mod.rs`,
/// then `a/b.rs` ... as far as files exist.
fn deepest(dir: &Path, segments: &[String]) -> Option<PathBuf> {
    let mut at = dir.to_path_buf();
    let mut found = None;
    for segment in segments {
        let file = at.join(format!("{segment}.rs"));
        let module = at.join(segment).join("mod.rs");
        if file.is_file() {
            found = Some(file);
        } else if module.is_file() {
            found = Some(module);
        } else {
            break;
        }
        at = at.join(segment);
    }
    found
}

/// A circle of imports among `files` (each with what it imports), if there is one.
fn circle(graph: &[(PathBuf, Vec<PathBuf>)]) -> Option<Vec<PathBuf>> {
    fn visit(
        at: &Path,
        graph: &[(PathBuf, Vec<PathBuf>)],
        path: &mut Vec<PathBuf>,
        done: &mut Vec<PathBuf>,
    ) -> Option<Vec<PathBuf>> {
        if let Some(start) = path.iter().position(|p| p == at) {
            let mut found = path[start..].to_vec();
            found.push(at.to_path_buf());
            return Some(found);
        }
        if done.iter().any(|p| p == at) {
            return None;
        }
        path.push(at.to_path_buf());
        let next = graph
            .iter()
            .find(|(file, _)| file == at)
            .map_or(&[][..], |(_, imports)| imports.as_slice());
        for target in next {
            if let Some(found) = visit(target, graph, path, done) {
                return Some(found);
            }
        }
        path.pop();
        done.push(at.to_path_buf());
        None
    }
    let mut done = Vec::new();
    graph
        .iter()
        .find_map(|(file, _)| visit(file, graph, &mut Vec::new(), &mut done))
}

/// The imports among the files of folder `layer` of `src/`.
fn layer_graph(root: &Path, layer: &str) -> Vec<(PathBuf, Vec<PathBuf>)> {
    let mut files = Vec::new();
    sources(&root.join(layer), &mut files);
    files.sort();
    files
        .iter()
        .map(|file| {
            let text = std::fs::read_to_string(file).expect("a source file reads");
            let inside: Vec<PathBuf> = imports(root, file, &text)
                .into_iter()
                .filter(|target| target.starts_with(root.join(layer)))
                .collect();
            (file.clone(), inside)
        })
        .collect()
}

#[test]
fn no_layer_imports_itself_in_a_circle() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut edges = 0;
    for (layer, _) in LAYERS.iter().filter(|(name, _)| !name.ends_with(".rs")) {
        let graph = layer_graph(&root, layer);
        edges += graph
            .iter()
            .map(|(_, imports)| imports.len())
            .sum::<usize>();
        if let Some(found) = circle(&graph) {
            let shown: Vec<String> = found
                .iter()
                .map(|p| p.strip_prefix(&root).unwrap_or(p).display().to_string())
                .collect();
            panic!(
                "a circle of imports in src/{layer}/: {}",
                shown.join(" -> ")
            );
        }
    }
    assert!(edges > 40, "only {edges} imports inside the layers read");
}

#[test]
fn the_circle_finder_reads_lists_super_and_children() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let changes = root.join("keyspace/changes.rs");
    let found = imports(
        &root,
        &changes,
        "use crate::keyspace::{session, waiting::queues::{self, Answer}};\nuse crate::ffi::Key;",
    );
    assert_eq!(
        found,
        vec![
            root.join("ffi/mod.rs"),
            root.join("keyspace/session.rs"),
            root.join("keyspace/waiting/queues.rs"),
        ]
    );
    let module = root.join("keyspace/waiting/mod.rs");
    let found = imports(
        &root,
        &module,
        "pub use handoff::x;\nblocking::wait(); a::b::c",
    );
    assert_eq!(
        found,
        vec![
            root.join("keyspace/waiting/blocking.rs"),
            root.join("keyspace/waiting/handoff.rs"),
        ]
    );
    let a = PathBuf::from("a");
    let b = PathBuf::from("b");
    let c = PathBuf::from("c");
    let planted = vec![
        (a.clone(), vec![b.clone()]),
        (b.clone(), vec![c.clone()]),
        (c.clone(), vec![a.clone()]),
    ];
    assert_eq!(circle(&planted), Some(vec![a.clone(), b.clone(), c, a]));
    assert_eq!(circle(&planted[..2]), None);
}

/// The imports among every file of the crate whose sources are `root`. A `mod.rs`'s
/// paths into its own folder are left out: they declare and re-export its children (an
/// index, which data does not flow through), while a child's use of what the `mod.rs`
/// itself defines counts.
fn crate_graph(root: &Path) -> Vec<(PathBuf, Vec<PathBuf>)> {
    let mut files = Vec::new();
    sources(root, &mut files);
    files.sort();
    files
        .iter()
        .map(|file| {
            let text = std::fs::read_to_string(file).expect("a source file reads");
            let mut found = imports(root, file, &text);
            if file.ends_with("mod.rs") {
                let folder = file.parent().expect("a folder");
                found.retain(|target| !target.starts_with(folder));
            }
            (file.clone(), found)
        })
        .collect()
}

/// The sources of every Rust crate of the workspace: the module, the core, the client,
/// the command line, the benchmark, its floor module and the test kit.
const CRATES: [&str; 7] = [
    "src",
    "core/src",
    "clients/rust/src",
    "clients/cli/src",
    "bench/src",
    "bench/floor/src",
    "testkit/src",
];

#[test]
fn no_crate_of_the_workspace_imports_itself_in_a_circle() {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut found = Vec::new();
    let mut edges = 0;
    for krate in CRATES {
        let root = workspace.join(krate);
        let mut graph = crate_graph(&root);
        edges += graph.iter().map(|(_, i)| i.len()).sum::<usize>();
        // Every circle, not only the first: each is taken out once reported.
        while let Some(circle) = circle(&graph) {
            let shown: Vec<String> = circle
                .iter()
                .map(|p| p.strip_prefix(workspace).unwrap_or(p).display().to_string())
                .collect();
            found.push(shown.join(" -> "));
            let (from, to) = (&circle[0], &circle[1]);
            for (file, imports) in &mut graph {
                if file == from {
                    imports.retain(|target| target != to);
                }
            }
        }
    }
    assert!(edges > 200, "only {edges} imports read");
    assert!(
        found.is_empty(),
        "circles of imports:\n{}",
        found.join("\n")
    );
}
