//! Lock guards on blocking connections.

use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use redis::{FromRedisValue, RedisResult};

use crate::commands::{
    Grant, LockInfo, Mode, acquire_mode_cmd, do_cmd, extend_cmd, info_cmd, release_cmd,
};
use crate::guard::{
    DEFAULT_COMMAND_TIMEOUT, Next, Schedule, debug_lock, lock_accessors, outcome_unknown,
};
use crate::link::{Link, Links, Source};
use crate::lost::{LockLost, LostFlag, LostReason};
use crate::options::LockOptions;

/// Takes locks on one Redis server, or a Redis Cluster, through blocking connections.
///
/// Each held [`Lock`] has a connection of its own (a waiting acquire blocks its
/// connection for the wait, a session-bound lock lives with its connection, and the
/// watchdog shares the guard's connection). Released locks give their connection back:
/// the locker keeps a few idle ones for the next locks, so taking a lock opens no new
/// connection once the locker is warm. Cheap to clone: clones share the connections.
#[derive(Clone, Debug)]
pub struct Locker {
    links: Arc<Links>,
    command_timeout: Duration,
}

impl Locker {
    /// A locker on the server `client` points at.
    pub fn new(client: redis::Client) -> Self {
        Self::with_source(Source::Server(client))
    }

    /// A locker on the master that `client`'s Sentinels name, asked again for each new
    /// connection, so that locks taken after a failover go to the new master (feature
    /// `sentinel`).
    #[cfg(feature = "sentinel")]
    pub fn sentinel(client: redis::sentinel::SentinelClient) -> Self {
        Self::with_source(Source::Sentinel(Arc::new(Mutex::new(client))))
    }

    /// A locker that borrows its connections from the program's r2d2 `pool` (feature
    /// `r2d2`): a held lock keeps its connection until it is released, then the
    /// connection goes back to the pool.
    #[cfg(feature = "r2d2")]
    pub fn pooled(pool: r2d2::Pool<redis::Client>) -> Self {
        Self::with_source(Source::Pool(pool))
    }

    /// A locker on the Redis Cluster `client` reaches: each command goes to the node of
    /// its key, following `MOVED`/`ASK` as the cluster reshards (feature `cluster`).
    #[cfg(feature = "cluster")]
    pub fn cluster(client: redis::cluster::ClusterClient) -> Self {
        Self::with_source(Source::Cluster(Box::new(client)))
    }

    fn with_source(source: Source) -> Self {
        Locker {
            links: Arc::new(Links::new(source)),
            command_timeout: DEFAULT_COMMAND_TIMEOUT,
        }
    }

    /// A connection of the locker's, idle or new.
    pub(crate) fn link(&self) -> RedisResult<Link> {
        self.links.take(self.command_timeout)
    }

    /// A new connection, never an idle one.
    pub(crate) fn fresh_link(&self) -> RedisResult<Link> {
        self.links.fresh(self.command_timeout)
    }

    /// Gives a connection back for the next lock.
    pub(crate) fn give_back(&self, link: Link) {
        self.links.give_back(link);
    }

    /// How long connecting and each command may take.
    pub(crate) fn command_timeout(&self) -> Duration {
        self.command_timeout
    }

    /// A locker on the server at `url` (`redis://host:port/`).
    pub fn open(url: &str) -> RedisResult<Self> {
        Ok(Self::new(redis::Client::open(url)?))
    }

    /// How long connecting and each command may take (default 5 s). A waiting acquire
    /// may take its wait timeout plus this.
    pub fn with_command_timeout(mut self, timeout: Duration) -> Self {
        self.command_timeout = timeout;
        self
    }

    /// Acquires `key` as a reader of a read/write lock (`SHARED`): beside other readers,
    /// never beside a writer. The same guard as [`acquire`](Self::acquire).
    pub fn read_lock(
        &self,
        key: impl AsRef<[u8]>,
        options: &LockOptions,
    ) -> RedisResult<Option<Lock>> {
        self.acquire(key, &options.clone().mode(Mode::Shared))
    }

    /// Acquires `key` as the writer of a read/write lock: alone, after the readers that
    /// came before it (readers that come after it wait for it).
    pub fn write_lock(
        &self,
        key: impl AsRef<[u8]>,
        options: &LockOptions,
    ) -> RedisResult<Option<Lock>> {
        self.acquire(key, &options.clone().mode(Mode::Exclusive))
    }

