//! Several keys at once, all or none, on blocking connections (`LOCK.ACQUIREALL`):
//! what Redisson's `MultiLock` does from the client, one key after another, done by the
//! server in one step, first come first served on every key, without deadlock.

use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::RedisResult;

use super::conn::{Link, Links};
use super::replicated::replicated;
use crate::commands::{GrantAll, extend_cmd};
use crate::guard::outcome_unknown;
use crate::multi::debug_multi;
use crate::multi::multi_lock_accessors;
use crate::multi::on_every_key;
use crate::options::LockOptions;
use crate::replicas::Policy;

/// Every key of one [`Locker::lock_all`](crate::Locker::lock_all), held by one token
/// with a fence per key; released together when dropped, or with
/// [`release`](Self::release). It keeps a connection of its own (a session-bound
/// grant lives with it). No watchdog: extend all the keys with [`extend`](Self::extend).
pub struct MultiLock {
    pub(super) links: Arc<Links>,
    pub(super) command_timeout: Duration,
    pub(super) con: Option<Link>,
    pub(super) keys: Vec<Vec<u8>>,
    pub(super) grant: GrantAll,
    pub(super) released: bool,
    /// The replicas its extends wait for, and the keys' TTL.
    pub(super) policy: Policy,
    pub(super) ttl: Duration,
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
    Ok(Some(MultiLock {
        links: links.clone(),
        command_timeout,
        con: Some(con),
        keys,
        grant,
        released: false,
        policy: options.policy(),
        ttl: options.ttl(),
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

    pub(super) fn con(&mut self) -> RedisResult<&mut Link> {
        if self.con.is_none() {
            self.con = Some(self.links.fresh(self.command_timeout)?);
        }
        Ok(self.con.as_mut().expect("a connection"))
    }

    /// Sets every key's remaining time to `ttl` (`LOCK.EXTEND` on each, one round trip).
    /// `true` only if this token still held every key.
    ///
    /// With the `WAIT` its replicas need: an error `is_not_replicated` recognizes when
    /// every key was extended but too few replicas acknowledged it.
    pub fn extend(&mut self, ttl: Duration) -> RedisResult<bool> {
        let cmds: Vec<redis::Cmd> = self
            .keys
            .iter()
            .map(|key| extend_cmd(key, &self.grant.token, ttl))
            .collect();
        let (links, policy, lock_ttl, first) = (
            self.links.clone(),
            self.policy,
            self.ttl,
            self.keys[0].clone(),
        );
        let outcome = replicated(&links, self.con()?, &first, cmds, policy, lock_ttl)?;
        let all = outcome.all_held()?;
        if all && let Some(missing) = outcome.missing(&first, "extended") {
            return Err(missing);
        }
        Ok(all)
    }

    /// Releases every key (`LOCK.RELEASE` on each, one round trip). `Ok(true)`: every key
    /// was still held; `Ok(false)`: some had expired or been taken over, so whatever was
    /// done under them may have overlapped with another holder.
    pub fn release(mut self) -> RedisResult<bool> {
        self.released = true;
        self.release_now()
    }

    pub(super) fn release_now(&mut self) -> RedisResult<bool> {
        let (keys, token) = (self.keys.clone(), self.grant.token.clone());
        let released = release_all(self.con()?, &keys, &token)?;
        if let Some(con) = self.con.take() {
            self.links.give_back(con);
        }
        Ok(released == keys.len())
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
