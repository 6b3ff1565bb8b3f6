//! That the core stays without a server: `cargo tree` of this crate, its dev-dependencies
//! included, names no server binding, and no file of it names one.

use std::path::Path;
use std::process::Command;

/// The crates that would bring a server into the core.
const SERVER_CRATES: [&str; 3] = ["redis-module", "valkey-module", "redis-module-macros"];

#[test]
fn the_dependency_tree_has_no_server_binding() {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml");
    let out = Command::new(env!("CARGO"))
        .args([
            "tree",
            "--offline",
            "--prefix",
            "none",
            "--edges",
            "normal,dev,build",
        ])
        .arg("--manifest-path")
        .arg(&manifest)
        .args(["--package", "lock-core"])
        .output()
        .expect("cargo tree runs");
    assert!(
        out.status.success(),
        "cargo tree failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let tree = String::from_utf8_lossy(&out.stdout);
    assert!(tree.starts_with("lock-core "), "{tree}");
    assert!(tree.lines().any(|line| line.starts_with("rand ")), "{tree}");
    for line in tree.lines() {
        let name = line.split(' ').next().unwrap_or_default();
        assert!(
            !SERVER_CRATES.contains(&name),
            "the core depends on {name}:\n{tree}"
        );
    }
}

#[test]
fn no_source_file_names_a_server_binding() {
    let mut stack = vec![Path::new(env!("CARGO_MANIFEST_DIR")).join("src")];
    let mut files = 0;
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("src/ reads") {
            let path = entry.expect("an entry").path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|ext| ext == "rs")
                && !path.ends_with("purity.rs")
            {
                files += 1;
                let text = std::fs::read_to_string(&path).expect("a source file reads");
                for binding in ["redis_module", "valkey_module"] {
                    assert!(
                        !text.contains(binding),
                        "{} names {binding}",
                        path.display()
                    );
                }
            }
        }
    }
    assert!(files > 20, "read only {files} files");
}
