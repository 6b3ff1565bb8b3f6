//! `INFO lock`, section `lock_stats`: the counters are exact after a known sequence of
//! commands, and `lock_waiters` is the number of clients blocked now (docs/operations.md,
//! "lock_stats"). Each test has its own server, so counts start at zero.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::common::*;

/// The section's fields as the server prints them, in order: the counters and the
/// gauges, the bytes the module holds, then the two distributions.
const FIELDS: [&str; 21] = [
    "lock_grants",
    "lock_contended",
    "lock_releases",
    "lock_extends",
    "lock_expired",
    "lock_waits",
    "lock_wait_timeouts",
    "lock_waiters",
    "lock_watchers",
    "lock_watch_replies",
    "lock_session_releases",
    "lock_session_reclaims",
    "lock_replica_waits",
    "lock_replica_shortfalls",
    "lock_replica_ack_requests",
    "lock_keys",
    "lock_holders",
    "lock_sessions_in_grace",
    "lock_allocated_bytes",
    "lock_wait_usec",
    "lock_hold_usec",
];

/// The counters among them.
const COUNTERS: &[&str] = FIELDS.split_at(15).0;

/// Every `field:value` line of `INFO section`.
fn info_fields(con: &mut redis::Connection, section: &str) -> BTreeMap<String, i64> {
    server_info(con, section)
        .lines()
        .filter_map(|line| line.trim().split_once(':'))
        .filter_map(|(name, value)| Some((name.to_string(), value.parse().ok()?)))
        .collect()
}

/// The `lock_stats` counters, all of them.
fn stats(con: &mut redis::Connection) -> BTreeMap<String, i64> {
    let all = info_fields(con, "lock");
    COUNTERS
        .iter()
        .map(|&field| {
            let value = *all
                .get(field)
                .unwrap_or_else(|| panic!("{field} in INFO lock: {all:?}"));
            (field.to_string(), value)
        })
        .collect()
}

fn expected(values: [i64; 8]) -> BTreeMap<String, i64> {
    // The watch, session and replica counters come last; no test of this file watches
    // a key, binds a lock to a connection or waits for a replica, so they stay 0
    // (tests/server/watching.rs, session.rs and replica_wait.rs check them).
    COUNTERS
        .iter()
        .map(|field| field.to_string())
        .zip(values.into_iter().chain([0, 0, 0, 0, 0, 0, 0]))
        .collect()
}

/// Starts `LOCK.ACQUIRE key 30000 TOKEN token WAIT timeout` on a new connection;
/// returns once the server counts it as blocked.
fn start_waiter(server: &TestServer, key: &str, token: &str, timeout_ms: u64) -> Waiter {
    Waiter::start(
        server,
        key,
        30_000,
        &["TOKEN", token, "WAIT", &timeout_ms.to_string()],
    )
}

#[test]
fn a_fresh_server_counts_nothing() {
    let server = TestServer::start();
    let mut con = server.connection();
    assert_eq!(stats(&mut con), expected([0, 0, 0, 0, 0, 0, 0, 0]));
}

