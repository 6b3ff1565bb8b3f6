//! `replicas`: a grant counts once the master's replicas have it (docs/clients.md,
//! "Failover-safe by default"). The part without I/O: the setting, what the server is
//! asked, what its answer means.
//!
//! Every write that makes or keeps a grant (an acquire, `lock_all`, an extend, the
//! watchdog's extends) asks the server to hold its reply until its replicas have it
//! (`REPLICAS AUTO`, or the number given, `REPLTIMEOUT ms`): the server counts the
//! acknowledgements of the grant's own offset and, when too few come in time, undoes the
//! grant itself and answers `NOTREPLICATED`. The package keeps no knowledge of replicas
//! of its own there: no `ROLE`, no `INFO`, no `WAIT`. A server that cannot wait (Redis
//! 7.0, a module before 0.3.0) refuses the option and changes nothing; the locker then
//! waits itself ([`crate::redis70`]). Either way the acquire answers an error that
//! [`is_not_replicated`] recognizes.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use redis::{ErrorKind, FromRedisValue, RedisError, RedisResult, Value};

/// The longest default wait for the replicas' acknowledgement.
const MAX_DEFAULT_TIMEOUT: Duration = Duration::from_secs(1);

/// What `REPLICAS <n|AUTO> REPLTIMEOUT <ms>` adds to a command: 4 arguments, and at most
/// 12 + 20 + 11 + 20 bytes.
const SERVER_WAIT_ARGS: usize = 4;
const SERVER_WAIT_BYTES: usize = 64;
/// What a not-replicated grant's error starts with.
const NOT_REPLICATED: &str = "NOTREPLICATED";

/// How many replicas must acknowledge a grant (or an extend) before it counts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Replicas {
    /// The server's rule (`REPLICAS AUTO`): 1 when the master has a replica, none on a
    /// master without one.
    #[default]
    Auto,
    /// Exactly this many; 0 turns it off.
    Exactly(usize),
}

/// Whether `err` is the error of a grant too few replicas acknowledged (the grant was
/// released: nothing is held), or of a master with fewer replicas online than an
/// explicit [`Replicas::Exactly`] asks for.
pub fn is_not_replicated(err: &RedisError) -> bool {
    // The package's own error names the code first; the server's `NOTREPLICATED acked
    // <a> required <n>` is an extension error with that code.
    err.kind() == ErrorKind::Extension
        && (err.code() == Some(NOT_REPLICATED) || err.to_string().starts_with(NOT_REPLICATED))
}

/// Whether `err` refused an acquire before anything was sent: the master had fewer
/// replicas online than [`Replicas::Exactly`] asks for (trying again at once would not
/// help). [`is_not_replicated`] is true for it too.
pub fn is_too_few_replicas(err: &RedisError) -> bool {
    is_not_replicated(err) && err.to_string().contains("replicas online")
}

/// Whether trying again at once would not help: too few replicas online, or a server
/// that refuses `WAITAOF`.
pub(crate) fn refused(err: &RedisError) -> bool {
    is_too_few_replicas(err)
        || (is_not_replicated(err) && err.to_string().contains("WAITAOF failed"))
}

/// What is left of an acquire's `wait` after `spent`, for a try after a grant too few
/// replicas acknowledged: `None` when there is no wait or it is over.
pub(crate) fn wait_left(wait: Option<Duration>, spent: Duration) -> Option<Duration> {
    match wait {
        Some(wait) if wait.is_zero() => Some(wait),
        Some(wait) if spent < wait => Some((wait - spent).max(Duration::from_millis(1))),
        _ => None,
    }
}

fn not_replicated(detail: String) -> RedisError {
    RedisError::from((ErrorKind::Extension, NOT_REPLICATED, detail))
}

/// A lock's replicas setting and timeout: the `WAIT` after each grant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Policy {
    pub(crate) replicas: Replicas,
    pub(crate) timeout: Option<Duration>,
    /// Wait with `WAITAOF 1 n`: the master's own fsync and the replicas'.
    pub(crate) fsync: bool,
}

