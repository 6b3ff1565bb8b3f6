//! Redlock: one lock across N independent Redis masters.
//!
//! The algorithm as published by the Redis authors, on the module's commands:
//!
//! 1. Make one random token and note the start time.
//! 2. `LOCK.ACQUIRE key ttl TOKEN token` on every master, each with a timeout that is
//!    small next to the TTL, so a dead or slow master cannot eat the lock's time. (This
//!    client asks all masters at once instead of one after another; that only shortens
//!    the elapsed time.)
//! 3. The lock is held if a quorum (N/2 + 1) granted it and time is left:
//!    validity = TTL - elapsed - drift, with drift = TTL x drift factor + 2 ms for clock
//!    rate differences between the servers.
//! 4. Otherwise release it on all masters (also those that did not answer: they may have
//!    granted it late), wait a random delay so competing clients fall out of step, retry.
//!
//! The holder may act on the resource only until [`RedlockGuard::valid_until`]. Each
//! master's fence is exposed ([`RedlockGuard::fences`]), but fences of independent
//! masters are not comparable with each other: Redlock gives no single fencing token.
//! When a resource must refuse late writers, lock on one master (with replicas) and use
//! [`Lock::fence`](crate::Lock::fence).
//!
//! ```no_run
//! use std::time::Duration;
//! use redis_lock_client::{Redlock, RedlockOptions};
//!
//! # fn main() -> redis::RedisResult<()> {
//! let masters = ["redis://10.0.0.1:6379/", "redis://10.0.0.2:6379/", "redis://10.0.0.3:6379/"];
//! let redlock = Redlock::open(&masters)?;
//! match redlock.lock("report:daily", &RedlockOptions::new(Duration::from_secs(10))) {
//!     Ok(guard) => {
//!         // ... work, but only while guard.is_valid() ...
//!         guard.release();
//!     }
//!     Err(failed) => println!("not acquired: {failed}"),
//! }
//! # Ok(())
//! # }
//! ```

use std::fmt;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use redis::{Connection, FromRedisValue, RedisResult};

use crate::commands::{Grant, acquire_cmd, extend_cmd, release_cmd};
use crate::sync::connect;
use crate::token::new_token;

/// How a Redlock acquire is tried.
#[derive(Clone, Debug)]
pub struct RedlockOptions {
    pub(crate) ttl: Duration,
    pub(crate) attempts: u32,
    pub(crate) retry_delay: Duration,
    pub(crate) retry_jitter: Duration,
    pub(crate) drift_factor: f64,
    pub(crate) instance_timeout: Duration,
}

impl RedlockOptions {
    /// Options for a lock of `ttl`: 3 attempts, 100 ms + up to 100 ms random delay between
    /// them, drift factor 0.01, and 100 ms for each master to answer (connecting
    /// included).
    pub fn new(ttl: Duration) -> Self {
        RedlockOptions {
            ttl,
            attempts: 3,
            retry_delay: Duration::from_millis(100),
            retry_jitter: Duration::from_millis(100),
            drift_factor: 0.01,
            instance_timeout: Duration::from_millis(100),
        }
    }

    /// How many times to try in all (at least 1).
    pub fn attempts(mut self, attempts: u32) -> Self {
        self.attempts = attempts.max(1);
        self
    }

    /// The delay between attempts: `delay` plus a random share of `jitter`.
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

/// A random delay in `delay ..= delay + jitter`, so that clients retrying after a split
/// vote do not collide again.
pub fn jittered(delay: Duration, jitter: Duration) -> Duration {
    let extra = u64::try_from(jitter.as_micros()).unwrap_or(u64::MAX);
    delay + Duration::from_micros(rand::random_range(0..=extra))
}

/// Why a Redlock acquire failed after all its attempts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RedlockError {
    /// How many attempts were made.
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

/// The outcome of one attempt on all masters, shared by the sync and async versions.
pub(crate) struct Round {
    pub(crate) fences: Vec<Option<u64>>,
    pub(crate) errors: Vec<(usize, String)>,
}

impl Round {
    pub(crate) fn from_results(results: Vec<RedisResult<Option<Grant>>>) -> Self {
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
        Round { fences, errors }
    }

