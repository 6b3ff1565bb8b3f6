//! Redlock on blocking connections: `Redlock` and its guard, and each master's
//! connection (`Instance`).

use redis::Connection;
use redis::FromRedisValue;
use redis::RedisResult;

use super::conn::exchange;
use super::redis70::online_with;
use crate::blocking::connect;
use crate::commands::Grant;
use crate::commands::acquire_cmd;
use crate::commands::extend_cmd;
use crate::commands::release_cmd;
use crate::guard::outcome_unknown;
use crate::new_token;
use crate::redis70::Learned;
use crate::redlock::Attempts;
use crate::redlock::Held;
use crate::redlock::RedlockError;
use crate::redlock::RedlockOptions;
use crate::redlock::clients;
use crate::redlock::confirmed;
use crate::redlock::debug_redlock;
use crate::redlock::instances;
use crate::redlock::redlock_guard_accessors;
use crate::replicas::{Outcome, Policy, ServerWaits, is_not_replicated, server_outcome};
use std::fmt;
use std::sync::Arc;
use std::sync::Mutex;
use std::thread;
use std::time::Duration;
use std::time::Instant;

/// Redlock over blocking connections, one per master. Cheap to clone (shared).
#[derive(Clone)]
pub struct Redlock {
    instances: Arc<Vec<Instance>>,
}

impl fmt::Debug for Redlock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        debug_redlock(f, self.masters())
    }
}

impl Redlock {
    /// Redlock over these independent masters (not replicas of each other).
    ///
    /// # Panics
    ///
    /// If `clients` is empty.
    pub fn new(clients: Vec<redis::Client>) -> Self {
        Redlock {
            instances: instances(clients, |client| Instance {
                client,
                con: Mutex::new(None),
                server_waits: ServerWaits::default(),
                learned: Learned::default(),
            }),
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
    pub fn lock(
        &self,
        key: impl AsRef<[u8]>,
        options: &RedlockOptions,
    ) -> Result<RedlockGuard, RedlockError> {
        let key = key.as_ref().to_vec();
        let token = new_token();
        let grant = GrantCmds {
            key: &key,
            cmd: acquire_cmd(&key, options.ttl, Some(&token), None),
            undo: release_cmd(&key, &token),
            policy: options.policy(),
            ttl: options.ttl,
        };
        let mut attempts = Attempts::new(options, self.masters());
        for attempt in 1..=options.attempts {
            let started = Instant::now();
            let results = self.acquire_on_all(&grant, options.instance_timeout);
            if let Some(won) = attempts.judge(results, started.elapsed()) {
                return Ok(RedlockGuard {
                    redlock: self.clone(),
                    held: Held::new(key, token, started, won, options),
                    released: false,
                });
            }
            self.release_all(&key, &token, options.instance_timeout);
            if let Some(pause) = attempts.pause_after(attempt) {
                thread::sleep(pause);
            }
        }
        Err(attempts.failed())
    }

    /// Runs `cmd` on every master at once, each within `timeout`.
    fn on_all<T: FromRedisValue + Send>(
        &self,
        cmd: &redis::Cmd,
        timeout: Duration,
    ) -> Vec<RedisResult<T>> {
        thread::scope(|scope| {
            let calls: Vec<_> = self
                .instances
                .iter()
                .map(|instance| scope.spawn(move || instance.query::<T>(cmd, timeout)))
                .collect();
            calls
                .into_iter()
                .map(|call| call.join().expect("a Redlock call panicked"))
                .collect()
        })
    }

    /// Runs the acquire on every master at once, each within `timeout`, with its undo
    /// (the release) sent behind it where the reply is lost ([`Instance::acquire`]).
    fn acquire_on_all(
        &self,
        grant: &GrantCmds<'_>,
        timeout: Duration,
    ) -> Vec<RedisResult<Option<Grant>>> {
        thread::scope(|scope| {
            let calls: Vec<_> = self
                .instances
                .iter()
                .map(|instance| scope.spawn(move || instance.acquire(grant, timeout)))
                .collect();
            calls
                .into_iter()
                .map(|call| call.join().expect("a Redlock call panicked"))
                .collect()
        })
    }

    /// Releases on every master; the number that confirmed.
    fn release_all(&self, key: &[u8], token: &[u8], timeout: Duration) -> usize {
        confirmed(&self.on_all::<bool>(&release_cmd(key, token), timeout))
    }
}

/// A Redlock held on a quorum of masters. Released on all masters when dropped.
pub struct RedlockGuard {
    redlock: Redlock,
    held: Held,
    released: bool,
}

impl fmt::Debug for RedlockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.held.fmt(f)
    }
}

impl RedlockGuard {
    redlock_guard_accessors!();

    /// Extends the lock to `ttl` on every master (`LOCK.EXTEND`). `true` if a quorum
    /// extended it in time, and the validity restarts; `false` leaves the old validity in
    /// place (the lock may be lost; stop using it when [`is_valid`](Self::is_valid) fails).
    pub fn extend(&mut self, ttl: Duration) -> bool {
        let started = Instant::now();
        let replies = self.redlock.on_all::<bool>(
            &extend_cmd(&self.held.key, &self.held.token, ttl),
            self.held.instance_timeout,
        );
        self.held.extended(ttl, started, &replies)
    }

