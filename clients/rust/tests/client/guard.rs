//! The blocking `Lock` guard against a real server: acquire, release, drop, own tokens,
//! waiting, the watchdog and the fence.

use std::thread;
use std::time::{Duration, Instant};

use crate::common::*;
use redis_lock_client::commands::acquire_cmd;
use redis_lock_client::{Grant, LockOptions, Locker, LostReason};

fn locker(server: &TestServer) -> Locker {
    Locker::new(server.client())
}

fn ttl(ms: u64) -> LockOptions {
    LockOptions::new(Duration::from_millis(ms))
}

#[test]
fn acquire_grants_a_fenced_lock_and_release_reports_it_was_held() {
    let server = TestServer::start();
    let locker = locker(&server);
    let lock = locker
        .acquire("orders:1", &ttl(30_000))
        .unwrap()
        .expect("granted");
    assert_eq!(lock.key(), b"orders:1");
    assert_eq!(lock.token().len(), 32);
    assert!(lock.fence() > 0);
    let info = lock.info().unwrap().expect("info");
    assert_eq!(info.fence, lock.fence());
    assert!(info.ttl.unwrap() <= Duration::from_secs(30));
    assert!(lock.release().unwrap(), "was held");
    assert!(!exists(&mut server.connection(), "orders:1"));
}

#[test]
fn a_busy_lock_answers_none_and_the_holder_keeps_it() {
    let server = TestServer::start();
    let locker = locker(&server);
    let held = locker
        .acquire("orders:2", &ttl(30_000))
        .unwrap()
        .expect("granted");
    assert!(locker.acquire("orders:2", &ttl(30_000)).unwrap().is_none());
    held.check().expect("still held");
    assert!(held.release().unwrap());
}

#[test]
fn dropping_the_guard_releases_the_lock() {
    let server = TestServer::start();
    let locker = locker(&server);
    {
        let _lock = locker
            .acquire("orders:3", &ttl(30_000))
            .unwrap()
            .expect("granted");
        assert!(exists(&mut server.connection(), "orders:3"));
    }
    assert!(!exists(&mut server.connection(), "orders:3"));
    assert!(locker.acquire("orders:3", &ttl(30_000)).unwrap().is_some());
}

#[test]
fn release_after_expiry_reports_the_lock_was_not_held() {
    let server = TestServer::start();
    let locker = locker(&server);
    let lock = locker
        .acquire("orders:4", &ttl(50))
        .unwrap()
        .expect("granted");
    let mut con = server.connection();
    poll_until(Duration::from_secs(5), "the lock expires", || {
        !exists(&mut con, "orders:4")
    });
    assert!(!lock.release().unwrap(), "expired before release");
}

#[test]
fn release_does_not_free_a_lock_that_another_client_took_over() {
    let server = TestServer::start();
    let locker = locker(&server);
    let stale = locker
        .acquire("orders:5", &ttl(50))
        .unwrap()
        .expect("granted");
    let mut con = server.connection();
    poll_until(Duration::from_secs(5), "the lock expires", || {
        !exists(&mut con, "orders:5")
    });
    let fresh = locker
        .acquire("orders:5", &ttl(30_000))
        .unwrap()
        .expect("granted");
    assert!(fresh.fence() > stale.fence(), "fences grow across grants");
    assert!(!stale.release().unwrap());
    fresh.check().expect("the new holder is untouched");
    assert!(exists(&mut con, "orders:5"));
}

#[test]
fn an_own_token_is_used_and_reacquiring_with_it_keeps_the_fence() {
    let server = TestServer::start();
    let locker = locker(&server);
    let options = ttl(30_000).token("worker-7:job-42");
    let lock = locker
        .acquire("orders:6", &options)
        .unwrap()
        .expect("granted");
    assert_eq!(lock.token(), b"worker-7:job-42");
    // A retry whose first reply was lost: the same token gets the same grant back.
    let mut con = server.connection();
    let again: Option<Grant> = acquire_cmd(
        "orders:6",
        Duration::from_secs(30),
        Some(b"worker-7:job-42"),
        None,
    )
    .query(&mut con)
    .unwrap();
    assert_eq!(again.expect("idempotent").fence, lock.fence());
    assert!(lock.release().unwrap());
}

#[test]
fn a_waiting_acquire_gets_the_lock_when_the_holder_releases() {
    let server = TestServer::start();
    let locker = locker(&server);
    let holder = locker
        .acquire("orders:7", &ttl(30_000))
        .unwrap()
        .expect("granted");
    let waiter = {
        let locker = locker.clone();
        thread::spawn(move || {
            let options = ttl(30_000).wait(Duration::from_secs(20));
            locker.acquire("orders:7", &options).unwrap()
        })
    };
    wait_for_waiters(&mut server.connection(), 1);
    let holder_fence = holder.fence();
    assert!(holder.release().unwrap());
    let granted = waiter.join().unwrap().expect("the waiter got the lock");
    assert!(granted.fence() > holder_fence);
    assert!(granted.release().unwrap());
}

