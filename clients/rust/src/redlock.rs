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
//!    Where a master's reply was lost, the release also goes out on the same connection
//!    right behind the acquire, so a master that runs the acquire late runs the release
//!    next, even if it is too slow to take a new connection in time.
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
use crate::guard::outcome_unknown;
use crate::link::connect;
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
    validity: Duration,
    fences: Vec<Option<u64>>,
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

// The sync guard uses the macro by its textual scope; the async one imports it.
#[cfg(feature = "tokio")]
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

struct Instance {
    client: redis::Client,
    /// Kept open between calls; `None` after an error, reopened on next use.
    con: Mutex<Option<Connection>>,
}

impl Instance {
    /// The kept connection with `timeout` for reads and writes, opened if there is none.
    fn open<'a>(
        &self,
        slot: &'a mut Option<Connection>,
        timeout: Duration,
    ) -> RedisResult<&'a mut Connection> {
        match slot {
            Some(con) => {
                con.set_read_timeout(Some(timeout))?;
                con.set_write_timeout(Some(timeout))?;
                Ok(con)
            }
            None => Ok(slot.insert(connect(&self.client, timeout)?)),
        }
    }

    fn query<T: FromRedisValue>(&self, cmd: &redis::Cmd, timeout: Duration) -> RedisResult<T> {
        let mut slot = self.con.lock().unwrap_or_else(|e| e.into_inner());
        let con = self.open(&mut slot, timeout)?;
        let result = cmd.query(con);
        if result.is_err() {
            // A late reply must never be read as the answer to the next command.
            *slot = None;
        }
        result
    }

    /// Sends the acquire `cmd`; if its reply is lost (the master is slow or gone), also
    /// writes `undo` (the release) on the same connection before dropping it, without
    /// waiting for an answer. A slow master may still run the acquire late; it then runs
    /// the release right after it, from the same connection, so a late grant never
    /// outlives the failed call. A release sent later on a new connection could not
    /// promise that: the master may be too busy to accept it before the caller gives up.
    fn acquire(
        &self,
        cmd: &redis::Cmd,
        undo: &redis::Cmd,
        timeout: Duration,
    ) -> RedisResult<Option<Grant>> {
        let mut slot = self.con.lock().unwrap_or_else(|e| e.into_inner());
        let con = self.open(&mut slot, timeout)?;
        let result = cmd.query(con);
        if let Err(err) = &result {
            if outcome_unknown(err) {
                let _ = con.send_packed_command(&undo.get_packed_command());
            }
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
        debug_redlock(f, self.masters())
    }
}

impl Redlock {
    /// Redlock over these independent masters (not replicas of each other).
    ///
    /// # Panics
    ///
    /// If `clients` is empty.
    pub fn new(clients: Vec<redis::Client>) -> Self {
        Redlock {
            instances: instances(clients, |client| Instance {
                client,
                con: Mutex::new(None),
            }),
        }
    }

    /// Redlock over the masters at these URLs.
    pub fn open(urls: &[&str]) -> RedisResult<Self> {
        Ok(Self::new(clients(urls)?))
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
        let cmd = acquire_cmd(&key, options.ttl, Some(&token), None);
        let undo = release_cmd(&key, &token);
        let mut attempts = Attempts::new(options, self.masters());
        for attempt in 1..=options.attempts {
            let started = Instant::now();
            let results = self.acquire_on_all(&cmd, &undo, options.instance_timeout);
            if let Some(won) = attempts.judge(results, started.elapsed()) {
                return Ok(RedlockGuard {
                    redlock: self.clone(),
                    held: Held::new(key, token, started, won, options),
                    released: false,
                });
            }
            self.release_all(&key, &token, options.instance_timeout);
            if let Some(pause) = attempts.pause_after(attempt) {
                thread::sleep(pause);
            }
        }
        Err(attempts.failed())
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

    /// Runs the acquire `cmd` on every master at once, each within `timeout`, with
    /// `undo` (its release) sent behind it where the reply is lost
    /// ([`Instance::acquire`]).
    fn acquire_on_all(
        &self,
        cmd: &redis::Cmd,
        undo: &redis::Cmd,
        timeout: Duration,
    ) -> Vec<RedisResult<Option<Grant>>> {
        thread::scope(|scope| {
            let calls: Vec<_> = self
                .instances
                .iter()
                .map(|instance| scope.spawn(move || instance.acquire(cmd, undo, timeout)))
                .collect();
            calls
                .into_iter()
                .map(|call| call.join().expect("a Redlock call panicked"))
                .collect()
        })
    }

    /// Releases on every master; the number that confirmed.
    fn release_all(&self, key: &[u8], token: &[u8], timeout: Duration) -> usize {
        confirmed(&self.on_all::<bool>(&release_cmd(key, token), timeout))
    }
}

/// A Redlock held on a quorum of masters. Released on all masters when dropped.
pub struct RedlockGuard {
    redlock: Redlock,
    held: Held,
    released: bool,
}

impl fmt::Debug for RedlockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.held.fmt(f)
    }
}

impl RedlockGuard {
    redlock_guard_accessors!();

    /// Extends the lock to `ttl` on every master (`LOCK.EXTEND`). `true` if a quorum
    /// extended it in time, and the validity restarts; `false` leaves the old validity in
    /// place (the lock may be lost; stop using it when [`is_valid`](Self::is_valid) fails).
    pub fn extend(&mut self, ttl: Duration) -> bool {
        let started = Instant::now();
        let replies = self.redlock.on_all::<bool>(
            &extend_cmd(&self.held.key, &self.held.token, ttl),
            self.held.instance_timeout,
        );
        self.held.extended(ttl, started, &replies)
    }

    /// Releases the lock on every master; returns how many confirmed the release.
    pub fn release(mut self) -> usize {
        self.released = true;
        self.release_now()
    }

    fn release_now(&self) -> usize {
        self.redlock
            .release_all(&self.held.key, &self.held.token, self.held.instance_timeout)
    }
}

impl Drop for RedlockGuard {
    fn drop(&mut self) {
        if !self.released {
            self.release_now();
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
