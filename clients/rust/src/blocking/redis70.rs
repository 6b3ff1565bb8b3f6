//! The locker's own wait for replicas on blocking connections (see `crate::redis70`),
//! where the server refused `REPLICAS`: a write that makes or keeps a grant, sent with
//! the `WAIT` it needs in one round trip.

use std::time::Duration;

use redis::{RedisResult, Value};

use super::conn::{Link, Links};
use crate::redis70::{
    Learned, count_cmd, learn_cmds, learned_from, node_cmd, online_from, role_refused, slot,
};
use crate::replicas::{Outcome, Policy};

/// What `learned` knows of the master at `place`, else learned now with `send`.
pub(crate) fn online_with(
    learned: &Learned,
    place: u16,
    mut send: impl FnMut(&[redis::Cmd]) -> RedisResult<Vec<RedisResult<Value>>>,
) -> RedisResult<usize> {
    if let Some(online) = learned.known(place, 0) {
        return Ok(online);
    }
    let (mut role, address) = learned_from(send(&learn_cmds())?, place);
    if role_refused(&role) {
        role = send(&[count_cmd()])?.remove(0);
    }
    Ok(learned.learn(place, 0, address, online_from(&role?)))
}

/// Where what is learned of `key`'s master is kept: its slot on a cluster, else 0.
fn place(con: &Link, key: &[u8]) -> u16 {
    if con.on_cluster() { slot(key) } else { 0 }
}

/// The replicas `key`'s master has online, learned on `con` now if not known.
pub(crate) fn online(links: &Links, con: &mut Link, key: &[u8]) -> RedisResult<usize> {
    let place = place(con, key);
    online_with(&links.learned, place, |cmds| con.exchange(key, cmds))
}

/// Sends `cmds` (writes that make or keep a grant on `key`) and the `WAIT` `policy` asks
/// for a lock of `ttl`, in one round trip on `con`. On a cluster, whose exchange sends
/// one command after another anyway, `CLIENT INFO` follows the writes, before the
/// `WAIT`: when the slot moved (the cluster client followed a `MOVED`), the node that
/// took the writes is asked for its replicas at once, and the `WAIT` is the one it needs.
pub(crate) fn replicated(
    links: &Links,
    con: &mut Link,
    key: &[u8],
    mut cmds: Vec<redis::Cmd>,
    policy: Policy,
    ttl: Duration,
) -> RedisResult<Outcome> {
    let place = place(con, key);
    let mut required = if policy.asks_no_replica() {
        0
    } else {
        policy.required(online(links, con, key)?, key)?
    };
    let count = cmds.len();
    let mut replies = Vec::new();
    if con.on_cluster() && !policy.asks_no_replica() {
        cmds.push(node_cmd());
        replies = con.exchange(key, &cmds)?;
        let node = replies.pop().unwrap_or(Ok(Value::Nil));
        cmds.clear();
        if links.learned.moved(place, &node) {
            links.learned.forget(place);
            required = policy.asked_of(online(links, con, key)?);
        }
    }
    let wait = if policy.off() {
        None
    } else {
        policy.wait_cmd(required, ttl)
    };
    let waited = wait.is_some().then_some(policy);
    cmds.extend(wait);
    if !cmds.is_empty() {
        replies.extend(con.exchange(key, &cmds)?);
    }
    let outcome = Outcome::of(replies, count, required, waited);
    if outcome.missing(key, "granted").is_some() {
        links.learned.forget(place);
    }
    Ok(outcome)
}
