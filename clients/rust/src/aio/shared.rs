//! What a held lock and its watchdog task share: renewal, release, reclaim after the
//! connection changed, and the watchdog itself.

use super::conn::Conn;
use super::replicated::replicated;
use crate::commands::Grant;
use crate::commands::Mode;
use crate::commands::acquire_mode_cmd;
use crate::commands::extend_cmd;
use crate::commands::release_cmd;
use crate::guard::Next;
use crate::guard::Schedule;
use crate::lost::LockLost;
use crate::lost::LostReason;
use crate::replicas::Policy;
use redis::RedisResult;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering;
use std::time::Duration;
use std::time::Instant;
use tokio::sync::watch;

/// What a guard and its watchdog task share.
pub(super) struct Shared {
    pub(super) conn: Arc<Conn>,
    pub(super) command_timeout: Duration,
    pub(super) key: Vec<u8>,
    pub(super) token: Vec<u8>,
    /// The fence of the grant: a reclaim must find the same one.
    pub(super) fence: u64,
    pub(super) lost: watch::Sender<Option<LostReason>>,
    /// The grace of a lock bound to the locker's shared connection.
    pub(super) session: Option<Duration>,
    /// How the lock is held, for a reclaim.
    pub(super) mode: Mode,
    /// The lock's TTL, for a reclaim.
    pub(super) ttl: Duration,
    /// The generation of the shared connection the lock is bound to.
    pub(super) bound_to: AtomicU64,
    /// The replicas its extends wait for.
    pub(super) policy: Policy,
}

/// `Shared::bound_to` of a session-bound lock not yet bound to the shared connection.
pub(super) const UNBOUND: u64 = u64::MAX;

impl Shared {
    /// A session-bound lock follows the locker's shared connection: granted on another
    /// connection, or the shared one reconnected since, its token acquires it again on
    /// the current one (same fence, within the grace). If that finds it gone, the lock
    /// counts as lost.
    pub(super) async fn stay_bound(&self) -> RedisResult<()> {
        let Some(grace) = self.session else {
            return Ok(());
        };
        // Opens the shared connection if it is not open, so that its generation is known.
        let _ = self.conn.get().await?;
        let current = self.conn.generation.load(Ordering::SeqCst);
        if self.bound_to.load(Ordering::SeqCst) == current {
            return Ok(());
        }
        let cmd = acquire_mode_cmd(
            &self.key,
            self.ttl,
            Some(&self.token),
            None,
            Some(grace),
            self.mode,
        );
        let reclaimed: Option<Grant> = self.conn.query(&cmd, self.command_timeout).await?;
        match reclaimed {
            Some(grant) if grant.fence == self.fence => {}
            Some(_) => {
                // The lock was released in between and this took it anew: not the same
                // lock, whatever was done under the old one may overlap another holder.
                self.set_lost(LostReason::NotHeld);
                let _: RedisResult<bool> = self
                    .conn
                    .query(&release_cmd(&self.key, &self.token), self.command_timeout)
                    .await;
            }
            None => self.set_lost(LostReason::NotHeld),
        }
        self.bound_to.store(current, Ordering::SeqCst);
        Ok(())
    }

    pub(super) fn set_lost(&self, reason: LostReason) {
        set_lost(&self.lost, reason);
    }

    pub(super) fn lost_error(&self, reason: LostReason) -> LockLost {
        LockLost {
            key: self.key.clone(),
            reason,
        }
    }

    pub(super) async fn extend(&self, ttl: Duration) -> RedisResult<bool> {
        self.extend_within(ttl, self.command_timeout).await
    }

    /// `extend`, its answer awaited for at most `limit` (and the command timeout).
    pub(super) async fn extend_within(&self, ttl: Duration, limit: Duration) -> RedisResult<bool> {
        self.stay_bound().await?;
        let cmd = extend_cmd(&self.key, &self.token, ttl);
        let limit = limit.min(self.command_timeout);
        let outcome = replicated(
            &self.conn,
            &self.key,
            vec![cmd],
            self.policy,
            self.ttl,
            limit,
        )
        .await?;
        let extended = outcome.all_held()?;
        if !extended {
            self.set_lost(LostReason::NotHeld);
        } else if let Some(missing) = outcome.missing(&self.key, "extended") {
            // Held, but the longer deadline might not survive a failover: the watchdog
            // tries again.
            return Err(missing);
        }
        Ok(extended)
    }

    pub(super) async fn release(&self) -> RedisResult<bool> {
        self.conn
            .query(&release_cmd(&self.key, &self.token), self.command_timeout)
            .await
    }
}

/// Extends the lock every `every` until aborted, the lock is found gone, or the server
/// stays unreachable for a whole TTL.
pub(super) async fn watchdog(shared: Arc<Shared>, every: Duration, ttl: Duration) {
    watch_over(
        every,
        ttl,
        |limit| shared.extend_within(ttl, limit),
        |reason| shared.set_lost(reason),
    )
    .await;
}

/// A watchdog's loop, for one lock or every key of a `MultiLock`: `renew(limit)` every
/// `every` (its answer awaited for at most `limit`), sooner again after a failure, until
/// aborted, a renewal finds the lock gone, or nothing answered for a whole `ttl`
/// (then `lose`).
pub(super) async fn watch_over<F, Fut>(
    every: Duration,
    ttl: Duration,
    renew: F,
    lose: impl Fn(LostReason),
) where
    F: Fn(Duration) -> Fut,
    Fut: Future<Output = RedisResult<bool>>,
{
    let mut schedule = Schedule::new(every, ttl);
    let mut next = schedule.first();
    loop {
        tokio::time::sleep(next).await;
        let sent = Instant::now();
        let extended = renew(schedule.answer_limit()).await;
        match schedule.after(sent, &extended) {
            Next::Wait(delay) => next = delay,
            Next::Stop => return,
            Next::Lost(reason) => {
                lose(reason);
                return;
            }
        }
    }
}

/// Resolves when `lost` holds a reason, as `error` words it; never before. The guard
/// holds the sender, so the channel cannot close while the guard waits on it.
pub(super) async fn when_lost(
    lost: &watch::Sender<Option<LostReason>>,
    error: impl Fn(LostReason) -> LockLost,
) -> LockLost {
    let mut changes = lost.subscribe();
    match changes.wait_for(Option::is_some).await {
        Ok(reason) => error(reason.clone().expect("waited for Some")),
        Err(_) => std::future::pending().await,
    }
}

/// Marks `lost` with `reason`, unless it already holds one: the first reason stays.
pub(super) fn set_lost(lost: &watch::Sender<Option<LostReason>>, reason: LostReason) {
    lost.send_if_modified(|slot| {
        if slot.is_none() {
            *slot = Some(reason);
            true
        } else {
            false
        }
    });
}
