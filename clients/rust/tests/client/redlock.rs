//! Redlock across five real, independent servers: all up, two down, one slow, split votes.

use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crate::common::*;
use redis_lock_client::commands::acquire_cmd;
use redis_lock_client::{Grant, Redlock, RedlockOptions, aio};

const KEY: &str = "reports:daily";

fn five() -> Vec<TestServer> {
    (0..5).map(|_| TestServer::start()).collect()
}

fn redlock(servers: &[TestServer]) -> Redlock {
    Redlock::new(servers.iter().map(client_of).collect())
}

fn async_redlock(servers: &[TestServer]) -> aio::Redlock {
    aio::Redlock::new(servers.iter().map(client_of).collect())
}

/// A client of `server`, or, once it is killed, of a port where nothing listens: the
/// killed server's port may be taken by a server of another test running beside this
/// one, whose locks (the same key) would then answer for the dead master.
fn client_of(server: &TestServer) -> redis::Client {
    match server.pid() {
        Some(_) => server.client(),
        None => redis::Client::open(format!("redis://127.0.0.1:{}/", dead_port()))
            .expect("a client of a dead port"),
    }
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

/// Stops `server` as a whole for `secs` with `DEBUG SLEEP`: it reads nothing meanwhile and
/// runs what was sent to it when it wakes, as a slow master does (with `CLIENT PAUSE` a
/// command from a connection closed meanwhile would be dropped, never run late). Returns
/// once the server sleeps; join the handle to wait until it is awake again.
fn sleep_server(server: &TestServer, secs: u64) -> JoinHandle<()> {
    let mut probe = server.connection();
    probe
        .set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let mut con = server.connection();
    let (sent, written) = std::sync::mpsc::channel();
    let sleeper = thread::spawn(move || {
        let sleep = redis::cmd("DEBUG")
            .arg("SLEEP")
            .arg(secs)
            .get_packed_command();
        con.send_packed_command(&sleep).expect("send DEBUG SLEEP");
        sent.send(()).expect("the test waits for it");
        con.recv_response().expect("DEBUG SLEEP");
    });
    // Only a PING unanswered after `DEBUG SLEEP` was written says the server sleeps: on
    // a loaded machine a PING can outlast the probe's timeout before the command is even
    // sent, and the test's commands would then reach a server that is awake.
    written.recv().expect("DEBUG SLEEP written");
    // The probe is used until its first unanswered PING only, so no late reply is
    // ever taken for the answer to a later one.
    poll_until(Duration::from_secs(10), "the server sleeps", || {
        redis::cmd("PING").query::<String>(&mut probe).is_err()
    });
    sleeper
}

/// One `INFO lock` counter (e.g. `lock_grants`) of each server, 0 for a stopped one.
fn stats(servers: &[TestServer], field: &str) -> Vec<u64> {
    servers
        .iter()
        .map(|server| {
            if server.is_running() {
                lock_stat(&mut server.connection(), field)
            } else {
                0
            }
        })
        .collect()
}

/// How much each counter grew from `before` to `after`.
fn delta(before: &[u64], after: &[u64]) -> Vec<u64> {
    before.iter().zip(after).map(|(b, a)| a - b).collect()
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
    // Open the connections first, as a long-lived client has them: on a new connection
    // the handshake to the sleeping master would time out before the acquire is sent,
    // and there would be no late grant to clean up.
    assert_eq!(
        redlock
            .lock(KEY, &options(10_000))
            .expect("warm-up")
            .release(),
        3
    );
    let grants = stats(&servers, "lock_grants");
    let releases = stats(&servers, "lock_releases");
    let slow = sleep_server(&servers[2], 4);
    let started = Instant::now();
    // A TTL far longer than the test: a late grant that was not released would stay.
    let options = options(60_000)
        .instance_timeout(Duration::from_millis(300))
        .attempts(2);
    let err = redlock
        .lock(KEY, &options)
        .expect_err("only 2 fast masters");
    assert!(
        started.elapsed() < Duration::from_millis(3_500),
        "slow master held us up"
    );
    assert_eq!((err.quorum, err.best, err.attempts), (3, 2, 2), "{err}");
    assert_eq!(err.errors.len(), 3, "{err}");
    // The fast masters saw both attempts (the count comes from the servers, not from
    // the client's report): each granted and released the lock twice.
    // (Only the fast ones are asked: the slow one would not answer yet.)
    assert_eq!(
        delta(&grants[3..], &stats(&servers[3..], "lock_grants")),
        [2, 2]
    );
    assert_eq!(
        delta(&releases[3..], &stats(&servers[3..], "lock_releases")),
        [2, 2]
    );
    assert!(!exists(&mut servers[3].connection(), KEY));
    assert!(!exists(&mut servers[4].connection(), KEY));
    // The slow master wakes and runs the acquire it was sent: a late grant, 60 s long,
    // unless the release reached it too.
    slow.join().unwrap();
    let mut con = servers[2].connection();
    poll_until(
        Duration::from_secs(10),
        "the slow master ran the late acquire",
        || lock_stat(&mut con, "lock_grants") > grants[2],
    );
    poll_until(
        Duration::from_secs(10),
        "the late grant on the slow master is released",
        || !exists(&mut con, KEY),
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
    let grants = stats(&servers, "lock_grants");
    let contended = stats(&servers, "lock_contended");
    let err = redlock
        .lock(KEY, &options(10_000).attempts(3))
        .expect_err("2 of 5");
    assert_eq!((err.best, err.quorum, err.attempts), (2, 3, 3));
    // Three attempts really reached every master: the held copies refused each, the
    // free ones granted each (and saw it released).
    assert_eq!(
        delta(&contended, &stats(&servers, "lock_contended")),
        [3, 3, 3, 0, 0]
    );
    assert_eq!(
        delta(&grants, &stats(&servers, "lock_grants")),
        [0, 0, 0, 3, 3]
    );
    assert!(!exists(&mut servers[3].connection(), KEY));
    assert!(!exists(&mut servers[4].connection(), KEY));
    assert_eq!(
        held_on(&servers),
        3,
        "the other client's locks are untouched"
    );
}

#[test]
fn a_failed_attempt_is_retried_until_the_lock_frees_up() {
    let servers = five();
    // Another client holds the key on three masters, briefly.
    for server in &servers[..3] {
        let grant: Option<Grant> =
            acquire_cmd(KEY, Duration::from_millis(600), Some(b"other"), None)
                .query(&mut server.connection())
                .unwrap();
        assert!(grant.is_some());
    }
    let grants = stats(&servers, "lock_grants");
    let contended = stats(&servers, "lock_contended");
    let redlock = redlock(&servers);
    let guard = redlock
        .lock(
            KEY,
            &options(10_000)
                .attempts(50)
                .retry_delay(Duration::from_millis(100), Duration::from_millis(50)),
        )
        .expect("granted once the other client's copies expire");
    // A majority (3 of 5) is reached as soon as one of the other client's three copies
    // has expired; the others may expire a moment later, so the grant holds 3 to 5.
    let held = guard.fences().iter().flatten().count();
    assert!((3..=5).contains(&held), "a majority: {held}");
    // Counted by the servers: the free masters granted the lock once per attempt (the
    // failed ones were released), the held ones refused it at least once.
    let granted = delta(&grants, &stats(&servers, "lock_grants"));
    let refused = delta(&contended, &stats(&servers, "lock_contended"));
    assert!(granted[3] >= 2, "a single attempt: {granted:?}");
    assert_eq!(granted[3], granted[4], "every attempt asked every master");
    assert!(
        refused[..3].iter().all(|&n| n >= 1 && n <= granted[3]),
        "the first attempt was refused everywhere it was held: {refused:?} vs {granted:?}"
    );
    assert_eq!(guard.release(), held);
    // The other client's last copies expire within moments of the first.
    poll_until(Duration::from_secs(5), "every copy gone", || {
        held_on(&servers) == 0
    });
}

#[test]
fn of_two_competing_clients_one_wins_until_it_releases() {
    let servers = five();
    let first = redlock(&servers);
    let second = redlock(&servers);
    let guard = first.lock(KEY, &options(10_000)).expect("first wins");
    let contended = stats(&servers, "lock_contended");
    let err = second
        .lock(KEY, &options(10_000).attempts(2))
        .expect_err("second loses");
    assert_eq!((err.best, err.attempts), (0, 2));
    assert_eq!(
        delta(&contended, &stats(&servers, "lock_contended")),
        [2; 5],
        "each of the two attempts asked every master"
    );
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
    // Connections open first, as in the sync test.
    let warm = redlock.lock(KEY, &options(10_000)).await.expect("warm-up");
    assert_eq!(warm.release().await, 3);
    let grants = stats(&servers, "lock_grants");
    let slow = sleep_server(&servers[0], 4);
    let started = Instant::now();
    let options = options(60_000)
        .instance_timeout(Duration::from_millis(300))
        .attempts(2);
    let err = redlock.lock(KEY, &options).await.expect_err("no quorum");
    assert!(started.elapsed() < Duration::from_millis(3_500));
    assert_eq!((err.best, err.quorum, err.attempts), (2, 3, 2), "{err}");
    assert_eq!(
        delta(&grants[1..3], &stats(&servers[1..3], "lock_grants")),
        [2, 2],
        "two attempts on the fast masters"
    );
    assert!(!exists(&mut servers[1].connection(), KEY));
    assert!(!exists(&mut servers[2].connection(), KEY));
    tokio::task::spawn_blocking(move || slow.join().unwrap())
        .await
        .unwrap();
    let mut con = servers[0].connection();
    poll_until(
        Duration::from_secs(10),
        "the slow master ran the late acquire",
        || lock_stat(&mut con, "lock_grants") > grants[0],
    );
    poll_until(
        Duration::from_secs(10),
        "the late grant on the slow master is released",
        || !exists(&mut con, KEY),
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
