//! Several keys at once, all or none, on blocking connections (`LOCK.ACQUIREALL`):
//! what Redisson's `MultiLock` does from the client, one key after another, done by the
//! server in one step, first come first served on every key, without deadlock.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redis::RedisResult;

use super::conn::{Link, Links};
use super::replicated::replicated;
use super::shared::{Renew, Watchdog};
use crate::commands::{GrantAll, extend_cmd};
use crate::guard::outcome_unknown;
use crate::lost::{LockLost, LostFlag, LostReason};
use crate::multi::debug_multi;
use crate::multi::multi_lock_accessors;
use crate::multi::on_every_key;
use crate::options::LockOptions;
use crate::replicas::Policy;

/// Every key of one [`Locker::lock_all`](crate::Locker::lock_all), held by one token
/// with a fence per key; released together when dropped, or with
/// [`release`](Self::release). It keeps a connection of its own (a session-bound
/// grant lives with it).
///
/// With a watchdog ([`LockOptions::watchdog`](crate::LockOptions::watchdog)), a
/// background thread extends every key, in one round trip, until the guard is released
/// or dropped, as it does for one lock: if an extend finds a key no longer held, or the
/// server stays unreachable until the TTL runs out, the guard reports it
/// ([`check`](Self::check), [`wait_lost`](Self::wait_lost)).
pub struct MultiLock {
    shared: Arc<MultiShared>,
    keys: Vec<Vec<u8>>,
    grant: GrantAll,
    watchdog: Option<Watchdog>,
    released: bool,
}

/// What a `MultiLock` and its watchdog thread share.
struct MultiShared {
    links: Arc<Links>,
    command_timeout: Duration,
    keys: Vec<Vec<u8>>,
    token: Vec<u8>,
    /// The guard's connection; `None` after an error, reopened on next use.
    con: Mutex<Option<Link>>,
    lost: LostFlag,
    /// The replicas its extends wait for, and the keys' TTL.
    policy: Policy,
    ttl: Duration,
}

impl MultiShared {
    /// `work` on the guard's connection (opened anew after an error), its answers awaited
    /// for at most `limit` (and the command timeout).
    fn on_con<T>(
        &self,
        limit: Duration,
        work: impl FnOnce(&mut Link) -> RedisResult<T>,
    ) -> RedisResult<T> {
        let mut slot = self.con.lock().unwrap_or_else(|e| e.into_inner());
        let con = match slot.as_mut() {
            Some(con) => con,
            None => slot.insert(self.links.fresh(self.command_timeout)?),
        };
        let limit = limit.min(self.command_timeout);
        con.set_read_timeout(Some(limit))?;
        let result = work(con);
        if result.is_err() {
            // A late reply would answer the next command: never reuse it.
            *slot = None;
        } else {
            con.set_read_timeout(Some(self.command_timeout))?;
        }
        result
    }

    /// Every key extended to `ttl` in one round trip, with the `WAIT` its replicas need;
    /// `false` (the guard then counts as lost) unless every key was still held.
    fn extend_within(&self, ttl: Duration, limit: Duration) -> RedisResult<bool> {
        let cmds: Vec<redis::Cmd> = self
            .keys
            .iter()
            .map(|key| extend_cmd(key, &self.token, ttl))
            .collect();
        let first = &self.keys[0];
        let outcome = self.on_con(limit, |con| {
            replicated(&self.links, con, first, cmds, self.policy, self.ttl)
        })?;
        let all = outcome.all_held()?;
        if !all {
            self.lost.set(LostReason::NotHeld);
        } else if let Some(missing) = outcome.missing(first, "extended") {
            return Err(missing);
        }
        Ok(all)
    }
}

impl Renew for MultiShared {
    fn renew(&self, ttl: Duration, limit: Duration) -> RedisResult<bool> {
        self.extend_within(ttl, limit)
    }

    fn lost_flag(&self) -> &LostFlag {
        &self.lost
    }
}

impl std::fmt::Debug for MultiLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        debug_multi(f, &self.keys, &self.grant)
    }
}

/// Acquires every key of `keys` at once with `options` on a connection of `links`.
pub(super) fn lock_all(
    links: &Arc<Links>,
    command_timeout: Duration,
    keys: &[&[u8]],
    options: &LockOptions,
) -> RedisResult<Option<MultiLock>> {
    let keys: Vec<Vec<u8>> = keys.iter().map(|key| key.to_vec()).collect();
    let token = options.token_to_send();
    let started = Instant::now();
    let mut attempt = options.clone();
    let (con, grant) = loop {
        match grant_all(links, command_timeout, &keys, &token, &attempt) {
            Err(err) => attempt = attempt.again(err, options, started)?,
            Ok(None) => return Ok(None),
            Ok(Some(granted)) => break granted,
        }
    };
    con.set_read_timeout(Some(command_timeout))?;
    let shared = Arc::new(MultiShared {
        links: links.clone(),
        command_timeout,
        keys: keys.clone(),
        token: grant.token.clone(),
        con: Mutex::new(Some(con)),
        lost: LostFlag::default(),
        policy: options.policy(),
        ttl: options.ttl(),
    });
    let watchdog = options
        .watchdog_interval()
        .map(|every| Watchdog::start(shared.clone(), every, options.ttl()));
    Ok(Some(MultiLock {
        shared,
        keys,
        grant,
        watchdog,
        released: false,
    }))
}

