//! The PHP clients (`clients/php`, on phpredis) run their check scripts against a server
//! started here (and a 3-master cluster), so they are cleaned up whatever the script does:
//! `RedisLock`, `RedisQueue` and the flash-sale example (50 buyer processes at once), on
//! `Redis`, `RedisCluster` and config arrays, loaded through
//! the PSR-4 mapping of `composer.json`, and the `OrderLock` helper. A missing
//! interpreter or phpredis fails the test (`make deps-test` installs them), and so does a
//! check the script reports as skipped (a `SKIPPED:` line). The Python package has its
//! own test (`python_package.rs`).

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::{MiniCluster, Sentinel, TestServer, start_replica};

fn script(relative: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(relative)
}

/// Runs `interpreter script port [more ports]` and returns its standard output,
/// failing the test with everything it printed if it cannot start, does not exit 0, or
/// skipped a check.
fn run(
    interpreter_env: &str,
    default: &str,
    relative: &str,
    server: &TestServer,
    more: &[u16],
) -> String {
    let interpreter = std::env::var(interpreter_env).unwrap_or_else(|_| default.to_string());
    let output = Command::new(&interpreter)
        .arg(script(relative))
        .arg(server.port.to_string())
        .args(more.iter().map(u16::to_string))
        .output()
        .unwrap_or_else(|err| {
            panic!("cannot run {interpreter} ({err}): install it with `make deps`")
        });
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "{interpreter} {relative} failed ({}):\n{stdout}\n{stderr}\nserver log:\n{}",
        output.status,
        server.log()
    );
    assert!(
        !stdout.contains("SKIPPED"),
        "{interpreter} {relative} skipped checks:\n{stdout}"
    );
    stdout
}

#[test]
fn php_order_lock_helper_works_through_phpredis() {
    let server = TestServer::start();
    let stdout = run(
        "PHP",
        "php",
        "clients/php/tests/order_lock_test.php",
        &server,
        &[],
    );
    assert!(
        stdout.contains("ok - a waiting acquire gets the lock"),
        "{stdout}"
    );
    assert!(
        stdout.contains("ok - a string key left by the old helper is refused"),
        "{stdout}"
    );
    assert!(stdout.trim_end().ends_with("checks passed"), "{stdout}");
}

/// `replicas` in the PHP package: a master with one replica (frozen with SIGSTOP where a
/// check needs it), and one without.
#[test]
fn php_grants_count_once_a_replica_has_them() {
    let server = TestServer::start();
    let replica = start_replica(&server, &[]);
    let lone = TestServer::start();
    let stdout = run(
        "PHP",
        "php",
        "clients/php/tests/replicas.php",
        &server,
        &[replica.port, lone.port],
    );
    for check in [
        "ok - each grant and extend waited for the replica",
        "ok - ... with no WAIT of its own where the server waits",
        "ok - a grant no replica acknowledged throws NotReplicatedException (0 of 1)",
        "ok - ... and was released at once",
        "ok - an extend not replicated throws, and the lock stays held",
        "ok - more replicas than the master has are not replicated, and nothing is held",
        "ok - Redlock on a master without replicas grants without a WAIT",
    ] {
        assert!(stdout.contains(check), "missing {check:?}:\n{stdout}");
    }
    assert!(stdout.trim_end().ends_with("checks passed"), "{stdout}");
}

#[test]
fn php_redis_lock_queue_and_flash_sale_work_through_phpredis() {
    let server = TestServer::start();
    let cluster = MiniCluster::start(3);
    let sentinel = Sentinel::watch(&server);
    let stdout = run(
        "PHP",
        "php",
        "clients/php/tests/run.php",
        &server,
        &[cluster.nodes[0].port, sentinel.port],
    );
    for check in [
        "ok - it waited in the server: one LOCK.ACQUIRE, whatever $waitIntervalUs",
        "ok - 10 workers popping at once take each of 300 tasks exactly once",
        "ok - enqueue answers false to bad input, as the articles do",
        "ok - 50 concurrent buyers of 20 items: 20 bought, 30 sold out",
        "ok - the stock is 0 and there are 20 orders, never more",
    ] {
        assert!(stdout.contains(check), "missing {check:?}:\n{stdout}");
    }
    assert!(stdout.trim_end().ends_with("checks passed"), "{stdout}");
}

#[test]
fn the_php_checks_fail_without_the_module() {
    let server = TestServer::without_module();
    for checks in [
        "clients/php/tests/order_lock_test.php",
        "clients/php/tests/run.php",
    ] {
        let output = Command::new(std::env::var("PHP").unwrap_or_else(|_| "php".into()))
            .arg(script(checks))
            .arg(server.port.to_string())
            .output()
            .expect("run php");
        assert!(
            !output.status.success(),
            "{checks} passed without the module"
        );
    }
}
