//! Many runners on one key: with --no-wait only one command runs; waiting, they run one
//! after another in the order they came; with --limit N, at most N at once.

use crate::*;

#[test]
fn a_cron_race_runs_the_command_once_and_the_others_exit_75() {
    let server = TestServer::start();
    let scratch = Scratch::new("cron");
    let runs = scratch.path("runs");
    let go = scratch.path("go");
    let script = format!("echo $$ >> '{}'; {}", runs.display(), until_exists(&go));
    let mut runners: Vec<Runner> = (0..5)
        .map(|i| {
            Runner::start(
                &server,
                &format!("runner {i}"),
                &["run", "-n", "cron:nightly", "--", "sh", "-c", &script],
            )
        })
        .collect();
    // Four of five find the lock busy and exit at once with 75, while the one command
    // that runs waits for the go-file.
    let exited = |runners: &mut Vec<Runner>| {
        runners
            .iter_mut()
            .filter_map(|runner| {
                runner
                    .child
                    .try_wait()
                    .expect("try_wait")
                    .map(|status| (runner.name.clone(), status))
            })
            .collect::<Vec<_>>()
    };
    poll_until(DEADLINE, "four runners find the lock busy", || {
        exited(&mut runners).len() >= 4
    });
    let busy = exited(&mut runners);
    assert_eq!(busy.len(), 4, "the fifth runs its command: {busy:?}");
    for (name, status) in &busy {
        assert_eq!(status.code(), Some(75), "{name} exited {status}");
    }
    runners.retain_mut(|runner| runner.child.try_wait().expect("try_wait").is_none());
    scratch.wait_lines("runs", 1);
    scratch.touch("go");
    let (status, _) = runners[0].finish(DEADLINE);
    assert_eq!(status.code(), Some(0));
    assert_eq!(scratch.lines("runs").len(), 1, "exactly one command ran");
    let mut con = server.connection();
    assert!(
        !held(&mut con, "cron:nightly"),
        "released when its command ended"
    );
}

#[test]
fn waiting_runners_run_one_at_a_time_in_the_order_they_came() {
    let server = TestServer::start();
    let mut con = server.connection();
    let scratch = Scratch::new("fifo");
    let log = scratch.path("log");
    let go = scratch.path("go");
    let mut runners = Vec::new();
    for i in 0..5 {
        let script = format!(
            "echo start {i} >> '{log}'; {wait}; sleep 0.05; echo end {i} >> '{log}'",
            log = log.display(),
            wait = until_exists(&go)
        );
        runners.push(Runner::start(
            &server,
            &format!("runner {i}"),
            &["run", "jobs:fifo", "--", "sh", "-c", &script],
        ));
        // The order of arrival is the order the server queued them: the first holds, the
        // next is seen waiting before the one after it starts.
        if i == 0 {
            scratch.wait_lines("log", 1);
        } else {
            poll_until(DEADLINE, &format!("runner {i} waits"), || {
                waiters(&mut con, "jobs:fifo") == i
            });
        }
    }
    scratch.touch("go");
    for runner in &mut runners {
        let (status, stderr) = runner.finish(DEADLINE);
        assert_eq!(status.code(), Some(0), "{}: {stderr}", runner.name);
    }
    let expected: Vec<String> = (0..5)
        .flat_map(|i| [format!("start {i}"), format!("end {i}")])
        .collect();
    assert_eq!(
        scratch.lines("log"),
        expected,
        "no overlap, in arrival order"
    );
}

#[test]
fn a_limit_of_two_runs_at_most_two_commands_at_once_and_every_one() {
    let server = TestServer::start();
    let scratch = Scratch::new("limit");
    let log = scratch.path("log");
    let script = format!(
        "echo start >> '{log}'; sleep 0.3; echo end >> '{log}'",
        log = log.display()
    );
    let mut runners: Vec<Runner> = (0..6)
        .map(|i| {
            Runner::start(
                &server,
                &format!("runner {i}"),
                &[
                    "run",
                    "--limit",
                    "2",
                    "jobs:pool",
                    "--",
                    "sh",
                    "-c",
                    &script,
                ],
            )
        })
        .collect();
    for runner in &mut runners {
        let (status, stderr) = runner.finish(DEADLINE);
        assert_eq!(status.code(), Some(0), "{}: {stderr}", runner.name);
    }
    // Each command writes `start` once granted and `end` before its runner releases: the
    // log's order is the order of the grants and releases.
    let lines = scratch.lines("log");
    assert_eq!(lines.len(), 12, "all six ran: {lines:?}");
    let mut running = 0;
    for line in &lines {
        running += if line == "start" { 1 } else { -1 };
        assert!(running <= 2, "more than two at once: {lines:?}");
    }
}

#[test]
fn shared_runners_run_together_and_an_exclusive_one_waits_for_them() {
    let server = TestServer::start();
    let mut con = server.connection();
    let scratch = Scratch::new("shared");
    let go = scratch.path("go");
    let readers: Vec<Runner> = (0..2)
        .map(|i| {
            let script = format!(
                "echo reader >> '{}'; {}",
                scratch.path("log").display(),
                until_exists(&go)
            );
            Runner::start(
                &server,
                &format!("reader {i}"),
                &["run", "--shared", "jobs:rw", "--", "sh", "-c", &script],
            )
        })
        .collect();
    // Both readers run at once.
    scratch.wait_lines("log", 2);
    let writer_script = format!("echo writer >> '{}'", scratch.path("log").display());
    let mut writer = Runner::start(
        &server,
        "writer",
        &["run", "jobs:rw", "--", "sh", "-c", &writer_script],
    );
    poll_until(DEADLINE, "the writer waits", || {
        waiters(&mut con, "jobs:rw") == 1
    });
    scratch.touch("go");
    let (status, _) = writer.finish(DEADLINE);
    assert_eq!(status.code(), Some(0));
    assert_eq!(scratch.lines("log"), ["reader", "reader", "writer"]);
    drop(readers);
}