impl Policy {
    /// No wait at all: no replicas asked for, and no fsync.
    pub(crate) fn off(&self) -> bool {
        self.asks_no_replica() && !self.fsync
    }

    pub(crate) fn asks_no_replica(&self) -> bool {
        self.replicas == Replicas::Exactly(0)
    }

    /// What this policy asks of a node with `online` replicas that took the writes
    /// already (a grant made: too few replicas there is then a shortfall, not a refusal).
    pub(crate) fn asked_of(&self, online: usize) -> usize {
        match self.replicas {
            Replicas::Auto => usize::from(online > 0),
            Replicas::Exactly(n) => n,
        }
    }

    /// The acknowledgements a grant needs from a master with `online` replicas.
    pub(crate) fn required(&self, online: usize, key: &[u8]) -> RedisResult<usize> {
        match self.replicas {
            Replicas::Exactly(n) if online < n => Err(not_replicated(format!(
                "{}: the master has {online} replicas online and {n} are required: not acquired",
                String::from_utf8_lossy(key)
            ))),
            _ => Ok(self.asked_of(online)),
        }
    }

    /// The wait's timeout for a lock of `ttl`, in ms: the timeout given, or a tenth of
    /// the TTL, at most 1 s (with `fsync` a third, at most 2 s: a replica reports its
    /// fsync once a second), never 0 (which `WAIT` reads as no limit).
    fn timeout_ms(&self, ttl: Duration) -> u64 {
        let default = if self.fsync {
            (ttl / 3).min(2 * MAX_DEFAULT_TIMEOUT)
        } else {
            (ttl / 10).min(MAX_DEFAULT_TIMEOUT)
        };
        let timeout = self.timeout.unwrap_or(default);
        timeout.as_millis().clamp(1, u128::from(u64::MAX)) as u64
    }

    /// `cmds` asking the server to hold each reply until its replicas have it (`REPLICAS
    /// AUTO`, or the number given, 0 included, and `REPLTIMEOUT`), for a lock of `ttl`;
    /// with `fsync`, a `WAITAOF 1 0` after them for the master's own fsync.
    pub(crate) fn server_writes(&self, cmds: &[redis::Cmd], ttl: Duration) -> Vec<redis::Cmd> {
        let timeout = self.timeout_ms(ttl);
        let mut writes: Vec<redis::Cmd> = cmds
            .iter()
            .map(|cmd| {
                let mut cmd = copy_with_room(cmd, SERVER_WAIT_ARGS, SERVER_WAIT_BYTES);
                cmd.arg("REPLICAS");
                match self.replicas {
                    Replicas::Auto => cmd.arg("AUTO"),
                    Replicas::Exactly(n) => cmd.arg(n),
                };
                cmd.arg("REPLTIMEOUT").arg(timeout);
                cmd
            })
            .collect();
        if self.fsync {
            let mut wait = redis::cmd("WAITAOF");
            wait.arg(1).arg(0).arg(timeout);
            writes.push(wait);
        }
        writes
    }

    /// `WAIT required timeout-ms` for a lock of `ttl` (with `fsync`, `WAITAOF 1 required
    /// timeout-ms`), or `None` when nothing is waited for.
    pub(crate) fn wait_cmd(&self, required: usize, ttl: Duration) -> Option<redis::Cmd> {
        let timeout = self.timeout_ms(ttl);
        if self.fsync {
            let mut cmd = redis::cmd("WAITAOF");
            cmd.arg(1).arg(required).arg(timeout);
            return Some(cmd);
        }
        (required > 0).then(|| {
            let mut cmd = redis::cmd("WAIT");
            cmd.arg(required).arg(timeout);
            cmd
        })
    }

