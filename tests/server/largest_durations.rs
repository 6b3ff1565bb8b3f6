//! The largest durations (docs/commands.md: `ttl-ms` "an integer from 1 to 2^53 - 1",
//! `timeout-ms` and `grace-ms` from 0 to 2^53 - 1) do what they say on every server: a
//! lock held that long, a wait and a watch that long blocked until their event comes (a
//! server timer armed that far ahead must not fire at once), a session's grace that long
//! keeping the lock after its connection closes. One more is an error naming the
//! argument, and changes nothing.

use crate::common::*;

/// 2^53 - 1 ms: JavaScript's `Number.MAX_SAFE_INTEGER`.
const MAX: i64 = (1 << 53) - 1;
const MAX_ARG: &str = "9007199254740991";
const ONE_MORE: &str = "9007199254740992";

/// A few round trips: a timer the server armed as due now has fired by their end.
fn let_due_timers_fire(con: &mut redis::Connection) {
    for _ in 0..3 {
        ping(con);
    }
}

fn assert_ttl_near_max(con: &mut redis::Connection, key: &str) {
    let left = pttl(con, key);
    assert!(left > MAX - 600_000 && left <= MAX, "{key}: PTTL {left}");
}

#[test]
fn a_wait_of_the_largest_timeout_blocks_until_the_lock_is_granted_for_the_largest_ttl() {
    let server = TestServer::start();
    let mut con = server.connection();
    let (holder, fence, mut waiter) =
        held_with_a_waiter(&server, &mut con, "k", MAX as u64, &["WAIT", MAX_ARG]);
    let_due_timers_fire(&mut con);
    assert_eq!(lock_waiters(&mut con), 1, "the wait timed out at once");
    assert!(waiter.is_blocked());

    assert_eq!(release(&mut con, "k", &holder), 1);
    let (_, granted) = waiter.granted().expect("granted when released");
    assert!(granted > fence);
    assert_ttl_near_max(&mut con, "k");
}

#[test]
fn a_waiter_for_several_keys_with_the_largest_timeout_and_ttl_is_granted_them_all() {
    let server = TestServer::start();
    let mut con = server.connection();
    let (holder, _) = acquire(&mut con, "a", 60_000, &[]).expect("a");
    let mut waiter = Waiter::start_all(&server, &["a", "b"], MAX as u64, &["WAIT", MAX_ARG]);
    let_due_timers_fire(&mut con);
    assert_eq!(lock_waiters(&mut con), 1, "the wait timed out at once");

    assert_eq!(release(&mut con, "a", &holder), 1);
    let (_, fences) = waiter.granted_all().expect("both keys");
    assert_eq!(fences.len(), 2);
    assert_ttl_near_max(&mut con, "a");
    assert_ttl_near_max(&mut con, "b");
}

#[test]
fn a_watch_of_the_largest_timeout_blocks_until_the_key_changes() {
    let server = TestServer::start();
    let mut con = server.connection();
    let (holder, fence) = acquire(&mut con, "k", 60_000, &[]).expect("granted");
    let mut watcher = Waiter::watch(&server, "k", fence, MAX as u64);
    let_due_timers_fire(&mut con);
    assert_eq!(
        lock_stat(&mut con, "lock_watchers"),
        1,
        "the watch timed out at once"
    );

    assert_eq!(release(&mut con, "k", &holder), 1);
    assert_eq!(watcher.seen(), Some((0, None)), "the key is free: state 0");
}

#[test]
fn shared_holders_with_the_largest_ttl_keep_the_key_until_they_leave() {
    let server = TestServer::start();
    let mut con = server.connection();
    let (first, _) = acquire(&mut con, "r", MAX as u64, &["SHARED"]).expect("first reader");
    let (second, _) = acquire(&mut con, "r", 1_000, &["SHARED"]).expect("second reader");
    assert_eq!(extend(&mut con, "r", &second, MAX), 1);
    let_due_timers_fire(&mut con);
    assert_eq!(info_field(&mut con, "r", "holders"), Some(2));
    assert_ttl_near_max(&mut con, "r");
    assert_eq!(release(&mut con, "r", &first), 1);
    assert_eq!(release(&mut con, "r", &second), 1);
    assert!(!exists(&mut con, "r"));
}

#[test]
fn a_session_with_the_largest_grace_keeps_its_lock_after_the_connection_closes() {
    let server = TestServer::start();
    let mut con = server.connection();
    let fence = {
        let mut bound = server.connection();
        session_lock(&mut bound, "s", "worker", MAX)
    };
    poll_until(LIMIT, "the closed connection to show", || {
        binding(&mut con, "s") == (MAX, 0)
    });
    let_due_timers_fire(&mut con);
    assert!(exists(&mut con, "s"), "released at once");
    let again = acquire(&mut con, "s", 60_000, &["TOKEN", "worker"]).expect("reclaimed");
    assert_eq!(again.1, fence, "the same token reclaims it with its fence");
}

#[test]
fn one_more_than_the_largest_is_an_error_naming_the_argument_and_changes_nothing() {
    let server = TestServer::start();
    let mut con = server.connection();
    let (holder, _) = acquire(&mut con, "held", 60_000, &[]).expect("granted");
    let token = String::from_utf8(holder.clone()).unwrap();
    let cases: [(&[&str], &str); 7] = [
        (&["LOCK.ACQUIRE", "k", ONE_MORE], "ttl-ms"),
        (
            &["LOCK.ACQUIRE", "k", "1000", "WAIT", ONE_MORE],
            "timeout-ms",
        ),
        (
            &["LOCK.ACQUIRE", "k", "1000", "SESSION", ONE_MORE],
            "grace-ms",
        ),
        (&["LOCK.ACQUIREALL", "2", "k", "j", ONE_MORE], "ttl-ms"),
        (
            &["LOCK.ACQUIREALL", "1", "k", "1000", "WAIT", ONE_MORE],
            "timeout-ms",
        ),
        (&["LOCK.EXTEND", "held", &token, ONE_MORE], "ttl-ms"),
        (&["LOCK.WATCH", "held", "0", ONE_MORE], "timeout-ms"),
    ];
    for (argv, named) in cases {
        let err = error_of_command(&mut con, argv);
        assert!(
            err.starts_with("ERR") && err.contains(named) && err.contains(MAX_ARG),
            "{argv:?}: {err}"
        );
    }
    assert_eq!(dbsize(&mut con), 1);
    assert!(pttl(&mut con, "held") <= 60_000);
}
