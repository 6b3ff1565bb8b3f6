//! `Locker`: acquires locks (waiting, retrying, re-acquiring) on the shared connection.

use super::conn::AsyncLink;
use super::shared::Shared;

use super::conn::AsyncSource;
use super::conn::Conn;
use super::lock::Lock;
use super::replicated::{OWN, replicated, replicated_on};
use super::shared::UNBOUND;
use super::shared::watchdog;
use super::within;
use crate::commands::Grant;
use crate::commands::LockInfo;
use crate::commands::Mode;
use crate::commands::info_cmd;
use crate::commands::release_cmd;
use crate::guard::DEFAULT_COMMAND_TIMEOUT;
use crate::guard::outcome_unknown;
use crate::options::LockOptions;
use redis::ErrorKind;
use redis::RedisError;
use redis::RedisResult;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering;
use std::time::Duration;
use std::time::Instant;
use tokio::sync::watch;

/// Takes locks on one Redis server, or a Redis Cluster, through async connections. Cheap
/// to clone (shared).
#[derive(Clone)]
pub struct Locker {
    pub(super) conn: Arc<Conn>,
    pub(super) command_timeout: Duration,
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

    pub(super) fn on(source: AsyncSource, timeout: Duration) -> Self {
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
        let started = Instant::now();
        let mut attempt = options.clone();
        // A wait takes a connection of its own, dropped (and so leaving the server's wait
        // queue) once this returns: after a session-bound grant has been bound to the
        // shared connection, for closing it first would release the lock.
        let (grant, waited_on) = loop {
            match self.grant(&key, &token, &attempt).await {
                Err(err) => attempt = attempt.again(err, options, started)?,
                Ok(None) => return Ok(None),
                Ok(Some(granted)) => break granted,
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
            policy: options.policy(),
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

impl Locker {
    /// One acquire with the `WAIT` its replicas need, on the shared connection or (with a
    /// wait) on one of its own: the grant and that connection, or `None` when busy; a
    /// grant too few replicas acknowledged is released at once (an error
    /// `is_not_replicated` recognizes).
    async fn grant(
        &self,
        key: &[u8],
        token: &[u8],
        options: &LockOptions,
    ) -> RedisResult<Option<(Grant, Option<AsyncLink>)>> {
        let cmd = options.acquire_cmd(key, token);
        let (policy, ttl) = (options.policy(), options.ttl());
        let mut waited_on = None;
        let outcome = match options.wait_timeout() {
            None => {
                replicated(
                    &self.conn,
                    key,
                    vec![cmd],
                    policy,
                    ttl,
                    self.command_timeout,
                )
                .await
            }
            Some(_) => {
                within(options.reply_limit(self.command_timeout), async {
                    let mut con = self.conn.open().await?;
                    let outcome =
                        replicated_on(&self.conn, OWN, &mut con, key, vec![cmd], policy, ttl).await;
                    waited_on = Some(con);
                    outcome
                })
                .await
            }
        };
        let reply = outcome.and_then(|mut outcome| {
            Ok((
                outcome.first::<Option<Grant>>()?,
                outcome.missing(key, "granted"),
            ))
        });
        match reply {
            Ok((Some(grant), None)) => Ok(Some((grant, waited_on))),
            Ok((Some(_), Some(missing))) => {
                let release = release_cmd(key, token);
                let _: RedisResult<bool> = match waited_on.as_mut() {
                    Some(con) => within(Some(self.command_timeout), release.query_async(con)).await,
                    None => self.conn.query(&release, self.command_timeout).await,
                };
                Err(missing)
            }
            Ok((None, _)) => Ok(None),
            Err(err) => {
                if outcome_unknown(&err) {
                    let _: RedisResult<bool> = self
                        .conn
                        .query(&release_cmd(key, token), self.command_timeout)
                        .await;
                }
                Err(err)
            }
        }
    }

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
