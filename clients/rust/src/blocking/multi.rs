//! Several keys at once, all or none, on blocking connections (`LOCK.ACQUIREALL`):
//! what Redisson's `MultiLock` does from the client, one key after another, done by the
//! server in one step, first come first served on every key, without deadlock.

use std::sync::Arc;
use std::time::Duration;

use redis::RedisResult;

use super::conn::{Link, Links};
use crate::commands::GrantAll;
use crate::guard::outcome_unknown;
use crate::multi::debug_multi;
use crate::multi::multi_lock_accessors;
use crate::multi::on_every_key;
use crate::options::LockOptions;

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
    let mut con = links.take(command_timeout)?;
    con.set_read_timeout(options.reply_limit(command_timeout))?;
    let grant = match options
        .acquire_all_cmd(&keys, &token)
        .query::<Option<GrantAll>>(&mut con)
    {
        Ok(Some(grant)) => grant,
        Ok(None) => {
            links.give_back(con);
            return Ok(None);
        }
        Err(err) => {
            // The reply was lost: the keys may be ours. Give them back, best effort; the
            // TTL bounds the damage if even that fails.
            if outcome_unknown(&err) {
                drop(con);
                if let Ok(mut con) = links.fresh(command_timeout) {
                    let _ = release_all(&mut con, &keys, &token);
                }
            }
            return Err(err);
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
    }))
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
    pub fn extend(&mut self, ttl: Duration) -> RedisResult<bool> {
        let pipe = on_every_key(&self.keys, &self.grant.token, Some(ttl));
        let extended: Vec<bool> = pipe.query(self.con()?)?;
        Ok(extended.into_iter().all(|held| held))
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
