//! The Python package (`clients/python`): installed with pip into a directory of its
//! own, then its pytest suite runs against real servers started here, so they are
//! cleaned up whatever the tests do: a master with a replica, three independent masters
//! for Redlock, and a port where nothing listens. A missing interpreter, redis-py or
//! pytest fails the test (`make deps-test` installs them).

use std::path::Path;
use std::process::{Command, Output};

use crate::common::python::{install_package, oldest_python, package_dir, python, run, tempdir};
use crate::common::{
    MiniCluster, Sentinel, TestServer, dead_port, free_port, pinned, start_replica,
};

/// The servers conftest.py reads: a master, its replica, the Redlock masters, a Sentinel
/// watching the master, a node of a 3-master cluster.
struct Ports {
    master: u16,
    replica: u16,
    redlock: Vec<u16>,
    sentinel: u16,
    cluster: u16,
    /// A Sentinel, its master and the master's replica, for the failover test alone.
    failover: [u16; 3],
}

/// `python -m pytest <target>` on `interpreter` with the package importable from
/// `package` (an installed copy or `src`) and the ports in the environment conftest.py
/// reads.
fn pytest(
    interpreter: &str,
    target: &Path,
    package: &Path,
    ports: &Ports,
    extra: &[&str],
) -> Output {
    let tests = package_dir().join("tests");
    let redlock: Vec<String> = ports.redlock.iter().map(u16::to_string).collect();
    Command::new(interpreter)
        .args(["-m", "pytest", "-q", "-p", "no:cacheprovider"])
        .args(extra)
        .arg(target)
        .current_dir(package_dir())
        // `tests` for its helpers module
        .env(
            "PYTHONPATH",
            format!("{}:{}", package.display(), tests.display()),
        )
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env("REDIS_LOCK_PORT", ports.master.to_string())
        .env("REDIS_LOCK_REPLICA_PORT", ports.replica.to_string())
        .env("REDIS_LOCK_REDLOCK_PORTS", redlock.join(","))
        .env("REDIS_LOCK_SENTINEL_PORT", ports.sentinel.to_string())
        .env("REDIS_LOCK_CLUSTER_PORT", ports.cluster.to_string())
        .env(
            "REDIS_LOCK_FAILOVER_PORTS",
            ports.failover.map(|p| p.to_string()).join(","),
        )
        .env("REDIS_LOCK_DEAD_PORT", dead_port().to_string())
        .output()
        .unwrap_or_else(|err| panic!("cannot run pytest ({err}): `make deps-test` installs it"))
}

/// Installs the package, starts every server its suite reads, and runs the suite on
/// `interpreter`; the suite's output (it must pass).
fn package_suite(interpreter: &str) -> String {
    let installed = tempdir("python");
    install_package(&installed);

    let master = TestServer::start();
    let replica = start_replica(&master, &[]);
    let redlock: Vec<TestServer> = (0..3).map(|_| TestServer::start()).collect();
    let sentinel = Sentinel::watch(&master);
    let cluster = MiniCluster::start(3);
    let failover_master = TestServer::start();
    let failover_replica = start_replica(&failover_master, &[]);
    let failover_sentinel = Sentinel::watch(&failover_master);
    let ports = Ports {
        master: master.port,
        replica: replica.port,
        redlock: redlock.iter().map(|s| s.port).collect(),
        sentinel: sentinel.port,
        cluster: cluster.nodes[0].port,
        failover: [
            failover_sentinel.port,
            failover_master.port,
            failover_replica.port,
        ],
    };

    // the installed copy, not the source tree
    let output = pytest(
        interpreter,
        &package_dir().join("tests"),
        &installed,
        &ports,
        &["-rs"],
    );
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "pytest on {interpreter} failed ({}):\n{stdout}\n{}\nmaster's log:\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr),
        master.log()
    );
    let _ = std::fs::remove_dir_all(&installed);
    stdout
}