#[test]
fn the_counters_are_exact_after_a_known_sequence_of_commands() {
    let server = TestServer::start();
    let mut con = server.connection();

    // Three direct grants, then a renew, which is not a grant (nor contended).
    for (key, token) in [("a", "ta"), ("b", "tb"), ("c", "tc")] {
        acquire_as(&mut con, key, 30_000, token.as_bytes()).expect("granted");
    }
    acquire_as(&mut con, "a", 30_000, b"ta").expect("renewed");
    assert_eq!(stats(&mut con), expected([3, 0, 0, 0, 0, 0, 0, 0]));

    // Two contended attempts without WAIT.
    assert_eq!(acquire_as(&mut con, "a", 30_000, b"x"), None);
    assert_eq!(acquire_as(&mut con, "b", 30_000, b"x"), None);
    // One extend; an extend and a release by the wrong token count nothing.
    assert_eq!(extend(&mut con, "a", b"ta", 60_000), 1);
    assert_eq!(extend(&mut con, "a", b"x", 60_000), 0);
    assert_eq!(release(&mut con, "a", b"x"), 0);
    // One release; releasing again counts nothing.
    assert_eq!(release(&mut con, "b", b"tb"), 1);
    assert_eq!(release(&mut con, "b", b"tb"), 0);
    assert_eq!(stats(&mut con), expected([3, 2, 1, 1, 0, 0, 0, 0]));

    // A held lock that expires; a lock deleted by an admin is neither released nor
    // expired.
    acquire_as(&mut con, "d", 50, b"td").expect("granted");
    poll_until(Duration::from_secs(10), "d to expire", || {
        !exists(&mut con, "d")
    });
    acquire_as(&mut con, "e", 30_000, b"te").expect("granted");
    let _: i64 = redis::cmd("DEL").arg("e").query(&mut con).unwrap();
    assert_eq!(stats(&mut con), expected([5, 2, 1, 1, 1, 0, 0, 0]));

    // A waiter: contended, a wait, blocked now; then granted on release.
    let mut waiter = start_waiter(&server, "c", "w", 10_000);
    assert_eq!(stats(&mut con), expected([5, 3, 1, 1, 1, 1, 0, 1]));
    assert_eq!(release(&mut con, "c", b"tc"), 1);
    assert!(waiter.granted().is_some());
    assert_eq!(stats(&mut con), expected([6, 3, 2, 1, 1, 1, 0, 0]));

    // A wait that times out: contended, a wait, a timeout.
    assert_eq!(
        acquire(&mut con, "c", 30_000, &["TOKEN", "y", "WAIT", "100"]),
        None
    );
    assert_eq!(stats(&mut con), expected([6, 4, 2, 1, 1, 2, 1, 0]));
}

#[test]
fn an_expired_lock_handed_to_a_waiter_counts_one_expiry_and_one_grant() {
    let server = TestServer::start();
    let mut con = server.connection();
    acquire_as(&mut con, "job", 1_000, b"holder").expect("granted");
    let mut waiter = start_waiter(&server, "job", "w", 10_000);

    assert!(waiter.granted().is_some());

    assert_eq!(stats(&mut con), expected([2, 1, 0, 0, 1, 1, 0, 0]));
}

#[test]
fn lock_waiters_is_the_number_of_clients_blocked_now() {
    let server = TestServer::start();
    let mut con = server.connection();
    acquire_as(&mut con, "x", 30_000, b"hx").expect("granted");
    acquire_as(&mut con, "y", 30_000, b"hy").expect("granted");
    let mut first_x = start_waiter(&server, "x", "w1", 10_000);
    let leaving = Waiter::start(&server, "x", 30_000, &["WAIT", "0"]);
    assert_eq!(lock_waiters(&mut con), 2);
    let mut on_y = start_waiter(&server, "y", "w3", 300);
    assert_eq!(lock_waiters(&mut con), 3);

    // The waiter on y times out.
    assert_eq!(on_y.granted(), None);
    assert_eq!(lock_waiters(&mut con), 2);

    // The second waiter on x disconnects.
    drop(leaving);
    poll_until(
        Duration::from_secs(10),
        "the second waiter on x to leave",
        || lock_waiters(&mut con) == 1,
    );

    // The first waiter on x is granted the lock.
    assert_eq!(release(&mut con, "x", b"hx"), 1);
    assert!(first_x.granted().is_some());
    assert_eq!(lock_waiters(&mut con), 0);
    let counts = stats(&mut con);
    assert_eq!(
        (counts["lock_waits"], counts["lock_wait_timeouts"]),
        (3, 1),
        "a disconnect is not a timeout"
    );
}

