//! Waiters that go away: a client blocked in `LOCK.ACQUIRE ... WAIT` that disconnects,
//! is `CLIENT KILL`ed or `CLIENT UNBLOCK`ed leaves the queue and is never granted a lock
//! it cannot use (such a grant would hold the lock for its whole TTL). Thousands of
//! waiters come and go without leaving memory behind.

mod common;

use std::thread;
use std::time::{Duration, Instant};

use common::*;
use redis::Value;

/// `INFO lock` field `lock_waiters`: clients blocked on any key.
fn blocked(con: &mut redis::Connection) -> i64 {
    info_stat(con, "lock_waiters")
}

/// One integer field of `INFO lock`.
fn info_stat(con: &mut redis::Connection, field: &str) -> i64 {
    let info: String = redis::cmd("INFO")
        .arg("lock")
        .query(con)
        .expect("INFO lock");
    let prefix = format!("{field}:");
    info.lines()
        .find_map(|line| line.strip_prefix(prefix.as_str()))
        .unwrap_or_else(|| panic!("{field} in INFO lock:\n{info}"))
        .trim()
        .parse()
        .expect("an integer")
}

/// `INFO memory` field `used_memory`.
fn used_memory(con: &mut redis::Connection) -> i64 {
    let info: String = redis::cmd("INFO")
        .arg("memory")
        .query(con)
        .expect("INFO memory");
    info.lines()
        .find_map(|line| line.strip_prefix("used_memory:"))
        .expect("used_memory")
        .trim()
        .parse()
        .expect("an integer")
}

/// A client that sent `LOCK.ACQUIRE ... WAIT` and has not read the reply yet.
struct Waiter {
    con: redis::Connection,
    id: i64,
}

impl Waiter {
    /// Connects and sends `LOCK.ACQUIRE key ttl [extra...]` without reading the reply.
    fn send(server: &TestServer, key: &str, ttl_ms: u64, extra: &[&str]) -> Self {
        let mut con = server.connection();
        let id: i64 = redis::cmd("CLIENT").arg("ID").query(&mut con).unwrap();
        let mut command = redis::cmd("LOCK.ACQUIRE");
        command.arg(key).arg(ttl_ms).arg(extra);
        con.send_packed_command(&command.get_packed_command())
            .expect("send LOCK.ACQUIRE");
        Self { con, id }
    }

    /// Sends the command and returns once the server counts the client as blocked.
    fn start(
        server: &TestServer,
        observer: &mut redis::Connection,
        key: &str,
        ttl_ms: u64,
        extra: &[&str],
    ) -> Self {
        let before = blocked(observer);
        let waiter = Self::send(server, key, ttl_ms, extra);
        poll_until(Duration::from_secs(10), "the waiter to block", || {
            blocked(observer) == before + 1
        });
        waiter
    }

    /// The reply to the blocked command (an error if the connection was closed).
    fn reply(&mut self) -> redis::RedisResult<Value> {
        self.reply_within(Duration::from_secs(10))
    }

    /// The reply, or an error if none comes within `limit`.
    fn reply_within(&mut self, limit: Duration) -> redis::RedisResult<Value> {
        self.con.set_read_timeout(Some(limit))?;
        self.con.recv_response().and_then(Value::extract_error)
    }

    /// The reply, expected to be `[token, fence]` or nil.
    fn granted(&mut self) -> Option<(Vec<u8>, i64)> {
        let reply = self.reply().expect("a reply");
        redis::from_redis_value(reply).expect("[token, fence] or nil")
    }
}

