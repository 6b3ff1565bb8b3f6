//! Grants a replica has (`REPLICAS n [REPLTIMEOUT ms]`, the `lock.replicas` setting;
//! docs/commands.md, "Grants a replica has"): the reply is held until n online replicas
//! acknowledged the grant, or its timeout; a shortfall undoes the grant as a release by
//! its token (an extend keeps the lock) and answers `NOTREPLICATED acked <a> required
//! <n>`. A held reply ends on a role change, a flush, a pause's end, a disconnect and
//! shutdown, never after its timeout. On Redis 7.0 `REPLICAS n` (n > 0) is refused.

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use crate::common::*;

/// The error of `REPLICAS n` on a server that cannot wait (Redis 7.0).
const NEEDS: &str = "ERR REPLICAS needs Redis 7.2 or later";

/// A server stopped with `SIGSTOP` until this is dropped (even when a test fails).
struct Stopped<'a>(&'a TestServer);

impl<'a> Stopped<'a> {
    fn new(server: &'a TestServer) -> Self {
        signal(server, "STOP");
        Stopped(server)
    }
}

impl Drop for Stopped<'_> {
    fn drop(&mut self) {
        signal(self.0, "CONT");
    }
}

/// A master and its replica, in sync.
fn pair() -> (TestServer, TestServer) {
    let master = TestServer::start();
    let replica = start_replica(&master, &[]);
    sync_replicas(&mut master.connection(), 1);
    (master, replica)
}

/// On a server that cannot wait for replicas, `command` is refused with the clear error
/// and `key` stays free: true (the test has nothing more to check there).
fn refused_here(con: &mut redis::Connection, command: &[&str], key: &str) -> bool {
    if server_kind().can_wait_for_replicas() {
        return false;
    }
    assert_eq!(error_of_command(con, command), NEEDS);
    assert_eq!(info(con, key), None, "nothing granted");
    true
}

/// Sends `command` (a grant of `k` whose reply the server holds) on a connection of its
/// own, and returns once `k` is granted on the master (`m` its connection).
fn send_held(master: &TestServer, m: &mut redis::Connection, command: &[&str]) -> Waiter {
    let held = Waiter::send_command(master, command);
    poll_until(Duration::from_secs(10), "the grant", || {
        info(m, "k").is_some()
    });
    held
}

/// Runs `test` with a grant of `k` (600 s, `REPLICAS 1 REPLTIMEOUT <repl_timeout>`)
/// whose reply the master holds, its replica stopped until `test` returns: the master,
/// a connection to it and the held client. Nothing on a server that cannot wait.
fn with_a_held_grant(
    repl_timeout: &str,
    test: impl FnOnce(&mut TestServer, &mut redis::Connection, Waiter),
) {
    let (mut master, replica) = pair();
    let mut m = master.connection();
    let command = [
        "LOCK.ACQUIRE",
        "k",
        "600000",
        "REPLICAS",
        "1",
        "REPLTIMEOUT",
        repl_timeout,
    ];
    if refused_here(&mut m, &command, "k") {
        return;
    }
    let _stopped = Stopped::new(&replica);
    let held = send_held(&master, &mut m, &command);
    test(&mut master, &mut m, held);
}

/// The reply's error text.
fn error_text(reply: redis::RedisResult<redis::Value>) -> String {
    match reply {
        Err(err) => err.to_string(),
        Ok(value) => panic!("expected an error, got {value:?}"),
    }
}

/// Whether the error is `NOTREPLICATED acked <acked> required <required>` (as the
/// server wrote it, or as the client library shows its code and text).
fn not_replicated(text: &str, acked: u32, required: u32) -> bool {
    let words: String = text.chars().filter(|c| *c != '"' && *c != ':').collect();
    words.contains(&format!("NOTREPLICATED acked {acked} required {required}"))
}

