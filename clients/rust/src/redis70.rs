//! Where the server cannot hold a grant's reply for its replicas (Redis 7.0, which
//! refuses `REPLICAS AUTO`; or a module before 0.3.0, which knows no `REPLICAS`): the
//! package learns its masters' replicas itself and sends its own `WAIT` (docs/clients.md,
//! "Failover-safe by default"). The part without I/O; `blocking/redis70.rs` and
//! `aio/redis70.rs` send. Entered only after such a refusal.
//!
//! What a locker learned of a master (`ROLE`, or `WAIT 0 0` for a user whose ACL denies
//! `ROLE`) is learned again on a new connection, after a shortfall, and after
//! [`RELEARN`]; a master that lists fewer replicas than before is taken at its former
//! count for [`HOLD`] (a deposed master loses its replicas just before Sentinel demotes
//! it, which it does after 8 s of a wrong role): the rule the server's own `auto` keeps
//! where it can wait.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use redis::{RedisResult, Value};

pub(crate) use crate::replicas::slot;

/// How long what was learned of a master is trusted.
pub const RELEARN: Duration = Duration::from_secs(5);
/// How long a master that lists fewer replicas than before counts at its former number.
pub const HOLD: Duration = Duration::from_secs(15);

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

/// What a locker learned of its masters: per place (a slot on a cluster, else 0) the
/// count, when, and on which connection (its generation); per server address the most
/// replicas it was seen with, and since when it shows fewer.
#[derive(Debug, Default)]
pub(crate) struct Learned {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    /// place -> (count, when, generation, the address it was learned on)
    places: HashMap<u16, (usize, Instant, u64, String)>,
    /// address -> (most replicas seen, fewer since, the count seen last)
    seen: HashMap<String, (usize, Option<Instant>, usize)>,
}

impl Learned {
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
    fn a_drop_is_held_then_followed() {
        let learned = Learned::default();
        assert_eq!(learned.learn(0, 1, "a".into(), 1), 1);
        assert_eq!(learned.learn(0, 1, "a".into(), 0), 1, "held");
        assert_eq!(learned.learn(0, 2, "b".into(), 0), 0, "another server");
        assert_eq!(learned.known(0, 2), Some(0));
        assert_eq!(learned.known(0, 3), None, "a new connection learns again");
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
