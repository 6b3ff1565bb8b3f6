//! `replicas`: a grant counts once the master's replicas have it (docs/clients.md,
//! "Failover-safe by default"). The part without I/O: the setting, the `WAIT` it asks,
//! what its answer means, and what a locker learned of its masters.
//!
//! Every write that makes or keeps a grant (an acquire, `lock_all`, an extend, the
//! watchdog's extends) asks the server to hold its reply until `n` replicas have it
//! (`REPLICAS n REPLTIMEOUT ms`): the server counts the acknowledgements of the grant's
//! own offset and, when too few come in time, undoes the grant itself and answers
//! `NOTREPLICATED`. Where the server does not take `REPLICAS` (Redis 7.0, an older
//! module: it refuses the command and changes nothing), and on a cluster connection,
//! the write goes with `WAIT n timeout` on the same connection, pipelined in the same
//! round trip (on a blocking cluster connection, right after it on the key's node); a
//! grant too few replicas acknowledged is then released at once by its token. Either
//! way the acquire answers an error that [`is_not_replicated`] recognizes.
//!
//! [`Replicas::Auto`] (the default) asks for 1 when the master has a replica online and
//! for nothing on a master without one. What a locker learned of a master (`ROLE`, or
//! `WAIT 0 0` for a user whose ACL denies `ROLE`) is learned again on a new connection,
//! after a shortfall, and after [`RELEARN`]; a master that lists fewer replicas than
//! before is taken at its former count for [`HOLD`] (a deposed master loses its replicas
//! just before Sentinel demotes it, which it does after 8 s of a wrong role).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use redis::{ErrorKind, FromRedisValue, RedisError, RedisResult, Value};

/// How long what was learned of a master is trusted.
pub const RELEARN: Duration = Duration::from_secs(5);
/// How long a master that lists fewer replicas than before counts at its former number.
pub const HOLD: Duration = Duration::from_secs(15);
/// The longest default wait for the replicas' acknowledgement.
const MAX_DEFAULT_TIMEOUT: Duration = Duration::from_secs(1);
/// What a not-replicated grant's error starts with.
const NOT_REPLICATED: &str = "NOTREPLICATED";

