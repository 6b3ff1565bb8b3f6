//! `Locker`: takes locks on blocking connections (waiting, retrying, re-acquiring).

use super::shared::Watchdog;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redis::RedisResult;

use super::conn::{Link, Links, Source};
use super::lock::Lock;
use super::replicated::replicated;
use super::shared::Shared;
use crate::commands::{Grant, Mode, release_cmd};
use crate::guard::{DEFAULT_COMMAND_TIMEOUT, outcome_unknown};
use crate::lost::LostFlag;
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
    pub(super) links: Arc<Links>,
    pub(super) command_timeout: Duration,
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

    pub(super) fn with_source(source: Source) -> Self {
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
    /// orders never deadlock. [`Mode::Shared`] reads every key; a semaphore and a
    /// published value are for one key. A watchdog renews every key together. On a
    /// cluster the keys must share a slot (a hash tag).
    pub fn lock_all(
        &self,
        keys: &[&[u8]],
        options: &LockOptions,
    ) -> RedisResult<Option<crate::MultiLock>> {
        super::multi::lock_all(&self.links, self.command_timeout, keys, options)
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
        let started = Instant::now();
        let mut attempt = options.clone();
        let (con, grant) = loop {
            match self.grant(&key, &token, &attempt) {
                Err(err) => attempt = attempt.again(err, options, started)?,
                Ok(None) => return Ok(None),
                Ok(Some(granted)) => break granted,
            }
        };
        self.hold(key, con, grant, options)
    }

    /// One acquire with the `WAIT` its replicas need: the grant and its connection, or
    /// `None` when busy; a grant too few replicas acknowledged is released at once (an
    /// error `is_not_replicated` recognizes).
    fn grant(
        &self,
        key: &[u8],
        token: &[u8],
        options: &LockOptions,
    ) -> RedisResult<Option<(Link, Grant)>> {
        let mut con = self.links.take(self.command_timeout)?;
        // Without `WAIT` the reply's limit is the command timeout `take` set: the link
        // knows it has it, and makes no system call (nor does `hold`).
        con.set_read_timeout(options.reply_limit(self.command_timeout))?;
        let cmd = options.acquire_cmd(key, token);
        let outcome = replicated(
            &self.links,
            &mut con,
            key,
            vec![cmd],
            options.policy(),
            options.ttl(),
        );
        let reply = outcome.and_then(|mut outcome| {
            Ok((
                outcome.first::<Option<Grant>>()?,
                outcome.missing(key, "granted"),
            ))
        });
        match reply {
            Ok((Some(grant), None)) => Ok(Some((con, grant))),
            Ok((Some(_), Some(missing))) => {
                let _: RedisResult<bool> = release_cmd(key, token).query(&mut con);
                self.links.give_back(con);
                Err(missing)
            }
            Ok((None, _)) => {
                self.links.give_back(con);
                Ok(None)
            }
            Err(err) => {
                if outcome_unknown(&err) {
                    drop(con);
                    if let Ok(mut con) = self.links.fresh(self.command_timeout) {
                        let _: RedisResult<bool> = release_cmd(key, token).query(&mut con);
                    }
                }
                Err(err)
            }
        }
    }

    /// The guard of `grant`, held on `con`.
    fn hold(
        &self,
        key: Vec<u8>,
        con: Link,
        grant: Grant,
        options: &LockOptions,
    ) -> RedisResult<Option<Lock>> {
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
            policy: options.policy(),
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
