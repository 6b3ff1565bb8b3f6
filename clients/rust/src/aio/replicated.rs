//! `replicas` on async connections (see `crate::replicas`): a write that makes or keeps
//! a grant, the server asked to hold its reply until its replicas have it, in one round
//! trip; where the server refuses, the locker's own wait (`redis70.rs`).

use std::sync::atomic::Ordering;
use std::time::Duration;

use redis::RedisResult;

use super::conn::{AsyncLink, Conn};
use super::redis70;
use crate::replicas::{Outcome, Policy, server_outcome};

pub(crate) use super::redis70::OWN;

/// Sends `cmds` (writes that make or keep a grant on `key`) on `con` (of `generation`),
/// asking the server to hold each reply until its replicas have it, as `policy` says, for
/// a lock of `ttl`. A server that refuses (Redis 7.0) changed nothing: the writes go
/// again with the locker's own `WAIT`, and from then on.
pub(crate) async fn replicated_on(
    conn: &Conn,
    generation: u64,
    con: &mut AsyncLink,
    key: &[u8],
    cmds: Vec<redis::Cmd>,
    policy: Policy,
    ttl: Duration,
) -> RedisResult<Outcome> {
    if conn.server_waits.may() {
        let replies = con.exchange(key, &policy.server_writes(&cmds, ttl)).await?;
        if let Some(outcome) = server_outcome(&conn.server_waits, key, replies, cmds.len(), policy)
        {
            return Ok(outcome);
        }
    }
    redis70::replicated_on(conn, generation, con, key, cmds, policy, ttl).await
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
