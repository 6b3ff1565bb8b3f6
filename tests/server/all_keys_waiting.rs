//! `LOCK.ACQUIREALL ... WAIT` on a real server (docs/commands.md, "LOCK.ACQUIREALL"):
//! one request queued on every key, holding none; granted all at once, in the event that
//! frees the last of its keys, when it is the oldest waiter of each; a later waiter never
//! passes it, and a key it waits for stays free for it; a timeout, a disconnect or
//! `CLIENT UNBLOCK` leaves every queue as if it had never come.

use std::time::Duration;

use crate::common::*;

const LONG: &[&str] = &["WAIT", "20000"];

#[test]
fn a_waiter_is_granted_every_key_at_once_when_the_last_one_frees() {
    let server = TestServer::start();
    let mut con = server.connection();
    let (ta, fa) = acquire(&mut con, "a", 30_000, &[]).expect("a");
    let (tb, fb) = acquire(&mut con, "b", 30_000, &[]).expect("b");
    let mut waiter = Waiter::start_all(&server, &["a", "b"], 30_000, LONG);
    assert_eq!(info_field(&mut con, "a", "waiters"), Some(1));
    assert_eq!(info_field(&mut con, "b", "waiters"), Some(1));

    assert_eq!(release(&mut con, "a", &ta), 1);
    // a is free, and kept for the waiter: nobody else takes it meanwhile. LOCK.INFO
    // answers as for any free key (nil), b's shows the waiter.
    assert!(!exists(&mut con, "a"));
    assert_eq!(info(&mut con, "a"), None);
    assert_eq!(info_field(&mut con, "b", "waiters"), Some(1));
    assert_eq!(acquire(&mut con, "a", 1000, &[]), None);
    assert_eq!(acquire_all(&mut con, &["a"], 1000, &[]), None);
    assert!(waiter.is_blocked());

    assert_eq!(release(&mut con, "b", &tb), 1);
    let (token, fences) = waiter.granted_all().expect("both keys");
    assert!(fences[0] > fa && fences[1] > fb, "{fences:?}");
    assert_eq!(info_field(&mut con, "a", "fence"), Some(fences[0]));
    assert_eq!(info_field(&mut con, "b", "fence"), Some(fences[1]));
    assert_eq!(release(&mut con, "a", &token), 1);
    assert_eq!(release(&mut con, "b", &token), 1);
    assert_eq!(lock_waiters(&mut con), 0);
}

#[test]
fn a_waiter_for_one_key_is_answered_with_a_list_of_one_fence() {
    let server = TestServer::start();
    let mut con = server.connection();
    let (ta, fa) = acquire(&mut con, "a", 30_000, &[]).expect("a");
    let mut waiter = Waiter::start_all(&server, &["a"], 30_000, LONG);
    assert_eq!(release(&mut con, "a", &ta), 1);
    let (_, fences) = waiter.granted_all().expect("a");
    assert_eq!(fences.len(), 1);
    assert!(fences[0] > fa);
}

#[test]
fn an_older_single_key_waiter_goes_first_and_a_later_one_never_passes() {
    let server = TestServer::start();
    let mut con = server.connection();
    let (tb, _) = acquire(&mut con, "b", 30_000, &[]).expect("b");
    let mut older = Waiter::start(&server, "b", 30_000, LONG);
    let mut all = Waiter::start_all(&server, &["a", "b"], 30_000, LONG);
    let mut later_a = Waiter::start(&server, "a", 30_000, LONG);
    let mut later_b = Waiter::start(&server, "b", 30_000, LONG);

    assert_eq!(release(&mut con, "b", &tb), 1);
    let (t_older, f_older) = older.granted().expect("the older waiter has b");
    assert!(all.is_blocked() && later_a.is_blocked() && later_b.is_blocked());

    assert_eq!(release(&mut con, "b", &t_older), 1);
    let (token, fences) = all.granted_all().expect("then the request for both");
    assert!(fences[1] > f_older);
    assert!(later_a.is_blocked() && later_b.is_blocked());

    assert_eq!(release(&mut con, "a", &token), 1);
    let (ta, fa) = later_a.granted().expect("a's next waiter");
    assert!(fa > fences[0]);
    assert_eq!(release(&mut con, "b", &token), 1);
    assert!(later_b.granted().expect("b's next waiter").1 > fences[1]);
    assert_eq!(release(&mut con, "a", &ta), 1);
}

