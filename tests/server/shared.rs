//! Shared holders and semaphores (docs/shared.md, and
//! docs/commands.md on `SHARED` and `LIMIT n`) on one real server: readers coexist and exclude writers, a semaphore never
//! has more than `n` holders, first come first served across both kinds with readers
//! granted in batches, per-holder tokens, fences, expiry, `EXTEND`, `RELEASE`, re-acquire
//! and `SESSION`, `LOCK.INFO`'s `mode`, `holders` and `limit`, the counters and
//! notifications per holder, and bad input refused with nothing changed.

use std::time::{Duration, Instant};

use crate::common::*;

const READ: &[&str] = &["SHARED"];

fn shared_as(con: &mut redis::Connection, key: &str, ttl_ms: u64, token: &str) -> Option<i64> {
    acquire(con, key, ttl_ms, &["SHARED", "TOKEN", token]).map(|(t, fence)| {
        assert_eq!(t, token.as_bytes());
        fence
    })
}

fn limited_as(con: &mut redis::Connection, key: &str, limit: u32, token: &str) -> Option<i64> {
    let limit = limit.to_string();
    acquire(con, key, 60_000, &["LIMIT", &limit, "TOKEN", token]).map(|(_, fence)| fence)
}

fn holders(con: &mut redis::Connection, key: &str) -> Option<i64> {
    info_field(con, key, "holders")
}

#[test]
fn readers_coexist_each_with_its_own_token_and_a_larger_fence() {
    let server = TestServer::start();
    let mut con = server.connection();
    let a = shared_as(&mut con, "rw", 60_000, "a").expect("the first reader");
    let b = shared_as(&mut con, "rw", 30_000, "b").expect("a second reader");
    let (token, c) = acquire(&mut con, "rw", 10_000, READ).expect("a third, server token");
    assert_eq!(token.len(), 32, "a server-made token");
    assert!(a < b && b < c, "fences grow across holders: {a} {b} {c}");
    assert_eq!(info_word(&mut con, "rw", "mode").as_deref(), Some("shared"));
    assert_eq!(holders(&mut con, "rw"), Some(3));
    assert_eq!(info_field(&mut con, "rw", "limit"), Some(-1));
    assert_eq!(info_field(&mut con, "rw", "fence"), Some(c), "the newest");
    let ttl = info_field(&mut con, "rw", "ttl").unwrap();
    assert!(
        ttl > 30_000 && ttl <= 60_000,
        "the longest-lived holder's: {ttl}"
    );
    assert!(pttl(&mut con, "rw") > 30_000, "the key's own expiry too");
    // Each release takes out its own holder only.
    assert_eq!(release(&mut con, "rw", b"a"), 1);
    assert_eq!(release(&mut con, "rw", b"a"), 0);
    assert_eq!(holders(&mut con, "rw"), Some(2));
    let ttl = pttl(&mut con, "rw");
    assert!(
        ttl <= 30_000,
        "the key's expiry follows the holders left: {ttl}"
    );
    assert_eq!(release(&mut con, "rw", b"b"), 1);
    assert_eq!(release(&mut con, "rw", &token), 1);
    assert!(!exists(&mut con, "rw"), "the key goes with its last holder");
    let exclusive = acquire(&mut con, "ex", 1_000, &[]).unwrap().1;
    assert_eq!(
        info_word(&mut con, "ex", "mode").as_deref(),
        Some("exclusive")
    );
    assert_eq!(holders(&mut con, "ex"), Some(1));
    assert_eq!(info_field(&mut con, "ex", "limit"), Some(-1));
    assert!(exclusive > c);
}

#[test]
fn acquired_is_the_oldest_holders_grant_and_a_reacquire_keeps_fence_and_grant() {
    let server = TestServer::start();
    let mut con = server.connection();
    let a = shared_as(&mut con, "rw", 1_000, "a").unwrap();
    let first = info_field(&mut con, "rw", "acquired").unwrap();
    std::thread::sleep(Duration::from_millis(5));
    shared_as(&mut con, "rw", 1_000, "b").unwrap();
    assert_eq!(info_field(&mut con, "rw", "acquired"), Some(first));
    // The idempotent re-acquire: same fence, its own TTL reset.
    assert_eq!(shared_as(&mut con, "rw", 60_000, "a"), Some(a));
    assert_eq!(holders(&mut con, "rw"), Some(2));
    assert!(pttl(&mut con, "rw") > 30_000, "a's new TTL is the longest");
    assert_eq!(info_field(&mut con, "rw", "acquired"), Some(first));
    // EXTEND acts on that holder only.
    assert_eq!(extend(&mut con, "rw", b"b", 120_000), 1);
    assert!(pttl(&mut con, "rw") > 60_000);
    assert_eq!(extend(&mut con, "rw", b"nobody", 120_000), 0);
    assert_eq!(release(&mut con, "rw", b"b"), 1);
    let ttl = pttl(&mut con, "rw");
    assert!(ttl <= 60_000 && ttl > 30_000, "back to a's: {ttl}");
}

