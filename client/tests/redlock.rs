//! Redlock across five real, independent servers: all up, two down, one slow, split votes.

mod common;

use std::time::{Duration, Instant};

use common::*;
use redis_lock_client::commands::acquire_cmd;
use redis_lock_client::{Grant, Redlock, RedlockOptions, aio};

const KEY: &str = "reports:daily";

fn five() -> Vec<TestServer> {
    (0..5).map(|_| TestServer::start()).collect()
}

fn redlock(servers: &[TestServer]) -> Redlock {
    Redlock::new(servers.iter().map(TestServer::client).collect())
}

fn async_redlock(servers: &[TestServer]) -> aio::Redlock {
    aio::Redlock::new(servers.iter().map(TestServer::client).collect())
}

/// Generous per-master timeout: the machine is shared, and a missed answer from a fast
/// master would make a test flaky rather than prove anything.
fn options(ttl_ms: u64) -> RedlockOptions {
    RedlockOptions::new(Duration::from_millis(ttl_ms))
        .instance_timeout(Duration::from_secs(1))
        .retry_delay(Duration::from_millis(20), Duration::from_millis(30))
}

/// Pauses every client of `server` for `ms` (the server itself keeps running).
fn pause(server: &TestServer, ms: u64) {
    let mut con = server.connection();
    let _: () = redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(ms)
        .arg("ALL")
        .query(&mut con)
        .expect("CLIENT PAUSE");
}

/// On how many of the running servers the key exists.
fn held_on(servers: &[TestServer]) -> usize {
    servers
        .iter()
        .filter(|server| server.is_running())
        .filter(|server| exists(&mut server.connection(), KEY))
        .count()
}

#[test]
fn five_masters_grant_the_lock_with_one_token_and_release_it_on_all() {
    let servers = five();
    let redlock = redlock(&servers);
    let guard = redlock.lock(KEY, &options(10_000)).expect("acquired");
    assert_eq!(guard.fences().iter().flatten().count(), 5);
    assert!(guard.is_valid());
    assert!(guard.validity() <= Duration::from_millis(10_000 - 102));
    // The same token holds every copy: acquiring with it is idempotent everywhere.
    for (server, fence) in servers.iter().zip(guard.fences()) {
        let again: Option<Grant> =
            acquire_cmd(KEY, Duration::from_secs(10), Some(guard.token()), None)
                .query(&mut server.connection())
                .unwrap();
        assert_eq!(again.map(|g| g.fence), *fence);
    }
    assert_eq!(guard.release(), 5);
    assert_eq!(held_on(&servers), 0);
}

#[test]
fn two_masters_down_still_leave_a_quorum() {
    let mut servers = five();
    servers[1].kill();
    servers[3].kill();
    let redlock = redlock(&servers);
    let guard = redlock
        .lock(KEY, &options(10_000))
        .expect("3 of 5 is a quorum");
    let granted: Vec<bool> = guard.fences().iter().map(Option::is_some).collect();
    assert_eq!(granted, [true, false, true, false, true]);
    assert_eq!(guard.release(), 3);
}

#[test]
fn two_down_and_one_slow_master_is_no_quorum_and_nothing_stays_locked() {
    let mut servers = five();
    servers[0].kill();
    servers[1].kill();
    let redlock = redlock(&servers);
    pause(&servers[2], 4_000);
    let started = Instant::now();
    let options = options(3_000)
        .instance_timeout(Duration::from_millis(300))
        .attempts(2);
    let err = redlock
        .lock(KEY, &options)
        .expect_err("only 2 fast masters");
    assert_eq!(err.quorum, 3);
    assert_eq!(err.best, 2);
    assert_eq!(err.attempts, 2);
    assert_eq!(err.errors.len(), 3, "{err}");
    assert!(
        started.elapsed() < Duration::from_millis(3_500),
        "slow master held us up"
    );
    // Released on the fast masters at once...
    assert!(!exists(&mut servers[3].connection(), KEY));
    assert!(!exists(&mut servers[4].connection(), KEY));
    // ...and on the slow one, a late grant is released or expires with its TTL.
    let mut slow = servers[2].connection();
    poll_until(
        Duration::from_secs(15),
        "nothing locked on the slow master",
        || !exists(&mut slow, KEY),
    );
}

