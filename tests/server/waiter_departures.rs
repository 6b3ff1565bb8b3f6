//! Waiters that go away: a client blocked in `LOCK.ACQUIRE ... WAIT` that disconnects,
//! is `CLIENT KILL`ed or `CLIENT UNBLOCK`ed leaves the queue and is never granted a lock
//! it cannot use (such a grant would hold the lock for its whole TTL). Thousands of
//! waiters come and go without leaving memory behind.

use std::time::{Duration, Instant};

use crate::common::*;

/// `INFO memory` field `used_memory`.
fn used_memory(con: &mut redis::Connection) -> i64 {
    info_int(&server_info(con, "memory"), "used_memory")
}

fn client_kill(con: &mut redis::Connection, id: i64) {
    let killed: i64 = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("ID")
        .arg(id)
        .query(con)
        .expect("CLIENT KILL");
    assert_eq!(killed, 1, "client {id} killed");
}

/// `job` held by a holder, with waiters of tokens `a` (the head) and `b` (next) queued
/// behind it (`WAIT 0`): the holder's token and the two waiters.
fn held_with_two_waiters(
    server: &TestServer,
    con: &mut redis::Connection,
) -> (Vec<u8>, Waiter, Waiter) {
    let (holder, _, head) =
        held_with_a_waiter(server, con, "job", 30_000, &["WAIT", "0", "TOKEN", "a"]);
    let next = Waiter::start(server, "job", 30_000, &["WAIT", "0", "TOKEN", "b"]);
    (holder, head, next)
}

/// After the only waiter left: nobody is blocked or queued on `job`; once the holder
/// releases, nobody holds it (no grant went to the client that left) and a newcomer is
/// granted it at once.
fn assert_the_waiter_left_and_the_lock_is_free_after_the_release(
    con: &mut redis::Connection,
    holder: &[u8],
) {
    assert_eq!(lock_waiters(con), 0);
    assert_eq!(info_field(con, "job", "waiters"), Some(0));
    assert_eq!(release(con, "job", holder), 1);
    assert!(!exists(con, "job"), "no grant to a client that left");
    assert_eq!(info(con, "job"), None);
    assert!(
        acquire(con, "job", 1_000, &[]).is_some(),
        "a newcomer gets it"
    );
}

/// After the head waiter `a` left and the holder released: the next waiter `b` is
/// granted `job`, and `a` holds nothing.
fn assert_the_next_waiter_holds_it(con: &mut redis::Connection, next: &mut Waiter) {
    let (token, _) = next.granted().expect("the next waiter is granted the lock");
    assert_eq!(token, b"b");
    assert_eq!(release(con, "job", b"a"), 0);
    assert_eq!(release(con, "job", b"b"), 1);
}

/// `LOCK.RELEASE job holder`, then `CLIENT client_args... id` in the same read, so that
/// the second command runs right after the release: both replies.
fn release_then_in_the_same_read(
    con: &mut redis::Connection,
    holder: &[u8],
    client_args: &[&str],
    id: i64,
) -> (i64, i64) {
    redis::pipe()
        .cmd("LOCK.RELEASE")
        .arg("job")
        .arg(holder)
        .cmd("CLIENT")
        .arg(client_args)
        .arg(id)
        .query(con)
        .unwrap()
}

/// `CLIENT UNBLOCK id [extra...]`: 1 if the client was blocked and is now unblocked.
fn client_unblock(con: &mut redis::Connection, id: i64, extra: &[&str]) -> i64 {
    redis::cmd("CLIENT")
        .arg("UNBLOCK")
        .arg(id)
        .arg(extra)
        .query(con)
        .expect("CLIENT UNBLOCK")
}

#[test]
fn a_waiter_that_disconnects_leaves_the_queue_and_is_never_granted_the_lock() {
    let server = TestServer::start();
    let mut con = server.connection();
    let (holder, _, waiter) = held_with_a_waiter(&server, &mut con, "job", 30_000, &["WAIT", "0"]);
    assert_eq!(info_field(&mut con, "job", "waiters"), Some(1));

    drop(waiter);
    poll_until(Duration::from_secs(10), "the waiter to leave", || {
        lock_waiters(&mut con) == 0
    });

    assert_the_waiter_left_and_the_lock_is_free_after_the_release(&mut con, &holder);
}