fn exists(con: &mut redis::Connection, key: &str) -> bool {
    redis::cmd("EXISTS")
        .arg(key)
        .query::<i64>(con)
        .expect("EXISTS")
        == 1
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

/// After the waiters left and the holder released, nobody holds the lock: the key is
/// gone and a newcomer is granted it at once.
fn assert_free_for_a_newcomer(con: &mut redis::Connection, key: &str) {
    assert!(!exists(con, key), "no grant to a client that left");
    assert_eq!(info(con, key), None);
    assert!(
        acquire(con, key, 1_000, &[]).is_some(),
        "a newcomer gets it"
    );
}

#[test]
fn a_waiter_that_disconnects_leaves_the_queue_and_is_never_granted_the_lock() {
    let server = TestServer::start();
    let mut con = server.connection();
    let (holder, _) = acquire(&mut con, "job", 30_000, &[]).expect("granted");
    let waiter = Waiter::start(&server, &mut con, "job", 30_000, &["WAIT", "0"]);
    assert_eq!(info_field(&mut con, "job", "waiters"), Some(1));

    drop(waiter);
    poll_until(Duration::from_secs(10), "the waiter to leave", || {
        blocked(&mut con) == 0
    });

    assert_eq!(info_field(&mut con, "job", "waiters"), Some(0));
    assert_eq!(release(&mut con, "job", &holder), 1);
    assert_free_for_a_newcomer(&mut con, "job");
}

#[test]
fn the_waiter_behind_one_that_disconnected_is_granted_the_lock() {
    let server = TestServer::start();
    let mut con = server.connection();
    let (holder, _) = acquire(&mut con, "job", 30_000, &[]).expect("granted");
    let gone = Waiter::start(
        &server,
        &mut con,
        "job",
        30_000,
        &["WAIT", "0", "TOKEN", "a"],
    );
    let mut next = Waiter::start(
        &server,
        &mut con,
        "job",
        30_000,
        &["WAIT", "0", "TOKEN", "b"],
    );

    drop(gone);
    poll_until(Duration::from_secs(10), "the first waiter to leave", || {
        blocked(&mut con) == 1
    });
    assert_eq!(release(&mut con, "job", &holder), 1);

    let (token, _) = next.granted().expect("the live waiter is granted the lock");
    assert_eq!(token, b"b");
    assert_eq!(release(&mut con, "job", b"a"), 0);
    assert_eq!(release(&mut con, "job", b"b"), 1);
}

#[test]
fn a_waiter_killed_with_client_kill_leaves_the_queue_and_is_never_granted_the_lock() {
    let server = TestServer::start();
    let mut con = server.connection();
    let (holder, _) = acquire(&mut con, "job", 30_000, &[]).expect("granted");
    let mut waiter = Waiter::start(&server, &mut con, "job", 30_000, &["WAIT", "0"]);

    client_kill(&mut con, waiter.id);

    assert!(
        waiter.reply().is_err(),
        "the killed client's connection is closed"
    );
    assert_eq!(blocked(&mut con), 0);
    assert_eq!(info_field(&mut con, "job", "waiters"), Some(0));
    assert_eq!(release(&mut con, "job", &holder), 1);
    assert_free_for_a_newcomer(&mut con, "job");
}

#[test]
fn a_killed_waiter_at_the_head_of_the_queue_is_skipped_for_the_next_waiter() {
    let server = TestServer::start();
    let mut con = server.connection();
    let (holder, _) = acquire(&mut con, "job", 30_000, &[]).expect("granted");
    let head = Waiter::start(
        &server,
        &mut con,
        "job",
        30_000,
        &["WAIT", "0", "TOKEN", "a"],
    );
    let mut next = Waiter::start(
        &server,
        &mut con,
        "job",
        30_000,
        &["WAIT", "0", "TOKEN", "b"],
    );

    client_kill(&mut con, head.id);
    assert_eq!(info_field(&mut con, "job", "waiters"), Some(1));
    assert_eq!(release(&mut con, "job", &holder), 1);

    let (token, _) = next.granted().expect("the next waiter is granted the lock");
    assert_eq!(token, b"b");
    assert_eq!(release(&mut con, "job", b"a"), 0);
    assert_eq!(release(&mut con, "job", b"b"), 1);
}

#[test]
fn a_waiter_killed_right_after_its_grant_holds_the_lock_like_any_holder_that_dies() {
    let server = TestServer::start();
    let mut con = server.connection();
    let (holder, _) = acquire(&mut con, "job", 30_000, &[]).expect("granted");
    let mut head = Waiter::start(
        &server,
        &mut con,
        "job",
        30_000,
        &["WAIT", "0", "TOKEN", "a"],
    );
    let mut next = Waiter::start(
        &server,
        &mut con,
        "job",
        30_000,
        &["WAIT", "0", "TOKEN", "b"],
    );

    // One read: the release grants the lock to the head inside the release itself,
    // while the head is connected; the kill comes after, as any holder may die.
    let (released, killed): (i64, i64) = redis::pipe()
        .cmd("LOCK.RELEASE")
        .arg("job")
        .arg(&holder)
        .cmd("CLIENT")
        .arg("KILL")
        .arg("ID")
        .arg(head.id)
        .query(&mut con)
        .unwrap();
    assert_eq!((released, killed), (1, 1));

    assert_eq!(info_field(&mut con, "job", "waiters"), Some(1));
    assert_eq!(
        blocked(&mut con),
        1,
        "the next waiter waits for the head's lock"
    );
    let _ = head.reply();
    assert_eq!(release(&mut con, "job", b"a"), 1, "the head held it");
    let (token, _) = next.granted().expect("then the next waiter gets it");
    assert_eq!(token, b"b");
    assert_eq!(release(&mut con, "job", b"b"), 1);
    assert_eq!(blocked(&mut con), 0);
}

#[test]
fn a_waiter_unblocked_with_client_unblock_answers_nil_and_leaves_the_queue() {
    let server = TestServer::start();
    let mut con = server.connection();
    let (holder, _) = acquire(&mut con, "job", 30_000, &[]).expect("granted");
    let mut waiter = Waiter::start(&server, &mut con, "job", 30_000, &["WAIT", "0"]);

    let unblocked: i64 = redis::cmd("CLIENT")
        .arg("UNBLOCK")
        .arg(waiter.id)
        .query(&mut con)
        .unwrap();

    assert_eq!(unblocked, 1);
    assert_eq!(waiter.granted(), None);
    assert_eq!(blocked(&mut con), 0);
    assert_eq!(info_field(&mut con, "job", "waiters"), Some(0));
    let pong: String = redis::cmd("PING").query(&mut waiter.con).unwrap();
    assert_eq!(pong, "PONG", "the unblocked client goes on");
    assert_eq!(release(&mut con, "job", &holder), 1);
    assert_free_for_a_newcomer(&mut con, "job");
}

#[test]
fn a_waiter_unblocked_with_client_unblock_error_gets_an_error_and_leaves_the_queue() {
    let server = TestServer::start();
    let mut con = server.connection();
    let (holder, _) = acquire(&mut con, "job", 30_000, &[]).expect("granted");
    let mut waiter = Waiter::start(&server, &mut con, "job", 30_000, &["WAIT", "0"]);

    let unblocked: i64 = redis::cmd("CLIENT")
        .arg("UNBLOCK")
        .arg(waiter.id)
        .arg("ERROR")
        .query(&mut con)
        .unwrap();

    assert_eq!(unblocked, 1);
    let err = error_of(waiter.reply());
    assert!(err.starts_with("UNBLOCKED"), "{err}");
    assert_eq!(blocked(&mut con), 0);
    assert_eq!(info_field(&mut con, "job", "waiters"), Some(0));
    assert_eq!(release(&mut con, "job", &holder), 1);
    assert_free_for_a_newcomer(&mut con, "job");
}

#[test]
fn a_waiter_unblocked_right_after_its_grant_keeps_it_and_gets_exactly_one_reply() {
    let server = TestServer::start();
    let mut con = server.connection();
    let (holder, _) = acquire(&mut con, "job", 30_000, &[]).expect("granted");
    let mut head = Waiter::start(
        &server,
        &mut con,
        "job",
        30_000,
        &["WAIT", "0", "TOKEN", "a"],
    );
    let mut next = Waiter::start(
        &server,
        &mut con,
        "job",
        30_000,
        &["WAIT", "0", "TOKEN", "b"],
    );

    // One read: the release grants the lock to the head at once, so the unblock that
    // follows finds nobody blocked to unblock.
    let (released, unblocked): (i64, i64) = redis::pipe()
        .cmd("LOCK.RELEASE")
        .arg("job")
        .arg(&holder)
        .cmd("CLIENT")
        .arg("UNBLOCK")
        .arg(head.id)
        .query(&mut con)
        .unwrap();
    assert_eq!((released, unblocked), (1, 0));

    let reply = head
        .reply_within(Duration::from_secs(3))
        .expect("the head gets its grant");
    let granted: Option<(Vec<u8>, i64)> = redis::from_redis_value(reply).expect("[token, fence]");
    assert_eq!(granted.map(|g| g.0), Some(b"a".to_vec()));
    let pong: String = redis::cmd("PING").query(&mut head.con).unwrap();
    assert_eq!(
        pong, "PONG",
        "exactly one reply: the next one answers the PING"
    );
    assert_eq!(info_field(&mut con, "job", "waiters"), Some(1));
    assert_eq!(release(&mut con, "job", b"a"), 1);
    assert_eq!(next.granted().map(|g| g.0), Some(b"b".to_vec()));
    assert_eq!(release(&mut con, "job", b"b"), 1);
    assert_eq!(blocked(&mut con), 0);
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
        blocked(observer) == count as i64
    });
    waiters
}

