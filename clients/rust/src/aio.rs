//! Lock guards, leader election and Redlock on async (tokio) connections.
//!
//! The same model as the blocking types at the crate root, on the `redis` crate's
//! [`MultiplexedConnection`]: one shared connection per server for acquires, releases
//! and the watchdogs' extends, and a connection of its own for each waiting acquire (a
//! blocked command would hold up every other command on a shared connection).
//!
//! ```no_run
//! use std::time::Duration;
//! use redis_lock_client::{aio::Locker, LockOptions};
//!
//! # async fn run() -> redis::RedisResult<()> {
//! let locker = Locker::open("redis://127.0.0.1:7379/")?;
//! let options = LockOptions::new(Duration::from_secs(10)).watchdog();
//! if let Some(lock) = locker.acquire("orders:42", &options).await? {
//!     tokio::select! {
//!         lost = lock.lost() => eprintln!("stopping: {lost}"),
//!         _ = tokio::time::sleep(Duration::from_secs(30)) => { /* the work */ }
//!     }
//!     lock.release().await?;
//! }
//! # Ok(())
//! # }
//! ```

use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redis::{ErrorKind, FromRedisValue, RedisError, RedisResult};
use tokio::sync::watch;
use tokio::task::{JoinHandle, JoinSet};

pub use crate::aio_election::{Election, Leadership, Observer};
use crate::async_link::{AsyncLink, AsyncSource};
use crate::commands::{
    Grant, LockInfo, Mode, acquire_cmd, acquire_mode_cmd, do_cmd, extend_cmd, info_cmd, release_cmd,
};
use crate::guard::{
    DEFAULT_COMMAND_TIMEOUT, Next, Schedule, debug_lock, lock_accessors, outcome_unknown,
};
use crate::lost::{LockLost, LostReason};
use crate::options::LockOptions;
use crate::redlock::{
    Attempts, Held, RedlockError, RedlockOptions, clients, confirmed, debug_redlock, instances,
    redlock_guard_accessors,
};
use crate::token::new_token;

fn timed_out(what: &str) -> RedisError {
    std::io::Error::new(std::io::ErrorKind::TimedOut, format!("{what} timed out")).into()
}

/// Runs `future` within `limit` (`None`: no limit), a timeout as a `TimedOut` IO error.
async fn within<T>(
    limit: Option<Duration>,
    future: impl Future<Output = RedisResult<T>>,
) -> RedisResult<T> {
    match limit {
        None => future.await,
        Some(limit) => tokio::time::timeout(limit, future)
            .await
            .unwrap_or_else(|_| Err(timed_out("redis command"))),
    }
}

/// A lazily opened, shared multiplexed connection that is reopened after it breaks.
struct Conn {
    source: AsyncSource,
    connect_timeout: Duration,
    slot: Mutex<Option<AsyncLink>>,
    /// How many connections the slot has held: session-bound locks know which one they
    /// are bound to.
    generation: AtomicU64,
}

impl Conn {
    fn new(client: redis::Client, connect_timeout: Duration) -> Self {
        Self::on(AsyncSource::Server(client), connect_timeout)
    }

    fn on(source: AsyncSource, connect_timeout: Duration) -> Self {
        Conn {
            source,
            connect_timeout,
            slot: Mutex::new(None),
            generation: AtomicU64::new(0),
        }
    }

    /// A new connection without a response timeout: callers bound each command.
    async fn open(&self) -> RedisResult<AsyncLink> {
        self.source.open(self.connect_timeout).await
    }

    async fn get(&self) -> RedisResult<AsyncLink> {
        if let Some(con) = self.slot.lock().unwrap_or_else(|e| e.into_inner()).clone() {
            return Ok(con);
        }
        let con = self.open().await?;
        *self.slot.lock().unwrap_or_else(|e| e.into_inner()) = Some(con.clone());
        self.generation.fetch_add(1, Ordering::SeqCst);
        Ok(con)
    }