#[test]
fn a_writer_excludes_readers_and_readers_exclude_a_writer() {
    let server = TestServer::start();
    let mut con = server.connection();
    let (writer, _) = acquire(&mut con, "rw", 60_000, &[]).unwrap();
    assert_eq!(
        acquire(&mut con, "rw", 1_000, READ),
        None,
        "no reader beside a writer"
    );
    assert_eq!(release(&mut con, "rw", &writer), 1);
    shared_as(&mut con, "rw", 60_000, "r").unwrap();
    assert_eq!(
        acquire(&mut con, "rw", 1_000, &[]),
        None,
        "no writer beside a reader"
    );
    assert_eq!(holders(&mut con, "rw"), Some(1));
    assert_eq!(lock_stat(&mut con, "lock_contended"), 2);
}

#[test]
fn a_waiting_writer_is_granted_when_the_last_reader_leaves_and_later_readers_queue_behind_it() {
    let server = TestServer::start();
    let mut con = server.connection();
    shared_as(&mut con, "rw", 60_000, "r1").unwrap();
    shared_as(&mut con, "rw", 60_000, "r2").unwrap();
    let mut writer = Waiter::start(&server, "rw", 60_000, &["TOKEN", "w", "WAIT", "0"]);
    // A reader that comes after the writer waits, though readers hold the key.
    assert_eq!(
        acquire(&mut con, "rw", 1_000, READ),
        None,
        "no passing the writer"
    );
    let mut late_reader = Waiter::start(&server, "rw", 60_000, &["SHARED", "WAIT", "0"]);
    assert_eq!(release(&mut con, "rw", b"r1"), 1);
    assert!(writer.is_blocked(), "one reader is still in");
    assert_eq!(release(&mut con, "rw", b"r2"), 1);
    let (token, fence) = writer
        .granted()
        .expect("the writer, when the last reader left");
    assert_eq!(token, b"w");
    assert_eq!(
        info_word(&mut con, "rw", "mode").as_deref(),
        Some("exclusive")
    );
    assert!(
        late_reader.is_blocked(),
        "the late reader waits for the writer"
    );
    assert_eq!(release(&mut con, "rw", b"w"), 1);
    let (_, reader_fence) = late_reader.granted().expect("then the reader");
    assert!(reader_fence > fence);
}

#[test]
fn one_release_grants_the_whole_batch_of_readers_at_the_head_up_to_the_next_writer() {
    let server = TestServer::start();
    let mut con = server.connection();
    let (writer, _) = acquire(&mut con, "rw", 60_000, &[]).unwrap();
    let mut readers: Vec<Waiter> = (0..3)
        .map(|_| Waiter::start(&server, "rw", 60_000, &["SHARED", "WAIT", "0"]))
        .collect();
    let second_writer = Waiter::start(&server, "rw", 60_000, &["TOKEN", "w2", "WAIT", "0"]);
    let last_reader = Waiter::start(&server, "rw", 60_000, &["SHARED", "WAIT", "0"]);
    assert_eq!(release(&mut con, "rw", &writer), 1);
    let mut fences = Vec::new();
    for reader in &mut readers {
        let (_, fence) = reader.granted().expect("every reader of the batch");
        fences.push(fence);
    }
    assert!(
        fences.windows(2).all(|w| w[0] < w[1]),
        "in queue order: {fences:?}"
    );
    assert_eq!(holders(&mut con, "rw"), Some(3));
    assert!(second_writer.is_blocked() && last_reader.is_blocked());
    assert_eq!(info_field(&mut con, "rw", "waiters"), Some(2));
    assert_eq!(
        lock_stat(&mut con, "lock_grants"),
        4,
        "each holder's grant counts"
    );
}

