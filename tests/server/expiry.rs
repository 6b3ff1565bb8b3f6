//! A lock expires `ttl-ms` after it is granted, by the server's own expire machinery
//! (docs/commands.md, "LOCK.ACQUIRE" and "The lock as a key"): with nobody touching the key, on a
//! lookup from any connection, and what comes after.

use std::time::{Duration, Instant};

use crate::common::*;

/// 2^53 - 1 ms, the largest `ttl-ms`.
const MAX_TTL_MS: i64 = (1 << 53) - 1;

/// `INFO keyspace` line of db0, if the database has keys.
fn keyspace_db0(con: &mut redis::Connection) -> Option<String> {
    server_info(con, "keyspace")
        .lines()
        .find(|l| l.starts_with("db0:"))
        .map(str::to_string)
}

fn expired_keys(con: &mut redis::Connection) -> i64 {
    info_int(&server_info(con, "stats"), "expired_keys")
}

/// Fails if a 300 ms lock granted at `started` went away in less than 250 ms.
fn assert_lived_its_300_ms(started: Instant) {
    let elapsed = started.elapsed();
    assert!(
        elapsed >= Duration::from_millis(250),
        "the 300 ms lock went away after {elapsed:?}"
    );
}

#[test]
fn a_lock_expires_on_time_with_no_command_touching_it() {
    let server = TestServer::start();
    let mut con = server.connection();
    let mut observer = server.connection();
    let expired_before = expired_keys(&mut observer);
    let started = Instant::now();
    acquire(&mut con, "lonely", 300, &[]).expect("granted");
    assert_eq!(dbsize(&mut observer), 1);
    assert!(keyspace_db0(&mut observer).is_some_and(|l| l.contains("keys=1,expires=1")));

    // DBSIZE and INFO count keys without looking any up, so only the server's background
    // expiry can make the lock go away here.
    poll_until(
        Duration::from_secs(10),
        "background expiry reaps the lock",
        || dbsize(&mut observer) == 0,
    );
    assert_lived_its_300_ms(started);
    assert_eq!(keyspace_db0(&mut observer), None);
    assert_eq!(expired_keys(&mut observer), expired_before + 1);
    assert_eq!(info(&mut con, "lonely"), None);
}

#[test]
fn another_connection_sees_the_lock_expire() {
    let server = TestServer::start();
    let mut holder = server.connection();
    let mut other = server.connection();
    let started = Instant::now();
    let (token, _) = acquire(&mut holder, "seen", 300, &[]).expect("granted");
    poll_until(Duration::from_secs(10), "EXISTS answers 0", || {
        !exists(&mut other, "seen")
    });
    assert_lived_its_300_ms(started);
    assert_eq!(info(&mut other, "seen"), None);
    assert_eq!(release(&mut holder, "seen", &token), 0);
}

#[test]
fn pttl_and_lock_info_ttl_count_down() {
    let server = TestServer::start();
    let mut con = server.connection();
    acquire(&mut con, "ticking", 10_000, &[]).expect("granted");
    let first = pttl(&mut con, "ticking");
    let first_info = info_field(&mut con, "ticking", "ttl").unwrap();
    assert!(first > 0 && first <= 10_000, "PTTL {first}");
    assert!(first_info > 0 && first_info <= 10_000, "ttl {first_info}");
    poll_until(Duration::from_secs(5), "PTTL decreases", || {
        pttl(&mut con, "ticking") < first - 100
    });
    // Each read of its own: LOCK.INFO was read a ms after PTTL, so it gets its own wait.
    let mut later_info = first_info;
    poll_until(Duration::from_secs(5), "LOCK.INFO ttl decreases", || {
        later_info = info_field(&mut con, "ticking", "ttl").unwrap();
        later_info < first_info - 100
    });
    assert!(later_info > 0, "ttl {first_info} then {later_info}");
}

#[test]
fn a_lock_with_the_largest_ttl_expires_two_to_the_53_minus_1_ms_after_its_grant() {
    let server = TestServer::start();
    let mut con = server.connection();
    let before = server_now_ms(&mut con);
    let (token, fence) = acquire(&mut con, "eon", MAX_TTL_MS as u64, &[]).expect("granted");
    let after = server_now_ms(&mut con);
    let at = pexpiretime(&mut con, "eon");
    assert!(
        at >= before + MAX_TTL_MS && at <= after + MAX_TTL_MS,
        "expires at {at}, granted in [{before}, {after}]"
    );
    let ttl = info_field(&mut con, "eon", "ttl").unwrap();
    assert!(ttl > MAX_TTL_MS - 600_000 && ttl <= MAX_TTL_MS, "ttl {ttl}");
    assert_eq!(info_field(&mut con, "eon", "fence"), Some(fence));
    assert_eq!(release(&mut con, "eon", &token), 1);
}