    async fn query<T: FromRedisValue>(&self, cmd: &redis::Cmd, limit: Duration) -> RedisResult<T> {
        let result = within(Some(limit), async {
            let mut con = self.get().await?;
            cmd.query_async(&mut con).await
        })
        .await;
        if let Err(err) = &result
            && (err.is_connection_dropped() || err.is_unrecoverable_error())
        {
            *self.slot.lock().unwrap_or_else(|e| e.into_inner()) = None;
        }
        result
    }
}

/// Takes locks on one Redis server, or a Redis Cluster, through async connections. Cheap
/// to clone (shared).
#[derive(Clone)]
pub struct Locker {
    conn: Arc<Conn>,
    command_timeout: Duration,
}

impl fmt::Debug for Locker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Locker")
            .field("source", &self.conn.source)
            .field("command_timeout", &self.command_timeout)
            .finish()
    }
}

impl Locker {
    /// A locker on the server `client` points at. Connects on first use.
    pub fn new(client: redis::Client) -> Self {
        Self::with_command_timeout(client, DEFAULT_COMMAND_TIMEOUT)
    }

    /// A locker on the server at `url` (`redis://host:port/`).
    pub fn open(url: &str) -> RedisResult<Self> {
        Ok(Self::new(redis::Client::open(url)?))
    }

    /// A locker whose connecting and commands may each take `timeout` (default 5 s); a
    /// waiting acquire may take its wait timeout plus this.
    pub fn with_command_timeout(client: redis::Client, timeout: Duration) -> Self {
        Self::on(AsyncSource::Server(client), timeout)
    }

    /// A locker on the master the Sentinels of `client` name: asked again at every
    /// connect, so after a failover the locker's next connection goes to the new master,
    /// and its session-bound locks are bound again there (feature `sentinel`).
    #[cfg(feature = "sentinel")]
    pub fn sentinel(client: redis::sentinel::SentinelClient) -> Self {
        Self::on(
            AsyncSource::Sentinel(Arc::new(tokio::sync::Mutex::new(client))),
            DEFAULT_COMMAND_TIMEOUT,
        )
    }

    /// A locker on the Redis Cluster `client` reaches, through the `redis` crate's async
    /// cluster connection: each command goes to the node of its key, following
    /// `MOVED`/`ASK` as the cluster reshards; a wait gets a cluster connection of its own
    /// (feature `cluster-async`). Session-bound locks are refused here (see
    /// [`acquire`](Self::acquire)).
    #[cfg(feature = "cluster-async")]
    pub fn cluster(client: redis::cluster::ClusterClient) -> Self {
        Self::on(
            AsyncSource::Cluster(Box::new(client)),
            DEFAULT_COMMAND_TIMEOUT,
        )
    }

    fn on(source: AsyncSource, timeout: Duration) -> Self {
        Locker {
            conn: Arc::new(Conn::on(source, timeout)),
            command_timeout: timeout,
        }
    }

    /// Acquires `key` as a reader of a read/write lock (`SHARED`).
    pub async fn read_lock(
        &self,
        key: impl AsRef<[u8]>,
        options: &LockOptions,
    ) -> RedisResult<Option<Lock>> {
        self.acquire(key, &options.clone().mode(Mode::Shared)).await
    }

    /// Acquires `key` as the writer of a read/write lock.
    pub async fn write_lock(
        &self,
        key: impl AsRef<[u8]>,
        options: &LockOptions,
    ) -> RedisResult<Option<Lock>> {
        self.acquire(key, &options.clone().mode(Mode::Exclusive))
            .await
    }

    /// Acquires one of at most `permits` places of the counting semaphore `key`.
    pub async fn semaphore(
        &self,
        key: impl AsRef<[u8]>,
        permits: u32,
        options: &LockOptions,
    ) -> RedisResult<Option<Lock>> {
        self.acquire(key, &options.clone().mode(Mode::Semaphore(permits)))
            .await
    }