#[test]
fn with_a_healthy_replica_the_replica_has_the_grant_when_the_reply_arrives() {
    let (master, replica) = pair();
    let (mut m, mut r) = (master.connection(), replica.connection());
    if refused_here(
        &mut m,
        &["LOCK.ACQUIRE", "k", "10000", "REPLICAS", "1"],
        "k",
    ) {
        return;
    }
    let (_, fence) = acquire(&mut m, "k", 10_000, &["REPLICAS", "1"]).expect("granted");
    // Read at once, with no WAIT of the test's own: the replica has it already.
    assert_eq!(info_field(&mut r, "k", "fence"), Some(fence));

    let (_, fences) = acquire_all(&mut m, &["x", "y"], 10_000, &["REPLICAS", "1"]).expect("all");
    assert_eq!(info_field(&mut r, "y", "fence"), Some(fences[1]));

    let (token, _) = acquire(&mut m, "e", 1000, &[]).expect("free");
    let extended: i64 = redis::cmd("LOCK.EXTEND")
        .arg("e")
        .arg(&token)
        .arg(600_000)
        .arg("REPLICAS")
        .arg(1)
        .query(&mut m)
        .expect("extend");
    assert_eq!(extended, 1);
    assert!(info_field(&mut r, "e", "ttl").expect("held") > 1000);
}

#[test]
fn a_stopped_replica_gets_notreplicated_by_the_timeout_and_nothing_stays_held() {
    let (master, replica) = pair();
    let mut m = master.connection();
    let command = [
        "LOCK.ACQUIRE",
        "k",
        "10000",
        "REPLICAS",
        "1",
        "REPLTIMEOUT",
        "200",
    ];
    if refused_here(&mut m, &command, "k") {
        return;
    }
    let _stopped = Stopped::new(&replica);
    let started = Instant::now();
    let text = error_of_command(&mut m, &command);
    assert!(not_replicated(&text, 0, 1), "{text}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "ended by its timeout"
    );
    assert_eq!(info(&mut m, "k"), None, "the grant was undone");
    assert_eq!(lock_stat(&mut m, "lock_replica_waits"), 1);
    assert_eq!(lock_stat(&mut m, "lock_replica_shortfalls"), 1);

    // More replicas than there are: the one that has it is counted.
    drop(_stopped);
    sync_replicas(&mut m, 1);
    let text = error_of_command(
        &mut m,
        &[
            "LOCK.ACQUIRE",
            "k",
            "10000",
            "REPLICAS",
            "2",
            "REPLTIMEOUT",
            "100",
        ],
    );
    assert!(not_replicated(&text, 1, 2), "{text}");
    assert_eq!(info(&mut m, "k"), None);
}

#[test]
fn an_extend_that_falls_short_keeps_the_lock() {
    let (master, replica) = pair();
    let mut m = master.connection();
    let (token, _) = acquire(&mut m, "e", 60_000, &[]).expect("free");
    let token = String::from_utf8(token).expect("a made token is hex");
    let command = [
        "LOCK.EXTEND",
        "e",
        &token,
        "600000",
        "REPLICAS",
        "1",
        "REPLTIMEOUT",
        "100",
    ];
    if !server_kind().can_wait_for_replicas() {
        assert_eq!(error_of_command(&mut m, &command), NEEDS);
        assert!(info_field(&mut m, "e", "ttl").expect("held") <= 60_000);
        return;
    }
    let _stopped = Stopped::new(&replica);
    let text = error_of_command(&mut m, &command);
    assert!(not_replicated(&text, 0, 1), "{text}");
    assert!(info_field(&mut m, "e", "ttl").expect("still held") > 60_000);
}

#[test]
fn a_grant_of_several_keys_that_falls_short_frees_them_all() {
    let (master, replica) = pair();
    let mut m = master.connection();
    let command = [
        "LOCK.ACQUIREALL",
        "2",
        "a",
        "b",
        "10000",
        "REPLICAS",
        "1",
        "REPLTIMEOUT",
        "100",
    ];
    if refused_here(&mut m, &command, "a") {
        return;
    }
    let _stopped = Stopped::new(&replica);
    let text = error_of_command(&mut m, &command);
    assert!(not_replicated(&text, 0, 1), "{text}");
    assert_eq!((info(&mut m, "a"), info(&mut m, "b")), (None, None));
}