    pub(crate) fn granted(&self) -> usize {
        self.fences.iter().filter(|f| f.is_some()).count()
    }
}

struct Instance {
    client: redis::Client,
    /// Kept open between calls; `None` after an error, reopened on next use.
    con: Mutex<Option<Connection>>,
}

impl Instance {
    fn query<T: FromRedisValue>(&self, cmd: &redis::Cmd, timeout: Duration) -> RedisResult<T> {
        let mut slot = self.con.lock().unwrap_or_else(|e| e.into_inner());
        let con = match slot.as_mut() {
            Some(con) => {
                con.set_read_timeout(Some(timeout))?;
                con.set_write_timeout(Some(timeout))?;
                con
            }
            None => slot.insert(connect(&self.client, timeout)?),
        };
        let result = cmd.query(con);
        if result.is_err() {
            // A late reply must never be read as the answer to the next command.
            *slot = None;
        }
        result
    }
}

/// Redlock over blocking connections, one per master. Cheap to clone (shared).
#[derive(Clone)]
pub struct Redlock {
    instances: Arc<Vec<Instance>>,
}

impl fmt::Debug for Redlock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Redlock")
            .field("masters", &self.instances.len())
            .finish()
    }
}

impl Redlock {
    /// Redlock over these independent masters (not replicas of each other).
    ///
    /// # Panics
    ///
    /// If `clients` is empty.
    pub fn new(clients: Vec<redis::Client>) -> Self {
        assert!(!clients.is_empty(), "Redlock needs at least one master");
        let instances = clients
            .into_iter()
            .map(|client| Instance {
                client,
                con: Mutex::new(None),
            })
            .collect();
        Redlock {
            instances: Arc::new(instances),
        }
    }

    /// Redlock over the masters at these URLs.
    pub fn open(urls: &[&str]) -> RedisResult<Self> {
        let clients = urls
            .iter()
            .map(|url| redis::Client::open(*url))
            .collect::<RedisResult<Vec<_>>>()?;
        Ok(Self::new(clients))
    }

    /// The number of masters.
    pub fn masters(&self) -> usize {
        self.instances.len()
    }

    /// Acquires `key` on a quorum of the masters, retrying as `options` say.
    pub fn lock(
        &self,
        key: impl AsRef<[u8]>,
        options: &RedlockOptions,
    ) -> Result<RedlockGuard, RedlockError> {
        let key = key.as_ref().to_vec();
        let token = new_token();
        let quorum = quorum(self.masters());
        let mut best = 0;
        let mut errors = Vec::new();
        for attempt in 1..=options.attempts {
            let started = Instant::now();
            let cmd = acquire_cmd(&key, options.ttl, Some(&token), None);
            let round = Round::from_results(self.on_all(&cmd, options.instance_timeout));
            let elapsed = started.elapsed();
            let granted = round.granted();
            if granted >= quorum
                && let Some(validity) = validity(options.ttl, elapsed, options.drift_factor)
            {
                return Ok(RedlockGuard {
                    redlock: self.clone(),
                    key,
                    token,
                    started,
                    validity,
                    fences: round.fences,
                    instance_timeout: options.instance_timeout,
                    drift_factor: options.drift_factor,
                    released: false,
                });
            }
            best = best.max(granted);
            errors = round.errors;
            self.release_all(&key, &token, options.instance_timeout);
            if attempt < options.attempts {
                thread::sleep(jittered(options.retry_delay, options.retry_jitter));
            }
        }
        Err(RedlockError {
            attempts: options.attempts,
            best,
            quorum,
            errors,
        })
    }

