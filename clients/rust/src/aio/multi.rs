//! Several keys at once, all or none, on async connections (`LOCK.ACQUIREALL`): the
//! async [`MultiLock`](super::MultiLock).

use super::conn::{AsyncLink, Conn};
use super::locker::Locker;
use super::replicated::{OWN, replicated_on};
use super::shared::{set_lost, watch_over, when_lost};
use super::within;
use crate::commands::extend_cmd;
use crate::guard::outcome_unknown;
use crate::lost::{LockLost, LostReason};
use crate::options::LockOptions;
use crate::replicas::Policy;
use redis::RedisResult;
use std::sync::Arc;
use std::time::Duration;
use std::time::Instant;
use tokio::sync::{Mutex, watch};
use tokio::task::JoinHandle;

use crate::commands::GrantAll;
use crate::multi::{debug_multi, multi_lock_accessors, on_every_key};

/// Every key of one [`Locker::lock_all`], held by one token with a fence per key. It keeps
/// a connection of its own (a session-bound grant lives with it). Release it with
/// [`release`](Self::release); dropping it stops its watchdog and closes that
/// connection, which frees a session-bound grant, and otherwise leaves the keys to their
/// TTL.
///
/// With a watchdog ([`LockOptions::watchdog`](crate::LockOptions::watchdog)) a task
/// extends every key, in one round trip, until the guard is released or dropped, as it
/// does for one lock; [`lost`](Self::lost) resolves if a key is found no longer held, or
/// the server stays unreachable for a whole TTL.
pub struct MultiLock {
    shared: Arc<MultiShared>,
    keys: Vec<Vec<u8>>,
    grant: GrantAll,
    watchdog: Option<JoinHandle<()>>,
}

/// What a `MultiLock` and its watchdog task share.
struct MultiShared {
    con: Mutex<AsyncLink>,
    keys: Vec<Vec<u8>>,
    token: Vec<u8>,
    command_timeout: Duration,
    /// The locker's connection state (what it learned of the replicas), the replicas
    /// its extends wait for, and the keys' TTL.
    conn: Arc<Conn>,
    policy: Policy,
    ttl: Duration,
    lost: watch::Sender<Option<LostReason>>,
}

impl MultiShared {
    /// Every key extended to `ttl` in one round trip, with the `WAIT` its replicas need,
    /// the answer awaited for at most `limit`; `false` (the guard then counts as lost)
    /// unless every key was still held.
    async fn extend_within(&self, ttl: Duration, limit: Duration) -> RedisResult<bool> {
        let cmds: Vec<redis::Cmd> = self
            .keys
            .iter()
            .map(|key| extend_cmd(key, &self.token, ttl))
            .collect();
        let first = &self.keys[0];
        let mut con = self.con.lock().await;
        let outcome = within(
            Some(limit.min(self.command_timeout)),
            replicated_on(
                &self.conn,
                OWN,
                &mut con,
                first,
                cmds,
                self.policy,
                self.ttl,
            ),
        )
        .await?;
        let all = outcome.all_held()?;
        if !all {
            set_lost(&self.lost, LostReason::NotHeld);
        } else if let Some(missing) = outcome.missing(first, "extended") {
            return Err(missing);
        }
        Ok(all)
    }

    fn lost_error(&self, reason: LostReason) -> LockLost {
        LockLost {
            key: self.keys[0].clone(),
            reason,
        }
    }
}

impl std::fmt::Debug for MultiLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        debug_multi(f, &self.keys, &self.grant)
    }
}

/// `LOCK.RELEASE` (or `LOCK.EXTEND` to `ttl`) of every key of `keys` by `token`, in one
/// round trip: whether each one was held.
async fn query_every_key(
    con: &mut AsyncLink,
    keys: &[Vec<u8>],
    token: &[u8],
    ttl: Option<Duration>,
) -> RedisResult<Vec<bool>> {
    on_every_key(keys, token, ttl).query_async(con).await
}

