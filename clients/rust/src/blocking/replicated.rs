//! `replicas` on blocking connections (see `crate::replicas`): a write that makes or
//! keeps a grant, sent with the `WAIT` it needs in one round trip.

use std::time::Duration;

use redis::{RedisResult, Value};

use super::conn::{Link, Links};
use crate::replicas::{
    Learned, Outcome, Policy, count_cmd, is_not_replicated, learn_cmds, learned_from, node_cmd,
    online_from, role_refused, server_shortfalls, slot,
};

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
    if on_cluster(con) { slot(key) } else { 0 }
}

/// The replicas `key`'s master has online, learned on `con` now if not known.
pub(crate) fn online(links: &Links, con: &mut Link, key: &[u8]) -> RedisResult<usize> {
    let place = place(con, key);
    online_with(&links.learned, place, |cmds| con.exchange(key, cmds))
}

/// Whether `con` is a cluster's: its exchanges may follow a `MOVED` to another node.
fn on_cluster(con: &Link) -> bool {
    #[cfg(feature = "cluster")]
    if matches!(con, Link::Cluster(_)) {
        return true;
    }
    let _ = con;
    false
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
    // The package waits itself (`fsync`), or not at all (`Exactly(0)`): the server must
    // not wait for its replicas as its own setting would have it (`REPLICAS 0`; an older
    // module that knows no `REPLICAS` is sent the writes as they are).
    let original = cmds.clone();
    let unwaited = policy.tells_server_not_to_wait() && links.learned.server_waits();
    if unwaited {
        cmds = cmds.iter().map(Policy::without_server_wait).collect();
    }
    if !on_cluster(con) && policy.server_side(required) && links.learned.server_waits() {
        let asked: Vec<redis::Cmd> = cmds
            .iter()
            .map(|cmd| policy.with_replicas(cmd, required, ttl))
            .collect();
        let replies = con.exchange(key, &asked)?;
        if links.learned.took_replicas(&replies) {
            if replies
                .iter()
                .any(|reply| reply.as_ref().is_err_and(is_not_replicated))
            {
                links.learned.forget(place);
            }
            let replies = server_shortfalls(key, replies);
            return Ok(Outcome::of(replies, count, required, None));
        }
    }
    let mut replies = Vec::new();
    if on_cluster(con) && !policy.asks_no_replica() {
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
    let writes_sent = cmds.is_empty();
    cmds.extend(wait.clone());
    if !cmds.is_empty() {
        let mut got = con.exchange(key, &cmds)?;
        if unwaited && !writes_sent && !links.learned.took_replicas(&got) {
            // An older module refused `REPLICAS 0` and changed nothing: as they are.
            let mut again = original;
            again.extend(wait);
            got = con.exchange(key, &again)?;
        }
        replies.extend(got);
    }
    let outcome = Outcome::of(replies, count, required, waited);
    if outcome.missing(key, "granted").is_some() {
        links.learned.forget(place);
    }
    Ok(outcome)
}
