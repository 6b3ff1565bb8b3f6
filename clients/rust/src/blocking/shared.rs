//! What a held lock and its watchdog thread share: renewal, release, reclaim after the
//! connection changed, and the watchdog itself.

use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use redis::{FromRedisValue, RedisResult};

use super::conn::{Link, Links};
use super::replicated::replicated;
use crate::commands::{Grant, Mode, acquire_mode_cmd, extend_cmd, release_cmd};
use crate::guard::{Next, Schedule};
use crate::lost::{LockLost, LostFlag, LostReason};
use crate::replicas::Policy;

/// What a guard and its watchdog thread share.
pub(super) struct Shared {
    pub(super) links: Arc<Links>,
    pub(super) command_timeout: Duration,
    pub(super) key: Vec<u8>,
    pub(super) token: Vec<u8>,
    /// The guard's connection; `None` after an error, reopened on next use.
    pub(super) con: Mutex<Option<Link>>,
    pub(super) lost: LostFlag,
    /// The fence of the grant: a reclaim must find the same one.
    pub(super) fence: u64,
    /// The grace of a lock bound to the guard's connection.
    pub(super) session: Option<Duration>,
    /// How the lock is held, for a reclaim.
    pub(super) mode: Mode,
    /// The lock's TTL, for a reclaim.
    pub(super) ttl: Duration,
    /// The replicas its extends wait for.
    pub(super) policy: Policy,
}

impl Shared {
    pub(super) fn query<T: FromRedisValue>(&self, cmd: &redis::Cmd) -> RedisResult<T> {
        self.query_within(cmd, self.command_timeout)
    }

    /// `query`, its answer awaited for at most `limit` (and the command timeout).
    pub(super) fn query_within<T: FromRedisValue>(
        &self,
        cmd: &redis::Cmd,
        limit: Duration,
    ) -> RedisResult<T> {
        self.on_con(limit, |con| cmd.query(con))
    }

    /// `work` on the guard's connection (reopened, and a session-bound lock reclaimed on
    /// it, after an error), its answers awaited for at most `limit`.
    fn on_con<T>(
        &self,
        limit: Duration,
        work: impl FnOnce(&mut Link) -> RedisResult<T>,
    ) -> RedisResult<T> {
        let mut slot = self.con.lock().unwrap_or_else(|e| e.into_inner());
        let con = match slot.as_mut() {
            Some(con) => con,
            None => {
                let mut con = self.links.take(self.command_timeout)?;
                self.reclaim(&mut con)?;
                slot.insert(con)
            }
        };
        // The link sets a timeout it does not have only: the command timeout, most often,
        // costs no system call.
        con.set_read_timeout(Some(limit.min(self.command_timeout)))?;
        let result = work(con);
        if result.is_ok() {
            con.set_read_timeout(Some(self.command_timeout))?;
        }
        if result.is_err() {
            // After a timeout the connection may still deliver the late reply as the
            // answer to the next command: never reuse it.
            *slot = None;
        }
        result
    }

    /// A session-bound lock whose connection was lost is bound to the new one `con`
    /// (its token acquires it again: same fence, while the grace runs); if that finds
    /// it gone, the lock counts as lost.
    pub(super) fn reclaim(&self, con: &mut Link) -> RedisResult<()> {
        let Some(grace) = self.session else {
            return Ok(());
        };
        let cmd = acquire_mode_cmd(
            &self.key,
            self.ttl,
            Some(&self.token),
            None,
            Some(grace),
            self.mode,
        );
        match cmd.query::<Option<Grant>>(con)? {
            Some(grant) if grant.fence == self.fence => {}
            Some(_) => {
                // Released in between and taken anew: not the same lock.
                self.lost.set(LostReason::NotHeld);
                let _: RedisResult<bool> = release_cmd(&self.key, &self.token).query(con);
            }
            None => self.lost.set(LostReason::NotHeld),
        }
        Ok(())
    }

    pub(super) fn extend(&self, ttl: Duration) -> RedisResult<bool> {
        self.extend_within(ttl, self.command_timeout)
    }

    /// `extend`, its answer awaited for at most `limit`, with the `WAIT` its replicas
    /// need: an error `is_not_replicated` recognizes when extended but too few replicas
    /// acknowledged it (the lock stays held; the watchdog tries again).
    pub(super) fn extend_within(&self, ttl: Duration, limit: Duration) -> RedisResult<bool> {
        let cmd = extend_cmd(&self.key, &self.token, ttl);
        let outcome = self.on_con(limit, |con| {
            replicated(
                &self.links,
                con,
                &self.key,
                vec![cmd],
                self.policy,
                self.ttl,
            )
        })?;
        let extended = outcome.all_held()?;
        if !extended {
            self.lost.set(LostReason::NotHeld);
        } else if let Some(missing) = outcome.missing(&self.key, "extended") {
            return Err(missing);
        }
        Ok(extended)
    }

    pub(super) fn lost(&self) -> Option<LockLost> {
        self.lost.get().map(|reason| LockLost {
            key: self.key.clone(),
            reason,
        })
    }
}

/// What a watchdog renews: one lock ([`Shared`]) or every key of a `MultiLock`.
pub(super) trait Renew: Send + Sync + 'static {
    /// Extends to `ttl`, the answer awaited for at most `limit`: `false` (and marked
    /// lost) when no longer held.
    fn renew(&self, ttl: Duration, limit: Duration) -> RedisResult<bool>;
    /// Where the watchdog marks the lock lost.
    fn lost_flag(&self) -> &LostFlag;
}

impl Renew for Shared {
    fn renew(&self, ttl: Duration, limit: Duration) -> RedisResult<bool> {
        self.extend_within(ttl, limit)
    }

    fn lost_flag(&self) -> &LostFlag {
        &self.lost
    }
}

/// The background thread that extends a lock while its guard lives.
pub(super) struct Watchdog {
    pub(super) stop: mpsc::Sender<()>,
    pub(super) thread: JoinHandle<()>,
}

impl Watchdog {
    pub(super) fn start<R: Renew>(shared: Arc<R>, every: Duration, ttl: Duration) -> Self {
        let (stop, stopped) = mpsc::channel();
        let thread = thread::Builder::new()
            .name("redis-lock-watchdog".into())
            .spawn(move || {
                let mut schedule = Schedule::new(every, ttl);
                let mut next = schedule.first();
                loop {
                    match stopped.recv_timeout(next) {
                        Err(RecvTimeoutError::Timeout) => {}
                        Ok(()) | Err(RecvTimeoutError::Disconnected) => return,
                    }
                    let sent = Instant::now();
                    let extended = shared.renew(ttl, schedule.answer_limit());
                    match schedule.after(sent, &extended) {
                        Next::Wait(delay) => next = delay,
                        Next::Stop => return,
                        Next::Lost(reason) => {
                            shared.lost_flag().set(reason);
                            return;
                        }
                    }
                }
            })
            .expect("spawn the watchdog thread");
        Watchdog { stop, thread }
    }

    pub(super) fn stop(self) {
        let _ = self.stop.send(());
        let _ = self.thread.join();
    }
}
