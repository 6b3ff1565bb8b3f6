//! What the blocking and the async lock guards share, without any I/O: the command
//! timeout, which errors leave an acquire's outcome unknown, the watchdog's schedule, and
//! the guards' accessors.

use std::fmt;
use std::time::{Duration, Instant};

use redis::RedisResult;

use crate::lost::LostReason;

/// How long a command other than a waiting acquire may take before the client gives up.
pub(crate) const DEFAULT_COMMAND_TIMEOUT: Duration = Duration::from_secs(5);

/// Whether an error leaves it unknown if the server ran the command (the reply was lost),
/// as opposed to an error reply, which means nothing changed.
pub(crate) fn outcome_unknown(err: &redis::RedisError) -> bool {
    err.is_io_error() || err.is_timeout() || err.is_connection_dropped()
}

/// After a failed extend: how soon to try again, or `None` when the lock's TTL (counted
/// from the last successful extend) has run out and the lock must be presumed lost.
pub(crate) fn retry_delay(
    last_extended: Instant,
    every: Duration,
    ttl: Duration,
) -> Option<Duration> {
    let left = ttl.checked_sub(last_extended.elapsed())?;
    if left.is_zero() {
        return None;
    }
    Some((every / 4).max(Duration::from_millis(10)).min(left))
}

/// What a watchdog does after an extend.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Next {
    /// Extend again after this long.
    Wait(Duration),
    /// Stop: the extend found the lock gone (and marked the guard lost).
    Stop,
    /// Stop and mark the guard lost for this reason.
    Lost(LostReason),
}

/// A watchdog's schedule, the same for the blocking thread and the async task: extend
/// every `every`, retry sooner after a failed extend, and give the lock up once the
/// server has been unreachable for a whole TTL since the last successful extend.
pub(crate) struct Schedule {
    every: Duration,
    ttl: Duration,
    last_extended: Instant,
}

impl Schedule {
    /// The schedule of a lock granted (or last extended) now.
    pub(crate) fn new(every: Duration, ttl: Duration) -> Self {
        Schedule {
            every,
            ttl,
            last_extended: Instant::now(),
        }
    }

    /// How long to wait before the first extend.
    pub(crate) fn first(&self) -> Duration {
        self.every
    }

    /// How long the next extend may wait for its answer: until a whole TTL has passed
    /// since the last one that succeeded (at least 1 ms). A server that answers nothing
    /// (stopped, cut off) makes the lock lost then, not at the command timeout.
    pub(crate) fn answer_limit(&self) -> Duration {
        (self.last_extended + self.ttl)
            .saturating_duration_since(Instant::now())
            .max(Duration::from_millis(1))
    }

    /// What to do after the extend sent at `sent` answered `result`. A new TTL counts
    /// from when the extend was sent: the conservative end.
    pub(crate) fn after(&mut self, sent: Instant, result: &RedisResult<bool>) -> Next {
        match result {
            Ok(true) => {
                self.last_extended = sent;
                Next::Wait(self.every)
            }
            Ok(false) => Next::Stop,
            Err(err) => match retry_delay(self.last_extended, self.every, self.ttl) {
                Some(delay) => Next::Wait(delay),
                None => Next::Lost(LostReason::Unreachable(err.to_string())),
            },
        }
    }
}

/// The `Debug` output of a lock guard, blocking or async: never the token.
pub(crate) fn debug_lock(
    f: &mut fmt::Formatter<'_>,
    key: &[u8],
    fence: u64,
    ttl: Duration,
    watchdog: bool,
) -> fmt::Result {
    f.debug_struct("Lock")
        .field("key", &String::from_utf8_lossy(key))
        .field("fence", &fence)
        .field("ttl", &ttl)
        .field("watchdog", &watchdog)
        .finish()
}

/// The accessors of a lock guard, the same on the blocking [`crate::Lock`] and the async
/// `aio::Lock`: both keep key and token in their `shared` state, fence and TTL in the
/// guard itself. Expands to methods, inside the guard's `impl`.
macro_rules! lock_accessors {
    () => {
        /// The lock's key.
        pub fn key(&self) -> &[u8] {
            &self.shared.key
        }

        /// The token that proves ownership (a secret: do not log it).
        pub fn token(&self) -> &[u8] {
            &self.shared.token
        }

        /// The fencing token of this grant. Send it with every write to the protected
        /// resource and have the resource refuse fences lower than the highest it has
        /// seen (see the crate docs for an example).
        pub fn fence(&self) -> u64 {
            self.fence
        }

        /// The TTL the lock was acquired with (and that the watchdog extends to).
        pub fn ttl(&self) -> std::time::Duration {
            self.ttl
        }
    };
}

pub(crate) use lock_accessors;

#[cfg(test)]
mod tests {
    use super::*;

    fn unreachable() -> RedisResult<bool> {
        Err(std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused").into())
    }

    #[test]
    fn a_failed_extend_is_retried_sooner_until_the_ttl_runs_out() {
        let ttl = Duration::from_secs(3);
        let every = Duration::from_secs(1);
        let delay = retry_delay(Instant::now(), every, ttl).unwrap();
        assert_eq!(delay, Duration::from_millis(250));
        let long_ago = Instant::now() - Duration::from_secs(4);
        assert_eq!(retry_delay(long_ago, every, ttl), None);
    }

    #[test]
    fn the_watchdog_waits_its_interval_after_each_successful_extend() {
        let mut schedule = Schedule::new(Duration::from_secs(1), Duration::from_secs(3));
        assert_eq!(schedule.first(), Duration::from_secs(1));
        let sent = Instant::now();
        assert_eq!(
            schedule.after(sent, &Ok(true)),
            Next::Wait(Duration::from_secs(1))
        );
        assert_eq!(schedule.last_extended, sent);
    }

    #[test]
    fn an_extend_may_wait_for_its_answer_until_a_whole_ttl_has_passed() {
        let mut schedule = Schedule::new(Duration::from_secs(1), Duration::from_secs(3));
        let limit = schedule.answer_limit();
        assert!(limit <= Duration::from_secs(3) && limit > Duration::from_millis(2900));
        schedule.last_extended = Instant::now() - Duration::from_secs(4);
        assert_eq!(schedule.answer_limit(), Duration::from_millis(1));
    }

    #[test]
    fn the_watchdog_stops_when_an_extend_finds_the_lock_gone() {
        let mut schedule = Schedule::new(Duration::from_secs(1), Duration::from_secs(3));
        assert_eq!(schedule.after(Instant::now(), &Ok(false)), Next::Stop);
    }

    #[test]
    fn the_watchdog_retries_a_failed_extend_sooner_and_gives_up_after_a_whole_ttl() {
        let mut schedule = Schedule::new(Duration::from_secs(1), Duration::from_secs(3));
        assert_eq!(
            schedule.after(Instant::now(), &unreachable()),
            Next::Wait(Duration::from_millis(250))
        );

        schedule.last_extended = Instant::now() - Duration::from_secs(4);
        match schedule.after(Instant::now(), &unreachable()) {
            Next::Lost(LostReason::Unreachable(err)) => assert!(err.contains("refused"), "{err}"),
            other => panic!("expected the lock to be given up, got {other:?}"),
        }
    }

    #[test]
    fn a_guard_debug_output_shows_the_key_and_fence() {
        struct Shown;
        impl fmt::Debug for Shown {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                debug_lock(f, b"orders:42", 7, Duration::from_secs(1), true)
            }
        }
        assert_eq!(
            format!("{Shown:?}"),
            r#"Lock { key: "orders:42", fence: 7, ttl: 1s, watchdog: true }"#
        );
    }
}
