//! redis-py's own lock tests (`tests/test_lock.py` and `tests/test_asyncio/test_lock.py`)
//! against this project's Python package, on a real server with the module, with RESP2
//! and with RESP3 (a test each, so that `make test` can run them beside each other). The tests are taken at test time from the `redis` sdist on PyPI, of the
//! redis-py version installed here (the one the package runs on), never copied into this
//! repository; `clients/python/peer/adapt_redis_py.py` points them at
//! `redis_lock_module.Lock` and changes only what reads the recipe's inner workings (each
//! adaptation listed there, with its reason). Everything else runs as redis-py wrote it.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::TestServer;
use crate::common::python::{install_package, package_dir, python, run, tempdir};

/// Downloads the sdist of the installed redis-py and unpacks it into `into`: its root.
fn redis_py_sdist(into: &Path) -> PathBuf {
    let version = run(
        Command::new(python()).args(["-c", "import redis; print(redis.__version__)"]),
        "python3 -c 'import redis' (redis-py)",
    );
    let version = String::from_utf8_lossy(&version.stdout).trim().to_string();
    run(
        Command::new(python())
            .args([
                "-m",
                "pip",
                "download",
                "--quiet",
                "--no-deps",
                "--no-binary=:all:",
            ])
            .arg(format!("redis=={version}"))
            .arg("--dest")
            .arg(into),
        "pip download the redis sdist",
    );
    let archive = into.join(format!("redis-{version}.tar.gz"));
    run(
        Command::new(python())
            .args(["-m", "tarfile", "-e"])
            .arg(&archive)
            .arg(into),
        "unpack the redis sdist",
    );
    into.join(format!("redis-{version}"))
}

#[test]
fn redis_py_lock_tests_pass_against_the_package_on_resp2() {
    redis_py_lock_tests_pass_on("2");
}

#[test]
fn redis_py_lock_tests_pass_against_the_package_on_resp3() {
    redis_py_lock_tests_pass_on("3");
}

/// redis-py's lock tests, adapted, pass against the package with RESP `protocol`, every
/// one of them run.
fn redis_py_lock_tests_pass_on(protocol: &str) {
    let work = tempdir(&format!("redis-py-suite-resp{protocol}"));
    let sdist = redis_py_sdist(&work);
    run(
        Command::new(python())
            .arg(package_dir().join("peer/adapt_redis_py.py"))
            .arg(sdist.join("tests")),
        "adapt redis-py's lock tests",
    );
    let installed = work.join("installed");
    install_package(&installed);

    let server = TestServer::start();
    let output = Command::new(python())
        .args(["-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs"])
        .args(["tests/test_lock.py", "tests/test_asyncio/test_lock.py"])
        .arg(format!("--redis-url=redis://127.0.0.1:{}/0", server.port))
        .arg(format!("--protocol={protocol}"))
        .current_dir(&sdist)
        .env(
            "PYTHONPATH",
            format!("{}:{}", installed.display(), sdist.display()),
        )
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .output()
        .expect("run pytest (`make deps-test` installs it)");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "redis-py's lock tests failed on RESP{protocol}:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let passed: usize = stdout
        .lines()
        .rev()
        .find_map(|line| {
            let words: Vec<&str> = line.split_whitespace().collect();
            let at = words
                .iter()
                .position(|w| w.trim_end_matches(',') == "passed")?;
            words.get(at.checked_sub(1)?)?.parse().ok()
        })
        .unwrap_or(0);
    println!("redis-py's lock tests on RESP{protocol}: {passed} passed");
    assert!(
        passed >= 80 && !stdout.contains("skipped") && !stdout.contains("deselected"),
        "every one of redis-py's lock tests ran and passed on RESP{protocol}:\n{stdout}"
    );
    drop(server);
    let _ = std::fs::remove_dir_all(&work);
}