#[test]
fn the_waiter_behind_one_that_disconnected_is_granted_the_lock() {
    let server = TestServer::start();
    let mut con = server.connection();
    let (holder, gone, mut next) = held_with_two_waiters(&server, &mut con);

    drop(gone);
    poll_until(Duration::from_secs(10), "the first waiter to leave", || {
        lock_waiters(&mut con) == 1
    });
    assert_eq!(release(&mut con, "job", &holder), 1);

    assert_the_next_waiter_holds_it(&mut con, &mut next);
}

#[test]
fn a_waiter_killed_with_client_kill_leaves_the_queue_and_is_never_granted_the_lock() {
    let server = TestServer::start();
    let mut con = server.connection();
    let (holder, _, mut waiter) =
        held_with_a_waiter(&server, &mut con, "job", 30_000, &["WAIT", "0"]);

    client_kill(&mut con, waiter.id);

    assert!(
        waiter.reply().is_err(),
        "the killed client's connection is closed"
    );
    assert_the_waiter_left_and_the_lock_is_free_after_the_release(&mut con, &holder);
}

#[test]
fn a_killed_waiter_at_the_head_of_the_queue_is_skipped_for_the_next_waiter() {
    let server = TestServer::start();
    let mut con = server.connection();
    let (holder, head, mut next) = held_with_two_waiters(&server, &mut con);

    client_kill(&mut con, head.id);
    assert_eq!(info_field(&mut con, "job", "waiters"), Some(1));
    assert_eq!(release(&mut con, "job", &holder), 1);

    assert_the_next_waiter_holds_it(&mut con, &mut next);
}

#[test]
fn a_waiter_killed_right_after_its_grant_holds_the_lock_like_any_holder_that_dies() {
    let server = TestServer::start();
    let mut con = server.connection();
    let (holder, mut head, mut next) = held_with_two_waiters(&server, &mut con);

    // One read: the release grants the lock to the head inside the release itself,
    // while the head is connected; the kill comes after, as any holder may die.
    let (released, killed) =
        release_then_in_the_same_read(&mut con, &holder, &["KILL", "ID"], head.id);
    assert_eq!((released, killed), (1, 1));

    assert_eq!(info_field(&mut con, "job", "waiters"), Some(1));
    assert_eq!(
        lock_waiters(&mut con),
        1,
        "the next waiter waits for the head's lock"
    );
    let _ = head.reply();
    assert_eq!(release(&mut con, "job", b"a"), 1, "the head held it");
    let (token, _) = next.granted().expect("then the next waiter gets it");
    assert_eq!(token, b"b");
    assert_eq!(release(&mut con, "job", b"b"), 1);
    assert_eq!(lock_waiters(&mut con), 0);
}

/// Where the server cannot be trusted with it (Redis 7.0 and 7.2, Valkey 7.2: see the
/// docs/servers.md), `CLIENT UNBLOCK` finds no wait it may end: it answers 0,
/// the waiter keeps its place and is granted the lock in its turn.
fn assert_client_unblock_leaves_the_wait_alone(extra: &[&str]) {
    let server = TestServer::start();
    let mut con = server.connection();
    let (holder, mut head, mut next) = held_with_two_waiters(&server, &mut con);

    assert_eq!(client_unblock(&mut con, head.id, extra), 0);

    assert!(head.is_blocked(), "the waiter keeps waiting");
    assert_eq!(info_field(&mut con, "job", "waiters"), Some(2));
    assert_eq!(release(&mut con, "job", &holder), 1);
    assert_eq!(head.granted_token(), b"a");
    assert_eq!(release(&mut con, "job", b"a"), 1);
    assert_eq!(next.granted_token(), b"b");
}