    /// Acquires one of at most `permits` places of the counting semaphore `key`
    /// (`LIMIT n`); every holder of the key must give the same `permits`.
    pub fn semaphore(
        &self,
        key: impl AsRef<[u8]>,
        permits: u32,
        options: &LockOptions,
    ) -> RedisResult<Option<Lock>> {
        self.acquire(key, &options.clone().mode(Mode::Semaphore(permits)))
    }

    /// Acquires every key of `keys` at once, or none (`LOCK.ACQUIREALL`), with one token
    /// and a fence per key: `Some(lock)` when granted, `None` when a key is busy (at once,
    /// or after the wait timed out). With a wait, the request queues on every key and
    /// holds none of them meanwhile, so two callers that take the same keys in different
    /// orders never deadlock. [`Mode::Shared`] reads every key; a semaphore, a published
    /// value and the watchdog are for one key. On a cluster the keys must share a slot
    /// (a hash tag).
    pub fn lock_all(
        &self,
        keys: &[&[u8]],
        options: &LockOptions,
    ) -> RedisResult<Option<crate::MultiLock>> {
        crate::multi::lock_all(&self.links, self.command_timeout, keys, options)
    }

    /// Acquires `key` with `options`: `Some(lock)` when granted, `None` when another
    /// token holds it (at once, or after the wait timed out).
    ///
    /// If the reply is lost (a timeout or a dropped connection), the lock may have been
    /// granted: this releases it on a new connection, best effort, before returning the
    /// error. The TTL bounds the damage if even that fails.
    pub fn acquire(
        &self,
        key: impl AsRef<[u8]>,
        options: &LockOptions,
    ) -> RedisResult<Option<Lock>> {
        let key = key.as_ref().to_vec();
        let token = options.token_to_send();
        let mut con = self.links.take(self.command_timeout)?;
        con.set_read_timeout(options.reply_limit(self.command_timeout))?;
        let cmd = options.acquire_cmd(&key, &token);
        let grant = match cmd.query::<Option<Grant>>(&mut con) {
            Ok(Some(grant)) => grant,
            Ok(None) => {
                self.links.give_back(con);
                return Ok(None);
            }
            Err(err) => {
                if outcome_unknown(&err) {
                    drop(con);
                    if let Ok(mut con) = self.links.fresh(self.command_timeout) {
                        let _: RedisResult<bool> = release_cmd(&key, &token).query(&mut con);
                    }
                }
                return Err(err);
            }
        };
        con.set_read_timeout(Some(self.command_timeout))?;
        let shared = Arc::new(Shared {
            links: self.links.clone(),
            command_timeout: self.command_timeout,
            key,
            token: grant.token,
            con: Mutex::new(Some(con)),
            lost: LostFlag::default(),
            fence: grant.fence,
            session: options.session_grace(),
            mode: options.lock_mode(),
            ttl: options.ttl(),
        });
        let watchdog = options
            .watchdog_interval()
            .map(|every| Watchdog::start(shared.clone(), every, options.ttl()));
        Ok(Some(Lock {
            shared,
            fence: grant.fence,
            ttl: options.ttl(),
            watchdog,
            released: false,
        }))
    }
}

/// What a guard and its watchdog thread share.
struct Shared {
    links: Arc<Links>,
    command_timeout: Duration,
    key: Vec<u8>,
    token: Vec<u8>,
    /// The guard's connection; `None` after an error, reopened on next use.
    con: Mutex<Option<Link>>,
    lost: LostFlag,
    /// The fence of the grant: a reclaim must find the same one.
    fence: u64,
    /// The grace of a lock bound to the guard's connection.
    session: Option<Duration>,
    /// How the lock is held, for a reclaim.
    mode: Mode,
    /// The lock's TTL, for a reclaim.
    ttl: Duration,
}

impl Shared {
    fn query<T: FromRedisValue>(&self, cmd: &redis::Cmd) -> RedisResult<T> {
        self.query_within(cmd, self.command_timeout)
    }

