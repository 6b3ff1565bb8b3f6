//! Fencing tokens: every grant of a key gets a fence above every fence granted before,
//! whatever removed the previous lock, and fences stay in `1 ..= 2^53 - 1`.

use std::time::Duration;

use crate::common::*;

/// The largest fence a client whose numbers are doubles reads exactly.
const MAX_FENCE: i64 = (1 << 53) - 1;

/// Acquires `key` (which must be free), releases it, and returns the fence.
fn grant_and_release(con: &mut redis::Connection, key: &str) -> i64 {
    let (token, fence) = acquire(con, key, 30_000, &[]).expect("the lock is free");
    assert_eq!(release(con, key, &token), 1);
    fence
}

/// Acquires `key` (which must be free) and returns the fence, keeping the lock.
fn grant(con: &mut redis::Connection, key: &str) -> i64 {
    acquire(con, key, 30_000, &[]).expect("the lock is free").1
}

/// Grants `k`, lets `remove` take the lock away, and checks that the next grant of `k`
/// gets a higher fence.
fn assert_fence_increases_after(remove: impl FnOnce(&mut redis::Connection)) {
    let server = TestServer::start();
    let mut con = server.connection();
    let first = grant(&mut con, "k");
    remove(&mut con);
    let second = grant(&mut con, "k");
    assert!(second > first, "{second} after {first}");
}

/// Copies `key` from `source` to the server of `target` (`DUMP`, then `RESTORE` without
/// an expiry).
fn copy_lock(source: &TestServer, target: &mut redis::Connection, key: &str) {
    let payload = dump(&mut source.connection(), key).expect("a lock to copy");
    let () = redis::cmd("RESTORE")
        .arg(key)
        .arg(0)
        .arg(&payload)
        .query(target)
        .unwrap();
}

#[test]
fn fences_increase_when_a_lock_is_released_and_granted_again() {
    let server = TestServer::start();
    let mut con = server.connection();
    let fences: Vec<i64> = (0..50)
        .map(|_| grant_and_release(&mut con, "orders"))
        .collect();
    assert!(fences.windows(2).all(|w| w[0] < w[1]), "{fences:?}");
}

#[test]
fn fences_increase_within_a_burst_of_grants_in_one_millisecond() {
    let server = TestServer::start();
    let mut con = server.connection();
    // One pipeline of acquire/release pairs: many grants land in the same millisecond,
    // where only the logical half of the clock tells them apart.
    let mut pipe = redis::pipe();
    for i in 0..500 {
        let token = format!("t{i}");
        pipe.cmd("LOCK.ACQUIRE")
            .arg("burst")
            .arg(30_000)
            .arg("TOKEN")
            .arg(&token);
        pipe.cmd("LOCK.RELEASE").arg("burst").arg(&token).ignore();
    }
    let replies: Vec<(String, i64)> = pipe.query(&mut con).unwrap();
    let fences: Vec<i64> = replies.into_iter().map(|(_, fence)| fence).collect();
    assert_eq!(fences.len(), 500);
    assert!(fences.windows(2).all(|w| w[0] < w[1]), "{fences:?}");
}

#[test]
fn fences_increase_after_a_lock_expires() {
    let server = TestServer::start();
    let mut con = server.connection();
    let mut last = 0;
    for _ in 0..3 {
        let (_, fence) = acquire(&mut con, "short", 20, &[]).expect("the lock is free");
        assert!(fence > last, "{fence} after {last}");
        last = fence;
        poll_until(Duration::from_secs(5), "the lock expires", || {
            !exists(&mut con, "short")
        });
    }
}

#[test]
fn fences_increase_after_del() {
    assert_fence_increases_after(|con| {
        let _: i64 = redis::cmd("DEL").arg("k").query(con).unwrap();
    });
}

#[test]
fn fences_increase_after_unlink() {
    assert_fence_increases_after(|con| {
        let unlinked: i64 = redis::cmd("UNLINK").arg("k").query(con).unwrap();
        assert_eq!(unlinked, 1);
    });
}

