//! `status` for a held, a shared and a contended lock, as a table and as JSON (read back
//! by Python's own JSON parser), never with a token; and the waiting line, on a real
//! terminal (tmux) and nowhere else.

use std::process::Command;

use redis_lock_testkit::Terminal;

use crate::*;

fn stdout(mut cmd: Command) -> String {
    let out = cmd.output().expect("run redis-lock");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// What Python's `json` module reads in `text`, as the expression `expr` of `d` prints it.
fn python_json(text: &str, expr: &str) -> String {
    use std::io::Write;
    let mut child = Command::new("python3")
        .args([
            "-c",
            &format!("import json,sys; d=json.load(sys.stdin); print({expr})"),
        ])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("python3");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(text.as_bytes())
        .expect("write");
    let out = child.wait_with_output().expect("python3");
    assert!(out.status.success(), "not JSON: {text}");
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

fn acquire(con: &mut redis::Connection, args: &[&str]) -> (String, u64) {
    redis::cmd("LOCK.ACQUIRE")
        .arg(args)
        .query(con)
        .expect("LOCK.ACQUIRE")
}

#[test]
fn status_shows_holders_waiters_mode_and_limit_never_a_token() {
    let server = TestServer::start();
    let mut con = server.connection();
    let client: i64 = redis::cmd("CLIENT")
        .arg("ID")
        .query(&mut con)
        .expect("CLIENT ID");
    let (held_token, held_fence) = acquire(&mut con, &["st:held", "60000", "VALUE", "host-7:4242"]);
    let (reader_a, _) = acquire(&mut con, &["st:shared", "60000", "SHARED", "LIMIT", "3"]);
    let (reader_b, _) = acquire(&mut con, &["st:shared", "60000", "SHARED", "LIMIT", "3"]);
    let (busy_token, _) = acquire(&mut con, &["st:busy", "60000"]);
    // A runner waits on st:busy; its stderr is no terminal, so it draws no waiting line.
    let mut waiter = Runner::start(&server, "waiter", &["run", "st:busy", "--", "true"]);
    poll_until(DEADLINE, "the runner waits", || {
        waiters(&mut con, "st:busy") == 1
    });

    let table = stdout(cli(
        &server,
        &["status", "st:held", "st:shared", "st:busy", "st:free"],
    ));
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(
        lines.len(),
        6,
        "a header, a row per holder, one for the free key:\n{table}"
    );
    let header: Vec<&str> = lines[0].split_whitespace().collect();
    assert_eq!(
        header,
        [
            "KEY", "MODE", "LIMIT", "WAITERS", "FENCE", "TTL", "HELD", "CLIENT", "SESSION", "VALUE"
        ]
    );
    let row = |i: usize| lines[i].split_whitespace().collect::<Vec<_>>();
    assert_eq!(
        row(1)[..5],
        ["st:held", "exclusive", "-", "0", &held_fence.to_string()]
    );
    assert_eq!(row(1)[7], client.to_string());
    assert_eq!(row(1)[9], "host-7:4242");
    assert_eq!(row(2)[..4], ["st:shared", "shared", "3", "0"]);
    assert_eq!(row(3)[..4], ["st:shared", "shared", "3", "0"]);
    assert_eq!(row(4)[..4], ["st:busy", "exclusive", "-", "1"]);
    assert_eq!(row(5)[..3], ["st:free", "free", "-"]);
    for (i, line) in lines.iter().enumerate().take(5).skip(1) {
        assert_eq!(
            line.find(row(i)[4]),
            lines[0].find("FENCE"),
            "aligned:\n{table}"
        );
    }

    let all = stdout(cli(&server, &["status"]));
    assert_eq!(
        all.lines().count(),
        5,
        "every lock of the database, sorted:\n{all}"
    );
    assert!(all.lines().nth(1).unwrap().starts_with("st:busy"));

    let contended = stdout(cli(&server, &["status", "--contended"]));
    let lines: Vec<&str> = contended.lines().collect();
    assert_eq!(lines.len(), 2, "{contended}");
    assert!(lines[0].contains("WAITED"));
    assert_eq!(lines[1].split_whitespace().next(), Some("st:busy"));

    let json = stdout(cli(
        &server,
        &["status", "--json", "st:held", "st:shared", "st:free"],
    ));
    assert_eq!(
        python_json(
            &json,
            "[(k['key'], k['mode'], k['limit'], len(k['holders'])) for k in d]"
        ),
        "[('st:held', 'exclusive', None, 1), ('st:shared', 'shared', 3, 2), ('st:free', None, None, 0)]"
    );
    assert_eq!(
        python_json(
            &json,
            "(d[0]['holders'][0]['fence'], d[0]['holders'][0]['value'], d[0]['holders'][0]['client'])"
        ),
        format!("({held_fence}, 'host-7:4242', {client})")
    );
    let json = stdout(cli(&server, &["status", "--contended", "--json"]));
    assert_eq!(
        python_json(
            &json,
            "[(k['key'], k['waiters'], k['waited_ms'] >= 0) for k in d]"
        ),
        "[('st:busy', 1, True)]"
    );

    let everything = format!("{table}{all}{contended}{json}");
    for token in [&held_token, &reader_a, &reader_b, &busy_token] {
        assert!(!everything.contains(token.as_str()), "a token shown");
    }

    let _: i64 = redis::cmd("LOCK.RELEASE")
        .arg("st:busy")
        .arg(&busy_token)
        .query(&mut con)
        .expect("release");
    let (status, stderr) = waiter.finish(DEADLINE);
    assert_eq!(status.code(), Some(0));
    assert_eq!(stderr, "", "no waiting line where stderr is no terminal");
}

#[test]
fn on_a_terminal_a_waiting_runner_shows_who_holds_the_lock_until_it_is_taken() {
    let server = TestServer::start();
    let mut con = server.connection();
    let client: i64 = redis::cmd("CLIENT")
        .arg("ID")
        .query(&mut con)
        .expect("CLIENT ID");
    let (token, fence) = acquire(&mut con, &["tty:report", "60000", "VALUE", "host-9"]);
    let scratch = Scratch::new("tty");
    let command = format!(
        "{bin} -p {port} run tty:report -- sh -c 'echo granted: ran'; echo exit $? > '{done}'; sleep 600",
        bin = bin(),
        port = server.port,
        done = scratch.path("done").display()
    );
    let terminal = Terminal::run(&command, 160, 10);
    let wanted = "redis-lock: waiting for tty:report: held for";
    let detail = format!("by client {client} (host-9), fence {fence}, 1 waiting");
    poll_until(DEADLINE, "the waiting line", || {
        let screen = terminal.screen();
        screen.contains(wanted) && screen.contains(&detail)
    });
    let waiting_screen = terminal.screen();
    let _: i64 = redis::cmd("LOCK.RELEASE")
        .arg("tty:report")
        .arg(&token)
        .query(&mut con)
        .expect("release");
    scratch.wait_lines("done", 1);
    let screen = terminal.screen();
    assert_eq!(scratch.lines("done"), ["exit 0"]);
    assert!(screen.contains("granted: ran"), "{screen}");
    assert!(
        !screen.contains("waiting for"),
        "the line is gone once the lock is taken:\n{screen}"
    );
    println!("the waiting line, as a terminal showed it:\n{waiting_screen}");
}