#[test]
fn a_waiting_acquire_gives_up_after_its_timeout() {
    let server = TestServer::start();
    let locker = locker(&server);
    let _holder = locker
        .acquire("orders:8", &ttl(30_000))
        .unwrap()
        .expect("granted");
    let started = Instant::now();
    let options = ttl(30_000).wait(Duration::from_millis(300));
    assert!(locker.acquire("orders:8", &options).unwrap().is_none());
    assert!(
        started.elapsed() >= Duration::from_millis(250),
        "waited only {:?}",
        started.elapsed()
    );
}

#[test]
fn the_watchdog_keeps_the_lock_past_its_ttl_until_release() {
    let server = TestServer::start();
    let locker = locker(&server);
    let lock = locker
        .acquire("orders:9", &ttl(600).watchdog())
        .unwrap()
        .expect("granted");
    let mut con = server.connection();
    // Three TTLs: without the watchdog the lock would long be gone.
    let until = Instant::now() + Duration::from_millis(1_800);
    while Instant::now() < until {
        assert!(
            exists(&mut con, "orders:9"),
            "the watchdog let the lock expire"
        );
        lock.check().expect("not lost");
        thread::sleep(Duration::from_millis(50));
    }
    assert!(lock.release().unwrap(), "still held at release");
    assert!(!exists(&mut con, "orders:9"));
}

#[test]
fn the_watchdog_reports_a_lock_deleted_under_it() {
    let server = TestServer::start();
    let locker = locker(&server);
    let lock = locker
        .acquire("orders:10", &ttl(300).watchdog())
        .unwrap()
        .expect("granted");
    let mut con = server.connection();
    redis::cmd("DEL")
        .arg("orders:10")
        .query::<i64>(&mut con)
        .unwrap();
    let lost = lock
        .wait_lost(Duration::from_secs(10))
        .expect("the watchdog noticed");
    assert_eq!(lost.reason, LostReason::NotHeld);
    assert_eq!(lost.key, b"orders:10");
    assert!(lock.is_lost());
    assert_eq!(lock.check().unwrap_err(), lost);
    assert!(!lock.release().unwrap());
}

#[test]
fn the_watchdog_reports_a_lost_lock_when_the_server_stays_unreachable_for_a_ttl() {
    let mut server = TestServer::start();
    let locker = locker(&server).with_command_timeout(Duration::from_millis(200));
    // A TTL long enough that a loaded machine stops the server before the lock could
    // expire unextended (which the watchdog would rightly report as NotHeld).
    let lock = locker
        .acquire("orders:15", &ttl(3_000).watchdog())
        .unwrap()
        .expect("granted");
    // Stopped, not killed: the port stays taken, so a reconnecting watchdog cannot reach
    // another test's server started on it (and be told the lock is not held there).
    let _frozen = freeze(&server);
    let lost = lock
        .wait_lost(Duration::from_secs(10))
        .expect("presumed lost after a TTL without an extend");
    assert!(matches!(lost.reason, LostReason::Unreachable(_)), "{lost}");
    assert!(lock.release().is_err(), "nobody to answer the release");
    server.kill();
}

#[test]
fn a_wait_without_limit_outlasts_the_command_timeout_and_its_connection_gets_it_back() {
    let mut server = TestServer::start();
    let command_timeout = Duration::from_millis(300);
    let locker = locker(&server).with_command_timeout(command_timeout);
    let holder = locker
        .acquire("orders:16", &ttl(30_000))
        .unwrap()
        .expect("granted");
    // A wait without limit reads its reply with no read timeout: it outlasts the command
    // timeout, and its connection then goes back to the locker's idle ones.
    let waiter = {
        let locker = locker.clone();
        thread::spawn(move || {
            let lock = locker
                .acquire("orders:16", &ttl(30_000).wait(Duration::ZERO))
                .unwrap()
                .expect("granted after the holder's release");
            assert!(lock.release().unwrap());
        })
    };
    wait_for_waiters(&mut server.connection(), 1);
    // Time itself is the event here: the waiter must still be waiting past its command
    // timeout.
    thread::sleep(command_timeout * 2);
    assert!(holder.release().unwrap());
    waiter
        .join()
        .expect("the waiter was granted, not timed out");
    let _frozen = freeze(&server);
    let (done, answer) = std::sync::mpsc::channel();
    thread::spawn(move || {
        let _ = done.send(
            locker
                .acquire("orders:17", &ttl(30_000))
                .map(|lock| lock.is_some()),
        );
    });
    // On the waiter's connection (the last one given back, the first taken), without
    // its command timeout the acquire would wait for the stopped server forever.
    let answered = answer.recv_timeout(Duration::from_secs(30));
    server.kill();
    let err = answered
        .expect("the acquire gave up at its command timeout")
        .expect_err("nobody answered");
    assert!(err.is_timeout(), "{err}");
}