/// The redis-py version `interpreter` imports.
fn redis_py_version(interpreter: &str) -> String {
    let output = run(
        Command::new(interpreter).args(["-c", "import redis; print(redis.__version__)"]),
        "import redis",
    );
    String::from_utf8_lossy(&output.stdout).trim().to_string()
}

#[test]
fn the_python_package_installs_and_passes_its_pytest_suite() {
    assert_eq!(redis_py_version(&python()), pinned("pip", "redis"));
    let stdout = package_suite(&python());
    assert!(
        !stdout.contains("skipped"),
        "pytest skipped tests:\n{stdout}"
    );
}

/// The oldest redis-py the package supports (`pyproject.toml`'s `redis>=4.2`, the
/// `oldest` pins): the whole suite passes there too, skipping only what that redis-py
/// lacks (an asyncio cluster client, from 4.3 on), each skip saying so.
#[test]
fn the_python_package_passes_its_suite_on_the_oldest_redis_py_it_supports() {
    let oldest = oldest_python();
    assert_eq!(redis_py_version(&oldest), pinned("oldest", "redis"));
    let pyproject = std::fs::read_to_string(package_dir().join("pyproject.toml"))
        .expect("clients/python/pyproject.toml");
    assert!(
        pyproject.contains(&format!(
            "\"redis>={}\"",
            pinned("oldest", "redis").trim_end_matches(".0")
        )),
        "the oldest pin is not the package's own floor:\n{pyproject}"
    );
    let stdout = package_suite(&oldest);
    let skips: Vec<&str> = stdout
        .lines()
        .filter(|line| line.starts_with("SKIPPED"))
        .collect();
    assert!(
        skips.iter().all(|line| line.contains("redis-py before")),
        "skips for another reason than the old redis-py's:\n{stdout}"
    );
}

#[test]
fn the_python_package_type_checks_strictly() {
    run(
        Command::new(python())
            .args([
                "-m",
                "mypy",
                "--strict",
                "--cache-dir=/dev/null",
                "src/redis_lock_module",
            ])
            .current_dir(package_dir()),
        "mypy --strict (the package ships py.typed)",
    );
}

#[test]
fn the_python_tests_fail_without_the_module() {
    let server = TestServer::without_module();
    let ports = Ports {
        master: server.port,
        replica: server.port,
        redlock: vec![server.port],
        sentinel: free_port(),
        cluster: free_port(),
        failover: [free_port(), free_port(), free_port()],
    };
    let output = pytest(
        &python(),
        &package_dir().join("tests/test_lock.py"),
        &package_dir().join("src"),
        &ports,
        &["-x"],
    );
    assert!(!output.status.success(), "passed without the module");
}

/// python-redis-lock imports as `redis_lock`: installed beside it (fetched from PyPI at
/// test time, at the version `scripts/pins.txt` pins), this package must leave it whole
/// and stay importable itself.
#[test]
fn the_python_package_installs_beside_python_redis_lock() {
    let installed = tempdir("python-beside");
    install_package(&installed);
    run(
        Command::new(python())
            .args(["-m", "pip", "install", "--quiet", "--no-deps", "--target"])
            .arg(&installed)
            .arg(format!(
                "python-redis-lock=={}",
                pinned("peer", "python-redis-lock")
            )),
        "pip install python-redis-lock",
    );
    let program = "\
import redis_lock, redis_lock_module\n\
from redis_lock_module import Lock\n\
assert redis_lock.Lock is not Lock, 'two different Lock classes'\n\
assert redis_lock.Lock.__module__ == 'redis_lock', redis_lock.Lock.__module__\n\
assert hasattr(redis_lock, 'reset_all'), 'python-redis-lock is whole'\n\
assert Lock.__module__.startswith('redis_lock_module')\n\
print('both import')\n";
    let output = run(
        Command::new(python())
            .args(["-c", program])
            .env("PYTHONPATH", &installed)
            .env("PYTHONDONTWRITEBYTECODE", "1"),
        "import both packages",
    );
    assert_eq!(
        String::from_utf8_lossy(&output.stdout).trim(),
        "both import"
    );
    let _ = std::fs::remove_dir_all(&installed);
}
