//! That the layers of `docs/development.md` hold: every `crate::` path in a file of `src/`
//! names its own layer or one below it. A file that imports against the table fails this
//! test, with the path and the line.

use std::path::{Path, PathBuf};

/// The layers, top first, and the layers each may use (the core, `state`, is under all).
const LAYERS: [(&str, &[&str]); 6] = [
    (
        "lib.rs",
        &["commands", "server", "keyspace", "datatype", "ffi", "state"],
    ),
    (
        "commands",
        &["commands", "keyspace", "datatype", "ffi", "state"],
    ),
    (
        "server",
        &["server", "keyspace", "datatype", "ffi", "state"],
    ),
    ("keyspace", &["keyspace", "datatype", "ffi", "state"]),
    ("datatype", &["datatype", "ffi", "state"]),
    ("ffi", &["ffi", "state"]),
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
    assert!(checked > 200, "only {checked} paths read");
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
    for file in &files {
        if file.ends_with("lib.rs") || file.ends_with("layers.rs") {
            continue;
        }
        let text = std::fs::read_to_string(file).expect("a source file reads");
        assert!(
            !text.contains("lock_core::"),
            "{} names lock_core: use crate::state",
            file.display()
        );
    }
}

#[test]
fn the_reader_finds_layers_in_code() {
    let found =
        uses("use crate::ffi::{self, Key};\n// crate::server in a comment\nx(crate::state::a);");
    assert_eq!(
        found,
        vec![(1, "ffi".to_string()), (3, "state".to_string())]
    );
    assert_eq!(layer_of(Path::new("keyspace/store.rs")), "keyspace");
    assert_eq!(layer_of(Path::new("lib.rs")), "lib.rs");
}
