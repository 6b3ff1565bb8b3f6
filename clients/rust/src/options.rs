//! How to acquire a lock.

use std::time::Duration;

use crate::commands::{Mode, acquire_mode_cmd};
use crate::replicas::{Policy, Replicas, is_not_replicated, refused, wait_left};
use crate::token::new_token;
use redis::{RedisError, RedisResult};
use std::time::Instant;

/// The default share of the TTL after which the watchdog extends the lock.
const DEFAULT_WATCHDOG_FRACTION: f64 = 1.0 / 3.0;

/// Options of an acquire: TTL, optional wait, optional own token, optional watchdog.
///
/// ```
/// use std::time::Duration;
/// use redis_lock_client::LockOptions;
///
/// let options = LockOptions::new(Duration::from_secs(30))
///     .wait(Duration::from_secs(5))
///     .watchdog();
/// assert_eq!(options.ttl(), Duration::from_secs(30));
/// ```
#[derive(Clone)]
pub struct LockOptions {
    ttl: Duration,
    wait: Option<Duration>,
    token: Option<Vec<u8>>,
    watchdog: Option<f64>,
    session: Option<Duration>,
    mode: Mode,
    value: Option<Vec<u8>>,
    replicas: Replicas,
    replicas_timeout: Option<Duration>,
    fsync: bool,
}

impl std::fmt::Debug for LockOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockOptions")
            .field("ttl", &self.ttl)
            .field("wait", &self.wait)
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .field("watchdog", &self.watchdog)
            .field("session", &self.session)
            .field("mode", &self.mode)
            .field("replicas", &self.replicas)
            .field("replicas_timeout", &self.replicas_timeout)
            .field("fsync", &self.fsync)
            .finish()
    }
}

impl LockOptions {
    /// Options for a lock that expires `ttl` after it is granted (at least 1 ms; the
    /// module counts in milliseconds), without waiting, with a random token and no
    /// watchdog.
    pub fn new(ttl: Duration) -> Self {
        LockOptions {
            ttl,
            wait: None,
            token: None,
            watchdog: None,
            session: None,
            mode: Mode::Exclusive,
            value: None,
            replicas: Replicas::Auto,
            replicas_timeout: None,
            fsync: false,
        }
    }

    /// Also wait for the master's own fsync (`WAITAOF 1 0` behind the writes, which still
    /// ask the server to wait for the replicas): the grant counts once the master's
    /// append-only file has it on disk, for a worry about a restart rather than a
    /// failover. Redis 7.2+ or Valkey 8+ with `appendonly yes`; elsewhere every acquire
    /// is refused, the grant released. The default timeout is then a third of the TTL, at
    /// most 2 s.
    pub fn fsync(mut self, fsync: bool) -> Self {
        self.fsync = fsync;
        self
    }

    /// How many replicas must acknowledge the grant (and each extend, the watchdog's
    /// included) before it counts: [`Replicas::Auto`] (the default) is the server's own
    /// rule (`REPLICAS AUTO`: 1 when the master has a replica, none without);
    /// `Exactly(n)` asks for `n`, `Exactly(0)` turns it off. The server holds the reply
    /// until they have it, in the same round trip, and undoes a grant too few
    /// acknowledged: the acquire answers an error [`is_not_replicated`] recognizes
    /// (tried again while its [`wait`](Self::wait) lasts). On Redis 7.0, which cannot
    /// wait, the locker counts the replicas itself and sends its own `WAIT` (a master
    /// with fewer online than `n` refuses at once there).
    ///
    /// [`is_not_replicated`]: crate::is_not_replicated
    pub fn replicas(mut self, replicas: Replicas) -> Self {
        self.replicas = replicas;
        self
    }

    /// How long the replicas' acknowledgement is waited for (default: a tenth of the TTL,
    /// at most 1 s; at least 1 ms).
    pub fn replicas_timeout(mut self, timeout: Duration) -> Self {
        self.replicas_timeout = Some(timeout.max(Duration::from_millis(1)));
        self
    }

    /// The replicas a grant needs, as set with [`replicas`](Self::replicas).
    pub fn replicas_setting(&self) -> Replicas {
        self.replicas
    }