#[test]
fn the_watchdog_stops_on_release_and_never_touches_the_next_holder() {
    let server = TestServer::start();
    let locker = locker(&server);
    let mut con = server.connection();
    // One token for both holders (a worker that locks again): a watchdog still running
    // after the release would extend the next lock too, not just fail.
    let options = ttl(300).token("worker-1");
    let lock = locker
        .acquire("orders:11", &options.clone().watchdog())
        .unwrap()
        .expect("granted");
    poll_until(Duration::from_secs(10), "the watchdog extends", || {
        lock_stat(&mut con, "lock_extends") >= 2
    });
    assert!(lock.release().unwrap());
    let extends = lock_stat(&mut con, "lock_extends");
    let calls = command_calls(&mut con, "lock.extend");
    let next = locker
        .acquire("orders:11", &options)
        .unwrap()
        .expect("granted");
    // Ten watchdog periods (100 ms each).
    thread::sleep(Duration::from_millis(1_000));
    assert_watchdog_stopped(&mut con, calls, extends, "orders:11");
    assert!(!next.release().unwrap());
}

#[test]
fn the_watchdog_extends_every_third_of_the_ttl_by_default() {
    let server = TestServer::start();
    let locker = locker(&server);
    let options = ttl(1_200).watchdog();
    let every = options.watchdog_interval().unwrap();
    assert_eq!(every, Duration::from_millis(400));
    let lock = locker
        .acquire("orders:16", &options)
        .unwrap()
        .expect("granted");
    let window = Duration::from_millis(3_200);
    let (extends, lowest) = watch_extends(&server, "orders:16", window);
    assert_cadence(extends, window, every);
    // Extended at a third of the TTL, the lock keeps about two thirds at worst.
    assert!(lowest > 400, "the TTL ran down to {lowest} ms of 1200");
    assert!(lock.release().unwrap());
}

#[test]
fn the_watchdog_extends_at_the_configured_fraction_of_the_ttl() {
    let server = TestServer::start();
    let locker = locker(&server);
    let options = ttl(1_500).watchdog_every(0.1);
    let every = options.watchdog_interval().unwrap();
    assert_eq!(every, Duration::from_millis(150));
    let lock = locker
        .acquire("orders:17", &options)
        .unwrap()
        .expect("granted");
    // About 20 extends; the default third of the TTL would make 6.
    let window = Duration::from_millis(3_000);
    let (extends, lowest) = watch_extends(&server, "orders:17", window);
    assert_cadence(extends, window, every);
    assert!(lowest > 750, "the TTL ran down to {lowest} ms of 1500");
    assert!(lock.release().unwrap());
}

#[test]
fn an_extend_that_finds_the_lock_gone_marks_the_guard_lost() {
    let server = TestServer::start();
    let locker = locker(&server);
    let lock = locker
        .acquire("orders:12", &ttl(30_000))
        .unwrap()
        .expect("granted");
    assert!(lock.extend(Duration::from_secs(60)).unwrap());
    assert!(pttl(&mut server.connection(), "orders:12") > 30_000);
    redis::cmd("DEL")
        .arg("orders:12")
        .query::<i64>(&mut server.connection())
        .unwrap();
    assert!(!lock.extend(Duration::from_secs(60)).unwrap());
    assert_eq!(lock.check().unwrap_err().reason, LostReason::NotHeld);
}

#[test]
fn the_fence_lets_the_resource_refuse_a_late_writer() {
    let server = TestServer::start();
    let locker = locker(&server);
    let mut highest_seen = 0;
    let mut write = |fence: u64| -> bool {
        if fence < highest_seen {
            return false;
        }
        highest_seen = fence;
        true
    };
    let slow = locker
        .acquire("orders:13", &ttl(50))
        .unwrap()
        .expect("granted");
    let mut con = server.connection();
    poll_until(
        Duration::from_secs(5),
        "the slow holder's lock expires",
        || !exists(&mut con, "orders:13"),
    );
    let fast = locker
        .acquire("orders:13", &ttl(30_000))
        .unwrap()
        .expect("granted");
    assert!(write(fast.fence()));
    assert!(!write(slow.fence()), "the stale fence is refused");
}

#[test]
fn without_the_module_acquire_fails() {
    let server = TestServer::without_module();
    let err = locker(&server)
        .acquire("orders:14", &ttl(1_000))
        .unwrap_err();
    assert!(
        err.to_string().to_lowercase().contains("unknown command"),
        "{err}"
    );
}