#[test]
fn a_shortfall_hands_the_lock_to_the_next_waiter() {
    with_a_held_grant("3000", |master, m, mut first| {
        // The next waiter asks for no replica (the replica is stopped: under the default
        // `auto` its grant would wait for it too).
        let mut next = Waiter::start(master, "k", 60_000, &["WAIT", "10000", "REPLICAS", "0"]);
        let text = error_text(first.reply());
        assert!(not_replicated(&text, 0, 1), "{text}");
        let (_, fence) = next.granted().expect("the next waiter has it");
        assert_eq!(info_field(m, "k", "fence"), Some(fence));
    });
}

#[test]
fn a_waiter_granted_later_is_answered_once_the_replica_has_its_grant() {
    let (master, replica) = pair();
    let mut m = master.connection();
    if refused_here(&mut m, &["LOCK.ACQUIRE", "k", "1", "REPLICAS", "1"], "k") {
        return;
    }
    let (token, _) = acquire(&mut m, "k", 60_000, &[]).expect("free");
    let mut waiter = Waiter::start(
        &master,
        "k",
        60_000,
        &["WAIT", "0", "REPLICAS", "1", "REPLTIMEOUT", "60000"],
    );
    let stopped = Stopped::new(&replica);
    assert_eq!(release(&mut m, "k", &token), 1);
    poll_until(Duration::from_secs(10), "the waiter's grant", || {
        info(&mut m, "k").is_some()
    });
    assert!(
        waiter.is_blocked(),
        "held while the replica lacks the grant"
    );
    drop(stopped);
    let (_, fence) = waiter.granted().expect("granted once the replica has it");
    assert_eq!(
        info_field(&mut replica.connection(), "k", "fence"),
        Some(fence)
    );

    // Without the replica in time: the waiter's grant is undone.
    let (token, _) = acquire(&mut m, "w", 60_000, &[]).expect("free");
    let mut waiter = Waiter::start(
        &master,
        "w",
        60_000,
        &["WAIT", "0", "REPLICAS", "1", "REPLTIMEOUT", "100"],
    );
    let _stopped = Stopped::new(&replica);
    assert_eq!(release(&mut m, "w", &token), 1);
    let text = error_text(waiter.reply());
    assert!(not_replicated(&text, 0, 1), "{text}");
    assert_eq!(info(&mut m, "w"), None);
}

#[test]
fn a_client_that_leaves_while_its_reply_is_held_has_its_grant_undone() {
    with_a_held_grant("600000", |_master, m, held| {
        assert!(held.is_blocked());
        drop(held);
        poll_until(Duration::from_secs(10), "the grant undone", || {
            info(m, "k").is_none()
        });
    });
}

#[test]
fn an_acknowledgement_from_a_client_that_is_no_replica_counts_for_nothing() {
    with_a_held_grant("1500", |master, m, mut held| {
        // A client (with the rights) claims an offset far beyond the grant's. The server
        // answers a non-replica's `REPLCONF ACK` with nothing: the `PING` after it shows it
        // was read.
        let mut other = std::net::TcpStream::connect(("127.0.0.1", master.port)).expect("connect");
        other
            .write_all(b"REPLCONF ACK 999999999999\r\nPING\r\n")
            .expect("send");
        let mut pong = [0u8; 7];
        other.read_exact(&mut pong).expect("the PING's reply");
        assert_eq!(&pong, b"+PONG\r\n");
        let text = error_text(held.reply());
        assert!(not_replicated(&text, 0, 1), "{text}");
        assert_eq!(info(m, "k"), None, "the grant was undone");
    });
}