    /// After an attempt of these options that failed with `err` (started at `started`,
    /// `first` being the options of the first attempt): the options of the next attempt
    /// (the wait that is left) when `err` is a grant too few replicas acknowledged and the
    /// wait goes on, else `err`.
    pub(crate) fn again(
        &self,
        err: RedisError,
        first: &LockOptions,
        started: Instant,
    ) -> RedisResult<Self> {
        if !is_not_replicated(&err) || refused(&err) {
            return Err(err);
        }
        match wait_left(first.wait_timeout(), started.elapsed()) {
            Some(left) => Ok(self.clone().wait(left)),
            None => Err(err),
        }
    }

    pub(crate) fn policy(&self) -> Policy {
        Policy {
            replicas: self.replicas,
            timeout: self.replicas_timeout,
            fsync: self.fsync,
        }
    }

    /// When another client holds the lock, wait up to `timeout` for it
    /// (`LOCK.ACQUIRE ... WAIT`); waiters are served first come, first served.
    /// `Duration::ZERO` waits without limit.
    pub fn wait(mut self, timeout: Duration) -> Self {
        self.wait = Some(timeout);
        self
    }

    /// Use this token instead of a random one (1 to 256 bytes). Acquiring again with the
    /// token that holds the lock succeeds and resets its TTL.
    pub fn token(mut self, token: impl Into<Vec<u8>>) -> Self {
        self.token = Some(token.into());
        self
    }

    /// Keep the lock alive while the guard lives: extend it to the full TTL every third
    /// of the TTL, and report a lost lock to the holder.
    pub fn watchdog(self) -> Self {
        self.watchdog_every(DEFAULT_WATCHDOG_FRACTION)
    }

    /// Like [`watchdog`](Self::watchdog), extending every `fraction` of the TTL.
    ///
    /// # Panics
    ///
    /// If `fraction` is not strictly between 0 and 1.
    pub fn watchdog_every(mut self, fraction: f64) -> Self {
        assert!(
            fraction > 0.0 && fraction < 1.0,
            "the watchdog fraction must be between 0 and 1, got {fraction}"
        );
        self.watchdog = Some(fraction);
        self
    }

    /// Bind the lock to the guard's connection (`LOCK.ACQUIRE ... SESSION grace-ms`): if
    /// the connection closes (the process dies, the network drops), the server releases
    /// the lock `grace` later instead of at the end of the TTL, and gives it to the next
    /// waiter. If the guard's connection is lost and opened again within the grace, the
    /// guard reclaims the lock (same fence) before its next extend. The async
    /// [`aio::Locker`](crate::aio::Locker) binds its locks to its one shared connection.
    ///
    /// Prefer it to a watchdog when the TTL must be long (work of unknown length) but a
    /// crashed holder must not block everyone for that long: the lock lives as long as
    /// the connection, plus `grace`. The grace is a lock-delay: a holder that is only cut
    /// off may still be acting, so nobody else gets the lock before it ends. The TTL
    /// still bounds the lock; combine it with [`watchdog`](Self::watchdog) to hold it
    /// beyond the TTL while the process is alive.
    pub fn session(mut self, grace: Duration) -> Self {
        self.session = Some(grace);
        self
    }

    /// Hold the key in `mode`: alone (the default), as a reader beside other readers
    /// ([`Mode::Shared`]), or as one of at most `n` holders ([`Mode::Semaphore`]). The
    /// [`Locker`](crate::Locker)'s `read_lock`, `write_lock` and `semaphore` set it.
    pub fn mode(mut self, mode: Mode) -> Self {
        self.mode = mode;
        self
    }

    /// Publish `value` with the grant (`LOCK.ACQUIRE ... VALUE`, 0 to 4096 bytes, no
    /// secret: `LOCK.INFO` and `LOCK.WATCH` show it), for an exclusive lock: the leader's
    /// address, say. See [`Election`](crate::Election).
    pub fn value(mut self, value: impl Into<Vec<u8>>) -> Self {
        self.value = Some(value.into());
        self
    }

    /// The value to publish with the grant, if any.
    pub fn published_value(&self) -> Option<&[u8]> {
        self.value.as_deref()
    }

    /// How the lock is held.
    pub fn lock_mode(&self) -> Mode {
        self.mode
    }

