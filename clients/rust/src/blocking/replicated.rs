//! `replicas` on blocking connections (see `crate::replicas`): a write that makes or
//! keeps a grant, the server asked to hold its reply until its replicas have it, in one
//! round trip; where the server refuses, the locker's own wait (`redis70.rs`).

use std::time::Duration;

use redis::RedisResult;

use super::conn::{Link, Links};
use super::redis70;
use crate::replicas::{Outcome, Policy, server_outcome};

/// Sends `cmds` (writes that make or keep a grant on `key`) on `con`, asking the server
/// to hold each reply until its replicas have it, as `policy` says, for a lock of
/// `ttl`. A server that refuses (Redis 7.0) changed nothing: the writes go again with the
/// locker's own `WAIT`, and from then on.
pub(crate) fn replicated(
    links: &Links,
    con: &mut Link,
    key: &[u8],
    cmds: Vec<redis::Cmd>,
    policy: Policy,
    ttl: Duration,
) -> RedisResult<Outcome> {
    if links.server_waits.may() {
        let replies = con.exchange(key, &policy.server_writes(&cmds, ttl))?;
        if let Some(outcome) = server_outcome(&links.server_waits, key, replies, cmds.len(), policy)
        {
            return Ok(outcome);
        }
    }
    redis70::replicated(links, con, key, cmds, policy, ttl)
}
