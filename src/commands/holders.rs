//! `LOCK.HOLDERS key`: who holds a lock, so an operator can trace a stuck one to its
//! connection (`CLIENT LIST ID`) and end it (`CLIENT KILL ID`). Never a token.

use redis_module::{Context, RedisValue};

use crate::datatype::LockKey;
use crate::ffi::Reply;
use crate::ffi::command::Args;
use crate::ffi::{self, Field, Key};
use lock_core::error::Error;
use lock_core::lock::LockState;
use lock_core::value::LockValue;

/// LOCK.HOLDERS <key>
///
/// Nil when the key does not exist; otherwise one map per holder (a flat field/value
/// array in RESP2), oldest grant first: `fence`, `ttl` (ms left, -1 when the key has no
/// expiry), `acquired`, `client` (the `CLIENT ID` of the connection granted it here, 0
/// when it came from elsewhere), `session` (the grace, -1 when not bound), `connected`
/// (1 while the bound connection is open, 0 when not, -1 when not bound) and `value`.
/// A shared holder past its time is not listed (it leaves within milliseconds).
pub fn holders(ctx: &Context, args: &Args) -> Reply {
    if args.len() != 2 {
        return Err(Error::WrongArity);
    }
    let name = args.string(1).ok_or(Error::WrongArity)?;
    let opened = Key::open_read(ctx, &name);
    let Some(value) = opened.lock()? else {
        return Ok(RedisValue::Null);
    };
    let now_ms = ffi::now_ms();
    // (lock, its expiry): an exclusive lock's is the key's.
    let mut listed: Vec<(&LockState, Option<i64>)> = match value {
        LockValue::Exclusive(lock) => vec![(lock, opened.expire_at())],
        LockValue::Shared(holders) => holders
            .iter()
            .filter(|holder| holder.expire_at >= now_ms)
            .map(|holder| (&holder.lock, Some(holder.expire_at)))
            .collect(),
    };
    // Every grant of a key has a greater fence than the ones before: grant order.
    listed.sort_unstable_by_key(|(lock, _)| lock.fence());
    ffi::reply_array(ctx, listed.len());
    for (lock, expire_at) in listed {
        let (grace, connected) = super::binding_fields(lock);
        ffi::reply_map(
            ctx,
            &[
                ("fence", Field::Integer(lock.fence() as i64)),
                (
                    "ttl",
                    Field::Integer(expire_at.map_or(-1, |at| at.saturating_sub(now_ms).max(0))),
                ),
                ("acquired", Field::Integer(lock.acquired_ms())),
                ("client", Field::Integer(lock.client() as i64)),
                ("session", Field::Integer(grace)),
                ("connected", Field::Integer(connected)),
                ("value", Field::Bulk(lock.value())),
            ],
        );
    }
    Ok(RedisValue::NoReply)
}