#[test]
fn a_semaphore_never_has_more_than_its_limit_and_a_freed_place_goes_to_the_next() {
    let server = TestServer::start();
    let mut con = server.connection();
    for token in ["a", "b"] {
        limited_as(&mut con, "sem", 2, token).expect("within the limit");
    }
    assert_eq!(limited_as(&mut con, "sem", 2, "c"), None, "full");
    assert_eq!(info_field(&mut con, "sem", "limit"), Some(2));
    let mut waiter = Waiter::start(
        &server,
        "sem",
        60_000,
        &["LIMIT", "2", "TOKEN", "c", "WAIT", "0"],
    );
    assert_eq!(release(&mut con, "sem", b"a"), 1);
    let (token, _) = waiter.granted().expect("the freed place");
    assert_eq!(token, b"c");
    assert_eq!(holders(&mut con, "sem"), Some(2));
    // LIMIT 1 is a mutex in semaphore form; `SHARED LIMIT n` is the same as `LIMIT n`.
    limited_as(&mut con, "one", 1, "x").unwrap();
    assert_eq!(
        acquire(&mut con, "one", 1_000, &["SHARED", "LIMIT", "1"]),
        None
    );
}

#[test]
fn a_limit_that_disagrees_an_upgrade_and_a_downgrade_are_refused_and_change_nothing() {
    let server = TestServer::start();
    let mut con = server.connection();
    let fence = limited_as(&mut con, "sem", 3, "a").unwrap();
    let before = info(&mut con, "sem");
    for extra in [
        &["LIMIT", "4"][..],
        &["SHARED"],
        &["LIMIT", "2", "TOKEN", "a"],
        &["SHARED", "WAIT", "0"],
    ] {
        let err = error_of(
            redis::cmd("LOCK.ACQUIRE")
                .arg("sem")
                .arg(1_000)
                .arg(extra)
                .query(&mut con),
        );
        assert!(
            err.starts_with("ERR") && err.contains("LIMIT"),
            "{extra:?}: {err}"
        );
    }
    // The holder asking for the key exclusively: an upgrade.
    let err = error_of(
        redis::cmd("LOCK.ACQUIRE")
            .arg(&["sem", "1000", "TOKEN", "a"])
            .query(&mut con),
    );
    assert!(err.starts_with("ERR") && err.contains("SHARED"), "{err}");
    assert_eq!(
        info(&mut con, "sem").map(|f| f.len()),
        before.map(|f| f.len())
    );
    assert_eq!(info_field(&mut con, "sem", "fence"), Some(fence));
    assert_eq!(holders(&mut con, "sem"), Some(1));
    assert_eq!(lock_waiters(&mut con), 0, "nobody queued");
    // An exclusive holder asking for a shared place: a downgrade.
    acquire(&mut con, "ex", 60_000, &["TOKEN", "w"]).unwrap();
    let err = error_of(
        redis::cmd("LOCK.ACQUIRE")
            .arg(&["ex", "1000", "SHARED", "TOKEN", "w"])
            .query(&mut con),
    );
    assert!(err.starts_with("ERR") && err.contains("SHARED"), "{err}");
    assert_eq!(
        info_word(&mut con, "ex", "mode").as_deref(),
        Some("exclusive")
    );
    assert_eq!(lock_stat(&mut con, "lock_grants"), 2);
}

#[test]
fn bad_limits_are_refused_with_an_error_naming_limit() {
    let server = TestServer::start();
    let mut con = server.connection();
    for bad in [
        &["LIMIT", "0"][..],
        &["LIMIT", "1000001"],
        &["LIMIT", "-1"],
        &["LIMIT", "x"],
        &["LIMIT"],
        &["LIMIT", "2", "LIMIT", "2"],
        &["SHARED", "SHARED"],
    ] {
        let err = error_of(
            redis::cmd("LOCK.ACQUIRE")
                .arg("k")
                .arg(1_000)
                .arg(bad)
                .query(&mut con),
        );
        assert!(
            err.starts_with("ERR") && err.to_uppercase().contains(bad[0]),
            "{bad:?}: {err}"
        );
    }
    assert!(!exists(&mut con, "k"));
    assert!(acquire(&mut con, "k", 1_000, &["LIMIT", "1000000"]).is_some());
}