    /// The grace of a session-bound lock, if [`session`](Self::session) was set.
    pub fn session_grace(&self) -> Option<Duration> {
        self.session
    }

    /// The lock's time to live.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// How long to wait for a busy lock, if at all (`Some(ZERO)`: without limit).
    pub fn wait_timeout(&self) -> Option<Duration> {
        self.wait
    }

    /// The caller's own token, if one was given.
    pub fn own_token(&self) -> Option<&[u8]> {
        self.token.as_deref()
    }

    /// How often the watchdog extends the lock, if it is on.
    pub fn watchdog_interval(&self) -> Option<Duration> {
        self.watchdog
            .map(|fraction| self.ttl.mul_f64(fraction).max(Duration::from_millis(1)))
    }

    /// The token an acquire sends: the caller's own, or a new random one. The guards
    /// always send one, so that they know it even if the reply is lost.
    pub(crate) fn token_to_send(&self) -> Vec<u8> {
        self.own_token()
            .map(<[u8]>::to_vec)
            .unwrap_or_else(new_token)
    }

    /// The `LOCK.ACQUIRE` these options send for `key` with `token`: TTL, wait and
    /// session grace as set.
    pub(crate) fn acquire_cmd(&self, key: &[u8], token: &[u8]) -> redis::Cmd {
        let mut cmd = acquire_mode_cmd(
            key,
            self.ttl(),
            Some(token),
            self.wait_timeout(),
            self.session_grace(),
            self.mode,
        );
        if let Some(value) = &self.value {
            cmd.arg("VALUE").arg(value.as_slice());
        }
        cmd
    }

    /// `LOCK.ACQUIREALL` of `keys` with these options (a published value belongs to one
    /// key: it is not sent).
    pub(crate) fn acquire_all_cmd(&self, keys: &[Vec<u8>], token: &[u8]) -> redis::Cmd {
        crate::commands::acquire_all_cmd(
            keys,
            self.ttl(),
            Some(token),
            self.wait_timeout(),
            self.session_grace(),
            self.mode,
        )
    }

    /// How long the client waits for the acquire's reply, `None` for no limit: a
    /// waiting acquire must not time out on the client before the server answers, so
    /// the wait plus `command_timeout`, and no limit for a wait without one.
    pub(crate) fn reply_limit(&self, command_timeout: Duration) -> Option<Duration> {
        match self.wait {
            None => Some(command_timeout),
            Some(wait) if wait.is_zero() => None,
            Some(wait) => Some(wait + command_timeout),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_watchdog_extends_every_third_of_the_ttl_by_default() {
        let options = LockOptions::new(Duration::from_millis(900)).watchdog();
        assert_eq!(
            options.watchdog_interval(),
            Some(Duration::from_millis(300))
        );
        assert_eq!(
            LockOptions::new(Duration::from_secs(1)).watchdog_interval(),
            None
        );
    }

    #[test]
    #[should_panic(expected = "between 0 and 1")]
    fn a_watchdog_fraction_of_one_is_refused() {
        let _ = LockOptions::new(Duration::from_secs(1)).watchdog_every(1.0);
    }

    #[test]
    fn an_acquire_sends_the_own_token_or_a_new_random_one() {
        let own = LockOptions::new(Duration::from_secs(1)).token("mine");
        assert_eq!(own.token_to_send(), b"mine");
        let random = LockOptions::new(Duration::from_secs(1));
        assert_eq!(random.token_to_send().len(), 32);
        assert_ne!(random.token_to_send(), random.token_to_send());
    }

    #[test]
    fn the_reply_to_a_waiting_acquire_may_take_the_wait_plus_the_command_timeout() {
        let timeout = Duration::from_secs(5);
        let options = LockOptions::new(Duration::from_secs(1));
        assert_eq!(options.reply_limit(timeout), Some(timeout));
        assert_eq!(
            options
                .clone()
                .wait(Duration::from_secs(2))
                .reply_limit(timeout),
            Some(Duration::from_secs(7))
        );
        assert_eq!(options.wait(Duration::ZERO).reply_limit(timeout), None);
    }

    #[test]
    fn debug_output_hides_the_token() {
        let options = LockOptions::new(Duration::from_secs(1)).token("secret");
        assert!(!format!("{options:?}").contains("secret"));
    }
}
