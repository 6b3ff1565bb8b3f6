//! `lock_all` of the sync and async lockers against a real server (docs/clients.md,
//! docs/commands.md "LOCK.ACQUIREALL"): several keys at once or none, one token and a
//! fence per key, extended and released together, waiting without deadlock, and kept
//! past their TTL by a watchdog that reports them lost.

use std::thread;
use std::time::Duration;

use crate::common::*;
use redis_lock_client::{LockOptions, Locker, LostReason, Mode, aio};

fn ttl(ms: u64) -> LockOptions {
    LockOptions::new(Duration::from_millis(ms))
}

#[test]
fn every_key_or_none_extended_and_released_together() {
    let server = TestServer::start();
    let locker = Locker::new(server.client());
    let mut both = locker
        .lock_all(&[b"acct:1", b"acct:2"], &ttl(30_000))
        .unwrap()
        .expect("two free keys");
    assert_eq!(both.keys(), [b"acct:1".to_vec(), b"acct:2".to_vec()]);
    assert_eq!(both.fences().len(), 2);
    let single = locker.acquire("acct:2", &ttl(30_000)).unwrap();
    assert!(single.is_none(), "acct:2 is held");
    let none = locker
        .lock_all(&[b"acct:3", b"acct:2"], &ttl(30_000))
        .unwrap();
    assert!(none.is_none(), "acct:2 is held: nothing taken");
    let mut con = server.connection();
    let exists: bool = redis::cmd("EXISTS").arg("acct:3").query(&mut con).unwrap();
    assert!(!exists);
    assert!(both.extend(Duration::from_secs(60)).unwrap());
    let pttl: i64 = redis::cmd("PTTL").arg("acct:1").query(&mut con).unwrap();
    assert!(pttl > 50_000, "{pttl}");
    assert!(both.release().unwrap());
    assert_eq!(dbsize(&mut con), 0);

    // Dropped, a guard releases every key.
    let readers = locker
        .lock_all(&[b"acct:1", b"acct:2"], &ttl(30_000).mode(Mode::Shared))
        .unwrap()
        .expect("readers");
    let other = locker
        .lock_all(&[b"acct:2", b"acct:1"], &ttl(30_000).mode(Mode::Shared))
        .unwrap()
        .expect("readers share");
    drop((readers, other));
    assert_eq!(dbsize(&mut con), 0);
}