#[test]
fn fences_increase_after_set_overwrites_the_lock_and_del_removes_the_string() {
    assert_fence_increases_after(|con| {
        let _: () = redis::cmd("SET").arg("k").arg("plain").query(con).unwrap();
        let err = error_of(redis::cmd("LOCK.ACQUIRE").arg("k").arg(1000).query(con));
        assert!(err.starts_with("WRONGTYPE"), "{err}");
        let _: i64 = redis::cmd("DEL").arg("k").query(con).unwrap();
    });
}

#[test]
fn fences_increase_after_debug_reload() {
    let server = TestServer::start();
    let mut con = server.connection();
    let released = grant_and_release(&mut con, "gone");
    let held = grant(&mut con, "held");
    let _: () = redis::cmd("DEBUG").arg("RELOAD").query(&mut con).unwrap();
    assert_eq!(info_field(&mut con, "held", "fence"), Some(held));
    let after = grant(&mut con, "gone");
    assert!(after > held && after > released, "{after} after {held}");
}

#[test]
fn fences_increase_after_flushall() {
    assert_fence_increases_after(|con| {
        let _: () = redis::cmd("FLUSHALL").query(con).unwrap();
        assert!(!exists(con, "k"));
    });
}

#[test]
fn fences_increase_across_different_keys_on_one_server() {
    let server = TestServer::start();
    let mut con = server.connection();
    let fences: Vec<i64> = (0..60)
        .map(|i| grant(&mut con, &format!("key:{i}")))
        .collect();
    assert!(fences.windows(2).all(|w| w[0] < w[1]), "{fences:?}");
}

#[test]
fn fences_are_positive_and_below_two_to_the_53() {
    let server = TestServer::start();
    let mut con = server.connection();
    for i in 0..20 {
        let own = format!("own-{i}");
        for extra in [&[][..], &["TOKEN", own.as_str()][..]] {
            let (token, fence) =
                acquire(&mut con, "range", 30_000, extra).expect("the lock is free");
            assert!(fence > 0 && fence <= MAX_FENCE, "{fence}");
            assert_eq!(release(&mut con, "range", &token), 1);
        }
    }
}

#[test]
fn a_fresh_server_grants_fences_above_those_another_server_granted_earlier() {
    // No shared state: only the wall-clock half of the clock orders the two servers.
    let first = TestServer::start();
    let before = grant(&mut first.connection(), "moved");
    let second = TestServer::start();
    let after = grant(&mut second.connection(), "moved");
    assert!(after > before, "{after} after {before}");
}

#[test]
fn a_restored_lock_raises_the_next_fence_above_its_own() {
    let (source, foreign) = server_with_future_fence("moved", "holder", &[]);

    let target = TestServer::start();
    let mut con = target.connection();
    let local = grant_and_release(&mut con, "local");
    assert!(local < foreign, "the source's fence must be far ahead");
    copy_lock(&source, &mut con, "moved");
    assert_eq!(info_field(&mut con, "moved", "fence"), Some(foreign));
    assert_eq!(release(&mut con, "moved", b"holder"), 1);

    let after = grant(&mut con, "moved");
    assert!(after > foreign, "{after} after restored {foreign}");
    let other_key = grant(&mut con, "other");
    assert!(other_key > after, "{other_key} after {after}");
}

#[test]
fn a_lock_restored_from_a_server_with_an_ordinary_clock_is_exceeded_too() {
    let source = TestServer::start();
    let (token, foreign) = acquire(&mut source.connection(), "moved", 30_000, &[]).unwrap();

    let target = TestServer::start();
    let mut con = target.connection();
    copy_lock(&source, &mut con, "moved");
    assert_eq!(release(&mut con, "moved", &token), 1);
    let after = grant(&mut con, "moved");
    assert!(after > foreign, "{after} after restored {foreign}");
}
