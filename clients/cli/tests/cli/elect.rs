//! `elect` runs its command only while it leads; `leader` says who leads, and with
//! `--follow` each new leader as it comes.

use std::io::{BufRead, BufReader};
use std::sync::mpsc::{Receiver, channel};

use crate::*;

/// An elector whose command writes its fence to `<name>.fence`, then sleeps.
fn elector(server: &TestServer, scratch: &Scratch, name: &str, extra: &[&str]) -> Runner {
    let script = format!(
        "echo $REDIS_LOCK_FENCE >> '{}'; exec sleep 600",
        scratch.path(&format!("{name}.fence")).display()
    );
    let mut args = vec![
        "elect",
        "svc:leader",
        "--value",
        name,
        "--session",
        "1s",
        "--ttl",
        "5s",
    ];
    args.extend_from_slice(extra);
    args.extend_from_slice(&["--", "sh", "-c", &script]);
    Runner::start(server, name, &args)
}

/// The lines `runner` prints, as they come.
fn lines_of(runner: &mut Runner) -> Receiver<String> {
    let stdout = runner.child.stdout.take().expect("stdout");
    let (tx, rx) = channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    rx
}

fn fence(scratch: &Scratch, name: &str) -> u64 {
    scratch.lines(&format!("{name}.fence"))[0]
        .parse()
        .expect("a fence")
}

#[test]
fn when_the_leaders_runner_is_killed_the_other_leads_with_a_higher_fence_and_follow_sees_both() {
    let server = TestServer::start();
    let mut con = server.connection();
    let scratch = Scratch::new("elect");
    let mut follower = Runner::start(&server, "follower", &["leader", "svc:leader", "--follow"]);
    let seen = lines_of(&mut follower);
    let mut first = elector(&server, &scratch, "alpha", &[]);
    scratch.wait_lines("alpha.fence", 1);
    let _second = elector(&server, &scratch, "beta", &[]);
    poll_until(DEADLINE, "beta campaigns", || {
        waiters(&mut con, "svc:leader") == 1
    });
    assert!(
        scratch.lines("beta.fence").is_empty(),
        "beta's command waits for leadership"
    );

    let out = cli(&server, &["leader", "svc:leader"])
        .output()
        .expect("leader");
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!("alpha\t{}\n", fence(&scratch, "alpha"))
    );

    first.child.kill().expect("SIGKILL alpha's runner");
    let _ = first.child.wait();
    scratch.wait_lines("beta.fence", 1);
    assert!(
        fence(&scratch, "beta") > fence(&scratch, "alpha"),
        "a new term"
    );

    let expected = [
        format!("alpha\t{}", fence(&scratch, "alpha")),
        format!("beta\t{}", fence(&scratch, "beta")),
    ];
    for line in expected {
        let got = seen
            .recv_timeout(DEADLINE)
            .expect("--follow prints each leader");
        assert_eq!(got, line);
    }
}

#[test]
fn a_lost_leadership_stops_the_command_and_the_elector_stands_again_unless_once() {
    let server = TestServer::start();
    let mut con = server.connection();
    let scratch = Scratch::new("restand");
    let elector_gamma = elector(&server, &scratch, "gamma", &["--kill-after", "1s"]);
    scratch.wait_lines("gamma.fence", 1);
    let _: i64 = redis::cmd("DEL")
        .arg("svc:leader")
        .query(&mut con)
        .expect("DEL");
    // The watchdog finds the term gone; the command is stopped and the elector wins again.
    scratch.wait_lines("gamma.fence", 2);
    let fences = scratch.lines("gamma.fence");
    assert!(fences[1].parse::<u64>().unwrap() > fences[0].parse::<u64>().unwrap());

    let once_scratch = Scratch::new("once");
    drop(elector_gamma);
    poll_until(DEADLINE, "the lock is free", || {
        !held(&mut con, "svc:leader")
    });
    let mut once = elector(
        &server,
        &once_scratch,
        "delta",
        &["--once", "--kill-after", "1s"],
    );
    once_scratch.wait_lines("delta.fence", 1);
    let _: i64 = redis::cmd("DEL")
        .arg("svc:leader")
        .query(&mut con)
        .expect("DEL");
    let (status, stderr) = once.finish(DEADLINE);
    assert_eq!(status.code(), Some(79), "{stderr}");
}

#[test]
fn leader_says_none_and_exits_1_when_nobody_leads_and_json_for_scripts() {
    let server = TestServer::start();
    let out = cli(&server, &["leader", "svc:nobody"])
        .output()
        .expect("leader");
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "none\n");
    let mut con = server.connection();
    let (_, fence): (String, u64) = redis::cmd("LOCK.ACQUIRE")
        .arg("svc:json")
        .arg(60000)
        .arg("VALUE")
        .arg("10.0.0.7:8080")
        .query(&mut con)
        .expect("acquire");
    let out = cli(&server, &["leader", "svc:json", "--json"])
        .output()
        .expect("leader");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!("{{\"fence\":{fence},\"value\":\"10.0.0.7:8080\"}}\n")
    );
}