    /// `None` when `answer` (the `WAIT`'s, or the `WAITAOF`'s) counts what was asked,
    /// else the error that says how many of how many did. A `WAITAOF` the server refuses
    /// (before Redis 7.2 and Valkey 8, or without `appendonly yes`) is a refusal
    /// ([`is_too_few_replicas`] is false for it; trying again will not mend it either).
    pub(crate) fn shortfall(
        &self,
        key: &[u8],
        what: &str,
        required: usize,
        answer: &RedisResult<Value>,
    ) -> Option<RedisError> {
        let key = String::from_utf8_lossy(key);
        if self.fsync {
            let counts = match answer {
                Ok(Value::Array(items)) if items.len() == 2 => match (&items[0], &items[1]) {
                    (Value::Int(local), Value::Int(acked)) => Some((*local, *acked)),
                    _ => None,
                },
                _ => None,
            };
            return match counts {
                None => Some(not_replicated(format!(
                    "{key}: the lock was {what}, but WAITAOF failed (fsync needs Redis 7.2+ or \
                     Valkey 8+ with appendonly yes): {answer:?}"
                ))),
                Some((local, acked))
                    if local >= 1 && usize::try_from(acked).unwrap_or(0) >= required =>
                {
                    None
                }
                Some((local, acked)) => Some(not_replicated(format!(
                    "{key}: the lock was {what}, but the master fsynced it {local} times and \
                     {acked} of {required} replicas did, in time"
                ))),
            };
        }
        shortfall(key.as_bytes(), what, required, answer)
    }
}

/// Whether the server refused `REPLICAS` (it cannot wait: Redis 7.0; or an older module
/// does not know the option), which changed nothing: the writes go again with `WAIT`.
pub(crate) fn refuses_replicas(replies: &[RedisResult<Value>]) -> bool {
    replies.iter().any(|reply| match reply {
        Err(err) => {
            let text = err.to_string();
            text.contains("REPLICAS needs") || text.contains("unknown option 'REPLICAS'")
        }
        Ok(_) => false,
    })
}

/// `replies` with the server's `NOTREPLICATED acked <a> required <n>` (the grant undone,
/// an extend kept) told as the package tells a shortfall.
pub(crate) fn server_shortfalls(
    key: &[u8],
    replies: Vec<RedisResult<Value>>,
) -> Vec<RedisResult<Value>> {
    replies
        .into_iter()
        .map(|reply| match reply {
            Err(err) if err.code() == Some(NOT_REPLICATED) => {
                let words: Vec<String> = err
                    .detail()
                    .unwrap_or_default()
                    .split_whitespace()
                    .map(str::to_owned)
                    .collect();
                let count = |i: usize| words.get(i).cloned().unwrap_or_else(|| "?".into());
                Err(not_replicated(format!(
                    "{}: only {} of {} replicas acknowledged it in time (the server undid the \
                     grant; an extend keeps the lock)",
                    String::from_utf8_lossy(key),
                    count(1),
                    count(3)
                )))
            }
            other => other,
        })
        .collect()
}

