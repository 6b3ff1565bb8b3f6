//! The Node package (`clients/node`): its tests run with node's own test runner against
//! real servers started here (a master with a Sentinel, three independent masters for
//! Redlock, a 3-master cluster), with ioredis and node-redis from the npm registry (which `make
//! deps-test` installs with `npm ci`), and its TypeScript declarations compile under
//! `tsc --strict` against a program that uses them.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::common::{MiniCluster, Sentinel, TestServer, free_port, start_replica};

fn package_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../node")
}

fn output(command: &mut Command, what: &str) -> Output {
    command
        .current_dir(package_dir())
        .output()
        .unwrap_or_else(|err| panic!("cannot run {what} ({err}): `make deps-test` installs it"))
}

/// Where the tests find their servers: `REDIS_LOCK_PORT` (the master),
/// `REDIS_LOCK_REDLOCK_PORTS` (independent masters), `REDIS_LOCK_CLUSTER_PORT` (a node of
/// a cluster), `REDIS_LOCK_SENTINEL_PORT` (a Sentinel watching the master),
/// `REDIS_LOCK_REPLICA_PORT` (the master's replica), `REDIS_LOCK_MOVING_CLUSTER_PORT` (a
/// node of a cluster whose first master has a replica, where a test moves a slot).
struct Servers<'a> {
    master: &'a TestServer,
    replica: u16,
    redlock: Vec<u16>,
    cluster: u16,
    moving_cluster: u16,
    sentinel: u16,
}

/// `node --test test/` against `servers`, killed if it runs past a deadline: a client a
/// failed test left open would keep node alive.
fn node_tests(servers: &Servers) -> Output {
    assert!(
        package_dir().join("node_modules/ioredis").is_dir()
            && package_dir().join("node_modules/redis").is_dir(),
        "clients/node/node_modules lacks ioredis or redis: run `make deps-test`"
    );
    let mut child = Command::new("node")
        .args(["--test", "test/"])
        .env("REDIS_LOCK_PORT", servers.master.port.to_string())
        .env(
            "REDIS_LOCK_REDLOCK_PORTS",
            servers
                .redlock
                .iter()
                .map(u16::to_string)
                .collect::<Vec<_>>()
                .join(","),
        )
        .env("REDIS_LOCK_CLUSTER_PORT", servers.cluster.to_string())
        .env(
            "REDIS_LOCK_MOVING_CLUSTER_PORT",
            servers.moving_cluster.to_string(),
        )
        .env("REDIS_LOCK_SENTINEL_PORT", servers.sentinel.to_string())
        .env("REDIS_LOCK_REPLICA_PORT", servers.replica.to_string())
        .current_dir(package_dir())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|err| panic!("cannot run node ({err}): `make deps-test` installs it"));
    let deadline = Instant::now() + Duration::from_secs(180);
    while child.try_wait().expect("wait for node").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child.wait_with_output().expect("read node's output")
}

#[test]
fn the_node_package_passes_its_tests_with_ioredis_and_node_redis() {
    let server = TestServer::start();
    let replica = start_replica(&server, &[]);
    let redlock: Vec<TestServer> = (0..3).map(|_| TestServer::start()).collect();
    let cluster = MiniCluster::start(3);
    // The moved-slot tests' own: a lock moves between its first master (with a replica)
    // and a master without one.
    let moving = MiniCluster::start(3);
    let _moving_replica = moving.add_replica(moving.nodes[0].port);
    let sentinel = Sentinel::watch(&server);
    let result = node_tests(&Servers {
        master: &server,
        replica: replica.port,
        redlock: redlock.iter().map(|s| s.port).collect(),
        cluster: cluster.nodes[0].port,
        moving_cluster: moving.nodes[0].port,
        sentinel: sentinel.port,
    });
    let stdout = String::from_utf8_lossy(&result.stdout);
    assert!(
        result.status.success(),
        "node --test failed:\n{stdout}\n{}\nserver log:\n{}",
        String::from_utf8_lossy(&result.stderr),
        server.log()
    );
    assert!(
        stdout.contains("# fail 0") && stdout.contains("# skipped 0"),
        "{stdout}"
    );
    for suite in ["ok 1 - ioredis", "ok 2 - node-redis"] {
        assert!(stdout.contains(suite), "missing {suite:?}:\n{stdout}");
    }
}

#[test]
fn the_node_typescript_declarations_compile_strictly() {
    let result = output(
        Command::new("node_modules/.bin/tsc").args([
            "--noEmit",
            "--strict",
            "--module",
            "nodenext",
            "--moduleResolution",
            "nodenext",
            "--target",
            "es2022",
            "--skipLibCheck",
            "test/types.ts",
        ]),
        "tsc",
    );
    assert!(
        result.status.success(),
        "tsc failed:\n{}{}",
        String::from_utf8_lossy(&result.stdout),
        String::from_utf8_lossy(&result.stderr)
    );
}

#[test]
fn the_node_tests_fail_without_the_module() {
    let server = TestServer::without_module();
    let servers = Servers {
        master: &server,
        replica: free_port(),
        redlock: vec![server.port],
        cluster: server.port,
        moving_cluster: server.port,
        sentinel: free_port(),
    };
    assert!(
        !node_tests(&servers).status.success(),
        "passed without the module"
    );
}