#[test]
fn a_waiter_unblocked_with_client_unblock_answers_nil_and_leaves_the_queue() {
    if !server_kind().admin_unblock_ends_a_wait() {
        return assert_client_unblock_leaves_the_wait_alone(&[]);
    }
    let server = TestServer::start();
    let mut con = server.connection();
    let (holder, _, mut waiter) =
        held_with_a_waiter(&server, &mut con, "job", 30_000, &["WAIT", "0"]);

    assert_eq!(client_unblock(&mut con, waiter.id, &[]), 1);

    assert_eq!(waiter.granted(), None);
    assert_eq!(waiter.ping(), "PONG", "the unblocked client goes on");
    assert_the_waiter_left_and_the_lock_is_free_after_the_release(&mut con, &holder);
}

#[test]
fn a_waiter_unblocked_with_client_unblock_error_gets_an_error_and_leaves_the_queue() {
    if !server_kind().admin_unblock_ends_a_wait() {
        return assert_client_unblock_leaves_the_wait_alone(&["ERROR"]);
    }
    let server = TestServer::start();
    let mut con = server.connection();
    let (holder, _, mut waiter) =
        held_with_a_waiter(&server, &mut con, "job", 30_000, &["WAIT", "0"]);

    assert_eq!(client_unblock(&mut con, waiter.id, &["ERROR"]), 1);

    let err = error_of(waiter.reply());
    assert!(err.starts_with("UNBLOCKED"), "{err}");
    assert_the_waiter_left_and_the_lock_is_free_after_the_release(&mut con, &holder);
}

#[test]
fn a_waiter_unblocked_right_after_its_grant_keeps_it_and_gets_exactly_one_reply() {
    let server = TestServer::start();
    let mut con = server.connection();
    let (holder, mut head, mut next) = held_with_two_waiters(&server, &mut con);

    // One read: the release writes the lock for the head at once, so the unblock that
    // follows cannot take it back. (Its own answer is the server's: Redis 7.4+ and
    // Valkey 8+ answer 1 and leave the already answered client alone; older servers
    // answer 0, as the module lets no CLIENT UNBLOCK reach a wait there.)
    let (released, unblocked) =
        release_then_in_the_same_read(&mut con, &holder, &["UNBLOCK"], head.id);
    assert_eq!(released, 1);
    let expected = i64::from(server_kind().admin_unblock_ends_a_wait());
    assert_eq!(
        unblocked,
        expected,
        "CLIENT UNBLOCK's answer on {}",
        server_kind()
    );

    let reply = head
        .reply_within(Duration::from_secs(3))
        .expect("the head gets its grant");
    let granted: Option<(Vec<u8>, i64)> = redis::from_redis_value(reply).expect("[token, fence]");
    assert_eq!(granted.map(|g| g.0), Some(b"a".to_vec()));
    assert_eq!(
        head.ping(),
        "PONG",
        "exactly one reply: the next one answers the PING"
    );
    assert_eq!(info_field(&mut con, "job", "waiters"), Some(1));
    assert_eq!(release(&mut con, "job", b"a"), 1);
    assert_eq!(next.granted().map(|g| g.0), Some(b"b".to_vec()));
    assert_eq!(release(&mut con, "job", b"b"), 1);
    assert_eq!(lock_waiters(&mut con), 0);
}

/// Opens `count` connections that each send `LOCK.ACQUIRE key-of(i) ... WAIT 0` and
/// returns once all of them are blocked.
fn many_waiters(
    server: &TestServer,
    observer: &mut redis::Connection,
    count: usize,
    key_of: impl Fn(usize) -> String,
) -> Vec<Waiter> {
    let waiters: Vec<Waiter> = (0..count)
        .map(|i| Waiter::send(server, &key_of(i), 30_000, &["WAIT", "0"]))
        .collect();
    poll_until(Duration::from_secs(60), "every waiter to block", || {
        lock_waiters(observer) == count as i64
    });
    waiters
}

/// Most that may stay allocated once every waiter is gone.
const SLACK: i64 = 1 << 20;
/// Most that a second round of waiters may add to the first: anything per waiter
/// that is never freed shows here (2,000 waiters leaking 32 bytes each is 64 KB).
const GROWTH: i64 = 64 << 10;