    /// Acquires `key` with `options`: `Some(lock)` when granted, `None` when another
    /// token holds it (at once, or after the wait timed out).
    ///
    /// Must run inside a tokio runtime (the watchdog and the release on drop are tasks).
    /// If the reply is lost, the lock may have been granted: this releases it, best
    /// effort, before returning the error.
    ///
    /// On a cluster locker ([`Locker::cluster`]) a session-bound lock is refused with an
    /// `InvalidClientConfig` error, before anything is sent: its binding would be to one
    /// of the shared connection's per-node connections, which reconnect on their own
    /// without the locker knowing, so it could not be kept bound. Take session-bound locks
    /// with a [`Locker::new`] on the key's node, or with the blocking
    /// [`crate::Locker::cluster`], whose locks each keep a connection of their own.
    pub async fn acquire(
        &self,
        key: impl AsRef<[u8]>,
        options: &LockOptions,
    ) -> RedisResult<Option<Lock>> {
        if options.session_grace().is_some() && self.conn.source.is_cluster() {
            return Err(RedisError::from((
                ErrorKind::InvalidClientConfig,
                "a session-bound lock needs a connection the locker can keep it bound to",
                "an async cluster locker's connection is one per node, each reconnecting on \
                 its own: use aio::Locker::new on the key's node, or the blocking \
                 Locker::cluster"
                    .to_string(),
            )));
        }
        let key = key.as_ref().to_vec();
        let token = options.token_to_send();
        let cmd = options.acquire_cmd(&key, &token);
        // A wait takes a connection of its own, dropped (and so leaving the server's wait
        // queue) once this returns: after a session-bound grant has been bound to the
        // shared connection, for closing it first would release the lock.
        let mut waited_on = None;
        let reply: RedisResult<Option<Grant>> = match options.wait_timeout() {
            None => self.conn.query(&cmd, self.command_timeout).await,
            Some(_) => {
                within(options.reply_limit(self.command_timeout), async {
                    let mut con = self.conn.open().await?;
                    let reply = cmd.query_async(&mut con).await;
                    waited_on = Some(con);
                    reply
                })
                .await
            }
        };
        let grant = match reply {
            Ok(Some(grant)) => grant,
            Ok(None) => return Ok(None),
            Err(err) => {
                if outcome_unknown(&err) {
                    let _: RedisResult<bool> = self
                        .conn
                        .query(&release_cmd(&key, &token), self.command_timeout)
                        .await;
                }
                return Err(err);
            }
        };
        let (lost, _) = watch::channel(None);
        // Granted on the shared connection, the lock is bound to it; granted after a wait
        // on a connection of its own, it is bound to the shared one before that closes.
        let bound_to = match options.wait_timeout() {
            None => self.conn.generation.load(Ordering::SeqCst),
            Some(_) => UNBOUND,
        };
        let shared = Arc::new(Shared {
            conn: self.conn.clone(),
            command_timeout: self.command_timeout,
            key,
            token: grant.token,
            fence: grant.fence,
            lost,
            session: options.session_grace(),
            mode: options.lock_mode(),
            ttl: options.ttl(),
            bound_to: AtomicU64::new(bound_to),
        });
        shared.stay_bound().await?;
        drop(waited_on);
        let watchdog = options
            .watchdog_interval()
            .map(|every| tokio::spawn(watchdog(shared.clone(), every, options.ttl())));
        Ok(Some(Lock {
            shared,
            fence: grant.fence,
            ttl: options.ttl(),
            watchdog,
            released: false,
        }))
    }
}

/// What a guard and its watchdog task share.
struct Shared {
    conn: Arc<Conn>,
    command_timeout: Duration,
    key: Vec<u8>,
    token: Vec<u8>,
    /// The fence of the grant: a reclaim must find the same one.
    fence: u64,
    lost: watch::Sender<Option<LostReason>>,
    /// The grace of a lock bound to the locker's shared connection.
    session: Option<Duration>,
    /// How the lock is held, for a reclaim.
    mode: Mode,
    /// The lock's TTL, for a reclaim.
    ttl: Duration,
    /// The generation of the shared connection the lock is bound to.
    bound_to: AtomicU64,
}

/// `Shared::bound_to` of a session-bound lock not yet bound to the shared connection.
const UNBOUND: u64 = u64::MAX;