#[test]
fn each_holder_expires_at_its_own_time_and_a_waiting_writer_follows_the_last() {
    let server = TestServer::start();
    let mut con = server.connection();
    // 1.5 s and 6 s: far enough apart that a loaded machine's delays cannot blur which
    // left first, and the writer queues while both hold.
    shared_as(&mut con, "rw", 1_500, "short").unwrap();
    shared_as(&mut con, "rw", 6_000, "long").unwrap();
    let mut writer = Waiter::start(&server, "rw", 60_000, &["WAIT", "0"]);
    let start = Instant::now();
    poll_until(
        Duration::from_secs(10),
        "the short holder to expire",
        || holders(&mut con, "rw") == Some(1),
    );
    // Gone before the long holder's 6 s, which the key's own expiry would have waited
    // for (holders 1 is only ever seen if it left first).
    assert!(start.elapsed() < Duration::from_millis(4_000));
    assert_eq!(
        extend(&mut con, "rw", b"short", 1_000),
        0,
        "expired: not held"
    );
    assert!(writer.is_blocked(), "the long reader still holds");
    let (granted, at) = writer.outcome();
    assert!(granted.is_some(), "the writer is granted");
    let waited = at.duration_since(start);
    assert!(
        waited >= Duration::from_millis(3_500) && waited < Duration::from_millis(9_000),
        "granted when the last reader expired: {waited:?}"
    );
    assert_eq!(
        info_word(&mut con, "rw", "mode").as_deref(),
        Some("exclusive")
    );
    assert_eq!(lock_stat(&mut con, "lock_expired"), 2);
}

#[test]
fn a_writer_that_gives_up_at_the_head_lets_the_readers_behind_it_in() {
    let server = TestServer::start();
    let mut con = server.connection();
    shared_as(&mut con, "rw", 60_000, "r").unwrap();
    let mut writer = Waiter::start(&server, "rw", 60_000, &["WAIT", "300"]);
    let mut reader = Waiter::start(&server, "rw", 60_000, &["SHARED", "WAIT", "0"]);
    assert_eq!(writer.granted(), None, "the writer times out");
    assert!(
        reader.granted().is_some(),
        "the reader behind it joins the holders"
    );
    assert_eq!(holders(&mut con, "rw"), Some(2));
    // The same when the waiting writer disconnects.
    let writer = Waiter::start(&server, "rw", 60_000, &["WAIT", "0"]);
    let mut reader = Waiter::start(&server, "rw", 60_000, &["SHARED", "WAIT", "0"]);
    drop(writer);
    assert!(reader.granted().is_some());
    assert_eq!(holders(&mut con, "rw"), Some(3));
}

#[test]
fn del_removes_every_holder_and_the_waiters_are_granted() {
    let server = TestServer::start();
    let mut con = server.connection();
    shared_as(&mut con, "rw", 60_000, "a").unwrap();
    shared_as(&mut con, "rw", 60_000, "b").unwrap();
    let mut writer = Waiter::start(&server, "rw", 60_000, &["WAIT", "0"]);
    let _: i64 = redis::cmd("DEL").arg("rw").query(&mut con).unwrap();
    assert!(writer.granted().is_some());
    assert_eq!(release(&mut con, "rw", b"a"), 0);
}

#[test]
fn session_bound_holders_are_released_each_at_its_own_grace() {
    let server = TestServer::start();
    let mut con = server.connection();
    let mut holder = server.connection();
    for (token, grace) in [("quick", "0"), ("slow", "1500")] {
        acquire(
            &mut holder,
            "rw",
            60_000,
            &["SHARED", "TOKEN", token, "SESSION", grace],
        )
        .expect("bound reader");
    }
    shared_as(&mut con, "rw", 60_000, "plain").unwrap();
    let start = Instant::now();
    drop(holder);
    poll_until(Duration::from_secs(5), "the grace-0 holder to go", || {
        holders(&mut con, "rw") == Some(2)
    });
    assert!(start.elapsed() < Duration::from_millis(1_000), "at once");
    poll_until(
        Duration::from_secs(5),
        "the grace-1500 holder to go",
        || holders(&mut con, "rw") == Some(1),
    );
    assert!(
        start.elapsed() >= Duration::from_millis(1_500),
        "not before its grace"
    );
    assert_eq!(lock_stat(&mut con, "lock_session_releases"), 2);
    assert_eq!(release(&mut con, "rw", b"plain"), 1);
}

