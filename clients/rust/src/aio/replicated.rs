//! `replicas` on async connections (see `crate::replicas`): a write that makes or keeps
//! a grant, sent with the `WAIT` it needs in one round trip.

use std::sync::atomic::Ordering;
use std::time::Duration;

use redis::RedisResult;

use super::conn::{AsyncLink, Conn};
use redis::Value;

use crate::replicas::{
    Outcome, Policy, count_cmd, is_not_replicated, learn_cmds, learned_from, node_cmd, online_from,
    role_refused, server_shortfalls, slot,
};

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
    // The package waits itself (`fsync`), or not at all (`Exactly(0)`): the server must
    // not wait for its replicas as its own setting would have it (`REPLICAS 0`; an older
    // module that knows no `REPLICAS` is sent the writes as they are).
    let original = cmds.clone();
    let unwaited = policy.tells_server_not_to_wait() && conn.learned.server_waits();
    if unwaited {
        cmds = cmds.iter().map(Policy::without_server_wait).collect();
    }
    if !on_cluster(con) && policy.server_side(required) && conn.learned.server_waits() {
        let asked: Vec<redis::Cmd> = cmds
            .iter()
            .map(|cmd| policy.with_replicas(cmd, required, ttl))
            .collect();
        let replies = con.exchange(key, &asked).await?;
        if conn.learned.took_replicas(&replies) {
            if replies
                .iter()
                .any(|reply| reply.as_ref().is_err_and(is_not_replicated))
            {
                conn.learned.forget(place(con, key));
            }
            let replies = server_shortfalls(key, replies);
            return Ok(Outcome::of(replies, count, required, None));
        }
    }
    let wait = if policy.off() {
        None
    } else {
        policy.wait_cmd(required, ttl)
    };
    let waited = wait.is_some().then_some(policy);
    cmds.extend(wait.clone());
    let cluster = on_cluster(con) && !policy.asks_no_replica();
    if cluster {
        cmds.push(node_cmd());
    }
    let mut replies = con.exchange(key, &cmds).await?;
    if unwaited && !conn.learned.took_replicas(&replies) {
        // An older module refused `REPLICAS 0` and changed nothing: as they are.
        let mut again = original;
        again.extend(wait);
        if cluster {
            again.push(node_cmd());
        }
        replies = con.exchange(key, &again).await?;
    }
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

/// `replicated_on` the locker's shared connection, its answers awaited for at most
/// `limit`; a broken connection is reopened next time.
pub(crate) async fn replicated(
    conn: &Conn,
    key: &[u8],
    cmds: Vec<redis::Cmd>,
    policy: Policy,
    ttl: Duration,
    limit: Duration,
) -> RedisResult<Outcome> {
    let result = super::within(Some(limit), async {
        let mut con = conn.get().await?;
        let generation = conn.generation.load(Ordering::SeqCst);
        replicated_on(conn, generation, &mut con, key, cmds, policy, ttl).await
    })
    .await;
    if let Err(err) = &result
        && (err.is_connection_dropped() || err.is_unrecoverable_error())
    {
        *conn.slot.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }
    result
}
