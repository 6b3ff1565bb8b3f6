//! The runner exits with its command's status, passes its signals on, and gives the
//! command what it needs for fenced writes.

use crate::*;

#[test]
fn the_runner_exits_with_the_commands_status() {
    let server = TestServer::start();
    let out = cli(&server, &["run", "jobs:three", "--", "sh", "-c", "exit 3"])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(3));
    let out = cli(&server, &["run", "jobs:none", "--", "/no/such/program"])
        .output()
        .expect("run");
    assert_eq!(
        out.status.code(),
        Some(127),
        "as a shell says a missing command"
    );
    let mut con = server.connection();
    assert!(
        !held(&mut con, "jobs:three") && !held(&mut con, "jobs:none"),
        "both released"
    );
}

#[test]
fn sigterm_to_the_runner_goes_to_the_command_and_gives_its_143() {
    let server = TestServer::start();
    let scratch = Scratch::new("sigterm");
    let mut runner = Runner::start(
        &server,
        "runner",
        &[
            "run",
            "jobs:term",
            "--",
            "sh",
            "-c",
            &format!(
                "echo up > '{}'; exec sleep 600",
                scratch.path("up").display()
            ),
        ],
    );
    scratch.wait_lines("up", 1);
    send_signal(runner.pid(), "TERM");
    let (status, stderr) = runner.finish(DEADLINE);
    assert_eq!(status.code(), Some(143), "{stderr}");
    let mut con = server.connection();
    assert!(!held(&mut con, "jobs:term"), "released");
}

#[test]
fn sigint_while_waiting_ends_the_wait_with_130_and_runs_nothing() {
    let server = TestServer::start();
    let mut con = server.connection();
    let scratch = Scratch::new("sigint");
    let mut holder = Runner::start(
        &server,
        "holder",
        &[
            "run",
            "jobs:int",
            "--",
            "sh",
            "-c",
            &format!(
                "echo up > '{}'; exec sleep 600",
                scratch.path("up").display()
            ),
        ],
    );
    scratch.wait_lines("up", 1);
    let mut waiter = Runner::start(
        &server,
        "waiter",
        &[
            "run",
            "jobs:int",
            "--",
            "sh",
            "-c",
            &format!("echo ran > '{}'", scratch.path("ran").display()),
        ],
    );
    poll_until(DEADLINE, "the waiter waits", || {
        waiters(&mut con, "jobs:int") == 1
    });
    send_signal(waiter.pid(), "INT");
    let (status, _) = waiter.finish(DEADLINE);
    assert_eq!(status.code(), Some(130));
    poll_until(DEADLINE, "the wait is gone from the queue", || {
        waiters(&mut con, "jobs:int") == 0
    });
    assert!(
        scratch.lines("ran").is_empty(),
        "the waiter's command never ran"
    );
    holder.child.kill().expect("kill the holder");
}

#[test]
fn the_command_writes_fenced_with_the_key_and_token_in_its_environment() {
    let server = TestServer::start();
    let script = format!(
        "redis-cli -p {port} LOCK.DO \"$REDIS_LOCK_KEY\" \"$REDIS_LOCK_TOKEN\" SET {{jobs:do}}:fence \"$REDIS_LOCK_FENCE\"",
        port = server.port
    );
    let out = cli(&server, &["run", "{jobs:do}", "--", "sh", "-c", &script])
        .output()
        .expect("run");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "OK",
        "LOCK.DO ran under the lock"
    );
    let mut con = server.connection();
    let fence: u64 = redis::cmd("GET")
        .arg("{jobs:do}:fence")
        .query(&mut con)
        .expect("GET");
    assert!(fence > 0);
}

#[test]
fn bad_usage_and_an_unreachable_server_have_their_own_codes() {
    let server = TestServer::start();
    let out = cli(&server, &["run", "k"]).output().expect("run");
    assert_eq!(out.status.code(), Some(64), "no command");
    let out = cli(&server, &["run", "k", "-n", "-w", "1s", "--", "true"])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(64), "-n with -w");
    let out = std::process::Command::new(bin())
        .args([
            "-p",
            &redis_lock_testkit::dead_port().to_string(),
            "run",
            "k",
            "--",
            "true",
        ])
        .output()
        .expect("run");
    assert_eq!(
        out.status.code(),
        Some(69),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = std::process::Command::new(bin())
        .args(["-u", "nonsense://x", "run", "k", "--", "true"])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(78), "a bad URL is configuration");
}

#[test]
fn a_server_without_the_module_is_a_configuration_error_that_says_so() {
    let server = TestServer::without_module();
    let out = cli(&server, &["run", "k", "--", "true"])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(78));
    assert!(String::from_utf8_lossy(&out.stderr).contains("module loaded"));
}

#[test]
fn a_password_comes_from_rediscli_auth_and_never_needs_the_command_line() {
    let server = with_password("s3cret");
    let out = cli(&server, &["run", "k", "--", "true"])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(78), "refused without the password");
    let out = cli(&server, &["run", "k", "--", "true"])
        .env("REDISCLI_AUTH", "s3cret")
        .output()
        .expect("run");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = std::process::Command::new(bin())
        .args(["run", "k", "--", "true"])
        .env(
            "REDIS_URL",
            format!("redis://:s3cret@127.0.0.1:{}/", server.port),
        )
        .output()
        .expect("run");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
