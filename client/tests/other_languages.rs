//! The module from other languages' real clients: PHP with phpredis and Python with
//! redis-py run their check scripts (`clients/php`, `clients/python`) against a server
//! started here, so the server is cleaned up whatever the script does. A missing
//! interpreter or client library fails the test (`make deps` installs them), and so does
//! a check the script reports as skipped (a `SKIPPED:` line).

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::TestServer;

fn script(relative: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
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
    more: &[&TestServer],
) -> String {
    let interpreter = std::env::var(interpreter_env).unwrap_or_else(|_| default.to_string());
    let output = Command::new(&interpreter)
        .arg(script(relative))
        .arg(server.port.to_string())
        .args(more.iter().map(|other| other.port.to_string()))
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
        "clients/php/order_lock_test.php",
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

#[test]
fn the_php_checks_fail_without_the_module() {
    let server = TestServer::without_module();
    let output = Command::new(std::env::var("PHP").unwrap_or_else(|_| "php".into()))
        .arg(script("clients/php/order_lock_test.php"))
        .arg(server.port.to_string())
        .output()
        .expect("run php");
    assert!(!output.status.success(), "passed without the module");
}