#[test]
fn a_bound_holder_reclaims_its_place_and_its_neighbours_keep_their_grace() {
    let server = TestServer::start();
    let mut con = server.connection();
    let mut holder = server.connection();
    let a = acquire(
        &mut holder,
        "rw",
        60_000,
        &["SHARED", "TOKEN", "a", "SESSION", "1500"],
    )
    .unwrap()
    .1;
    acquire(
        &mut holder,
        "rw",
        60_000,
        &["SHARED", "TOKEN", "b", "SESSION", "1500"],
    )
    .unwrap();
    let id = format!("id={} ", client_id(&mut holder));
    drop(holder);
    poll_until(Duration::from_secs(5), "the close to be seen", || {
        let clients: String = redis::cmd("CLIENT").arg("LIST").query(&mut con).unwrap();
        !clients.contains(&id)
    });
    let (_, fence) = acquire(&mut con, "rw", 60_000, &["SHARED", "TOKEN", "a"]).unwrap();
    assert_eq!(fence, a, "reclaimed with its fence");
    poll_until(Duration::from_secs(5), "b's grace to end", || {
        holders(&mut con, "rw") == Some(1)
    });
    assert_eq!(extend(&mut con, "rw", b"a", 1_000), 1, "a stays");
    assert_eq!(lock_stat(&mut con, "lock_session_reclaims"), 1);
    assert_eq!(lock_stat(&mut con, "lock_session_releases"), 1);
}

#[test]
fn every_holder_is_notified_acquired_released_and_expired() {
    let server = TestServer::start();
    let mut con = server.connection();
    config_set(&mut con, "notify-keyspace-events", "KEd");
    let mut pubsub_con = server.connection();
    let mut pubsub = pubsub_con.as_pubsub();
    pubsub.psubscribe("__keyspace@0__:rw").unwrap();
    pubsub
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    shared_as(&mut con, "rw", 60_000, "a").unwrap();
    shared_as(&mut con, "rw", 100, "b").unwrap();
    extend(&mut con, "rw", b"a", 60_000);
    let mut events = Vec::new();
    while events.len() < 4 {
        let message = pubsub.get_message().expect("an event");
        events.push(message.get_payload::<String>().unwrap());
    }
    assert_eq!(
        events,
        [
            "lock.acquire",
            "lock.acquire",
            "lock.extend",
            "lock.expired"
        ]
    );
    release(&mut con, "rw", b"a");
    let message = pubsub.get_message().expect("an event");
    assert_eq!(message.get_payload::<String>().unwrap(), "lock.release");
}

#[test]
fn a_hundred_thousand_holders_on_one_key_cost_about_a_token_and_a_fence_each() {
    let server = TestServer::start();
    let mut con = server.connection();
    let used = |con: &mut redis::Connection| info_int(&server_info(con, "memory"), "used_memory");
    let before = used(&mut con);
    const N: usize = 100_000;
    for chunk in 0..(N / 10_000) {
        let mut pipe = redis::pipe();
        for i in chunk * 10_000..(chunk + 1) * 10_000 {
            pipe.cmd("LOCK.ACQUIRE")
                .arg("many")
                .arg(600_000)
                .arg("SHARED")
                .arg("TOKEN")
                .arg(format!("{i:032}"))
                .ignore();
        }
        let () = pipe.query(&mut con).unwrap();
    }
    assert_eq!(holders(&mut con, "many"), Some(N as i64));
    let per_holder = (used(&mut con) - before) / N as i64;
    // A token (32 bytes) and a fence (8) are 40 bytes; the rest is the holder's grant
    // time and expiry and the two indexes. A key per holder costs more than 150.
    assert!(per_holder < 160, "{per_holder} bytes a holder");
    let usage: i64 = redis::cmd("MEMORY")
        .arg("USAGE")
        .arg("many")
        .query(&mut con)
        .unwrap();
    assert!(
        usage > 40 * N as i64,
        "MEMORY USAGE counts the holders: {usage}"
    );
    // Still fast: a release of one of them, and the whole key's removal.
    assert_eq!(
        release(&mut con, "many", format!("{:032}", 5).as_bytes()),
        1
    );
    let _: i64 = redis::cmd("DEL").arg("many").query(&mut con).unwrap();
    ping(&mut con);
}