/// The cluster slot of `key` (CRC16 of its hash tag), where its master is.
pub(crate) fn slot(key: &[u8]) -> u16 {
    let tagged = key
        .iter()
        .position(|&b| b == b'{')
        .and_then(|open| {
            let rest = &key[open + 1..];
            rest.iter()
                .position(|&b| b == b'}')
                .filter(|&close| close > 0)
                .map(|close| &rest[..close])
        })
        .unwrap_or(key);
    let mut crc: u16 = 0;
    for &byte in tagged {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc % 16384
}

/// Whether a locker's servers hold a grant's reply for their replicas themselves: set
/// once one refused `REPLICAS`, and the locker waits itself from then on
/// ([`crate::redis70`]).
#[derive(Debug, Default)]
pub(crate) struct ServerWaits {
    refused: AtomicBool,
}

impl ServerWaits {
    /// Whether to ask the servers to wait (none refused yet).
    pub(crate) fn may(&self) -> bool {
        !self.refused.load(Ordering::Relaxed)
    }

    /// Keeps whether the server took `REPLICAS` (`replies` to writes that asked it);
    /// whether it did.
    pub(crate) fn took(&self, replies: &[RedisResult<Value>]) -> bool {
        let refused = refuses_replicas(replies);
        if refused {
            self.refused.store(true, Ordering::Relaxed);
        }
        !refused
    }
}

/// The outcome of `count` writes the server was asked to wait for ([`Policy::server_writes`]),
/// or `None` when it refused `REPLICAS` (nothing changed: the locker waits itself).
pub(crate) fn server_outcome(
    server: &ServerWaits,
    key: &[u8],
    replies: Vec<RedisResult<Value>>,
    count: usize,
    policy: Policy,
) -> Option<Outcome> {
    if !server.took(&replies[..count.min(replies.len())]) {
        return None;
    }
    let waited = policy.fsync.then_some(policy);
    Some(Outcome::of(
        server_shortfalls(key, replies),
        count,
        0,
        waited,
    ))
}

/// The replies of a write that makes or keeps a grant, and of its `WAIT`.
pub(crate) struct Outcome {
    pub(crate) replies: Vec<RedisResult<Value>>,
    pub(crate) required: usize,
    pub(crate) answer: RedisResult<Value>,
    /// The policy whose wait was sent; `None` when none was.
    pub(crate) waited: Option<Policy>,
}

impl Outcome {
    /// Splits the replies of `count` writes from the wait's (when `waited`).
    pub(crate) fn of(
        mut replies: Vec<RedisResult<Value>>,
        count: usize,
        required: usize,
        waited: Option<Policy>,
    ) -> Self {
        let answer = if waited.is_some() {
            replies.pop().unwrap_or(Ok(Value::Nil))
        } else {
            Ok(Value::Nil)
        };
        replies.truncate(count);
        Outcome {
            replies,
            required,
            answer,
            waited,
        }
    }

    /// The error of a shortfall (`what` the write did), or `None`.
    pub(crate) fn missing(&self, key: &[u8], what: &str) -> Option<RedisError> {
        let policy = self.waited?;
        policy.shortfall(key, what, self.required, &self.answer)
    }

    /// The writes went to another node than the one the wait was chosen for (the slot
    /// moved), which has `online` replicas: what `policy` asks of that node. `None` when
    /// the answer in hand settles it (enough acknowledged, or too few replicas there to
    /// ask: a shortfall); else the `WAIT` still to send there, whose answer goes to
    /// [`waited_again`](Self::waited_again).
    #[cfg(feature = "tokio")] // the async face settles after its one round trip
    pub(crate) fn on_new_node(
        &mut self,
        policy: Policy,
        online: usize,
        ttl: Duration,
    ) -> Option<redis::Cmd> {
        let required = policy.asked_of(online);
        let acked = match (&self.waited, &self.answer) {
            (Some(_), Ok(Value::Int(n))) => usize::try_from(*n).unwrap_or(0),
            _ => 0,
        };
        self.required = required;
        if required == 0 || required <= acked || policy.fsync {
            return None;
        }
        self.waited = Some(policy);
        if online < required {
            self.answer = Ok(Value::Int(acked as i64));
            return None;
        }
        policy.wait_cmd(required, ttl)
    }

    /// The answer of the `WAIT` [`on_new_node`](Self::on_new_node) asked for.
    #[cfg(feature = "tokio")] // the async face settles after its one round trip
    pub(crate) fn waited_again(&mut self, answer: RedisResult<Value>) {
        self.answer = answer;
    }

    /// The first write's reply as `T` (its error reply as `Err`).
    pub(crate) fn first<T: redis::FromRedisValue>(&mut self) -> RedisResult<T> {
        let reply = self.replies.remove(0)?;
        Ok(T::from_redis_value(reply)?)
    }

    /// Whether every write answered 1 (each key still held).
    pub(crate) fn all_held(&self) -> RedisResult<bool> {
        let mut all = true;
        for reply in &self.replies {
            all &= bool::from_redis_value(reply.clone()?)?;
        }
        Ok(all)
    }
}

/// `None` when `answer` (the `WAIT`'s) counts `required` acknowledgements, else the
/// error that says how many of how many did.
pub(crate) fn shortfall(
    key: &[u8],
    what: &str,
    required: usize,
    answer: &RedisResult<Value>,
) -> Option<RedisError> {
    let acked = match answer {
        Ok(Value::Int(n)) => usize::try_from(*n).unwrap_or(0),
        _ => 0,
    };
    (required > 0 && acked < required).then(|| {
        not_replicated(format!(
            "{}: the lock was {what}, but only {acked} of {required} replicas acknowledged it in time",
            String::from_utf8_lossy(key)
        ))
    })
}

/// A copy of `cmd` with room for `args` more arguments of `bytes` in all, so that adding
/// them moves nothing: a clone has no room to spare, and an acquire's arguments grew its
/// buffers twice more on their way out. A command with an argument of another kind (a
/// cursor: none of the lock commands has one) is cloned.
fn copy_with_room(cmd: &redis::Cmd, args: usize, bytes: usize) -> redis::Cmd {
    let mut size = 0;
    for arg in cmd.args_iter() {
        match arg {
            redis::Arg::Simple(arg) => size += arg.len(),
            _ => return cmd.clone(),
        }
    }
    let mut copy = redis::Cmd::with_capacity(cmd.args_iter().len() + args, size + bytes);
    for arg in cmd.args_iter() {
        if let redis::Arg::Simple(arg) = arg {
            copy.arg(arg);
        }
    }
    copy
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_copy_with_room_sends_the_bytes_of_the_command_and_what_follows() {
        let mut cmd = redis::cmd("LOCK.ACQUIRE");
        cmd.arg("orders:42")
            .arg(30_000)
            .arg("TOKEN")
            .arg(&[0u8, 255, 7][..]);
        let copy = copy_with_room(&cmd, SERVER_WAIT_ARGS, SERVER_WAIT_BYTES);
        assert_eq!(copy.get_packed_command(), cmd.get_packed_command());
        let mut longer = copy.clone();
        longer.arg("REPLICAS").arg("AUTO");
        let mut expected = cmd.clone();
        expected.arg("REPLICAS").arg("AUTO");
        assert_eq!(longer.get_packed_command(), expected.get_packed_command());
    }

    #[test]
    fn auto_asks_for_one_replica_when_there_is_one() {
        let auto = Policy {
            replicas: Replicas::Auto,
            timeout: None,
            fsync: false,
        };
        assert_eq!(auto.required(0, b"k").unwrap(), 0);
        assert_eq!(auto.required(2, b"k").unwrap(), 1);
        let two = Policy {
            replicas: Replicas::Exactly(2),
            timeout: None,
            fsync: false,
        };
        assert!(is_not_replicated(&two.required(1, b"k").unwrap_err()));
        assert_eq!(two.required(3, b"k").unwrap(), 2);
    }

    #[test]
    fn the_default_timeout_is_a_tenth_of_the_ttl_at_most_a_second_never_zero() {
        let auto = Policy {
            replicas: Replicas::Auto,
            timeout: None,
            fsync: false,
        };
        let timeout =
            |ttl: Duration| match auto.wait_cmd(1, ttl).expect("a WAIT").args_iter().nth(2) {
                Some(redis::Arg::Simple(bytes)) => String::from_utf8_lossy(bytes).into_owned(),
                _ => String::new(),
            };
        assert_eq!(timeout(Duration::from_secs(5)), "500");
        assert_eq!(timeout(Duration::from_secs(60)), "1000");
        assert_eq!(timeout(Duration::from_millis(5)), "1");
    }

    #[test]
    fn slots_follow_hash_tags() {
        assert_eq!(slot(b"123456789"), 0x31C3);
        assert_eq!(slot(b"{user}:a"), slot(b"{user}:b"));
        assert_eq!(slot(b"foo"), 12182);
    }
}