    /// Runs `cmd` on every master at once, each within `timeout`.
    fn on_all<T: FromRedisValue + Send>(
        &self,
        cmd: &redis::Cmd,
        timeout: Duration,
    ) -> Vec<RedisResult<T>> {
        thread::scope(|scope| {
            let calls: Vec<_> = self
                .instances
                .iter()
                .map(|instance| scope.spawn(move || instance.query::<T>(cmd, timeout)))
                .collect();
            calls
                .into_iter()
                .map(|call| call.join().expect("a Redlock call panicked"))
                .collect()
        })
    }

    /// Releases on every master; the number that confirmed.
    fn release_all(&self, key: &[u8], token: &[u8], timeout: Duration) -> usize {
        self.on_all::<bool>(&release_cmd(key, token), timeout)
            .into_iter()
            .filter(|released| matches!(released, Ok(true)))
            .count()
    }
}

/// A Redlock held on a quorum of masters. Released on all masters when dropped.
pub struct RedlockGuard {
    redlock: Redlock,
    key: Vec<u8>,
    token: Vec<u8>,
    started: Instant,
    validity: Duration,
    fences: Vec<Option<u64>>,
    instance_timeout: Duration,
    drift_factor: f64,
    released: bool,
}

impl fmt::Debug for RedlockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedlockGuard")
            .field("key", &String::from_utf8_lossy(&self.key))
            .field("validity", &self.validity)
            .field("fences", &self.fences)
            .finish()
    }
}

impl RedlockGuard {
    /// The lock's key.
    pub fn key(&self) -> &[u8] {
        &self.key
    }

    /// The token, the same on every master (a secret: do not log it).
    pub fn token(&self) -> &[u8] {
        &self.token
    }

    /// The validity computed at the grant: TTL - elapsed - drift.
    pub fn validity(&self) -> Duration {
        self.validity
    }

    /// The instant after which the lock may be held by someone else.
    pub fn valid_until(&self) -> Instant {
        self.started + self.validity
    }

    /// Time left before [`valid_until`](Self::valid_until).
    pub fn remaining(&self) -> Duration {
        self.valid_until().saturating_duration_since(Instant::now())
    }

    /// Whether the lock is still within its validity.
    pub fn is_valid(&self) -> bool {
        !self.remaining().is_zero()
    }

    /// Each master's fence, `None` where it did not grant the lock. Fences of different
    /// masters cannot be compared with each other.
    pub fn fences(&self) -> &[Option<u64>] {
        &self.fences
    }

    /// Extends the lock to `ttl` on every master (`LOCK.EXTEND`). `true` if a quorum
    /// extended it in time, and the validity restarts; `false` leaves the old validity in
    /// place (the lock may be lost; stop using it when [`is_valid`](Self::is_valid) fails).
    pub fn extend(&mut self, ttl: Duration) -> bool {
        let started = Instant::now();
        let replies = self.redlock.on_all::<bool>(
            &extend_cmd(&self.key, &self.token, ttl),
            self.instance_timeout,
        );
        let extended = replies.iter().filter(|r| matches!(r, Ok(true))).count();
        let valid = validity(ttl, started.elapsed(), self.drift_factor);
        match valid {
            Some(validity) if extended >= quorum(self.redlock.masters()) => {
                self.started = started;
                self.validity = validity;
                true
            }
            _ => false,
        }
    }

    /// Releases the lock on every master; returns how many confirmed the release.
    pub fn release(mut self) -> usize {
        self.released = true;
        self.redlock
            .release_all(&self.key, &self.token, self.instance_timeout)
    }
}

impl Drop for RedlockGuard {
    fn drop(&mut self) {
        if !self.released {
            self.redlock
                .release_all(&self.key, &self.token, self.instance_timeout);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn jittered_delays_stay_in_range_and_vary() {
        let delays: Vec<Duration> = (0..50)
            .map(|_| jittered(Duration::from_millis(100), Duration::from_millis(100)))
            .collect();
        assert!(
            delays
                .iter()
                .all(|d| *d >= Duration::from_millis(100) && *d <= Duration::from_millis(200))
        );
        assert!(delays.iter().any(|d| *d != delays[0]));
    }
}
