//! The async Redlock: one lock across independent masters, and its guard.

use super::conn::Conn;
use super::replicated::replicated;
use super::timed_out;
use crate::commands::Grant;
use crate::commands::acquire_cmd;
use crate::commands::extend_cmd;
use crate::commands::release_cmd;
use crate::guard::DEFAULT_COMMAND_TIMEOUT;
use crate::redlock::Attempts;
use crate::redlock::Held;
use crate::redlock::RedlockError;
use crate::redlock::RedlockOptions;
use crate::redlock::clients;
use crate::redlock::confirmed;
use crate::redlock::debug_redlock;
use crate::redlock::instances;
use crate::redlock::redlock_guard_accessors;
use crate::token::new_token;
use redis::FromRedisValue;
use redis::RedisResult;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;
use std::time::Instant;
use tokio::task::JoinSet;

/// Redlock over async connections, one shared connection per master; see
/// [`crate::redlock`] for the algorithm. Cheap to clone (shared).
#[derive(Clone)]
pub struct Redlock {
    pub(super) instances: Arc<Vec<Conn>>,
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
            let results = self.grant_on_all(&key, &token, &cmd, options).await;
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
    pub(super) async fn on_all<T: FromRedisValue + Send + 'static>(
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

    /// The acquire `cmd` on every master at once, each within its timeout, with the
    /// `WAIT` its own replicas need (`replicas`): a grant too few acknowledged is
    /// released there and answers an error `is_not_replicated` recognizes (a vote
    /// against).
    async fn grant_on_all(
        &self,
        key: &[u8],
        token: &[u8],
        cmd: &redis::Cmd,
        options: &RedlockOptions,
    ) -> Vec<RedisResult<Option<Grant>>> {
        let mut calls = JoinSet::new();
        for index in 0..self.instances.len() {
            let instances = self.instances.clone();
            let (key, token, cmd) = (key.to_vec(), token.to_vec(), cmd.clone());
            let (policy, ttl, timeout) = (options.policy(), options.ttl, options.instance_timeout);
            calls.spawn(async move {
                let conn = &instances[index];
                let result = async {
                    let mut outcome =
                        replicated(conn, &key, vec![cmd], policy, ttl, timeout).await?;
                    let granted = outcome.first::<Option<Grant>>()?;
                    if granted.is_some()
                        && let Some(missing) = outcome.missing(&key, "granted")
                    {
                        let _: RedisResult<bool> =
                            conn.query(&release_cmd(&key, &token), timeout).await;
                        return Err(missing);
                    }
                    Ok(granted)
                }
                .await;
                (index, result)
            });
        }
        let mut results: Vec<RedisResult<Option<Grant>>> = (0..self.instances.len())
            .map(|_| Err(timed_out("Redlock call")))
            .collect();
        while let Some(done) = calls.join_next().await {
            if let Ok((index, result)) = done {
                results[index] = result;
            }
        }
        results
    }

    pub(super) async fn release_all(&self, key: &[u8], token: &[u8], timeout: Duration) -> usize {
        confirmed(&self.on_all::<bool>(release_cmd(key, token), timeout).await)
    }
}

/// A Redlock held on a quorum of masters, on async connections. Released on all masters
/// when dropped (by a task on the current tokio runtime).
pub struct RedlockGuard {
    pub(super) redlock: Redlock,
    pub(super) held: Held,
    pub(super) released: bool,
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