#[test]
fn crossing_orders_wait_their_turn_without_deadlock() {
    let server = TestServer::start();
    let locker = Locker::new(server.client());
    let held = locker
        .lock_all(&[b"a", b"b"], &ttl(30_000))
        .unwrap()
        .expect("held");
    let waiters: Vec<_> = [[b"b", b"a"], [b"a", b"b"]]
        .into_iter()
        .map(|keys| {
            let locker = locker.clone();
            thread::spawn(move || {
                let options = ttl(30_000).wait(Duration::from_secs(10));
                let lock = locker
                    .lock_all(&[keys[0], keys[1]], &options)
                    .unwrap()
                    .expect("granted in turn");
                let fences = lock.fences().to_vec();
                assert!(lock.release().unwrap());
                fences
            })
        })
        .collect();
    let mut con = server.connection();
    wait_for_waiters(&mut con, 2);
    assert!(held.release().unwrap());
    for waiter in waiters {
        assert_eq!(waiter.join().unwrap().len(), 2);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_async_locker_takes_every_key_or_none() {
    let server = TestServer::start();
    let locker = aio::Locker::new(server.client());
    let mut both = locker
        .lock_all(&[b"x", b"y"], &ttl(30_000))
        .await
        .unwrap()
        .expect("two free keys");
    assert!(
        locker
            .lock_all(&[b"y"], &ttl(30_000))
            .await
            .unwrap()
            .is_none()
    );
    assert!(both.extend(Duration::from_secs(60)).await.unwrap());
    let waiting = {
        let locker = locker.clone();
        tokio::spawn(async move {
            let options = ttl(30_000).wait(Duration::from_secs(10));
            locker.lock_all(&[b"y", b"x"], &options).await
        })
    };
    let mut con = server.connection();
    tokio::task::spawn_blocking(move || wait_for_waiters(&mut con, 1))
        .await
        .unwrap();
    assert!(both.release().await.unwrap());
    let next = waiting
        .await
        .unwrap()
        .unwrap()
        .expect("granted after the release");
    assert_eq!(next.fences().len(), 2);
    assert!(next.release().await.unwrap());
}

/// The keys' `PTTL`s now.
fn pttls(con: &mut redis::Connection, keys: &[&str]) -> Vec<i64> {
    keys.iter().map(|key| pttl(con, key)).collect()
}

#[test]
fn a_watchdog_keeps_every_key_past_its_ttl_and_reports_a_key_taken_away() {
    let server = TestServer::start();
    let locker = Locker::new(server.client());
    let mut con = server.connection();
    let keys = ["wd:1", "wd:2"];
    let held = locker
        .lock_all(&[b"wd:1", b"wd:2"], &ttl(300).watchdog())
        .unwrap()
        .expect("two free keys");
    // Three TTLs later both keys are still held: extended, together, every 100 ms.
    let (extends, lowest) = watch_extends(&server, "wd:1", Duration::from_millis(900));
    assert_cadence(
        extends / 2,
        Duration::from_millis(900),
        Duration::from_millis(100),
    );
    assert!(lowest > 0, "wd:1 ran out under the watchdog");
    assert!(pttls(&mut con, &keys).iter().all(|&t| t > 0));
    held.check().expect("not lost");
    assert!(held.release().unwrap(), "every key was still held");
    // Counted once the release returned: an extend the watchdog had in flight is not one
    // after it.
    let (calls, extends) = (
        command_calls(&mut con, "lock.extend"),
        lock_stat(&mut con, "lock_extends"),
    );
    assert_eq!(dbsize(&mut con), 0);
    // Ten of its periods later, no extend followed the release.
    let _next = locker.acquire("wd:1", &ttl(1_000)).unwrap().expect("free");
    assert_watchdog_stopped(&mut con, calls, extends, "wd:1");

    // A key taken away under it: the watchdog's next extend finds it gone.
    let held = locker
        .lock_all(&[b"wd:1", b"wd:2"], &ttl(600).watchdog())
        .unwrap()
        .expect("free");
    let _: i64 = redis::cmd("DEL").arg("wd:2").query(&mut con).unwrap();
    let lost = held
        .wait_lost(Duration::from_secs(5))
        .expect("reported lost within a few periods");
    assert_eq!(lost.reason, LostReason::NotHeld);
    assert_eq!(lost.key, b"wd:1");
    assert!(held.is_lost() && held.check().is_err());
    assert!(!held.release().unwrap(), "wd:2 was no longer held");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_async_watchdog_keeps_every_key_past_its_ttl_and_reports_a_key_taken_away() {
    let server = TestServer::start();
    let locker = aio::Locker::new(server.client());
    let held = locker
        .lock_all(&[b"wd:1", b"wd:2"], &ttl(300).watchdog())
        .await
        .unwrap()
        .expect("two free keys");
    // Three TTLs pass: the keys stay held only if the watchdog extends them.
    tokio::time::sleep(Duration::from_millis(900)).await;
    let mut con = server.connection();
    assert!(
        pttls(&mut con, &["wd:1", "wd:2"]).iter().all(|&t| t > 0),
        "a key ran out under the watchdog"
    );
    held.check().expect("not lost");
    assert!(held.release().await.unwrap(), "every key was still held");
    assert_eq!(dbsize(&mut con), 0);

    let held = locker
        .lock_all(&[b"wd:1", b"wd:2"], &ttl(600).watchdog())
        .await
        .unwrap()
        .expect("free");
    let _: i64 = redis::cmd("DEL").arg("wd:1").query(&mut con).unwrap();
    let lost = tokio::time::timeout(Duration::from_secs(5), held.lost())
        .await
        .expect("reported lost within a few periods");
    assert_eq!(lost.reason, LostReason::NotHeld);
    assert!(held.is_lost());
    assert!(!held.release().await.unwrap(), "wd:1 was no longer held");
}
