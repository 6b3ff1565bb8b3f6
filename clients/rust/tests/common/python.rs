//! The Python package (`clients/python`) as its users get it: the interpreter, a `pip
//! install` of the package into a directory of its own, and commands that must succeed.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use super::free_port;

/// `clients/python`.
pub fn package_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../python")
}

// Each test binary uses some of these.
#[allow(unused_imports)]
pub use redis_lock_testkit::{oldest_python, python};

/// Runs `command`, which must succeed; its output.
pub fn run(command: &mut Command, what: &str) -> Output {
    let output = command.output().unwrap_or_else(|err| {
        panic!("cannot run {what} ({err}): install it with `make deps-test`")
    });
    assert!(
        output.status.success(),
        "{what} failed ({}):\n{}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

/// Copies what the package is built from (its metadata, readme and sources) to a fresh
/// directory: pip then builds there, so tests that install at once never share a build
/// directory, and nothing is written into the repository.
fn package_copy() -> PathBuf {
    fn copy(from: &Path, to: &Path) {
        if from.is_dir() {
            std::fs::create_dir_all(to).expect("create a directory of the copy");
            for entry in std::fs::read_dir(from).expect("read the package") {
                let entry = entry.expect("a package entry");
                let name = entry.file_name();
                if name == "__pycache__" || name.to_string_lossy().ends_with(".egg-info") {
                    continue;
                }
                copy(&entry.path(), &to.join(name));
            }
        } else {
            std::fs::copy(from, to).expect("copy a package file");
        }
    }
    let dir = tempdir("python-source");
    for part in ["pyproject.toml", "README.md", "src"] {
        copy(&package_dir().join(part), &dir.join(part));
    }
    dir
}

/// `pip install ./clients/python` into `into`, as a user installs it; checks that what
/// the package ships is there.
pub fn install_package(into: &Path) {
    // Without build isolation when setuptools and wheel are at hand: no download then.
    let has_setuptools = Command::new(python())
        .args(["-c", "import setuptools, wheel"])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success());
    let source = package_copy();
    let mut pip = Command::new(python());
    pip.args(["-m", "pip", "install", "--quiet", "--no-deps", "--target"])
        .arg(into)
        .arg(&source);
    if has_setuptools {
        pip.arg("--no-build-isolation");
    }
    run(&mut pip, "pip install ./clients/python");
    let _ = std::fs::remove_dir_all(&source);
    for file in [
        "redis_lock_module/__init__.py",
        "redis_lock_module/asyncio.py",
        "redis_lock_module/py.typed",
    ] {
        assert!(
            into.join(file).is_file(),
            "the installed package lacks {file}"
        );
    }
}

/// A fresh directory under the system's temporary directory, named for `tag`.
pub fn tempdir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "redis-lock-{tag}-{}-{}",
        std::process::id(),
        free_port()
    ));
    std::fs::create_dir_all(&dir).expect("create a temporary directory");
    dir
}