#[test]
fn the_setting_waits_for_commands_that_name_no_replicas() {
    let master = TestServer::start();
    let mut m = master.connection();
    let get = |con: &mut redis::Connection| -> String {
        let pair: Vec<String> = redis::cmd("CONFIG")
            .arg("GET")
            .arg("lock.replicas")
            .query(con)
            .expect("CONFIG GET");
        pair[1].clone()
    };
    assert_eq!(get(&mut m), "auto", "auto by default");
    let bad = error_of_command(&mut m, &["CONFIG", "SET", "lock.replicas", "101"]);
    assert!(
        bad.contains("expected an integer from 0 to 100 or auto"),
        "{bad}"
    );
    config_set(&mut m, "lock.replicas", "auto");
    assert_eq!(get(&mut m), "auto");
    // auto, and no replica: answered at once.
    acquire(&mut m, "alone", 10_000, &[]).expect("granted");
    if !server_kind().can_wait_for_replicas() {
        let text = error_of_command(&mut m, &["CONFIG", "SET", "lock.replicas", "1"]);
        assert!(text.contains("REPLICAS needs Redis 7.2 or later"), "{text}");
        return;
    }
    // A count, and no replica: a shortfall.
    config_set(&mut m, "lock.replicas", "1");
    let text = error_of_command(&mut m, &["LOCK.ACQUIRE", "k", "1000"]);
    assert!(not_replicated(&text, 0, 1), "{text}");
    assert_eq!(info(&mut m, "k"), None);
    // REPLICAS 0 overrides the setting.
    acquire(&mut m, "k", 1000, &["REPLICAS", "0"]).expect("granted");

    let replica = start_replica(&master, &[]);
    // Online on the master's side too (auto counts the replicas the master lists online).
    sync_replicas(&mut m, 1);
    config_set(&mut m, "lock.replicas", "auto");
    let (_, fence) = acquire(&mut m, "with", 10_000, &[]).expect("granted");
    assert_eq!(
        info_field(&mut replica.connection(), "with", "fence"),
        Some(fence)
    );
    let stopped = Stopped::new(&replica);
    let text = error_of_command(&mut m, &["LOCK.ACQUIRE", "stopped", "1000"]);
    assert!(not_replicated(&text, 0, 1), "{text}");
    assert_eq!(info(&mut m, "stopped"), None);

    // The replica gone for good: auto still counts it for a while (a deposed master's
    // replicas drop just before Sentinel demotes it), so a grant falls short.
    drop(stopped);
    drop(replica);
    poll_until(Duration::from_secs(10), "the replica gone", || {
        server_info(&mut m, "replication").contains("connected_slaves:0")
    });
    let text = error_of_command(&mut m, &["LOCK.ACQUIRE", "gone", "1000"]);
    assert!(not_replicated(&text, 0, 1), "{text}");
    assert_eq!(info(&mut m, "gone"), None);
}

#[test]
fn the_setting_is_a_loadmodule_argument_too() {
    let module = module_path();
    let module = module.to_str().expect("a UTF-8 path");
    let server = TestServer::with_args(&["--no-module", "--loadmodule", module, "REPLICAS", "0"]);
    let pair: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("lock.replicas")
        .query(&mut server.connection())
        .expect("CONFIG GET");
    assert_eq!(pair[1], "0", "the argument opts out of the default");
}

#[test]
fn inside_multi_an_explicit_wait_is_refused_and_the_setting_does_not_apply() {
    let (master, _replica) = pair();
    let mut m = master.connection();
    let replies: Vec<redis::Value> = redis::pipe()
        .atomic()
        .cmd("LOCK.ACQUIRE")
        .arg("k")
        .arg(1000)
        .arg("REPLICAS")
        .arg(1)
        .query(&mut m)
        .unwrap_or_else(|err| vec![redis::Value::SimpleString(err.to_string())]);
    let text = format!("{replies:?}");
    let expected = if server_kind().can_wait_for_replicas() {
        "REPLICAS cannot hold a reply inside MULTI/EXEC or a script"
    } else {
        "REPLICAS needs Redis 7.2 or later"
    };
    assert!(text.contains(expected), "{text}");
    assert_eq!(info(&mut m, "k"), None);
    config_set(&mut m, "lock.replicas", "auto");
    let granted: Vec<Option<(Vec<u8>, i64)>> = redis::pipe()
        .atomic()
        .cmd("LOCK.ACQUIRE")
        .arg("k")
        .arg(1000)
        .query(&mut m)
        .expect("EXEC");
    assert!(granted[0].is_some(), "granted at once in MULTI");
}

