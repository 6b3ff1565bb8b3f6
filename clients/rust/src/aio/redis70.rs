//! The locker's own wait for replicas on async connections (see `crate::redis70`), where
//! the server refused `REPLICAS`: a write that makes or keeps a grant, sent with the
//! `WAIT` it needs in one round trip.

use std::time::Duration;

use redis::RedisResult;

use super::conn::{AsyncLink, Conn};
use redis::Value;

use crate::redis70::{
    count_cmd, learn_cmds, learned_from, node_cmd, online_from, role_refused, slot,
};
use crate::replicas::{Outcome, Policy};

/// The generation of a connection of its own (a waiting acquire's, a multi-key lock's):
/// what it learns is never taken for the shared connection's.
pub(crate) const OWN: u64 = u64::MAX - 1;

/// Where what is learned of `key`'s master is kept: its slot on a cluster, else 0.
fn place(con: &AsyncLink, key: &[u8]) -> u16 {
    if on_cluster(con) { slot(key) } else { 0 }
}

/// The replicas `key`'s master has online, learned on `con` (of `generation`) now if
/// not known.
pub(crate) async fn online(
    conn: &Conn,
    generation: u64,
    con: &mut AsyncLink,
    key: &[u8],
) -> RedisResult<usize> {
    let place = place(con, key);
    if let Some(online) = conn.learned.known(place, generation) {
        return Ok(online);
    }
    let (mut role, address) = learned_from(con.exchange(key, &learn_cmds()).await?, place);
    if role_refused(&role) {
        role = con.exchange(key, &[count_cmd()]).await?.remove(0);
    }
    Ok(conn
        .learned
        .learn(place, generation, address, online_from(&role?)))
}

/// Whether `con` is a cluster's: its exchanges may follow a `MOVED` to another node.
fn on_cluster(con: &AsyncLink) -> bool {
    #[cfg(feature = "cluster-async")]
    if matches!(con, AsyncLink::Cluster(_)) {
        return true;
    }
    let _ = con;
    false
}

/// Sends `cmds` (writes that make or keep a grant on `key`) and the `WAIT` `policy` asks
/// for a lock of `ttl`, in one round trip on `con` (of `generation`). On a cluster,
/// `CLIENT INFO` follows them: when the slot moved (the cluster client followed a
/// `MOVED`), the node that took the writes is asked for its replicas at once, and the
/// `WAIT` it needs is sent there.
pub(crate) async fn replicated_on(
    conn: &Conn,
    generation: u64,
    con: &mut AsyncLink,
    key: &[u8],
    mut cmds: Vec<redis::Cmd>,
    policy: Policy,
    ttl: Duration,
) -> RedisResult<Outcome> {
    let required = if policy.asks_no_replica() {
        0
    } else {
        policy.required(online(conn, generation, con, key).await?, key)?
    };
    let count = cmds.len();
    let wait = if policy.off() {
        None
    } else {
        policy.wait_cmd(required, ttl)
    };
    let waited = wait.is_some().then_some(policy);
    cmds.extend(wait);
    let cluster = on_cluster(con) && !policy.asks_no_replica();
    if cluster {
        cmds.push(node_cmd());
    }
    let mut replies = con.exchange(key, &cmds).await?;
    let node = if cluster { replies.pop() } else { None };
    let mut outcome = Outcome::of(replies, count, required, waited);
    let place = place(con, key);
    if let Some(node) = node
        && conn.learned.moved(place, &node)
    {
        conn.learned.forget(place);
        let online = online(conn, generation, con, key).await?;
        if let Some(wait) = outcome.on_new_node(policy, online, ttl) {
            let answer = con.exchange(key, &[wait]).await?.pop();
            outcome.waited_again(answer.unwrap_or(Ok(Value::Nil)));
        }
    }
    if outcome.missing(key, "granted").is_some() {
        conn.learned.forget(place);
    }
    Ok(outcome)
}