#[test]
fn after_expiry_another_token_gets_the_lock_with_a_larger_fence() {
    let server = TestServer::start();
    let mut first = server.connection();
    let mut second = server.connection();
    let (token, fence) = acquire(&mut first, "handover", 60_000, &[]).expect("granted");
    assert_eq!(acquire(&mut second, "handover", 60_000, &[]), None);

    // Let it run out soon; the newcomer's own lookup finds it expired.
    assert_eq!(extend(&mut first, "handover", &token, 100), 1);
    let mut granted = None;
    poll_until(
        Duration::from_secs(10),
        "the newcomer gets the lock",
        || {
            granted = acquire(&mut second, "handover", 60_000, &[]);
            granted.is_some()
        },
    );
    let (next_token, next_fence) = granted.unwrap();
    assert_ne!(next_token, token);
    assert!(next_fence > fence, "fence {next_fence} after {fence}");

    // The former holder has lost it for good.
    assert_eq!(release(&mut first, "handover", &token), 0);
    assert_eq!(extend(&mut first, "handover", &token, 60_000), 0);
    assert_eq!(
        info_field(&mut first, "handover", "fence"),
        Some(next_fence)
    );
    assert_eq!(release(&mut second, "handover", &next_token), 1);
}

#[test]
fn after_background_expiry_the_next_grant_gets_a_larger_fence() {
    let server = TestServer::start();
    let mut con = server.connection();
    let (_, fence) = acquire(&mut con, "reaped", 100, &[]).expect("granted");
    poll_until(
        Duration::from_secs(10),
        "background expiry reaps the lock",
        || dbsize(&mut con) == 0,
    );
    let (_, next) = acquire(&mut con, "reaped", 60_000, &[]).expect("free again");
    assert!(next > fence, "fence {next} after {fence}");
}

#[test]
fn the_former_holder_reacquiring_after_expiry_gets_a_new_grant() {
    let server = TestServer::start();
    let mut con = server.connection();
    let (_, fence) = acquire(&mut con, "again", 100, &["TOKEN", "same"]).expect("granted");
    let acquired = info_field(&mut con, "again", "acquired").unwrap();
    poll_until(Duration::from_secs(10), "the lock expires", || {
        pttl(&mut con, "again") == -2
    });
    // Make sure the server clock has moved on, so a new grant time shows.
    poll_until(Duration::from_secs(5), "server clock moves on", || {
        server_now_ms(&mut con) > acquired + 5
    });
    let (token, next) = acquire(&mut con, "again", 60_000, &["TOKEN", "same"]).expect("granted");
    assert_eq!(token, b"same");
    assert!(
        next > fence,
        "an expired lock is not renewed: fence {next} after {fence}"
    );
    let new_acquired = info_field(&mut con, "again", "acquired").unwrap();
    assert!(
        new_acquired > acquired,
        "acquired {new_acquired} after {acquired}"
    );
    let ms = pttl(&mut con, "again");
    assert!(ms > 0 && ms <= 60_000, "PTTL {ms}");
}

#[test]
fn only_held_locks_that_expire_count_as_expired_not_deleted_ones_nor_strings() {
    let server = TestServer::start();
    let mut con = server.connection();

    // A lock deleted, then a string of the same name that expires: no lock expired.
    acquire(&mut con, "job", 60_000, &[]).expect("granted");
    let deleted: i64 = redis::cmd("DEL").arg("job").query(&mut con).unwrap();
    assert_eq!(deleted, 1);
    let _: () = redis::cmd("SET")
        .arg("job")
        .arg("plain")
        .arg("PX")
        .arg(50)
        .query(&mut con)
        .unwrap();
    poll_until(Duration::from_secs(5), "the string to expire", || {
        dbsize(&mut con) == 0
    });
    assert_eq!(lock_stat(&mut con, "lock_expired"), 0);

    // A lock that expires on its own counts once.
    acquire(&mut con, "job", 50, &[]).expect("granted");
    poll_until(Duration::from_secs(5), "the lock to expire", || {
        dbsize(&mut con) == 0
    });
    assert_eq!(lock_stat(&mut con, "lock_expired"), 1);
}
