//! A lock lost under a running command stops the command; a runner that dies takes its
//! command with it, and the lock is free once its grace has passed.

use std::time::{Duration, Instant};

use crate::*;

/// A runner whose command records its pid, then waits for `go` (or for ever): `trap`
/// decides what SIGTERM does to it.
fn start_recording(
    server: &TestServer,
    scratch: &Scratch,
    key: &str,
    trap: &str,
    extra: &[&str],
) -> Runner {
    let script = format!(
        "{trap}; echo $$ > '{pid}'; {wait}",
        pid = scratch.path("pid").display(),
        wait = until_exists(&scratch.path("never"))
    );
    let mut args = vec!["run", "--ttl", "3s"];
    args.extend_from_slice(extra);
    args.extend_from_slice(&[key, "--", "sh", "-c", &script]);
    let runner = Runner::start(server, "runner", &args);
    scratch.wait_lines("pid", 1);
    runner
}

fn command_pid(scratch: &Scratch) -> u32 {
    scratch.lines("pid")[0].parse().expect("a pid")
}

#[test]
fn a_lock_deleted_under_the_command_stops_it_with_sigterm_and_the_runner_exits_79() {
    let server = TestServer::start();
    let mut con = server.connection();
    let scratch = Scratch::new("lost");
    let trap = format!(
        "trap 'echo term >> \"{}\"; exit 0' TERM",
        scratch.path("signals").display()
    );
    let mut runner = start_recording(&server, &scratch, "jobs:lost", &trap, &[]);
    let _: i64 = redis::cmd("DEL")
        .arg("jobs:lost")
        .query(&mut con)
        .expect("DEL");
    // The watchdog's next extend (a third of the 3 s TTL) finds the lock gone.
    let (status, stderr) = runner.finish(DEADLINE);
    assert_eq!(status.code(), Some(79), "{stderr}");
    assert!(stderr.contains("lost"), "the runner says why: {stderr}");
    assert_eq!(
        scratch.lines("signals"),
        ["term"],
        "the command got SIGTERM"
    );
}

#[test]
fn a_command_that_ignores_sigterm_is_killed_after_kill_after() {
    let server = TestServer::start();
    let mut con = server.connection();
    let scratch = Scratch::new("killafter");
    let mut runner = start_recording(
        &server,
        &scratch,
        "jobs:stubborn",
        "trap '' TERM",
        &["--kill-after", "1s"],
    );
    let pid = command_pid(&scratch);
    let _: i64 = redis::cmd("DEL")
        .arg("jobs:stubborn")
        .query(&mut con)
        .expect("DEL");
    let (status, stderr) = runner.finish(DEADLINE);
    assert_eq!(status.code(), Some(79), "{stderr}");
    assert!(
        stderr.contains("SIGKILL"),
        "the runner says it killed: {stderr}"
    );
    assert!(!alive(pid), "the command is gone");
}

#[test]
fn a_killed_runner_takes_its_command_with_it_and_the_lock_frees_after_its_grace() {
    let server = TestServer::start();
    let mut con = server.connection();
    let scratch = Scratch::new("runnerdies");
    // A long TTL: only the session's grace can free the lock this soon.
    let mut runner = Runner::start(
        &server,
        "runner",
        &[
            "run",
            "--ttl",
            "5m",
            "--session",
            "1s",
            "jobs:orphan",
            "--",
            "sh",
            "-c",
            &format!(
                "echo $$ > '{}'; exec sleep 600",
                scratch.path("pid").display()
            ),
        ],
    );
    scratch.wait_lines("pid", 1);
    let pid = command_pid(&scratch);
    assert!(held(&mut con, "jobs:orphan"));
    let killed = Instant::now();
    runner.child.kill().expect("SIGKILL the runner");
    let _ = runner.child.wait();
    poll_until(DEADLINE, "the command dies with its runner", || !alive(pid));
    poll_until(DEADLINE, "the lock is free after the grace", || {
        !held(&mut con, "jobs:orphan")
    });
    assert!(
        killed.elapsed() >= Duration::from_millis(900),
        "freed by the grace, not at once: {:?}",
        killed.elapsed()
    );
}

#[test]
fn a_server_that_stops_answering_for_the_whole_ttl_loses_the_lock_and_stops_the_command() {
    let server = TestServer::start();
    let scratch = Scratch::new("unreachable");
    let trap = format!(
        "trap 'echo term >> \"{}\"; exit 0' TERM",
        scratch.path("signals").display()
    );
    let mut runner = start_recording(
        &server,
        &scratch,
        "jobs:frozen",
        &trap,
        &["--timeout", "500ms"],
    );
    // The server is frozen (SIGSTOP): no renewal can be made before the 3 s TTL runs out.
    let pid = server.pid().expect("the server's pid");
    send_signal(pid, "STOP");
    let (status, stderr) = runner.finish(DEADLINE);
    send_signal(pid, "CONT");
    assert_eq!(status.code(), Some(79), "{stderr}");
    assert!(
        stderr.contains("unreachable"),
        "the runner says why: {stderr}"
    );
    assert_eq!(
        scratch.lines("signals"),
        ["term"],
        "the command got SIGTERM"
    );
}