    /// Releases the lock on every master; returns how many confirmed the release.
    pub fn release(mut self) -> usize {
        self.released = true;
        self.release_now()
    }

    fn release_now(&self) -> usize {
        self.redlock
            .release_all(&self.held.key, &self.held.token, self.held.instance_timeout)
    }
}

impl Drop for RedlockGuard {
    fn drop(&mut self) {
        if !self.released {
            self.release_now();
        }
    }
}

/// One master of the blocking Redlock: its connection, opened lazily and again after it
/// breaks, with the per-master timeout.
struct Instance {
    client: redis::Client,
    /// Kept open between calls; `None` after an error, reopened on next use.
    con: Mutex<Option<Connection>>,
    /// Whether the master holds a grant's reply for its replicas itself.
    server_waits: ServerWaits,
    /// What was learned of the master's replicas where it does not (Redis 7.0;
    /// forgotten when it reconnects).
    learned: Learned,
}

/// What an acquire sends to each master: the acquire, its undo (the release), and the
/// replicas it waits for.
struct GrantCmds<'a> {
    key: &'a [u8],
    cmd: redis::Cmd,
    undo: redis::Cmd,
    policy: Policy,
    ttl: Duration,
}

impl Instance {
    /// The kept connection with `timeout` for reads and writes, opened if there is none.
    fn open<'a>(
        &self,
        slot: &'a mut Option<Connection>,
        timeout: Duration,
    ) -> RedisResult<&'a mut Connection> {
        match slot {
            Some(con) => {
                con.set_read_timeout(Some(timeout))?;
                con.set_write_timeout(Some(timeout))?;
                Ok(con)
            }
            None => Ok(slot.insert(connect(&self.client, timeout)?)),
        }
    }

    fn query<T: FromRedisValue>(&self, cmd: &redis::Cmd, timeout: Duration) -> RedisResult<T> {
        let mut slot = self.con.lock().unwrap_or_else(|e| e.into_inner());
        let con = self.open(&mut slot, timeout)?;
        let result = cmd.query(con);
        if result.is_err() {
            // A late reply must never be read as the answer to the next command.
            *slot = None;
        }
        result
    }

    /// Sends the acquire `cmd`; if its reply is lost (the master is slow or gone), also
    /// writes `undo` (the release) on the same connection before dropping it, without
    /// waiting for an answer. A slow master may still run the acquire late; it then runs
    /// the release right after it, from the same connection, so a late grant never
    /// outlives the failed call. A release sent later on a new connection could not
    /// promise that: the master may be too busy to accept it before the caller gives up.
    ///
    /// The acquire goes with the `WAIT` the master's own replicas need (`replicas`): a
    /// grant too few acknowledged is released at once and answers an error
    /// `is_not_replicated` recognizes (a vote against).
    fn acquire(&self, grant: &GrantCmds<'_>, timeout: Duration) -> RedisResult<Option<Grant>> {
        let mut slot = self.con.lock().unwrap_or_else(|e| e.into_inner());
        if slot.is_none() {
            self.learned.clear();
        }
        let con = self.open(&mut slot, timeout)?;
        let result = self.replicated_grant(con, grant);
        if let Err(err) = &result {
            if outcome_unknown(err) {
                let _ = con.send_packed_command(&grant.undo.get_packed_command());
            }
            if !is_not_replicated(err) {
                *slot = None;
            }
        }
        result
    }

    fn replicated_grant(
        &self,
        con: &mut Connection,
        grant: &GrantCmds<'_>,
    ) -> RedisResult<Option<Grant>> {
        let policy = grant.policy;
        if self.server_waits.may() {
            let writes = policy.server_writes(std::slice::from_ref(&grant.cmd), grant.ttl);
            let replies = exchange(con, &writes)?;
            if let Some(outcome) = server_outcome(&self.server_waits, grant.key, replies, 1, policy)
            {
                return self.settled(con, grant, outcome);
            }
        }
        // The master cannot wait for its replicas (Redis 7.0): the package's own WAIT.
        let required = if policy.asks_no_replica() {
            0
        } else {
            let online = online_with(&self.learned, 0, |cmds| exchange(con, cmds))?;
            policy.required(online, grant.key)?
        };
        let mut cmds = vec![grant.cmd.clone()];
        let wait = if policy.off() {
            None
        } else {
            policy.wait_cmd(required, grant.ttl)
        };
        let waited = wait.is_some().then_some(policy);
        cmds.extend(wait);
        let outcome = Outcome::of(exchange(con, &cmds)?, 1, required, waited);
        self.settled(con, grant, outcome)
    }

    /// The grant of `outcome`, or the shortfall's error once the grant is undone.
    fn settled(
        &self,
        con: &mut Connection,
        grant: &GrantCmds<'_>,
        mut outcome: Outcome,
    ) -> RedisResult<Option<Grant>> {
        let granted = outcome.first::<Option<Grant>>()?;
        if granted.is_some()
            && let Some(missing) = outcome.missing(grant.key, "granted")
        {
            self.learned.forget(0);
            let _: RedisResult<bool> = grant.undo.query(con);
            return Err(missing);
        }
        Ok(granted)
    }
}