#[test]
fn waiters_for_the_same_keys_in_crossing_orders_are_served_in_arrival_order() {
    let server = TestServer::start();
    let mut con = server.connection();
    let (ta, _) = acquire(&mut con, "a", 30_000, &[]).expect("a");
    let (tb, _) = acquire(&mut con, "b", 30_000, &[]).expect("b");
    let mut first = Waiter::start_all(&server, &["a", "b"], 30_000, LONG);
    let mut second = Waiter::start_all(&server, &["b", "a"], 30_000, LONG);
    assert_eq!(release(&mut con, "b", &tb), 1);
    assert_eq!(release(&mut con, "a", &ta), 1);
    let (t1, f1) = first.granted_all().expect("the first");
    assert!(second.is_blocked());
    assert_eq!(release(&mut con, "a", &t1), 1);
    assert!(second.is_blocked(), "b is still the first's");
    assert_eq!(release(&mut con, "b", &t1), 1);
    let (_, f2) = second.granted_all().expect("the second");
    assert!(f2[0] > f1[1] && f2[1] > f1[0], "{f1:?} then {f2:?}");
}

#[test]
fn a_later_waiter_for_several_keys_never_passes_an_older_one_on_a_free_key_they_share() {
    let server = TestServer::start();
    let mut con = server.connection();
    let (ta, _) = acquire(&mut con, "a", 30_000, &[]).expect("a");
    let (tc, _) = acquire(&mut con, "c", 30_000, &[]).expect("c");
    // b is free: kept for the older request (b, c), which waits for c.
    let mut older = Waiter::start_all(&server, &["b", "c"], 30_000, LONG);
    let mut later = Waiter::start_all(&server, &["a", "b"], 30_000, LONG);
    assert_eq!(release(&mut con, "a", &ta), 1);
    assert!(
        later.is_blocked(),
        "a is free for the later request, b is not its yet"
    );
    assert!(!exists(&mut con, "a") && !exists(&mut con, "b"));

    assert_eq!(release(&mut con, "c", &tc), 1);
    let (t_older, _) = older.granted_all().expect("the older request has b and c");
    assert!(later.is_blocked());
    assert_eq!(release(&mut con, "b", &t_older), 1);
    later.granted_all().expect("then the later one has a and b");
    assert_eq!(lock_waiters(&mut con), 0);
}

/// `leave` ends the wait of a request for a (free, kept for it) and b (held): afterwards
/// every queue is as if it had never come, and a waiter behind it on a is granted a at once.
fn assert_leaving_restores_every_queue(server: &TestServer, leave: impl FnOnce(Waiter)) {
    let mut con = server.connection();
    let (tb, _) = acquire(&mut con, "b", 30_000, &[]).expect("b");
    let all = Waiter::start_all(server, &["a", "b"], 30_000, LONG);
    let mut behind = Waiter::start(server, "a", 30_000, LONG);
    assert_eq!(lock_waiters(&mut con), 2);
    leave(all);
    let (_, fence) = behind.granted().expect("the waiter behind has a");
    assert!(fence > 0);
    assert_eq!(lock_waiters(&mut con), 0);
    assert_eq!(info_field(&mut con, "b", "waiters"), Some(0));
    assert_eq!(release(&mut con, "b", &tb), 1);
}

#[test]
fn a_timeout_leaves_every_queue_as_if_it_had_never_come() {
    let server = TestServer::start();
    let mut con = server.connection();
    let (tb, _) = acquire(&mut con, "b", 30_000, &[]).expect("b");
    let mut all = Waiter::start_all(&server, &["a", "b"], 30_000, &["WAIT", "200"]);
    let mut behind = Waiter::start(&server, "a", 30_000, LONG);
    assert_eq!(all.granted_all(), None, "nil at the timeout");
    behind.granted().expect("then the waiter behind has a");
    assert_eq!(info_field(&mut con, "b", "waiters"), Some(0));
    assert_eq!(lock_waiters(&mut con), 0);
    assert_eq!(release(&mut con, "b", &tb), 1);
}

#[test]
fn a_disconnect_leaves_every_queue_as_if_it_had_never_come() {
    let server = TestServer::start();
    assert_leaving_restores_every_queue(&server, drop);
}

#[test]
fn client_kill_leaves_every_queue_as_if_it_had_never_come() {
    let server = TestServer::start();
    let mut admin = server.connection();
    assert_leaving_restores_every_queue(&server, |waiter| {
        let killed: i64 = redis::cmd("CLIENT")
            .arg(&["KILL", "ID", &waiter.id.to_string()][..])
            .query(&mut admin)
            .unwrap();
        assert_eq!(killed, 1);
    });
}

#[test]
fn client_unblock_ends_the_wait_with_nil_where_the_server_allows_it() {
    if !server_kind().admin_unblock_ends_a_wait() {
        return; // docs/waiting.md: CLIENT UNBLOCK does not end a wait on this server
    }
    let server = TestServer::start();
    let mut admin = server.connection();
    let mut unblocked = None;
    assert_leaving_restores_every_queue(&server, |mut waiter| {
        let done: i64 = redis::cmd("CLIENT")
            .arg(&["UNBLOCK", &waiter.id.to_string()][..])
            .query(&mut admin)
            .unwrap();
        assert_eq!(done, 1);
        unblocked = Some(waiter.granted_all());
    });
    assert_eq!(unblocked, Some(None));
}