/// How many replicas must acknowledge a grant (or an extend) before it counts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Replicas {
    /// 1 when the master has a replica online, none on a master without one.
    #[default]
    Auto,
    /// Exactly this many (a master with fewer online refuses at once); 0 turns it off.
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

    /// Whether the server is asked to wait for the replicas itself (`REPLICAS`): some
    /// are required, and no fsync (the server's wait is for replicas only).
    pub(crate) fn server_side(&self, required: usize) -> bool {
        required > 0 && !self.fsync
    }

    /// `cmd` asking the server to hold its reply until `required` replicas have it.
    pub(crate) fn with_replicas(
        &self,
        cmd: &redis::Cmd,
        required: usize,
        ttl: Duration,
    ) -> redis::Cmd {
        let mut cmd = cmd.clone();
        cmd.arg("REPLICAS")
            .arg(required)
            .arg("REPLTIMEOUT")
            .arg(self.timeout_ms(ttl));
        cmd
    }

    /// Whether the writes must tell the server not to wait (`REPLICAS 0`): the package
    /// asks no replica (`Exactly(0)`), or waits itself (`WAITAOF`, with `fsync`). The
    /// server's own `lock.replicas` (`auto` by default) would hold them otherwise.
    pub(crate) fn tells_server_not_to_wait(&self) -> bool {
        self.asks_no_replica() || self.fsync
    }

    /// `cmd` with `REPLICAS 0`: the server answers at once, whatever its setting.
    pub(crate) fn without_server_wait(cmd: &redis::Cmd) -> redis::Cmd {
        let mut cmd = cmd.clone();
        cmd.arg("REPLICAS").arg(0);
        cmd
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

/// The commands that learn what a master has: `ROLE` and `CLIENT INFO` (its address).
pub(crate) fn learn_cmds() -> [redis::Cmd; 2] {
    [redis::cmd("ROLE"), node_cmd()]
}

/// `CLIENT INFO`: which node a cluster exchange went to (its `laddr`), sent after the
/// writes, so that a `MOVED` the cluster client followed is seen.
pub(crate) fn node_cmd() -> redis::Cmd {
    let mut info = redis::cmd("CLIENT");
    info.arg("INFO");
    info
}

/// `WAIT 0 0`: the replicas that have this connection's writes, for a user without `ROLE`.
pub(crate) fn count_cmd() -> redis::Cmd {
    let mut wait = redis::cmd("WAIT");
    wait.arg(0).arg(0);
    wait
}

/// What the learning commands answered: the replicas online and the server's address.
pub(crate) fn learned_from(
    mut replies: Vec<RedisResult<Value>>,
    place: u16,
) -> (RedisResult<Value>, String) {
    let info = replies.pop().and_then(Result::ok);
    let role = replies.pop().unwrap_or(Ok(Value::Nil));
    let address = info
        .as_ref()
        .and_then(address_from)
        .unwrap_or_else(|| format!("slot {place}"));
    (role, address)
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

/// The replicas online in a `ROLE` reply (a master lists them; a replica has none), or a
/// `WAIT 0 0` answer.
pub(crate) fn online_from(reply: &Value) -> usize {
    match reply {
        Value::Int(n) => usize::try_from(*n).unwrap_or(0),
        Value::Array(items) => match (items.first(), items.get(2)) {
            (Some(Value::BulkString(role)), Some(Value::Array(replicas))) if role == b"master" => {
                replicas.len()
            }
            _ => 0,
        },
        _ => 0,
    }
}

/// The server's own address from a `CLIENT INFO` reply (`laddr=`), to tell servers apart.
pub(crate) fn address_from(reply: &Value) -> Option<String> {
    let text = match reply {
        Value::BulkString(bytes) => String::from_utf8_lossy(bytes).into_owned(),
        Value::VerbatimString { text, .. } => text.clone(),
        Value::SimpleString(text) => text.clone(),
        _ => return None,
    };
    text.split_whitespace()
        .find_map(|field| field.strip_prefix("laddr="))
        .map(str::to_string)
}

/// Whether `ROLE` was refused by the user's ACL (then `WAIT 0 0` counts instead).
pub(crate) fn role_refused(reply: &RedisResult<Value>) -> bool {
    matches!(reply, Err(err) if err.code() == Some("NOPERM"))
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

/// What a locker learned of its masters: per place (a slot on a cluster, else 0) the
/// count, when, and on which connection (its generation); per server address the most
/// replicas it was seen with, and since when it shows fewer.
#[derive(Debug, Default)]
pub(crate) struct Learned {
    inner: Mutex<Inner>,
    /// Set once a server refused `REPLICAS`: the locker waits with `WAIT` from then on.
    no_server_wait: std::sync::atomic::AtomicBool,
}

#[derive(Debug, Default)]
struct Inner {
    /// place -> (count, when, generation, the address it was learned on)
    places: HashMap<u16, (usize, Instant, u64, String)>,
    /// address -> (most replicas seen, fewer since, the count seen last)
    seen: HashMap<String, (usize, Option<Instant>, usize)>,
}

impl Learned {
    /// Whether to ask the servers to wait for their replicas (none refused yet).
    pub(crate) fn server_waits(&self) -> bool {
        !self
            .no_server_wait
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Keeps whether the server took `REPLICAS` (`replies` to writes that asked it);
    /// whether it did.
    pub(crate) fn took_replicas(&self, replies: &[RedisResult<Value>]) -> bool {
        let refused = refuses_replicas(replies);
        if refused {
            self.no_server_wait
                .store(true, std::sync::atomic::Ordering::Relaxed);
        }
        !refused
    }

    /// The count learned for `place` on the connection of `generation`, if still trusted.
    pub(crate) fn known(&self, place: u16, generation: u64) -> Option<usize> {
        let inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        match inner.places.get(&place) {
            Some(&(online, at, of, _)) if of == generation && at.elapsed() < RELEARN => {
                Some(online)
            }
            _ => None,
        }
    }

    /// Whether `info` (the `CLIENT INFO` answer of the node that took a cluster
    /// exchange) names another node than the one `place` was learned on: the slot moved
    /// (a `MOVED` the cluster client followed), and what was learned is of the old node.
    pub(crate) fn moved(&self, place: u16, info: &RedisResult<Value>) -> bool {
        let Some(address) = info.as_ref().ok().and_then(address_from) else {
            return false;
        };
        let inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        matches!(inner.places.get(&place), Some((_, _, _, learned_on)) if *learned_on != address)
    }

    /// Keeps what was learned; the count to go by (the former one within HOLD of the
    /// last drop: a count that falls again, say from 1 to 0 after 2 to 1, starts the
    /// hold afresh).
    pub(crate) fn learn(
        &self,
        place: u16,
        generation: u64,
        address: String,
        online: usize,
    ) -> usize {
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        let count = match inner.seen.get(&address).copied() {
            Some((most, since, last)) if online < most => {
                let since = match since {
                    Some(since) if online >= last => since,
                    _ => now,
                };
                if now.duration_since(since) < HOLD {
                    inner
                        .seen
                        .insert(address.clone(), (most, Some(since), online));
                    most
                } else {
                    inner.seen.insert(address.clone(), (online, None, online));
                    online
                }
            }
            _ => {
                inner.seen.insert(address.clone(), (online, None, online));
                online
            }
        };
        inner
            .places
            .insert(place, (count, now, generation, address));
        count
    }

    /// Forgets every place (a new connection was made), keeping the servers' counts.
    pub(crate) fn clear(&self) {
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        inner.places.clear();
    }

    pub(crate) fn forget(&self, place: u16) {
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        inner.places.remove(&place);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn a_drop_is_held_then_followed() {
        let learned = Learned::default();
        assert_eq!(learned.learn(0, 1, "a".into(), 1), 1);
        assert_eq!(learned.learn(0, 1, "a".into(), 0), 1, "held");
        assert_eq!(learned.learn(0, 2, "b".into(), 0), 0, "another server");
        assert_eq!(learned.known(0, 2), Some(0));
        assert_eq!(learned.known(0, 3), None, "a new connection learns again");
    }

    #[test]
    fn slots_follow_hash_tags() {
        assert_eq!(slot(b"123456789"), 0x31C3);
        assert_eq!(slot(b"{user}:a"), slot(b"{user}:b"));
        assert_eq!(slot(b"foo"), 12182);
    }

    #[test]
    fn role_replies_count_the_replicas_a_master_lists() {
        let master = Value::Array(vec![
            Value::BulkString(b"master".to_vec()),
            Value::Int(10),
            Value::Array(vec![Value::Array(vec![])]),
        ]);
        assert_eq!(online_from(&master), 1);
        assert_eq!(online_from(&Value::Int(2)), 2);
        let info = Value::BulkString(b"id=3 addr=127.0.0.1:5 laddr=127.0.0.1:7379 fd=8".to_vec());
        assert_eq!(address_from(&info).as_deref(), Some("127.0.0.1:7379"));
    }
}