/// Kills every normal client of the server but `con` (the holder's process dies).
fn kill_other_clients(con: &mut redis::Connection) {
    let _: i64 = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("normal")
        .query(con)
        .unwrap();
}

#[test]
fn a_session_bound_guard_is_released_when_its_connection_dies() {
    let server = TestServer::start();
    let locker = locker(&server);
    let options = ttl(60_000).session(Duration::ZERO);
    let lock = locker
        .acquire("orders:s1", &options)
        .unwrap()
        .expect("granted");
    let info = lock.info().unwrap().expect("info");
    assert_eq!(info.session, Some(Duration::ZERO));
    assert_eq!(info.connected, Some(true));
    // The holder's process dies: here, its connection is killed under it.
    let mut admin = server.connection();
    kill_other_clients(&mut admin);
    poll_until(
        Duration::from_secs(10),
        "the lock to go with its connection",
        || !exists(&mut admin, "orders:s1"),
    );
    // Another process gets it at once, not after the 60 s TTL.
    let next = locker.acquire("orders:s1", &ttl(1_000)).unwrap();
    assert!(next.is_some());
    // The first command finds the dead connection; the next one reconnects, and its
    // reclaim finds the lock gone.
    let _ = lock.extend(Duration::from_secs(60));
    assert!(
        !lock.extend(Duration::from_secs(60)).unwrap(),
        "the old guard lost it"
    );
    assert!(lock.check().is_err());
}

#[test]
fn a_session_bound_guard_reclaims_its_lock_after_a_reconnect() {
    let server = TestServer::start();
    let locker = locker(&server);
    let options = ttl(60_000).session(Duration::from_secs(30));
    let lock = locker
        .acquire("orders:s2", &options)
        .unwrap()
        .expect("granted");
    let mut admin = server.connection();
    kill_other_clients(&mut admin);
    poll_until(Duration::from_secs(10), "the grace to start", || {
        info_field(&mut admin, "orders:s2", "connected") == Some(0)
    });
    // The next command fails on the dead connection; the one after reconnects and
    // reclaims the lock before it runs.
    let _ = lock.extend(Duration::from_secs(60));
    assert!(lock.extend(Duration::from_secs(60)).unwrap());
    assert_eq!(info_field(&mut admin, "orders:s2", "connected"), Some(1));
    assert_eq!(
        info_field(&mut admin, "orders:s2", "fence"),
        Some(lock.fence() as i64)
    );
    assert_eq!(lock_stat(&mut admin, "lock_session_reclaims"), 1);
    lock.check().expect("still held");
    assert!(lock.release().unwrap());
}

#[test]
fn a_reclaim_that_finds_the_lock_gone_does_not_take_it_anew() {
    let server = TestServer::start();
    let locker = locker(&server);
    let options = ttl(60_000).session(Duration::ZERO);
    let lock = locker
        .acquire("orders:s3", &options)
        .unwrap()
        .expect("granted");
    let mut admin = server.connection();
    kill_other_clients(&mut admin);
    poll_until(
        Duration::from_secs(10),
        "the lock to go with its connection",
        || !exists(&mut admin, "orders:s3"),
    );
    // The dead connection fails one command; on the next, the reclaim finds the key
    // free: acquiring it would be a new grant with a new fence, not the guard's lock.
    let _ = lock.extend(Duration::from_secs(60));
    assert!(!lock.extend(Duration::from_secs(60)).unwrap());
    assert!(lock.check().is_err(), "the guard knows it lost the lock");
    assert!(
        !exists(&mut admin, "orders:s3"),
        "nothing taken in its name"
    );
}

#[test]
fn run_writes_only_while_the_lock_is_held() {
    let server = TestServer::start();
    let locker = locker(&server);
    let lock = locker
        .acquire("{sale:7}:lock", &ttl(30_000))
        .unwrap()
        .expect("granted");
    let set: String = lock
        .run(redis::cmd("SET").arg("{sale:7}:stock").arg(1))
        .unwrap();
    assert_eq!(set, "OK");
    let left: i64 = lock.run(redis::cmd("DECR").arg("{sale:7}:stock")).unwrap();
    assert_eq!(left, 0);
    // The lock goes (its TTL ran out, say): the late write is refused, nothing runs.
    let _: i64 = redis::cmd("DEL")
        .arg("{sale:7}:lock")
        .query(&mut server.connection())
        .unwrap();
    let err = lock
        .run::<i64>(redis::cmd("DECR").arg("{sale:7}:stock"))
        .unwrap_err();
    assert_eq!(err.code(), Some("NOTHELD"), "{err}");
    assert!(lock.is_lost());
    let stock: i64 = redis::cmd("GET")
        .arg("{sale:7}:stock")
        .query(&mut server.connection())
        .unwrap();
    assert_eq!(stock, 0, "sold once");
}