#[test]
fn a_slow_master_within_the_timeout_counts_but_eats_into_the_validity() {
    let mut servers = five();
    servers[0].kill();
    servers[4].kill();
    let redlock = redlock(&servers);
    pause(&servers[2], 500);
    let options = options(10_000).instance_timeout(Duration::from_secs(5));
    let guard = redlock
        .lock(KEY, &options)
        .expect("3 of 5 with the slow one");
    assert_eq!(guard.fences().iter().flatten().count(), 3);
    // validity = 10 000 - elapsed (>= the pause, less what passed before the lock) - 102
    assert!(
        guard.validity() < Duration::from_millis(9_650),
        "validity {:?} ignores the slow master",
        guard.validity()
    );
    assert_eq!(guard.release(), 3);
}

#[test]
fn a_split_vote_is_released_on_every_master() {
    let servers = five();
    // Another client holds the key on three masters.
    for server in &servers[..3] {
        let grant: Option<Grant> = acquire_cmd(KEY, Duration::from_secs(30), Some(b"other"), None)
            .query(&mut server.connection())
            .unwrap();
        assert!(grant.is_some());
    }
    let redlock = redlock(&servers);
    let err = redlock
        .lock(KEY, &options(10_000).attempts(3))
        .expect_err("2 of 5");
    assert_eq!((err.best, err.quorum, err.attempts), (2, 3, 3));
    assert!(!exists(&mut servers[3].connection(), KEY));
    assert!(!exists(&mut servers[4].connection(), KEY));
    assert_eq!(
        held_on(&servers),
        3,
        "the other client's locks are untouched"
    );
}

#[test]
fn of_two_competing_clients_one_wins_until_it_releases() {
    let servers = five();
    let first = redlock(&servers);
    let second = redlock(&servers);
    let guard = first.lock(KEY, &options(10_000)).expect("first wins");
    let err = second
        .lock(KEY, &options(10_000).attempts(2))
        .expect_err("second loses");
    assert_eq!(err.best, 0);
    assert_eq!(guard.release(), 5);
    let guard = second.lock(KEY, &options(10_000)).expect("second's turn");
    drop(guard);
    assert_eq!(
        held_on(&servers),
        0,
        "dropping the guard released everywhere"
    );
}

#[test]
fn extend_restarts_the_validity_on_a_quorum() {
    let mut servers = five();
    servers[2].kill();
    let redlock = redlock(&servers);
    let mut guard = redlock.lock(KEY, &options(1_000)).expect("acquired");
    assert!(guard.extend(Duration::from_secs(20)));
    assert!(guard.validity() > Duration::from_secs(10));
    assert!(pttl(&mut servers[0].connection(), KEY) > 10_000);
    for server in &servers[..2] {
        redis::cmd("DEL")
            .arg(KEY)
            .query::<i64>(&mut server.connection())
            .unwrap();
    }
    assert!(
        !guard.extend(Duration::from_secs(20)),
        "2 of 5 extended: no quorum"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn async_redlock_holds_with_two_masters_down() {
    let mut servers = five();
    servers[0].kill();
    servers[2].kill();
    let redlock = async_redlock(&servers);
    let guard = redlock.lock(KEY, &options(10_000)).await.expect("acquired");
    assert_eq!(guard.fences().iter().flatten().count(), 3);
    assert!(guard.is_valid());
    assert_eq!(guard.release().await, 3);
    assert_eq!(held_on(&servers), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn async_redlock_with_two_down_and_one_slow_fails_and_releases() {
    let mut servers = five();
    servers[3].kill();
    servers[4].kill();
    let redlock = async_redlock(&servers);
    pause(&servers[0], 4_000);
    let started = Instant::now();
    let options = options(3_000)
        .instance_timeout(Duration::from_millis(300))
        .attempts(2);
    let err = redlock.lock(KEY, &options).await.expect_err("no quorum");
    assert_eq!((err.best, err.quorum), (2, 3));
    assert!(started.elapsed() < Duration::from_millis(3_500));
    assert!(!exists(&mut servers[1].connection(), KEY));
    assert!(!exists(&mut servers[2].connection(), KEY));
    let mut slow = servers[0].connection();
    poll_until(
        Duration::from_secs(15),
        "nothing locked on the slow master",
        || !exists(&mut slow, KEY),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_an_async_redlock_guard_releases_on_all() {
    let servers = five();
    let redlock = async_redlock(&servers);
    drop(redlock.lock(KEY, &options(10_000)).await.expect("acquired"));
    poll_until(Duration::from_secs(5), "released on all", || {
        held_on(&servers) == 0
    });
}