#[test]
fn bad_replica_options_are_refused_before_anything_changes() {
    let master = TestServer::start();
    let mut m = master.connection();
    for (args, expected) in [
        (
            &["REPLICAS", "101"][..],
            "ERR invalid REPLICAS: expected an integer from 0 to 100",
        ),
        (&["REPLICAS", "-1"][..], "ERR invalid REPLICAS"),
        (
            &["REPLTIMEOUT", "0"][..],
            "ERR invalid REPLTIMEOUT: expected an integer from 1",
        ),
        (&["REPLICAS"][..], "REPLICAS"),
        (&["REPLICAS", "1", "REPLICAS", "1"][..], "REPLICAS"),
    ] {
        let mut command = vec!["LOCK.ACQUIRE", "k", "1000"];
        command.extend_from_slice(args);
        let text = error_of_command(&mut m, &command);
        assert!(
            text.starts_with("ERR") && text.contains(expected),
            "{args:?}: {text}"
        );
    }
    let (token, _) = acquire(&mut m, "e", 1000, &[]).expect("free");
    let token = String::from_utf8(token).expect("hex");
    let text = error_of_command(&mut m, &["LOCK.EXTEND", "e", &token, "5000", "WAIT", "1"]);
    assert!(text.contains("expected REPLICAS or REPLTIMEOUT"), "{text}");
    assert!(
        info_field(&mut m, "e", "ttl").expect("held") <= 1000,
        "unchanged"
    );
    assert_eq!(info(&mut m, "k"), None);
}

#[test]
fn a_held_reply_ends_when_the_master_becomes_a_replica() {
    let other = TestServer::start();
    with_a_held_grant("600000", |_master, m, mut held| {
        let _: () = redis::cmd("REPLICAOF")
            .arg("127.0.0.1")
            .arg(other.port)
            .query(m)
            .expect("REPLICAOF");
        let text = error_text(held.reply_within(Duration::from_secs(10)));
        // Redis unblocks the client itself (UNBLOCKED); Valkey leaves it to the module.
        assert!(
            text.contains("NOTREPLICATED") || text.contains("UNBLOCKED"),
            "{text}"
        );
    });
}

#[test]
fn a_held_reply_ends_when_its_keys_are_flushed() {
    with_a_held_grant("600000", |_master, m, mut held| {
        let _: () = redis::cmd("FLUSHALL").query(m).expect("FLUSHALL");
        let text = error_text(held.reply_within(Duration::from_secs(10)));
        assert!(not_replicated(&text, 0, 1), "{text}");
    });
}

#[test]
fn under_client_pause_a_shortfall_is_answered_in_time_and_undone_when_writes_resume() {
    with_a_held_grant("3000", |_master, m, mut held| {
        let _: () = redis::cmd("CLIENT")
            .arg("PAUSE")
            .arg(600_000)
            .arg("WRITE")
            .query(m)
            .expect("CLIENT PAUSE");
        let text = error_text(held.reply_within(Duration::from_secs(10)));
        assert!(not_replicated(&text, 0, 1), "{text}");
        assert!(info(m, "k").is_some(), "nothing is written while paused");
        let _: () = redis::cmd("CLIENT")
            .arg("UNPAUSE")
            .query(m)
            .expect("UNPAUSE");
        poll_until(Duration::from_secs(10), "the grant undone", || {
            info(m, "k").is_none()
        });
    });
}

#[test]
fn a_held_reply_does_not_keep_the_server_from_shutting_down() {
    with_a_held_grant("600000", |master, m, mut held| {
        let _ = redis::cmd("SHUTDOWN")
            .arg("NOSAVE")
            .arg("NOW")
            .query::<redis::Value>(m);
        assert!(held.reply_within(Duration::from_secs(20)).is_err());
        let port = master.port;
        poll_until(Duration::from_secs(20), "the server gone", || {
            !port_open(port)
        });
        master.stop();
    });
}
