//! Which servers the module runs on: it names itself and the server in the log at load,
//! and refuses a server older than it supports with a line that says why.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::*;

#[test]
fn the_module_logs_its_version_and_the_servers_at_load() {
    let server = TestServer::start();
    let expected = format!(
        "redis-lock {} loaded on {}",
        env!("CARGO_PKG_VERSION"),
        server_kind()
    );
    poll_until(Duration::from_secs(5), "the load line in the log", || {
        server.log().contains(&expected)
    });
    let line = server
        .log()
        .lines()
        .find(|line| line.contains(&expected))
        .map(str::to_string)
        .unwrap();
    let unblock = if server_kind().admin_unblock_ends_a_wait() {
        "CLIENT UNBLOCK ends a wait"
    } else {
        "CLIENT UNBLOCK does not end a wait"
    };
    assert!(line.contains(unblock), "{line}");
}

/// Starts `binary` with the module and returns its log once it has exited; fails if it
/// is still running after 20 s (it loaded the module).
fn log_of_a_start_that_fails(binary: &str) -> String {
    let dir = std::env::temp_dir().join(format!("redis-lock-unsupported-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join("server.log");
    let mut child = Command::new(binary)
        .args(["--port", &free_port().to_string(), "--bind", "127.0.0.1"])
        .args(["--save", "", "--dir"])
        .arg(&dir)
        .arg("--logfile")
        .arg(&log)
        .arg("--loadmodule")
        .arg(module_path())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|err| panic!("cannot start {binary}: {err}"));
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{binary} started with the module loaded; it should refuse to load");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(!status.success(), "{binary} exited with {status}");
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    let _ = std::fs::remove_dir_all(&dir);
    text
}

#[test]
fn a_server_older_than_redis_7_refuses_the_module_and_the_log_says_why() {
    // `make test` fetches Redis 6.2.14 for this (scripts/fetch-servers.sh).
    let Some(binary) = std::env::var_os("UNSUPPORTED_SERVER").map(PathBuf::from) else {
        println!("UNSUPPORTED_SERVER is not set: `make test` sets it; nothing to check here");
        return;
    };
    let log = log_of_a_start_that_fails(binary.to_str().unwrap());
    assert!(
        log.contains("cannot load: this server is Redis 6.2")
            && log.contains("needs Redis 7.0 or newer"),
        "{log}"
    );
}