impl Shared {
    /// A session-bound lock follows the locker's shared connection: granted on another
    /// connection, or the shared one reconnected since, its token acquires it again on
    /// the current one (same fence, within the grace). If that finds it gone, the lock
    /// counts as lost.
    async fn stay_bound(&self) -> RedisResult<()> {
        let Some(grace) = self.session else {
            return Ok(());
        };
        // Opens the shared connection if it is not open, so that its generation is known.
        let _ = self.conn.get().await?;
        let current = self.conn.generation.load(Ordering::SeqCst);
        if self.bound_to.load(Ordering::SeqCst) == current {
            return Ok(());
        }
        let cmd = acquire_mode_cmd(
            &self.key,
            self.ttl,
            Some(&self.token),
            None,
            Some(grace),
            self.mode,
        );
        let reclaimed: Option<Grant> = self.conn.query(&cmd, self.command_timeout).await?;
        match reclaimed {
            Some(grant) if grant.fence == self.fence => {}
            Some(_) => {
                // The lock was released in between and this took it anew: not the same
                // lock, whatever was done under the old one may overlap another holder.
                self.set_lost(LostReason::NotHeld);
                let _: RedisResult<bool> = self
                    .conn
                    .query(&release_cmd(&self.key, &self.token), self.command_timeout)
                    .await;
            }
            None => self.set_lost(LostReason::NotHeld),
        }
        self.bound_to.store(current, Ordering::SeqCst);
        Ok(())
    }

    fn set_lost(&self, reason: LostReason) {
        self.lost.send_if_modified(|slot| {
            if slot.is_none() {
                *slot = Some(reason);
                true
            } else {
                false
            }
        });
    }

    fn lost_error(&self, reason: LostReason) -> LockLost {
        LockLost {
            key: self.key.clone(),
            reason,
        }
    }

    async fn extend(&self, ttl: Duration) -> RedisResult<bool> {
        self.stay_bound().await?;
        let extended: bool = self
            .conn
            .query(
                &extend_cmd(&self.key, &self.token, ttl),
                self.command_timeout,
            )
            .await?;
        if !extended {
            self.set_lost(LostReason::NotHeld);
        }
        Ok(extended)
    }

    async fn release(&self) -> RedisResult<bool> {
        self.conn
            .query(&release_cmd(&self.key, &self.token), self.command_timeout)
            .await
    }
}

impl Locker {
    /// `LOCK.INFO key` on the locker's shared connection.
    pub(crate) async fn info(&self, key: &[u8]) -> RedisResult<Option<LockInfo>> {
        self.conn.query(&info_cmd(key), self.command_timeout).await
    }

    /// A new connection of the locker's source, whose replies the caller bounds.
    pub(crate) async fn open_link(&self) -> RedisResult<AsyncLink> {
        self.conn.open().await
    }

    /// How long connecting and each command may take.
    pub(crate) fn command_timeout(&self) -> Duration {
        self.command_timeout
    }
}

/// Extends the lock every `every` until aborted, the lock is found gone, or the server
/// stays unreachable for a whole TTL.
async fn watchdog(shared: Arc<Shared>, every: Duration, ttl: Duration) {
    let mut schedule = Schedule::new(every, ttl);
    let mut next = schedule.first();
    loop {
        tokio::time::sleep(next).await;
        let sent = Instant::now();
        match schedule.after(sent, &shared.extend(ttl).await) {
            Next::Wait(delay) => next = delay,
            Next::Stop => return,
            Next::Lost(reason) => {
                shared.set_lost(reason);
                return;
            }
        }
    }
}

/// A held lock on an async connection. Released when dropped (by a task spawned on the
/// current tokio runtime; outside a runtime the TTL frees it); see
/// [`release`](Self::release) to learn whether it was still held.
///
/// With a watchdog ([`LockOptions::watchdog`]) a task extends the lock until the guard
/// is released or dropped; [`lost`](Self::lost) resolves if the lock is lost meanwhile.
pub struct Lock {
    shared: Arc<Shared>,
    fence: u64,
    ttl: Duration,
    watchdog: Option<JoinHandle<()>>,
    released: bool,
}

impl fmt::Debug for Lock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        debug_lock(
            f,
            &self.shared.key,
            self.fence,
            self.ttl,
            self.watchdog.is_some(),
        )
    }
}

