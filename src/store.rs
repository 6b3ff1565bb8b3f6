//! Writing a grant to the keyspace: the one place a lock is given to a token, whether to
//! a caller of `LOCK.ACQUIRE` or to a waiter at the head of the queue; and binding a
//! session-bound lock to its connection.

use std::ffi::CStr;

use redis_module::{Context, RedisError};

use crate::bindings;
use crate::datatype::LockKey;
use crate::error;
use crate::fence;
use crate::ffi::{self, Key, LockSet};
use crate::lock::{LockState, Session};
use crate::stats;

/// Keyspace events, in the module class (`notify-keyspace-events` with `d`): a grant.
pub const EVENT_ACQUIRE: &CStr = c"lock.acquire";
/// Fired when the holder releases the lock.
pub const EVENT_RELEASE: &CStr = c"lock.release";
/// Fired when the holder extends the lock.
pub const EVENT_EXTEND: &CStr = c"lock.extend";

/// Grants the free lock `key` (named `name` in database `db`) to `token` for `ttl_ms`,
/// bound to `session`'s connection if given: a new fence, the key's expiry, replication of the absolute state
/// (`LOCK._SET`), the `lock.acquire` event and the `grants` counter. Returns the fence
/// and the absolute expiry; the caller replies.
pub fn grant(
    ctx: &Context,
    key: &Key,
    (db, name): (i32, &[u8]),
    token: Vec<u8>,
    ttl_ms: i64,
    session: Option<Session>,
) -> Result<(u64, i64), RedisError> {
    let now = ffi::now_ms();
    let fence = fence::clock()
        .next(now)
        .ok_or_else(error::fence_exhausted)?;
    let expire_at = now.saturating_add(ttl_ms);
    key.set_lock(LockState::new(token, fence, now, session), Some(expire_at))?;
    let lock = key
        .lock()?
        .ok_or(RedisError::Str("ERR lock vanished while granting"))?;
    replicate(ctx, key, lock, expire_at);
    if let Some(session) = session {
        bind(db, name, session.client, session.grace_ms);
    }
    ffi::notify(ctx, EVENT_ACQUIRE, key.name());
    stats::GRANTS.bump();
    Ok((fence, expire_at))
}

/// The lock on key `name` of database `db` is bound to the open connection `client`: the
/// module hears of closed connections from now on, if it did not already.
pub fn bind(db: i32, name: &[u8], client: u64, grace_ms: i64) {
    bindings::with(|b| b.bind(db, name, client, grace_ms));
    ffi::watch_connections(true);
}

/// Replicates `lock`, expiring at `expire_at`, as the absolute state `LOCK._SET` sets.
pub fn replicate(ctx: &Context, key: &Key, lock: &LockState, expire_at: i64) {
    ffi::replicate_lock_set(
        ctx,
        key.name(),
        &LockSet {
            token: lock.token(),
            fence: lock.fence(),
            acquired_ms: lock.acquired_ms(),
            expire_at,
            grace_ms: lock.grace_ms(),
        },
    );
}
