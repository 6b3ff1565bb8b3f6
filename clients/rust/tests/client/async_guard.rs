//! The async (tokio) `aio::Lock` guard against a real server.

use std::time::{Duration, Instant};

use crate::common::*;
use redis_lock_client::aio::Locker;
use redis_lock_client::{LockOptions, LostReason};

fn ttl(ms: u64) -> LockOptions {
    LockOptions::new(Duration::from_millis(ms))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquire_and_release_on_an_async_connection() {
    let server = TestServer::start();
    let locker = Locker::new(server.client());
    let lock = locker
        .acquire("jobs:1", &ttl(30_000))
        .await
        .unwrap()
        .expect("granted");
    assert!(lock.fence() > 0);
    assert_eq!(
        lock.info().await.unwrap().expect("info").fence,
        lock.fence()
    );
    assert!(
        locker
            .acquire("jobs:1", &ttl(30_000))
            .await
            .unwrap()
            .is_none()
    );
    assert!(lock.release().await.unwrap());
    assert!(!exists(&mut server.connection(), "jobs:1"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_the_async_guard_releases_the_lock() {
    let server = TestServer::start();
    let locker = Locker::new(server.client());
    drop(
        locker
            .acquire("jobs:2", &ttl(30_000))
            .await
            .unwrap()
            .expect("granted"),
    );
    let mut con = server.connection();
    poll_until(
        Duration::from_secs(5),
        "the dropped guard's release",
        || !exists(&mut con, "jobs:2"),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_async_acquire_gets_the_lock_when_the_holder_releases() {
    let server = TestServer::start();
    let locker = Locker::new(server.client());
    let holder = locker
        .acquire("jobs:3", &ttl(30_000))
        .await
        .unwrap()
        .expect("granted");
    let waiter = {
        let locker = locker.clone();
        tokio::spawn(async move {
            let options = ttl(30_000).wait(Duration::from_secs(20));
            locker.acquire("jobs:3", &options).await.unwrap()
        })
    };
    // While one acquire waits on its own connection, the shared one still answers.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let info = holder.info().await.unwrap().expect("info");
        if info.waiters == 1 {
            break;
        }
        assert!(Instant::now() < deadline, "the waiter never queued");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let holder_fence = holder.fence();
    assert!(holder.release().await.unwrap());
    let granted = waiter.await.unwrap().expect("the waiter got the lock");
    assert!(granted.fence() > holder_fence);
    assert!(granted.release().await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_async_acquire_gives_up_after_its_timeout() {
    let server = TestServer::start();
    let locker = Locker::new(server.client());
    let _holder = locker
        .acquire("jobs:4", &ttl(30_000))
        .await
        .unwrap()
        .expect("granted");
    let started = Instant::now();
    let options = ttl(30_000).wait(Duration::from_millis(300));
    assert!(locker.acquire("jobs:4", &options).await.unwrap().is_none());
    assert!(started.elapsed() >= Duration::from_millis(250));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_async_watchdog_keeps_the_lock_past_its_ttl() {
    let server = TestServer::start();
    let locker = Locker::new(server.client());
    let lock = locker
        .acquire("jobs:5", &ttl(600).watchdog())
        .await
        .unwrap()
        .expect("granted");
    let mut con = server.connection();
    let until = Instant::now() + Duration::from_millis(1_800);
    while Instant::now() < until {
        assert!(
            exists(&mut con, "jobs:5"),
            "the watchdog let the lock expire"
        );
        lock.check().expect("not lost");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(lock.release().await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_async_watchdog_stops_on_release() {
    let server = TestServer::start();
    let locker = Locker::new(server.client());
    let mut con = server.connection();
    // One token for both holders: a watchdog still running after the release would
    // extend the next lock too, not just fail.
    let options = ttl(300).token("worker-1");
    let lock = locker
        .acquire("jobs:8", &options.clone().watchdog())
        .await
        .unwrap()
        .expect("granted");
    let deadline = Instant::now() + Duration::from_secs(10);
    while lock_stat(&mut con, "lock_extends") < 2 {
        assert!(Instant::now() < deadline, "the watchdog never extended");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(lock.release().await.unwrap());
    let extends = lock_stat(&mut con, "lock_extends");
    let calls = command_calls(&mut con, "lock.extend");
    let next = locker
        .acquire("jobs:8", &options)
        .await
        .unwrap()
        .expect("granted");
    // Ten watchdog periods (100 ms each).
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    assert_watchdog_stopped(&mut con, calls, extends, "jobs:8");
    assert!(!next.release().await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_async_watchdog_extends_at_the_configured_fraction_of_the_ttl() {
    let server = TestServer::start();
    let locker = Locker::new(server.client());
    let options = ttl(1_000).watchdog_every(0.2);
    let every = options.watchdog_interval().unwrap();
    assert_eq!(every, Duration::from_millis(200));
    let lock = locker
        .acquire("jobs:9", &options)
        .await
        .unwrap()
        .expect("granted");
    // About 15 extends; the default third of the TTL would make 9, half the TTL 6.
    let window = Duration::from_millis(3_000);
    let (extends, lowest) = {
        let server = &server;
        tokio::task::block_in_place(|| watch_extends(server, "jobs:9", window))
    };
    assert_cadence(extends, window, every);
    assert!(lowest > 500, "the TTL ran down to {lowest} ms of 1000");
    assert!(lock.release().await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_async_watchdog_signals_a_lost_lock() {
    let server = TestServer::start();
    let locker = Locker::new(server.client());
    let lock = locker
        .acquire("jobs:6", &ttl(300).watchdog())
        .await
        .unwrap()
        .expect("granted");
    redis::cmd("DEL")
        .arg("jobs:6")
        .query::<i64>(&mut server.connection())
        .unwrap();
    let lost = tokio::time::timeout(Duration::from_secs(10), lock.lost())
        .await
        .expect("the watchdog noticed");
    assert_eq!(lost.reason, LostReason::NotHeld);
    assert!(lock.is_lost());
    assert!(!lock.release().await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_stays_pending_while_the_lock_is_held() {
    let server = TestServer::start();
    let locker = Locker::new(server.client());
    let lock = locker
        .acquire("jobs:7", &ttl(600).watchdog())
        .await
        .unwrap()
        .expect("granted");
    let waited = tokio::time::timeout(Duration::from_millis(1_500), lock.lost()).await;
    assert!(waited.is_err(), "reported lost while held: {waited:?}");
    assert!(lock.release().await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_bound_async_lock_lives_as_long_as_the_lockers_connection() {
    let server = TestServer::start();
    let mut admin = server.connection();
    let locker = Locker::new(server.client());
    let holder = locker
        .acquire("jobs:s", &ttl(60_000))
        .await
        .unwrap()
        .expect("granted");
    // A waiting acquire is granted on a connection of its own, then bound to the
    // locker's shared one before that closes.
    let waiting = {
        let locker = locker.clone();
        tokio::spawn(async move {
            let options = ttl(60_000)
                .wait(Duration::from_secs(10))
                .session(Duration::ZERO);
            locker.acquire("jobs:s", &options).await
        })
    };
    poll_until(Duration::from_secs(10), "the acquire to wait", || {
        info_field(&mut admin, "jobs:s", "waiters") == Some(1)
    });
    assert!(holder.release().await.unwrap());
    let lock = waiting
        .await
        .unwrap()
        .unwrap()
        .expect("granted after the wait");
    let info = lock.info().await.unwrap().expect("info");
    assert_eq!(
        (info.session, info.connected),
        (Some(Duration::ZERO), Some(true))
    );
    assert_eq!(info.fence, lock.fence());
    // The process dies: its connections close, and the lock goes at once.
    let own: i64 = redis::cmd("CLIENT").arg("ID").query(&mut admin).unwrap();
    let killed: i64 = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("normal")
        .query(&mut admin)
        .unwrap();
    assert!(killed >= 1, "killed the locker's connection (not {own})");
    poll_until(Duration::from_secs(10), "the lock to go", || {
        !exists(&mut admin, "jobs:s")
    });
    assert_eq!(lock_stat(&mut admin, "lock_session_releases"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_on_the_async_guard_writes_only_while_the_lock_is_held() {
    let server = TestServer::start();
    let locker = Locker::new(server.client());
    let lock = locker
        .acquire("{sale:8}:lock", &ttl(30_000))
        .await
        .unwrap()
        .expect("granted");
    let n: i64 = lock
        .run(redis::cmd("INCR").arg("{sale:8}:n"))
        .await
        .unwrap();
    assert_eq!(n, 1);
    let _: i64 = redis::cmd("DEL")
        .arg("{sale:8}:lock")
        .query(&mut server.connection())
        .unwrap();
    let err = lock
        .run::<i64>(redis::cmd("INCR").arg("{sale:8}:n"))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some("NOTHELD"), "{err}");
    assert!(lock.is_lost());
}