#[test]
fn info_lock_and_info_everything_show_the_lock_stats_section() {
    let server = TestServer::start();
    let mut con = server.connection();
    acquire_as(&mut con, "job", 30_000, b"t").expect("granted");

    for section in ["lock", "everything"] {
        let info = server_info(&mut con, section);
        let body: Vec<&str> = info
            .lines()
            .map(str::trim)
            .skip_while(|line| *line != "# lock_stats")
            .skip(1)
            .take_while(|line| !line.is_empty() && !line.starts_with('#'))
            .collect();
        let names: Vec<&str> = body
            .iter()
            .filter_map(|line| line.split_once(':').map(|(name, _)| name))
            .collect();
        assert_eq!(names, FIELDS, "INFO {section}:\n{info}");
        assert!(body.contains(&"lock_grants:1"), "INFO {section}:\n{info}");
    }
}

/// `lock_allocated_bytes`: the bytes the module holds now.
fn allocated(con: &mut redis::Connection) -> i64 {
    *info_fields(con, "lock")
        .get("lock_allocated_bytes")
        .expect("lock_allocated_bytes in INFO lock")
}

#[test]
fn allocated_bytes_follow_what_the_module_holds() {
    let server = TestServer::start();
    let mut con = server.connection();
    let fresh = allocated(&mut con);
    assert!(fresh > 0, "the module holds nothing at all: {fresh}");

    // A thousand locks with server-made tokens: one 24-byte value each.
    let mut pipe = redis::pipe();
    for i in 0..1000 {
        pipe.cmd("LOCK.ACQUIRE")
            .arg(format!("held:{i}"))
            .arg(60_000)
            .ignore();
    }
    let () = pipe.query(&mut con).expect("a thousand grants");
    let held = allocated(&mut con) - fresh;
    assert!(
        (24_000..=32_000).contains(&held),
        "a thousand locks hold {held} bytes of the module's"
    );

    // Twenty clients waiting hold their queue entries until they leave.
    let (_, _, first) = held_with_a_waiter(&server, &mut con, "busy", 60_000, &["WAIT", "0"]);
    let mut waiters = vec![first];
    for _ in 1..20 {
        waiters.push(Waiter::start(&server, "busy", 60_000, &["WAIT", "0"]));
    }
    let waiting = allocated(&mut con);
    assert!(
        waiting > fresh + held,
        "{waiting} with 20 waiters, {} before",
        fresh + held
    );
    drop(waiters);
    poll_until(LIMIT, "the waiters to leave", || {
        lock_waiters(&mut con) == 0
    });

    redis::cmd("FLUSHALL")
        .query::<()>(&mut con)
        .expect("FLUSHALL");
    // Nothing stays: the waiters' maps give their room back when the last one leaves.
    // (Valkey 8 and later free a flushed keyspace in a background thread by default:
    // the count goes down as it does.)
    poll_until(LIMIT, "the flushed locks to be freed", || {
        allocated(&mut con) <= fresh
    });
}

#[test]
fn a_closed_connections_locks_leave_nothing_of_the_modules_behind() {
    let server = TestServer::start();
    let mut con = server.connection();
    let fresh = allocated(&mut con);
    // More locks than a grace releases in one turn of the event loop, with two graces.
    let mut holder = server.connection();
    let mut pipe = redis::pipe();
    for i in 0..2_000 {
        pipe.cmd("LOCK.ACQUIRE")
            .arg(format!("bound:{i}"))
            .arg(60_000)
            .arg("SESSION")
            .arg(i % 2)
            .ignore();
    }
    let () = pipe.query(&mut holder).expect("two thousand grants");
    assert!(allocated(&mut con) > fresh + 2_000 * 24);
    drop(holder);
    poll_until(LIMIT, "every lock to go with its connection", || {
        dbsize(&mut con) == 0
    });
    // The registry's lists and maps give their room back once they are empty. (Valkey
    // may free a deleted value in a background thread: the count goes down as it does.)
    poll_until(
        LIMIT,
        "the module's bytes to come back to the start",
        || allocated(&mut con) <= fresh,
    );
    assert_eq!(allocated(&mut con), fresh);
}
