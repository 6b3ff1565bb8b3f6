//! The Python package (`clients/python`) as its users get it: the interpreter, a `pip
//! install` of the package into a directory of its own, and commands that must succeed.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use super::free_port;

/// `clients/python`.
pub fn package_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../clients/python")
}

/// The interpreter: `$PYTHON`, else `python3`.
pub fn python() -> String {
    std::env::var("PYTHON").unwrap_or_else(|_| "python3".into())
}

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

/// `pip install ./clients/python` into `into`, as a user installs it; checks that what
/// the package ships is there.
pub fn install_package(into: &Path) {
    // Without build isolation when setuptools and wheel are at hand: no download then.
    let has_setuptools = Command::new(python())
        .args(["-c", "import setuptools, wheel"])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success());
    let mut pip = Command::new(python());
    pip.args(["-m", "pip", "install", "--quiet", "--no-deps", "--target"])
        .arg(into)
        .arg(package_dir());
    if has_setuptools {
        pip.arg("--no-build-isolation");
    }
    run(&mut pip, "pip install ./clients/python");
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