/// Most that may stay allocated once every waiter is gone.
const SLACK: i64 = 1 << 20;
/// Most that a second round of waiters may add to the first: anything per waiter
/// that is never freed shows here (2,000 waiters leaking 32 bytes each is 64 KB).
const GROWTH: i64 = 64 << 10;

/// `used_memory` once every client but `con` is gone and memory has come back within
/// `SLACK` of `baseline` (or, if it does not, after 10 s).
fn settled_memory(con: &mut redis::Connection, baseline: i64) -> i64 {
    poll_until(
        Duration::from_secs(30),
        "the other clients to be freed",
        || {
            let list: String = redis::cmd("CLIENT").arg("LIST").query(con).unwrap();
            list.lines().count() == 1
        },
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let used = used_memory(con);
        if used <= baseline + SLACK || Instant::now() > deadline {
            return used;
        }
        thread::sleep(Duration::from_millis(20));
    }
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
    let baseline = used_memory(&mut con);
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
            blocked(&mut con) == 0
        });
        assert_eq!(info_field(&mut con, "job", "waiters"), Some(0));
        assert_eq!(release(&mut con, "job", &token), 1);
        after_round.push(settled_memory(&mut con, baseline));
    }
    assert_nothing_stays_behind(baseline, &after_round);
}

#[test]
fn two_thousand_keys_with_a_waiter_each_come_and_go_without_leaving_memory_behind() {
    const KEYS: usize = 2_000;
    let server = TestServer::start();
    let mut con = server.connection();
    let baseline = used_memory(&mut con);
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
        assert_eq!(blocked(&mut con), 0);
        drop(waiters);
        let _: () = redis::cmd("FLUSHALL").query(&mut con).unwrap();
        after_round.push(settled_memory(&mut con, baseline));
    }
    assert_nothing_stays_behind(baseline, &after_round);
}
