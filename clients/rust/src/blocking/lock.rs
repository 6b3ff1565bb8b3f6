//! `Lock`: a held lock on a blocking connection, released when dropped.

use super::shared::Shared;
use super::shared::Watchdog;

use std::sync::Arc;
use std::time::Duration;

use redis::{FromRedisValue, RedisResult};

use crate::commands::{Grant, LockInfo, acquire_mode_cmd, do_cmd, info_cmd, release_cmd};
use crate::guard::{debug_lock, lock_accessors};
use crate::lost::{LockLost, LostReason};

/// A held lock. Released when dropped; see [`release`](Self::release) to learn whether
/// it was still held.
///
/// With a watchdog ([`LockOptions::watchdog`](crate::LockOptions::watchdog)), a background thread extends the lock
/// until the guard is released or dropped. If an extend finds the lock gone, or the
/// server stays unreachable until the TTL runs out, the guard reports it: poll
/// [`check`](Self::check) before each step of your work, or block on
/// [`wait_lost`](Self::wait_lost) in a supervising thread.
pub struct Lock {
    pub(super) shared: Arc<Shared>,
    pub(super) fence: u64,
    pub(super) ttl: Duration,
    pub(super) watchdog: Option<Watchdog>,
    pub(super) released: bool,
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

    pub(super) fn release_now(&mut self) -> RedisResult<bool> {
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
