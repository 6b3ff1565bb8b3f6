//! What a Redlock attempt is given (`RedlockOptions`), the arithmetic of a quorum and
//! its validity, and how a failed attempt is reported (`RedlockError`).

use std::fmt;
use std::time::Duration;

use crate::replicas::{Policy, Replicas};

/// How a Redlock acquire is tried.
#[derive(Clone, Debug)]
pub struct RedlockOptions {
    pub(crate) ttl: Duration,
    pub(crate) attempts: u32,
    pub(crate) retry_delay: Duration,
    pub(crate) retry_jitter: Duration,
    pub(crate) drift_factor: f64,
    pub(crate) instance_timeout: Duration,
    pub(crate) replicas: Replicas,
    pub(crate) replicas_timeout: Option<Duration>,
    pub(crate) fsync: bool,
}

impl RedlockOptions {
    /// Options for a lock of `ttl`, the defaults of every package (docs/clients.md):
    /// 11 attempts (10 retries), 200 ms +/- up to 100 ms between them, drift factor 0.01,
    /// and a tenth of the TTL, at most 500 ms, for each master to answer (connecting
    /// included).
    pub fn new(ttl: Duration) -> Self {
        RedlockOptions {
            ttl,
            attempts: 11,
            retry_delay: Duration::from_millis(200),
            retry_jitter: Duration::from_millis(100),
            drift_factor: 0.01,
            instance_timeout: (ttl / 10)
                .clamp(Duration::from_millis(1), Duration::from_millis(500)),
            replicas: Replicas::Auto,
            replicas_timeout: None,
            fsync: false,
        }
    }

    /// Each master's grant waits with `WAITAOF 1 n` (see
    /// [`LockOptions::fsync`](crate::LockOptions::fsync)).
    pub fn fsync(mut self, fsync: bool) -> Self {
        self.fsync = fsync;
        self
    }

    /// How many of each master's own replicas must acknowledge its grant before it counts
    /// as a vote for ([`Replicas::Auto`], the default: 1 on a master with a replica
    /// online, none without; see [`LockOptions::replicas`](crate::LockOptions::replicas)).
    /// A grant too few acknowledged is released there and counts as a vote against.
    pub fn replicas(mut self, replicas: Replicas) -> Self {
        self.replicas = replicas;
        self
    }

    /// How long each master's replicas are waited for (default: half the instance
    /// timeout, and at most a tenth of the TTL).
    pub fn replicas_timeout(mut self, timeout: Duration) -> Self {
        self.replicas_timeout = Some(timeout.max(Duration::from_millis(1)));
        self
    }

    pub(crate) fn policy(&self) -> Policy {
        Policy {
            replicas: self.replicas,
            timeout: Some(self.replicas_timeout.unwrap_or_else(|| {
                (self.instance_timeout / 2)
                    .min(self.ttl / 10)
                    .max(Duration::from_millis(1))
            })),
            fsync: self.fsync,
        }
    }

    /// How many times to try in all (at least 1).
    pub fn attempts(mut self, attempts: u32) -> Self {
        self.attempts = attempts.max(1);
        self
    }

    /// How many times to try again after the first attempt (node-redlock's
    /// `retryCount`): `attempts(retries + 1)`.
    pub fn retry_count(self, retries: u32) -> Self {
        self.attempts(retries.saturating_add(1))
    }

    /// The delay between attempts: `delay` plus or minus a random share of `jitter`.
    pub fn retry_delay(mut self, delay: Duration, jitter: Duration) -> Self {
        self.retry_delay = delay;
        self.retry_jitter = jitter;
        self
    }

    /// The share of the TTL allowed for clock rate differences (default 0.01).
    pub fn drift_factor(mut self, factor: f64) -> Self {
        self.drift_factor = factor.max(0.0);
        self
    }

    /// How long one master may take to answer (connecting included) before it counts as
    /// failed. Keep it small next to the TTL.
    pub fn instance_timeout(mut self, timeout: Duration) -> Self {
        self.instance_timeout = timeout;
        self
    }

    /// The lock's time to live.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }
}

/// The number of masters that must grant the lock: a strict majority of `n`.
pub fn quorum(n: usize) -> usize {
    n / 2 + 1
}

/// The time the holder may rely on the lock: `ttl - elapsed - drift`, where
/// drift = `ttl * drift_factor + 2 ms`; `None` if nothing is left.
pub fn validity(ttl: Duration, elapsed: Duration, drift_factor: f64) -> Option<Duration> {
    let drift = ttl.mul_f64(drift_factor) + Duration::from_millis(2);
    ttl.checked_sub(elapsed + drift)
        .filter(|left| !left.is_zero())
}

/// A random delay in `delay - jitter ..= delay + jitter` (not below 0), so that clients
/// retrying after a split vote do not collide again.
pub fn jittered(delay: Duration, jitter: Duration) -> Duration {
    let spread = u64::try_from(jitter.as_micros()).unwrap_or(u64::MAX / 2);
    let offset = rand::random_range(0..=spread.saturating_mul(2));
    (delay + Duration::from_micros(offset)).saturating_sub(jitter)
}

/// Why a Redlock acquire failed after all its attempts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RedlockError {
    /// How many attempts were actually made (each one asked every master).
    pub attempts: u32,
    /// The most masters that granted the lock in any one attempt.
    pub best: usize,
    /// How many were needed.
    pub quorum: usize,
    /// The errors of the last attempt, as `(master index, message)`.
    pub errors: Vec<(usize, String)>,
}

impl fmt::Display for RedlockError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Redlock not acquired: at best {} of the {} masters needed granted it, in {} attempts",
            self.best, self.quorum, self.attempts
        )?;
        for (index, error) in &self.errors {
            write!(f, "; master {index}: {error}")?;
        }
        Ok(())
    }
}

impl std::error::Error for RedlockError {}