    /// `query`, its answer awaited for at most `limit` (and the command timeout).
    fn query_within<T: FromRedisValue>(&self, cmd: &redis::Cmd, limit: Duration) -> RedisResult<T> {
        let mut slot = self.con.lock().unwrap_or_else(|e| e.into_inner());
        let con = match slot.as_mut() {
            Some(con) => con,
            None => {
                let mut con = self.links.take(self.command_timeout)?;
                self.reclaim(&mut con)?;
                slot.insert(con)
            }
        };
        let limited = limit < self.command_timeout;
        if limited {
            con.set_read_timeout(Some(limit))?;
        }
        let result = cmd.query(con);
        if limited && result.is_ok() {
            con.set_read_timeout(Some(self.command_timeout))?;
        }
        if result.is_err() {
            // After a timeout the connection may still deliver the late reply as the
            // answer to the next command: never reuse it.
            *slot = None;
        }
        result
    }

    /// A session-bound lock whose connection was lost is bound to the new one `con`
    /// (its token acquires it again: same fence, while the grace runs); if that finds
    /// it gone, the lock counts as lost.
    fn reclaim(&self, con: &mut Link) -> RedisResult<()> {
        let Some(grace) = self.session else {
            return Ok(());
        };
        let cmd = acquire_mode_cmd(
            &self.key,
            self.ttl,
            Some(&self.token),
            None,
            Some(grace),
            self.mode,
        );
        match cmd.query::<Option<Grant>>(con)? {
            Some(grant) if grant.fence == self.fence => {}
            Some(_) => {
                // Released in between and taken anew: not the same lock.
                self.lost.set(LostReason::NotHeld);
                let _: RedisResult<bool> = release_cmd(&self.key, &self.token).query(con);
            }
            None => self.lost.set(LostReason::NotHeld),
        }
        Ok(())
    }

    fn extend(&self, ttl: Duration) -> RedisResult<bool> {
        self.extend_within(ttl, self.command_timeout)
    }

    /// `extend`, its answer awaited for at most `limit`.
    fn extend_within(&self, ttl: Duration, limit: Duration) -> RedisResult<bool> {
        let extended: bool = self.query_within(&extend_cmd(&self.key, &self.token, ttl), limit)?;
        if !extended {
            self.lost.set(LostReason::NotHeld);
        }
        Ok(extended)
    }

    fn lost(&self) -> Option<LockLost> {
        self.lost.get().map(|reason| LockLost {
            key: self.key.clone(),
            reason,
        })
    }
}

/// The background thread that extends a lock while its guard lives.
struct Watchdog {
    stop: mpsc::Sender<()>,
    thread: JoinHandle<()>,
}

impl Watchdog {
    fn start(shared: Arc<Shared>, every: Duration, ttl: Duration) -> Self {
        let (stop, stopped) = mpsc::channel();
        let thread = thread::Builder::new()
            .name("redis-lock-watchdog".into())
            .spawn(move || {
                let mut schedule = Schedule::new(every, ttl);
                let mut next = schedule.first();
                loop {
                    match stopped.recv_timeout(next) {
                        Err(RecvTimeoutError::Timeout) => {}
                        Ok(()) | Err(RecvTimeoutError::Disconnected) => return,
                    }
                    let sent = Instant::now();
                    let extended = shared.extend_within(ttl, schedule.answer_limit());
                    match schedule.after(sent, &extended) {
                        Next::Wait(delay) => next = delay,
                        Next::Stop => return,
                        Next::Lost(reason) => {
                            shared.lost.set(reason);
                            return;
                        }
                    }
                }
            })
            .expect("spawn the watchdog thread");
        Watchdog { stop, thread }
    }

    fn stop(self) {
        let _ = self.stop.send(());
        let _ = self.thread.join();
    }
}

/// A held lock. Released when dropped; see [`release`](Self::release) to learn whether
/// it was still held.
///
/// With a watchdog ([`LockOptions::watchdog`]), a background thread extends the lock
/// until the guard is released or dropped. If an extend finds the lock gone, or the
/// server stays unreachable until the TTL runs out, the guard reports it: poll
/// [`check`](Self::check) before each step of your work, or block on
/// [`wait_lost`](Self::wait_lost) in a supervising thread.
pub struct Lock {
    shared: Arc<Shared>,
    fence: u64,
    ttl: Duration,
    watchdog: Option<Watchdog>,
    released: bool,
}