impl Lock {
    lock_accessors!();

    /// Sets the lock's remaining time to `ttl`. `false`: no longer held by this token,
    /// and the guard counts as lost.
    pub async fn extend(&self, ttl: Duration) -> RedisResult<bool> {
        self.shared.extend(ttl).await
    }

    /// `LOCK.INFO` of the lock's key (`None` if the key is gone).
    pub async fn info(&self) -> RedisResult<Option<LockInfo>> {
        self.shared
            .conn
            .query(&info_cmd(&self.shared.key), self.shared.command_timeout)
            .await
    }

    /// Runs `cmd` fenced by this lock (`LOCK.DO`), as [`crate::Lock::run`]: its reply,
    /// or an error with code `NOTHELD` (nothing ran; the guard counts as lost).
    pub async fn run<T: FromRedisValue>(&self, cmd: &redis::Cmd) -> RedisResult<T> {
        let shared = &self.shared;
        shared.stay_bound().await?;
        let result = shared
            .conn
            .query(
                &do_cmd(&shared.key, &shared.token, cmd),
                shared.command_timeout,
            )
            .await;
        if matches!(&result, Err(err) if err.code() == Some("NOTHELD")) {
            shared.set_lost(LostReason::NotHeld);
        }
        result
    }

    /// Publishes `value` in place of the lock's published value (an idempotent
    /// re-acquire with `VALUE` on the locker's shared connection: same fence, TTL reset,
    /// bound anew if session-bound). `false`: no longer held by this token, and the guard
    /// counts as lost.
    pub async fn proclaim(&self, value: &[u8]) -> RedisResult<bool> {
        let shared = &self.shared;
        shared.stay_bound().await?;
        let mut cmd = acquire_mode_cmd(
            &shared.key,
            shared.ttl,
            Some(&shared.token),
            None,
            shared.session,
            shared.mode,
        );
        cmd.arg("VALUE").arg(value);
        let granted: Option<Grant> = shared.conn.query(&cmd, shared.command_timeout).await?;
        let held = match granted {
            Some(grant) if grant.fence == self.fence => true,
            Some(_) => {
                // The lock had gone and the key was free: this took it anew. Give it back.
                let _ = shared.release().await;
                false
            }
            None => false,
        };
        if !held {
            shared.set_lost(LostReason::NotHeld);
        }
        Ok(held)
    }

    /// Whether the lock is known to be lost.
    pub fn is_lost(&self) -> bool {
        self.shared.lost.borrow().is_some()
    }

    /// `Err` once the lock is known to be lost: stop touching the protected resource.
    pub fn check(&self) -> Result<(), LockLost> {
        match self.shared.lost.borrow().clone() {
            Some(reason) => Err(self.shared.lost_error(reason)),
            None => Ok(()),
        }
    }

    /// Resolves when the lock is known to be lost; never while it is held. Race it
    /// against the work with `tokio::select!`.
    pub async fn lost(&self) -> LockLost {
        let mut changes = self.shared.lost.subscribe();
        match changes.wait_for(Option::is_some).await {
            Ok(reason) => {
                let reason = reason.clone().expect("waited for Some");
                self.shared.lost_error(reason)
            }
            // The sender lives in `self.shared`, so it cannot be gone while we borrow it.
            Err(_) => std::future::pending().await,
        }
    }

    /// Stops the watchdog and releases the lock. `Ok(true)`: it was still held and is
    /// released; `Ok(false)`: it had already expired or been taken over.
    pub async fn release(mut self) -> RedisResult<bool> {
        self.released = true;
        if let Some(watchdog) = self.watchdog.take() {
            watchdog.abort();
            // Wait until the task is gone (an aborted task ends at its next await), so
            // no extend of the watchdog can follow the release.
            let _ = watchdog.await;
        }
        self.shared.release().await
    }
}

impl Drop for Lock {
    fn drop(&mut self) {
        if let Some(watchdog) = self.watchdog.take() {
            watchdog.abort();
        }
        if !self.released
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            let shared = self.shared.clone();
            runtime.spawn(async move {
                let _ = shared.release().await;
            });
        }
    }
}