/// `used_memory` once every client but `con` is gone and the figure has stopped
/// moving. A module-blocked client borrows two temporary clients from the server's
/// pool; once it is gone they go back to the pool, which the server's cron (10 times
/// a second at the default `hz`) shrinks by at most 50 clients a tick. So memory comes
/// back over a few seconds, and is settled only once no cron tick has changed it.
fn settled_memory(con: &mut redis::Connection) -> i64 {
    poll_until(
        Duration::from_secs(30),
        "the other clients to be freed",
        || {
            let list: String = redis::cmd("CLIENT").arg("LIST").query(con).unwrap();
            list.lines().count() == 1
        },
    );
    const STEADY_FOR: Duration = Duration::from_millis(500);
    let mut last = used_memory(con);
    let mut since = Instant::now();
    poll_until(Duration::from_secs(60), "used_memory to settle", || {
        let used = used_memory(con);
        if used != last {
            (last, since) = (used, Instant::now());
        }
        since.elapsed() >= STEADY_FOR
    });
    last
}

/// Two rounds of waiters left `after_round` bytes in use, starting from `baseline`.
fn assert_nothing_stays_behind(baseline: i64, after_round: &[i64]) {
    let above: Vec<i64> = after_round.iter().map(|used| used - baseline).collect();
    assert!(
        above[1] - above[0] < GROWTH,
        "memory grows with every round of waiters: {above:?} bytes above the start"
    );
    assert!(
        above.iter().all(|&extra| extra <= SLACK),
        "memory does not return to its starting level: {above:?} bytes above the start"
    );
}

#[test]
fn two_thousand_waiters_on_one_key_come_and_go_without_leaving_memory_behind() {
    const WAITERS: usize = 2_000;
    let server = TestServer::start();
    let mut con = server.connection();
    let baseline = settled_memory(&mut con);
    // Twice: the first round also grows the server's tables to size, the second
    // proves that nothing accumulates per waiter.
    let mut after_round = Vec::new();
    for _ in 0..2 {
        let (holder, _) = acquire(&mut con, "job", 30_000, &[]).expect("granted");
        let mut waiters = many_waiters(&server, &mut con, WAITERS, |_| "job".to_string());
        assert_eq!(info_field(&mut con, "job", "waiters"), Some(WAITERS as i64));

        // The release hands the lock to the first waiter; every other one disconnects.
        assert_eq!(release(&mut con, "job", &holder), 1);
        let (token, _) = waiters[0].granted().expect("the head is granted the lock");
        drop(waiters);
        poll_until(Duration::from_secs(30), "every waiter to leave", || {
            lock_waiters(&mut con) == 0
        });
        assert_eq!(info_field(&mut con, "job", "waiters"), Some(0));
        assert_eq!(release(&mut con, "job", &token), 1);
        after_round.push(settled_memory(&mut con));
    }
    assert_nothing_stays_behind(baseline, &after_round);
}

#[test]
fn two_thousand_keys_with_a_waiter_each_come_and_go_without_leaving_memory_behind() {
    const KEYS: usize = 2_000;
    let server = TestServer::start();
    let mut con = server.connection();
    let baseline = settled_memory(&mut con);
    let key_of = |i: usize| format!("job:{i}");
    let mut after_round = Vec::new();
    for _ in 0..2 {
        let holders: Vec<Vec<u8>> = (0..KEYS)
            .map(|i| {
                acquire(&mut con, &key_of(i), 30_000, &[])
                    .expect("granted")
                    .0
            })
            .collect();
        let mut waiters = many_waiters(&server, &mut con, KEYS, key_of);

        // Every lock is released at once; each waiter is granted its own key.
        let mut releases = redis::pipe();
        for (i, token) in holders.iter().enumerate() {
            releases.cmd("LOCK.RELEASE").arg(key_of(i)).arg(token);
        }
        let released: Vec<i64> = releases.query(&mut con).unwrap();
        assert!(released.iter().all(|&r| r == 1));
        for waiter in &mut waiters {
            assert!(waiter.granted().is_some(), "each waiter gets its key");
        }
        assert_eq!(lock_waiters(&mut con), 0);
        drop(waiters);
        let _: () = redis::cmd("FLUSHALL").query(&mut con).unwrap();
        after_round.push(settled_memory(&mut con));
    }
    assert_nothing_stays_behind(baseline, &after_round);
}
