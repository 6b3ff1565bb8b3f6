//! `lock_all` of the sync and async lockers against a real server (docs/clients.md,
//! docs/commands.md "LOCK.ACQUIREALL"): several keys at once or none, one token and a
//! fence per key, extended and released together, waiting without deadlock.

use std::thread;
use std::time::Duration;

use crate::common::*;
use redis_lock_client::{LockOptions, Locker, Mode, aio};

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
