//! One acquire across the masters, shared by the blocking and the async Redlock: the
//! attempts, their quorum, and the lock held once it is won.

use crate::commands::Grant;
use crate::redlock::RedlockError;
use crate::redlock::RedlockOptions;
use crate::redlock::jittered;
use crate::redlock::quorum;
use crate::redlock::validity;
use redis::RedisResult;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;
use std::time::Instant;

/// How many of the replies confirm (`Ok(true)`): masters that released or extended.
pub(crate) fn confirmed(replies: &[RedisResult<bool>]) -> usize {
    replies.iter().filter(|r| matches!(r, Ok(true))).count()
}

/// The validity of a lock that `votes` of `masters` granted (or extended) to `ttl`,
/// `elapsed` after the requests went out: `None` without a quorum or without time left.
pub(crate) fn quorum_validity(
    votes: usize,
    masters: usize,
    ttl: Duration,
    elapsed: Duration,
    drift_factor: f64,
) -> Option<Duration> {
    if votes < quorum(masters) {
        return None;
    }
    validity(ttl, elapsed, drift_factor)
}

/// The bookkeeping of one Redlock acquire across its attempts, without the I/O, the same
/// for the sync and the async [`Redlock`]: judges each attempt's replies, says how long
/// to pause before the next, and makes the error once all have failed.
pub(crate) struct Attempts<'a> {
    options: &'a RedlockOptions,
    /// Attempts judged so far: the ones actually made.
    made: u32,
    quorum: usize,
    best: usize,
    errors: Vec<(usize, String)>,
}

/// An attempt that won the lock: its validity and each master's fence.
pub(crate) struct Won {
    pub(super) validity: Duration,
    pub(super) fences: Vec<Option<u64>>,
}

impl<'a> Attempts<'a> {
    /// An acquire on `masters` masters with `options`.
    pub(crate) fn new(options: &'a RedlockOptions, masters: usize) -> Self {
        Attempts {
            options,
            made: 0,
            quorum: quorum(masters),
            best: 0,
            errors: Vec::new(),
        }
    }

    /// Judges one attempt's replies (one per master, in order) that took `elapsed`:
    /// `Some` if a quorum granted the lock with validity left. `None`: the attempt failed,
    /// and the caller releases the lock on all masters (also those that did not answer:
    /// they may have granted it late) before trying again.
    pub(crate) fn judge(
        &mut self,
        results: Vec<RedisResult<Option<Grant>>>,
        elapsed: Duration,
    ) -> Option<Won> {
        self.made += 1;
        let mut fences = Vec::with_capacity(results.len());
        let mut errors = Vec::new();
        for (index, result) in results.into_iter().enumerate() {
            match result {
                Ok(grant) => fences.push(grant.map(|g| g.fence)),
                Err(err) => {
                    fences.push(None);
                    errors.push((index, err.to_string()));
                }
            }
        }
        let granted = fences.iter().filter(|f| f.is_some()).count();
        let masters = fences.len();
        match quorum_validity(
            granted,
            masters,
            self.options.ttl,
            elapsed,
            self.options.drift_factor,
        ) {
            Some(validity) => Some(Won { validity, fences }),
            None => {
                self.best = self.best.max(granted);
                self.errors = errors;
                None
            }
        }
    }

    /// After failed attempt number `attempt` (counted from 1): the random pause before
    /// the next, `None` after the last.
    pub(crate) fn pause_after(&self, attempt: u32) -> Option<Duration> {
        (attempt < self.options.attempts)
            .then(|| jittered(self.options.retry_delay, self.options.retry_jitter))
    }

    /// The error once every attempt failed.
    pub(crate) fn failed(self) -> RedlockError {
        RedlockError {
            attempts: self.made,
            best: self.best,
            quorum: self.quorum,
            errors: self.errors,
        }
    }
}

/// What a held Redlock knows, the same in the sync and the async [`RedlockGuard`].
pub(crate) struct Held {
    pub(crate) key: Vec<u8>,
    pub(crate) token: Vec<u8>,
    started: Instant,
    pub(crate) validity: Duration,
    pub(crate) fences: Vec<Option<u64>>,
    pub(crate) instance_timeout: Duration,
    drift_factor: f64,
}