impl std::fmt::Debug for Lock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
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

    /// Sets the lock's remaining time to `ttl` (`LOCK.EXTEND`). `false` means the lock is
    /// no longer held by this token; the guard then counts as lost.
    pub fn extend(&self, ttl: Duration) -> RedisResult<bool> {
        self.shared.extend(ttl)
    }

    /// `LOCK.INFO` of the lock's key (`None` if the key is gone).
    pub fn info(&self) -> RedisResult<Option<LockInfo>> {
        self.shared.query(&info_cmd(&self.shared.key))
    }

    /// Runs `cmd` fenced by this lock (`LOCK.DO`): atomically, and only while this
    /// token holds the lock; its reply as `T`. If the lock is no longer held (it expired,
    /// was released or taken over), nothing runs: an error with code `NOTHELD`, and the
    /// guard counts as lost. Put the data under the lock's hash tag on a cluster.
    pub fn run<T: FromRedisValue>(&self, cmd: &redis::Cmd) -> RedisResult<T> {
        let result = self
            .shared
            .query(&do_cmd(&self.shared.key, &self.shared.token, cmd));
        if matches!(&result, Err(err) if err.code() == Some("NOTHELD")) {
            self.shared.lost.set(LostReason::NotHeld);
        }
        result
    }

    /// Publishes `value` in place of the lock's published value (an idempotent
    /// re-acquire with `VALUE`, on the guard's connection: same fence, TTL reset, bound
    /// anew if session-bound). `false` means the lock is no longer held by this token;
    /// the guard then counts as lost.
    pub fn proclaim(&self, value: &[u8]) -> RedisResult<bool> {
        let mut cmd = acquire_mode_cmd(
            &self.shared.key,
            self.shared.ttl,
            Some(&self.shared.token),
            None,
            self.shared.session,
            self.shared.mode,
        );
        cmd.arg("VALUE").arg(value);
        let held = match self.shared.query::<Option<Grant>>(&cmd)? {
            Some(grant) if grant.fence == self.fence => true,
            Some(_) => {
                // The lock had gone and the key was free: this took it anew. Give it back.
                let _: RedisResult<bool> = self
                    .shared
                    .query(&release_cmd(&self.shared.key, &self.shared.token));
                false
            }
            None => false,
        };
        if !held {
            self.shared.lost.set(LostReason::NotHeld);
        }
        Ok(held)
    }

    /// Whether the lock is known to be lost (an extend found it gone, or the watchdog
    /// could not reach the server for a whole TTL).
    pub fn is_lost(&self) -> bool {
        self.shared.lost.get().is_some()
    }

    /// `Err` once the lock is known to be lost: stop touching the protected resource.
    pub fn check(&self) -> Result<(), LockLost> {
        match self.shared.lost() {
            Some(lost) => Err(lost),
            None => Ok(()),
        }
    }

    /// Blocks until the lock is known to be lost, or `timeout` passes (`None`).
    pub fn wait_lost(&self, timeout: Duration) -> Option<LockLost> {
        self.shared.lost.wait(timeout).map(|reason| LockLost {
            key: self.shared.key.clone(),
            reason,
        })
    }

    /// Stops the watchdog and releases the lock (`LOCK.RELEASE`). `Ok(true)`: the lock was
    /// still held and is released; `Ok(false)`: it had already expired or been taken
    /// over, so whatever was done under it may have overlapped with another holder.
    pub fn release(mut self) -> RedisResult<bool> {
        self.released = true;
        self.release_now()
    }

    fn release_now(&mut self) -> RedisResult<bool> {
        if let Some(watchdog) = self.watchdog.take() {
            watchdog.stop();
        }
        let released = self
            .shared
            .query(&release_cmd(&self.shared.key, &self.shared.token))?;
        // The lock is gone from this connection: it may serve the next lock.
        let con = self
            .shared
            .con
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(con) = con {
            self.shared.links.give_back(con);
        }
        Ok(released)
    }
}

impl Drop for Lock {
    fn drop(&mut self) {
        if !self.released {
            // Best effort: if the server cannot be reached, the TTL frees the lock.
            let _ = self.release_now();
        }
    }
}