impl Locker {
    /// Acquires every key of `keys` at once, or none (`LOCK.ACQUIREALL`), with one token
    /// and a fence per key: `Some(lock)` when granted, `None` when a key is busy (at
    /// once, or after the wait timed out). With a wait, the request queues on every key
    /// and holds none of them meanwhile, so two callers that take the same keys in
    /// different orders never deadlock. [`Mode::Shared`](crate::Mode::Shared) reads every key; a
    /// watchdog renews every key together. On a cluster the keys must share a slot (a
    /// hash tag).
    pub async fn lock_all(
        &self,
        keys: &[&[u8]],
        options: &LockOptions,
    ) -> RedisResult<Option<MultiLock>> {
        let keys: Vec<Vec<u8>> = keys.iter().map(|key| key.to_vec()).collect();
        let token = options.token_to_send();
        let started = Instant::now();
        let mut attempt = options.clone();
        let (con, grant) = loop {
            match self.grant_all(&keys, &token, &attempt).await {
                Err(err) => attempt = attempt.again(err, options, started)?,
                Ok(None) => return Ok(None),
                Ok(Some(granted)) => break granted,
            }
        };
        let shared = Arc::new(MultiShared {
            con: Mutex::new(con),
            keys: keys.clone(),
            token: grant.token.clone(),
            command_timeout: self.command_timeout,
            conn: self.conn.clone(),
            policy: options.policy(),
            ttl: options.ttl(),
            lost: watch::Sender::new(None),
        });
        let watchdog = options.watchdog_interval().map(|every| {
            let (shared, ttl) = (shared.clone(), options.ttl());
            tokio::spawn(async move {
                watch_over(
                    every,
                    ttl,
                    |limit| shared.extend_within(ttl, limit),
                    |reason| set_lost(&shared.lost, reason),
                )
                .await;
            })
        });
        Ok(Some(MultiLock {
            shared,
            keys,
            grant,
            watchdog,
        }))
    }

    /// One `LOCK.ACQUIREALL` with the `WAIT` its replicas need, on a connection of its
    /// own: the grant and that connection, or `None` when a key is busy; a grant too few
    /// replicas acknowledged is released at once (an error `is_not_replicated`
    /// recognizes).
    async fn grant_all(
        &self,
        keys: &[Vec<u8>],
        token: &[u8],
        options: &LockOptions,
    ) -> RedisResult<Option<(AsyncLink, GrantAll)>> {
        let cmd = options.acquire_all_cmd(keys, token);
        let mut con = within(Some(self.command_timeout), self.conn.open()).await?;
        let (policy, ttl) = (options.policy(), options.ttl());
        let reply = within(options.reply_limit(self.command_timeout), async {
            let mut outcome =
                replicated_on(&self.conn, OWN, &mut con, &keys[0], vec![cmd], policy, ttl).await?;
            Ok((
                outcome.first::<Option<GrantAll>>()?,
                outcome.missing(&keys[0], "granted"),
            ))
        })
        .await;
        match reply {
            Ok((Some(grant), None)) => Ok(Some((con, grant))),
            Ok((Some(_), Some(missing))) => {
                let _ = within(
                    Some(self.command_timeout),
                    query_every_key(&mut con, keys, token, None),
                )
                .await;
                Err(missing)
            }
            Ok((None, _)) => Ok(None),
            Err(err) => {
                if outcome_unknown(&err) {
                    // The reply was lost: the keys may be ours. Give them back, best effort.
                    if let Ok(mut con) = self.conn.open().await {
                        let _ = within(
                            Some(self.command_timeout),
                            query_every_key(&mut con, keys, token, None),
                        )
                        .await;
                    }
                }
                Err(err)
            }
        }
    }
}

impl MultiLock {
    multi_lock_accessors!();

    /// Sets every key's remaining time to `ttl`, in one round trip. `true` only if this
    /// token still held every key; `false` means some key is no longer held, and the
    /// guard then counts as lost.
    ///
    /// With the `WAIT` its replicas need: an error `is_not_replicated` recognizes when
    /// every key was extended but too few replicas acknowledged it.
    pub async fn extend(&mut self, ttl: Duration) -> RedisResult<bool> {
        self.shared
            .extend_within(ttl, self.shared.command_timeout)
            .await
    }

    /// Whether the keys are known to be lost.
    pub fn is_lost(&self) -> bool {
        self.shared.lost.borrow().is_some()
    }

    /// `Err` once the keys are known to be lost: stop touching what they protect. The
    /// error names the first key.
    pub fn check(&self) -> Result<(), LockLost> {
        match self.shared.lost.borrow().clone() {
            Some(reason) => Err(self.shared.lost_error(reason)),
            None => Ok(()),
        }
    }

    /// Resolves when the keys are known to be lost; never while they are held. Race it
    /// against the work with `tokio::select!`.
    pub async fn lost(&self) -> LockLost {
        when_lost(&self.shared.lost, |reason| self.shared.lost_error(reason)).await
    }

    /// Stops the watchdog and releases every key, in one round trip. `Ok(true)`: every
    /// key was still held; `Ok(false)`: some had expired or been taken over.
    pub async fn release(mut self) -> RedisResult<bool> {
        if let Some(watchdog) = self.watchdog.take() {
            watchdog.abort();
            // Gone before the release: no extend of the watchdog can follow it.
            let _ = watchdog.await;
        }
        let shared = &self.shared;
        let mut con = shared.con.lock().await;
        let held = within(
            Some(shared.command_timeout),
            query_every_key(&mut con, &shared.keys, &shared.token, None),
        )
        .await?;
        Ok(held.into_iter().all(|held| held))
    }
}

impl Drop for MultiLock {
    fn drop(&mut self) {
        if let Some(watchdog) = self.watchdog.take() {
            watchdog.abort();
        }
    }
}
