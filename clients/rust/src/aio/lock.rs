//! `Lock`: a held lock on an async connection, released when dropped.

use super::shared::{Shared, when_lost};
use crate::commands::Grant;
use crate::commands::LockInfo;
use crate::commands::acquire_mode_cmd;
use crate::commands::do_cmd;
use crate::commands::info_cmd;
use crate::guard::debug_lock;
use crate::guard::lock_accessors;
use crate::lost::LockLost;
use crate::lost::LostReason;
use redis::FromRedisValue;
use redis::RedisResult;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;
use tokio::task::JoinHandle;

/// A held lock on an async connection. Released when dropped (by a task spawned on the
/// current tokio runtime; outside a runtime the TTL frees it); see
/// [`release`](Self::release) to learn whether it was still held.
///
/// With a watchdog ([`LockOptions::watchdog`](crate::LockOptions::watchdog)) a task extends the lock until the guard
/// is released or dropped; [`lost`](Self::lost) resolves if the lock is lost meanwhile.
pub struct Lock {
    pub(super) shared: Arc<Shared>,
    pub(super) fence: u64,
    pub(super) ttl: Duration,
    pub(super) watchdog: Option<JoinHandle<()>>,
    pub(super) released: bool,
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
        when_lost(&self.shared.lost, |reason| self.shared.lost_error(reason)).await
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
