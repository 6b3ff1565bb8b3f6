//! The Python package (`clients/python`): installed with pip into a directory of its
//! own, then its pytest suite runs against real servers started here, so they are
//! cleaned up whatever the tests do: a master with a replica, three independent masters
//! for Redlock, and a port where nothing listens. A missing interpreter, redis-py or
//! pytest fails the test (`make deps-test` installs them).

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use common::{TestServer, free_port, start_replica};

fn package_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../clients/python")
}

fn python() -> String {
    std::env::var("PYTHON").unwrap_or_else(|_| "python3".into())
}

fn run(command: &mut Command, what: &str) -> Output {
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

/// `pip install ./clients/python` into a fresh directory; returns that directory.
fn install_package(into: &Path) {
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
        "redis_lock/__init__.py",
        "redis_lock/asyncio.py",
        "redis_lock/py.typed",
    ] {
        assert!(
            into.join(file).is_file(),
            "the installed package lacks {file}"
        );
    }
}

#[test]
fn the_python_package_installs_and_passes_its_pytest_suite() {
    let installed = tempdir();
    install_package(&installed);

    let master = TestServer::start();
    let replica = start_replica(&master, &[]);
    let redlock: Vec<TestServer> = (0..3).map(|_| TestServer::start()).collect();
    let redlock_ports: Vec<String> = redlock.iter().map(|s| s.port.to_string()).collect();

    let tests = package_dir().join("tests");
    let output = Command::new(python())
        .args(["-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs"])
        .arg(&tests)
        .current_dir(package_dir())
        // the installed copy, not the source tree; `tests` for its helpers module
        .env(
            "PYTHONPATH",
            format!("{}:{}", installed.display(), tests.display()),
        )
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env("REDIS_LOCK_PORT", master.port.to_string())
        .env("REDIS_LOCK_REPLICA_PORT", replica.port.to_string())
        .env("REDIS_LOCK_REDLOCK_PORTS", redlock_ports.join(","))
        .env("REDIS_LOCK_DEAD_PORT", free_port().to_string())
        .output()
        .unwrap_or_else(|err| panic!("cannot run pytest ({err}): `make deps-test` installs it"));
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "pytest failed ({}):\n{stdout}\n{}\nmaster's log:\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr),
        master.log()
    );
    assert!(
        !stdout.contains("skipped"),
        "pytest skipped tests:\n{stdout}"
    );
    let _ = std::fs::remove_dir_all(&installed);
}

#[test]
fn the_python_package_type_checks_strictly() {
    run(
        Command::new(python())
            .args([
                "-m",
                "mypy",
                "--strict",
                "--no-incremental",
                "src/redis_lock",
            ])
            .current_dir(package_dir()),
        "mypy --strict (the package ships py.typed)",
    );
}

#[test]
fn the_python_tests_fail_without_the_module() {
    let server = TestServer::without_module();
    let tests = package_dir().join("tests");
    let output = Command::new(python())
        .args(["-m", "pytest", "-q", "-x", "-p", "no:cacheprovider"])
        .arg(tests.join("test_lock.py"))
        .current_dir(package_dir())
        .env(
            "PYTHONPATH",
            format!(
                "{}:{}",
                package_dir().join("src").display(),
                tests.display()
            ),
        )
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env("REDIS_LOCK_PORT", server.port.to_string())
        .env("REDIS_LOCK_REPLICA_PORT", server.port.to_string())
        .env("REDIS_LOCK_REDLOCK_PORTS", server.port.to_string())
        .env("REDIS_LOCK_DEAD_PORT", free_port().to_string())
        .output()
        .expect("run pytest");
    assert!(!output.status.success(), "passed without the module");
}

fn tempdir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "redis-lock-python-{}-{}",
        std::process::id(),
        free_port()
    ));
    std::fs::create_dir_all(&dir).expect("create a directory for the installed package");
    dir
}
