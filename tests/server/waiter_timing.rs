//! When a waiter is answered: at its `WAIT` timeout (not at the server's next cron
//! tick), at a deadline that `LOCK.EXTEND`, a renewing acquire or an admin moved, and not
//! while the server holds writes back (`CLIENT PAUSE`), which used to crash it.

use std::time::{Duration, Instant};

use crate::common::{TestServer, Waiter, acquire, info_field, ping, pttl, release};

/// How late after its timeout a `WAIT` may be answered. The server alone answers at its
/// next cron tick: the test's server runs at `hz 1`, so that is up to a second late,
/// half a second on average; the module answers within a few ms, and this slack leaves
/// a loaded 2-core machine's scheduling delays ample room (40 ms at `hz 10` did not).
const TIMEOUT_SLACK: Duration = Duration::from_millis(300);

/// How late after a deadline moved earlier (from a minute away) the waiter may be
/// granted: far below the old deadline, with room for a loaded machine's delays.
const FOLLOWED: Duration = Duration::from_secs(2);

#[test]
fn wait_timeouts_are_answered_within_a_few_ms_not_at_the_next_cron_tick() {
    const TIMEOUT_MS: u64 = 150;
    let server = TestServer::with_args(&["--hz", "1"]);
    let mut holder_con = server.connection();
    let mut con = server.connection();
    let (holder, _) = acquire(&mut holder_con, "job", 60_000, &[]).expect("granted");
    // Five in a row: with the cron tick alone, each is late by 0-1000 ms, so all five
    // within the slack would happen about once in 400 runs.
    for round in 0..5 {
        let started = Instant::now();
        let reply = acquire(&mut con, "job", 30_000, &["WAIT", &TIMEOUT_MS.to_string()]);
        let waited = started.elapsed();
        assert_eq!(reply, None, "round {round}");
        assert!(
            waited >= Duration::from_millis(TIMEOUT_MS),
            "round {round}: answered after {waited:?}, before the timeout"
        );
        assert!(
            waited < Duration::from_millis(TIMEOUT_MS) + TIMEOUT_SLACK,
            "round {round}: answered {:?} after the timeout",
            waited - Duration::from_millis(TIMEOUT_MS)
        );
    }
    assert_eq!(info_field(&mut con, "job", "waiters"), Some(0));
    assert_eq!(release(&mut holder_con, "job", &holder), 1);
}

/// Holds `job` for a minute with a waiter queued, runs `shorten` (which must leave the
/// lock `SHORT_MS` to live), and checks that the waiter gets it at the new deadline, not
/// the old one.
fn assert_the_waiter_follows_a_shortened_deadline(
    shorten: impl FnOnce(&mut redis::Connection, &[u8]),
    late_limit: Duration,
) {
    const SHORT_MS: u64 = 300;
    let server = TestServer::start();
    let mut con = server.connection();
    let (holder, fence) = acquire(&mut con, "job", 60_000, &[]).expect("granted");
    let mut waiter = Waiter::start(&server, "job", 30_000, &["WAIT", "0"]);

    shorten(&mut con, &holder);
    let left = u64::try_from(pttl(&mut con, "job")).expect("job expires");
    assert!(left <= SHORT_MS, "the deadline moved ({left} ms left)");
    let deadline = Instant::now() + Duration::from_millis(left);

    let (granted, at) = waiter.outcome();
    let (_, new_fence) = granted.expect("the waiter is granted the lock");
    assert!(new_fence > fence);
    let late = at.saturating_duration_since(deadline);
    assert!(late < late_limit, "granted {late:?} after the new deadline");
}

#[test]
fn a_waiter_is_granted_the_lock_at_the_deadline_an_extend_moved_earlier() {
    assert_the_waiter_follows_a_shortened_deadline(
        |con, holder| {
            let extended: i64 = redis::cmd("LOCK.EXTEND")
                .arg("job")
                .arg(holder)
                .arg(300)
                .query(con)
                .unwrap();
            assert_eq!(extended, 1);
        },
        FOLLOWED,
    );
}

#[test]
fn a_waiter_is_granted_the_lock_at_the_deadline_a_renewing_acquire_moved_earlier() {
    assert_the_waiter_follows_a_shortened_deadline(
        |con, holder| {
            let holder = String::from_utf8(holder.to_vec()).unwrap();
            acquire(con, "job", 300, &["TOKEN", &holder]).expect("renewed");
        },
        FOLLOWED,
    );
}

#[test]
fn a_waiter_is_granted_the_lock_soon_after_the_deadline_an_admin_moved_earlier() {
    // PEXPIRE reaches the module through no callback: the key is looked at every 100 ms.
    assert_the_waiter_follows_a_shortened_deadline(
        |con, _| {
            let set: i64 = redis::cmd("PEXPIRE")
                .arg("job")
                .arg(300)
                .query(con)
                .unwrap();
            assert_eq!(set, 1);
        },
        FOLLOWED,
    );
}

#[test]
fn a_lock_that_expires_while_writes_are_paused_goes_to_its_waiter_after_the_pause() {
    // The deadline (1.5 s) must fall inside the pause however long the waiter takes to
    // queue on a loaded machine, and the pause (4 s) must outlast it.
    const PAUSE_MS: u64 = 4_000;
    let server = TestServer::start();
    let mut con = server.connection();
    let (_, fence) = acquire(&mut con, "job", 1_500, &[]).expect("granted");
    let mut waiter = Waiter::start(&server, "job", 30_000, &["WAIT", "0"]);

    let () = redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(PAUSE_MS)
        .arg("WRITE")
        .query(&mut con)
        .unwrap();
    let paused = Instant::now();
    // The deadline passes during the pause: the server counts the key as expired but may
    // not delete it, so nothing may be written in its place yet.
    let (granted, at) = waiter.outcome();
    assert!(
        at.duration_since(paused) >= Duration::from_millis(PAUSE_MS - 50),
        "granted {:?} into a {PAUSE_MS} ms write pause",
        at.duration_since(paused)
    );
    let (token, new_fence) = granted.expect("the waiter is granted the lock");
    assert!(new_fence > fence);
    ping(&mut con);
    assert!(server.is_running(), "the server survived: {}", server.log());
    assert_eq!(info_field(&mut con, "job", "fence"), Some(new_fence));
    assert_eq!(release(&mut con, "job", &token), 1);
}