/// Redlock over async connections, one shared connection per master; see
/// [`crate::redlock`] for the algorithm. Cheap to clone (shared).
#[derive(Clone)]
pub struct Redlock {
    instances: Arc<Vec<Conn>>,
}

impl fmt::Debug for Redlock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        debug_redlock(f, self.masters())
    }
}

impl Redlock {
    /// Redlock over these independent masters. Connects on first use, each connection
    /// attempt bounded by the options' instance timeout.
    ///
    /// # Panics
    ///
    /// If `clients` is empty.
    pub fn new(clients: Vec<redis::Client>) -> Self {
        Redlock {
            instances: instances(clients, |client| Conn::new(client, DEFAULT_COMMAND_TIMEOUT)),
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
    pub async fn lock(
        &self,
        key: impl AsRef<[u8]>,
        options: &RedlockOptions,
    ) -> Result<RedlockGuard, RedlockError> {
        let key = key.as_ref().to_vec();
        let token = new_token();
        let cmd = acquire_cmd(&key, options.ttl, Some(&token), None);
        let mut attempts = Attempts::new(options, self.masters());
        for attempt in 1..=options.attempts {
            let started = Instant::now();
            let results = self
                .on_all::<Option<Grant>>(cmd.clone(), options.instance_timeout)
                .await;
            if let Some(won) = attempts.judge(results, started.elapsed()) {
                return Ok(RedlockGuard {
                    redlock: self.clone(),
                    held: Held::new(key, token, started, won, options),
                    released: false,
                });
            }
            self.release_all(&key, &token, options.instance_timeout)
                .await;
            if let Some(pause) = attempts.pause_after(attempt) {
                tokio::time::sleep(pause).await;
            }
        }
        Err(attempts.failed())
    }

    /// Runs `cmd` on every master at once, each within `timeout` (connecting included).
    async fn on_all<T: FromRedisValue + Send + 'static>(
        &self,
        cmd: redis::Cmd,
        timeout: Duration,
    ) -> Vec<RedisResult<T>> {
        let mut calls = JoinSet::new();
        for index in 0..self.instances.len() {
            let instances = self.instances.clone();
            let cmd = cmd.clone();
            calls.spawn(async move { (index, instances[index].query::<T>(&cmd, timeout).await) });
        }
        let mut results: Vec<RedisResult<T>> = (0..self.instances.len())
            .map(|_| Err(timed_out("Redlock call")))
            .collect();
        while let Some(done) = calls.join_next().await {
            if let Ok((index, result)) = done {
                results[index] = result;
            }
        }
        results
    }

    async fn release_all(&self, key: &[u8], token: &[u8], timeout: Duration) -> usize {
        confirmed(&self.on_all::<bool>(release_cmd(key, token), timeout).await)
    }
}

/// A Redlock held on a quorum of masters, on async connections. Released on all masters
/// when dropped (by a task on the current tokio runtime).
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

    /// Extends the lock to `ttl` on every master; `true` if a quorum extended it in time
    /// (the validity restarts), `false` leaves the old validity in place.
    pub async fn extend(&mut self, ttl: Duration) -> bool {
        let started = Instant::now();
        let replies = self
            .redlock
            .on_all::<bool>(
                extend_cmd(&self.held.key, &self.held.token, ttl),
                self.held.instance_timeout,
            )
            .await;
        self.held.extended(ttl, started, &replies)
    }

    /// Releases the lock on every master; returns how many confirmed the release.
    pub async fn release(mut self) -> usize {
        self.released = true;
        self.redlock
            .release_all(&self.held.key, &self.held.token, self.held.instance_timeout)
            .await
    }
}

impl Drop for RedlockGuard {
    fn drop(&mut self) {
        if !self.released
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            let redlock = self.redlock.clone();
            let key = std::mem::take(&mut self.held.key);
            let token = std::mem::take(&mut self.held.token);
            let timeout = self.held.instance_timeout;
            runtime.spawn(async move {
                redlock.release_all(&key, &token, timeout).await;
            });
        }
    }
}
