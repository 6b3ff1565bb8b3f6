//! `LOCK.INFO`: the state of a lock, never its token.

use redis_module::{Context, RedisValue};

use crate::datatype::LockKey;
use crate::ffi::Reply;
use crate::ffi::command::Args;
use crate::ffi::{self, Field, Key};
use crate::keyspace::waiting;
use crate::keyspace::watching;
use lock_core::error::Error;
use lock_core::key::KeyRef;
use lock_core::value::LockValue;

/// LOCK.INFO <key>
///
/// Nil when the key does not exist; otherwise the fields `ttl` (the key's: its
/// longest-lived holder's), `fence` (the newest holder's), `acquired` (the oldest
/// holder's grant), `waiters`, `watchers` (clients blocked in `LOCK.WATCH` on it),
/// `session` (the grace, -1 when not bound) and `connected`
/// (1 while the bound connection is open, 0 while the grace runs, -1 when not bound;
/// both -1 for shared holders, which are bound each on its own), `mode` (`exclusive` or
/// `shared`), `holders` and `limit` (-1 when none): a map in RESP3, a flat field/value
/// array in RESP2. Never a token.
pub fn info(ctx: &Context, args: &Args) -> Reply {
    if args.len() != 2 {
        return Err(Error::WrongArity);
    }
    let name = args.string(1).ok_or(Error::WrongArity)?;
    let opened = Key::open_read(ctx, &name);
    let Some(value) = opened.lock()? else {
        return Ok(RedisValue::Null);
    };
    let ttl = opened
        .expire_at()
        .map_or(-1, |at| at.saturating_sub(ffi::now_ms()).max(0));
    let waiting = waiting::count(KeyRef::new(ffi::selected_db(ctx), args.get(1)));
    let watching = watching::count(KeyRef::new(ffi::selected_db(ctx), args.get(1)));
    let published = match value {
        LockValue::Exclusive(lock) => lock.value(),
        LockValue::Shared(_) => None,
    };
    let (grace, connected, mode, holders, limit) = match value {
        LockValue::Exclusive(lock) => {
            let (grace, connected) = super::binding_fields(lock);
            (grace, connected, "exclusive", 1, -1)
        }
        LockValue::Shared(shared) => (
            -1,
            -1,
            "shared",
            shared.len() as i64,
            shared.limit().map_or(-1, i64::from),
        ),
    };
    ffi::reply_map(
        ctx,
        &[
            ("ttl", Field::Integer(ttl)),
            ("fence", Field::Integer(value.newest_fence() as i64)),
            ("acquired", Field::Integer(value.oldest_grant())),
            ("waiters", Field::Integer(waiting as i64)),
            ("watchers", Field::Integer(watching as i64)),
            ("session", Field::Integer(grace)),
            ("connected", Field::Integer(connected)),
            ("mode", Field::Word(mode)),
            ("holders", Field::Integer(holders)),
            ("limit", Field::Integer(limit)),
            ("value", Field::Bulk(published)),
        ],
    );
    Ok(RedisValue::NoReply)
}