impl Held {
    /// The lock `key` with `token`, won by the attempt that started at `started`.
    pub(crate) fn new(
        key: Vec<u8>,
        token: Vec<u8>,
        started: Instant,
        won: Won,
        options: &RedlockOptions,
    ) -> Self {
        Held {
            key,
            token,
            started,
            validity: won.validity,
            fences: won.fences,
            instance_timeout: options.instance_timeout,
            drift_factor: options.drift_factor,
        }
    }

    /// The instant after which the lock may be held by someone else.
    pub(crate) fn valid_until(&self) -> Instant {
        self.started + self.validity
    }

    /// Time left before `valid_until`.
    pub(crate) fn remaining(&self) -> Duration {
        self.valid_until().saturating_duration_since(Instant::now())
    }

    /// Takes the replies (one per master) of an extend to `ttl` sent at `started`: if a
    /// quorum extended the lock with time left, the validity restarts from `started`
    /// (`true`); otherwise the old validity stays in place (`false`).
    pub(crate) fn extended(
        &mut self,
        ttl: Duration,
        started: Instant,
        replies: &[RedisResult<bool>],
    ) -> bool {
        let votes = confirmed(replies);
        match quorum_validity(
            votes,
            replies.len(),
            ttl,
            started.elapsed(),
            self.drift_factor,
        ) {
            Some(validity) => {
                self.started = started;
                self.validity = validity;
                true
            }
            None => false,
        }
    }
}

impl fmt::Debug for Held {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedlockGuard")
            .field("key", &String::from_utf8_lossy(&self.key))
            .field("validity", &self.validity)
            .field("fences", &self.fences)
            .finish()
    }
}

/// The accessors of a Redlock guard, the same on the sync [`RedlockGuard`] and the async
/// `aio::RedlockGuard`: both keep what they know in a [`Held`] named `held`. Expands to
/// methods, inside the guard's `impl`.
macro_rules! redlock_guard_accessors {
    () => {
        /// The lock's key.
        pub fn key(&self) -> &[u8] {
            &self.held.key
        }

        /// The token, the same on every master (a secret: do not log it).
        pub fn token(&self) -> &[u8] {
            &self.held.token
        }

        /// The validity computed at the grant (or the last extend): TTL - elapsed - drift.
        pub fn validity(&self) -> std::time::Duration {
            self.held.validity
        }

        /// The instant after which the lock may be held by someone else.
        pub fn valid_until(&self) -> std::time::Instant {
            self.held.valid_until()
        }

        /// Time left before [`valid_until`](Self::valid_until).
        pub fn remaining(&self) -> std::time::Duration {
            self.held.remaining()
        }

        /// Whether the lock is still within its validity.
        pub fn is_valid(&self) -> bool {
            !self.remaining().is_zero()
        }

        /// Each master's fence, `None` where it did not grant the lock. Fences of
        /// different masters cannot be compared with each other.
        pub fn fences(&self) -> &[Option<u64>] {
            &self.held.fences
        }
    };
}

// Both guards import it (`blocking/redlock.rs`, `aio/redlock.rs`).
pub(crate) use redlock_guard_accessors;

/// The masters' clients from their URLs.
pub(crate) fn clients(urls: &[&str]) -> RedisResult<Vec<redis::Client>> {
    urls.iter().map(|url| redis::Client::open(*url)).collect()
}

/// One instance per master, made by `instance` from the master's client; fails unless
/// there is at least one master.
pub(crate) fn instances<T>(
    clients: Vec<redis::Client>,
    instance: impl FnMut(redis::Client) -> T,
) -> Arc<Vec<T>> {
    assert!(!clients.is_empty(), "Redlock needs at least one master");
    Arc::new(clients.into_iter().map(instance).collect())
}

/// The `Debug` output of a Redlock, sync or async: how many masters it has.
pub(crate) fn debug_redlock(f: &mut fmt::Formatter<'_>, masters: usize) -> fmt::Result {
    f.debug_struct("Redlock")
        .field("masters", &masters)
        .finish()
}