/// One `LOCK.ACQUIREALL` with the `WAIT` its replicas need: the grant and its
/// connection, or `None` when a key is busy; a grant too few replicas acknowledged is
/// released at once (an error `is_not_replicated` recognizes).
fn grant_all(
    links: &Arc<Links>,
    command_timeout: Duration,
    keys: &[Vec<u8>],
    token: &[u8],
    options: &LockOptions,
) -> RedisResult<Option<(Link, GrantAll)>> {
    let mut con = links.take(command_timeout)?;
    con.set_read_timeout(options.reply_limit(command_timeout))?;
    let cmd = options.acquire_all_cmd(keys, token);
    let reply = replicated(
        links,
        &mut con,
        &keys[0],
        vec![cmd],
        options.policy(),
        options.ttl(),
    )
    .and_then(|mut outcome| {
        Ok((
            outcome.first::<Option<GrantAll>>()?,
            outcome.missing(&keys[0], "granted"),
        ))
    });
    match reply {
        Ok((Some(grant), None)) => Ok(Some((con, grant))),
        Ok((Some(_), Some(missing))) => {
            let _ = release_all(&mut con, keys, token);
            links.give_back(con);
            Err(missing)
        }
        Ok((None, _)) => {
            links.give_back(con);
            Ok(None)
        }
        Err(err) => {
            // The reply was lost: the keys may be ours. Give them back, best effort; the
            // TTL bounds the damage if even that fails.
            if outcome_unknown(&err) {
                drop(con);
                if let Ok(mut con) = links.fresh(command_timeout) {
                    let _ = release_all(&mut con, keys, token);
                }
            }
            Err(err)
        }
    }
}

/// Releases every key of `keys` held by `token`, in one round trip: how many were.
fn release_all(con: &mut Link, keys: &[Vec<u8>], token: &[u8]) -> RedisResult<usize> {
    let released: Vec<bool> = on_every_key(keys, token, None).query(con)?;
    Ok(released.into_iter().filter(|held| *held).count())
}

impl MultiLock {
    multi_lock_accessors!();

    /// Sets every key's remaining time to `ttl` (`LOCK.EXTEND` on each, one round trip).
    /// `true` only if this token still held every key; `false` means some key is no
    /// longer held, and the guard then counts as lost.
    ///
    /// With the `WAIT` its replicas need: an error `is_not_replicated` recognizes when
    /// every key was extended but too few replicas acknowledged it.
    pub fn extend(&mut self, ttl: Duration) -> RedisResult<bool> {
        self.shared.extend_within(ttl, self.shared.command_timeout)
    }

    /// Whether the keys are known to be lost (an extend found one gone, or the watchdog
    /// could not reach the server for a whole TTL).
    pub fn is_lost(&self) -> bool {
        self.shared.lost.get().is_some()
    }

    /// `Err` once the keys are known to be lost: stop touching what they protect. The
    /// error names the first key.
    pub fn check(&self) -> Result<(), LockLost> {
        match self.shared.lost.get() {
            Some(reason) => Err(self.lost_error(reason)),
            None => Ok(()),
        }
    }

    /// Blocks until the keys are known to be lost, or `timeout` passes (`None`).
    pub fn wait_lost(&self, timeout: Duration) -> Option<LockLost> {
        self.shared
            .lost
            .wait(timeout)
            .map(|reason| self.lost_error(reason))
    }

    fn lost_error(&self, reason: LostReason) -> LockLost {
        LockLost {
            key: self.keys[0].clone(),
            reason,
        }
    }

    /// Stops the watchdog and releases every key (`LOCK.RELEASE` on each, one round
    /// trip). `Ok(true)`: every key was still held; `Ok(false)`: some had expired or been
    /// taken over, so whatever was done under them may have overlapped with another
    /// holder.
    pub fn release(mut self) -> RedisResult<bool> {
        self.released = true;
        self.release_now()
    }

    fn release_now(&mut self) -> RedisResult<bool> {
        if let Some(watchdog) = self.watchdog.take() {
            watchdog.stop();
        }
        let shared = &self.shared;
        let released = shared.on_con(shared.command_timeout, |con| {
            release_all(con, &shared.keys, &shared.token)
        })?;
        let con = shared.con.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(con) = con {
            shared.links.give_back(con);
        }
        Ok(released == self.keys.len())
    }
}

impl Drop for MultiLock {
    fn drop(&mut self) {
        if !self.released {
            // Best effort: if the server cannot be reached, the TTL frees the keys.
            let _ = self.release_now();
        }
    }
}