/// b is held and a request for a and b waits; `free` frees b some way: the request is
/// granted both keys.
fn assert_granted_when_b_is_freed_by(
    extra: &[&str],
    free: impl FnOnce(&mut redis::Connection, &[u8]),
) {
    let server = TestServer::start();
    let mut con = server.connection();
    let (tb, fb) = acquire(&mut con, "b", 30_000, extra).expect("b");
    let mut waiter = Waiter::start_all(&server, &["a", "b"], 30_000, LONG);
    free(&mut con, &tb);
    let (_, fences) = waiter.granted_all().expect("both keys");
    assert!(fences[1] > fb);
    assert_eq!(info_field(&mut con, "b", "fence"), Some(fences[1]));
}

#[test]
fn a_waiter_is_granted_when_its_last_key_is_deleted_expires_or_is_renamed_away() {
    assert_granted_when_b_is_freed_by(&[], |con, _| {
        let n: i64 = redis::cmd("DEL").arg("b").query(con).unwrap();
        assert_eq!(n, 1);
    });
    assert_granted_when_b_is_freed_by(&[], |con, token| {
        assert_eq!(extend(con, "b", token, 50), 1);
    });
    assert_granted_when_b_is_freed_by(&[], |con, _| {
        redis::cmd("RENAME")
            .arg("b")
            .arg("elsewhere")
            .query::<()>(con)
            .unwrap();
    });
    assert_granted_when_b_is_freed_by(&[], |con, _| {
        redis::cmd("FLUSHALL").query::<()>(con).unwrap();
    });
    assert_granted_when_b_is_freed_by(&["SHARED"], |con, token| {
        assert_eq!(release(con, "b", token), 1);
    });
}

#[test]
fn a_waiter_is_granted_when_a_session_bound_holder_goes() {
    let server = TestServer::start();
    let mut con = server.connection();
    let mut holder = server.connection();
    let (_, fb) = acquire(&mut holder, "b", 30_000, &["SESSION", "0"]).expect("b");
    let mut waiter = Waiter::start_all(&server, &["a", "b"], 30_000, LONG);
    drop(holder);
    let (_, fences) = waiter.granted_all().expect("both keys");
    assert!(fences[1] > fb);
    assert_eq!(lock_waiters(&mut con), 0);
}

#[test]
fn readers_for_several_keys_join_readers_and_wait_for_a_writer() {
    let server = TestServer::start();
    let mut con = server.connection();
    acquire(&mut con, "a", 30_000, &["SHARED"]).expect("a reader of a");
    let (tw, _) = acquire(&mut con, "b", 30_000, &[]).expect("a writer of b");
    let mut reader = Waiter::start_all(&server, &["a", "b"], 30_000, &["SHARED", "WAIT", "20000"]);
    assert_eq!(release(&mut con, "b", &tw), 1);
    let (token, _) = reader.granted_all().expect("a reader of both");
    assert_eq!(info_field(&mut con, "a", "holders"), Some(2));
    assert_eq!(info_field(&mut con, "b", "holders"), Some(1));
    assert_eq!(release(&mut con, "a", &token), 1);
}

#[test]
fn a_watcher_of_a_key_kept_free_sees_the_grant() {
    let server = TestServer::start();
    let mut con = server.connection();
    let (tb, _) = acquire(&mut con, "b", 30_000, &[]).expect("b");
    let mut waiter = Waiter::start_all(&server, &["a", "b"], 30_000, LONG);
    let mut watcher = Waiter::watch(&server, "a", 0, 20_000);
    assert!(watcher.is_blocked(), "a is free: nothing to see yet");
    assert_eq!(release(&mut con, "b", &tb), 1);
    let (_, fences) = waiter.granted_all().expect("both");
    assert_eq!(watcher.seen(), Some((fences[0], None)));
}

#[test]
fn a_server_that_becomes_a_replica_ends_the_wait() {
    let server = TestServer::start();
    let master = TestServer::start();
    let mut con = server.connection();
    acquire(&mut con, "b", 30_000, &[]).expect("b");
    let mut waiter = Waiter::start_all(&server, &["a", "b"], 30_000, LONG);
    redis::cmd("REPLICAOF")
        .arg("127.0.0.1")
        .arg(master.port)
        .query::<()>(&mut con)
        .unwrap();
    let ended = waiter.reply_within(Duration::from_secs(10));
    let err = ended.expect_err("an error ends the wait");
    assert!(format!("{err}").contains("UNBLOCKED"), "{err}");
    poll_until(Duration::from_secs(10), "no waiter left", || {
        lock_waiters(&mut con) == 0
    });
}
