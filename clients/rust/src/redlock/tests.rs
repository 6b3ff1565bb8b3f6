use super::attempts::{Won, quorum_validity};
use std::time::{Duration, Instant};

use redis::RedisResult;

use super::{Attempts, Held, RedlockOptions, confirmed, jittered, quorum, validity};
use crate::commands::Grant;

#[test]
fn quorum_is_a_strict_majority() {
    assert_eq!(quorum(1), 1);
    assert_eq!(quorum(2), 2);
    assert_eq!(quorum(3), 2);
    assert_eq!(quorum(5), 3);
    assert_eq!(quorum(6), 4);
}

#[test]
fn validity_subtracts_elapsed_time_and_drift() {
    let ttl = Duration::from_secs(10);
    // drift = 10 s * 0.01 + 2 ms = 102 ms
    assert_eq!(
        validity(ttl, Duration::from_millis(300), 0.01),
        Some(Duration::from_millis(9_598))
    );
    assert_eq!(validity(ttl, Duration::from_millis(9_898), 0.01), None);
    assert_eq!(validity(ttl, Duration::from_secs(11), 0.01), None);
}

fn refused() -> redis::RedisError {
    std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused").into()
}

fn grant(fence: u64) -> RedisResult<Option<Grant>> {
    Ok(Some(Grant {
        token: b"t".to_vec(),
        fence,
    }))
}

fn ten_seconds() -> RedlockOptions {
    RedlockOptions::new(Duration::from_secs(10))
        .attempts(2)
        .retry_delay(Duration::from_millis(100), Duration::ZERO)
}

#[test]
fn confirmed_counts_only_the_masters_that_answered_true() {
    let replies = vec![Ok(true), Ok(false), Err(refused()), Ok(true)];
    assert_eq!(confirmed(&replies), 2);
}

#[test]
fn quorum_validity_needs_a_strict_majority_and_time_left() {
    let ttl = Duration::from_secs(10);
    let quick = Duration::from_millis(300);
    assert_eq!(quorum_validity(2, 5, ttl, quick, 0.01), None);
    assert_eq!(
        quorum_validity(3, 5, ttl, quick, 0.01),
        Some(Duration::from_millis(9_598))
    );
    assert_eq!(
        quorum_validity(5, 5, ttl, Duration::from_secs(10), 0.01),
        None
    );
}

#[test]
fn an_attempt_granted_by_a_quorum_wins_with_each_masters_fence() {
    let options = ten_seconds();
    let mut attempts = Attempts::new(&options, 3);
    let won = attempts
        .judge(
            vec![grant(7), Ok(None), grant(9)],
            Duration::from_millis(300),
        )
        .expect("2 of 3 granted");
    assert_eq!(won.fences, [Some(7), None, Some(9)]);
    assert_eq!(won.validity, Duration::from_millis(9_598));
}

#[test]
fn failed_attempts_keep_the_best_vote_and_the_last_errors_then_give_up() {
    let options = ten_seconds();
    let mut attempts = Attempts::new(&options, 3);
    let quick = Duration::from_millis(300);

    // Two grants, but no time left: failed, though with a quorum of votes.
    assert!(
        attempts
            .judge(vec![grant(1), grant(2), Ok(None)], Duration::from_secs(10))
            .is_none()
    );
    assert_eq!(attempts.pause_after(1), Some(Duration::from_millis(100)));
    // One grant and an error.
    assert!(
        attempts
            .judge(vec![grant(3), Err(refused()), Ok(None)], quick)
            .is_none()
    );
    assert_eq!(attempts.pause_after(2), None, "the last attempt");

    let error = attempts.failed();
    assert_eq!(
        (error.attempts, error.best, error.quorum),
        (2, 2, 2),
        "{error}"
    );
    assert_eq!(error.errors.len(), 1);
    assert_eq!(error.errors[0].0, 1, "master 1 failed");
    assert!(error.errors[0].1.contains("refused"), "{error}");
}

#[test]
fn the_error_counts_the_attempts_made_not_the_attempts_allowed() {
    let options = ten_seconds().attempts(5);
    let mut attempts = Attempts::new(&options, 3);
    assert!(
        attempts
            .judge(vec![grant(1), Ok(None), Ok(None)], Duration::ZERO)
            .is_none()
    );
    assert_eq!(attempts.failed().attempts, 1);
}

#[test]
fn an_extend_restarts_the_validity_only_when_a_quorum_confirms() {
    let options = ten_seconds();
    let won = Won {
        validity: Duration::from_millis(1),
        fences: vec![Some(1), Some(2), None],
    };
    let before = Instant::now();
    let mut held = Held::new(b"k".to_vec(), b"t".to_vec(), before, won, &options);

    let started = Instant::now();
    let ttl = Duration::from_secs(10);
    assert!(!held.extended(ttl, started, &[Ok(true), Ok(false), Err(refused())]));
    assert_eq!(held.valid_until(), before + Duration::from_millis(1));

    assert!(held.extended(ttl, started, &[Ok(true), Ok(false), Ok(true)]));
    assert!(held.validity > Duration::from_secs(9));
    assert_eq!(held.valid_until(), started + held.validity);
    assert!(!held.remaining().is_zero());
}

#[test]
fn the_defaults_are_every_packages() {
    let options = RedlockOptions::new(Duration::from_secs(10));
    assert_eq!(options.attempts, 11);
    assert_eq!(options.retry_delay, Duration::from_millis(200));
    assert_eq!(options.retry_jitter, Duration::from_millis(100));
    assert_eq!(options.instance_timeout, Duration::from_millis(500));
    let short = RedlockOptions::new(Duration::from_millis(1000));
    assert_eq!(short.instance_timeout, Duration::from_millis(100));
    assert_eq!(short.retry_count(2).attempts, 3);
}

#[test]
fn jittered_delays_stay_in_range_and_vary() {
    let delays: Vec<Duration> = (0..50)
        .map(|_| jittered(Duration::from_millis(200), Duration::from_millis(100)))
        .collect();
    assert!(
        delays
            .iter()
            .all(|d| *d >= Duration::from_millis(100) && *d <= Duration::from_millis(300))
    );
    assert!(delays.iter().any(|d| *d < Duration::from_millis(200)));
    assert!(delays.iter().any(|d| *d > Duration::from_millis(200)));
    // A jitter above the delay never makes it negative.
    assert!((0..50).all(
        |_| jittered(Duration::from_millis(10), Duration::from_millis(100))
            <= Duration::from_millis(110)
    ));
}
