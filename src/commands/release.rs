//! `LOCK.RELEASE`: the holder lets go; the oldest waiters get the lock at once.

use redis_module::{Context, RedisValue};

use crate::commands::args;
use crate::datatype::LockKey;
use crate::datatype::events;
use crate::ffi;
use crate::ffi::Reply;
use crate::ffi::command::Args;
use crate::keyspace::store::{self, EVENT_RELEASE};
use crate::keyspace::waiting;
use crate::keyspace::watching;
use lock_core::error::Error;
use lock_core::key::KeyRef;
use lock_core::stats;
use lock_core::value::LockValue;

/// LOCK.RELEASE <key> <token>
///
/// Deletes the lock if, and only if, `token` holds it (for shared holders: takes that
/// holder out, and the key with the last one): `1` released, `0` not held by this token.
/// The next waiters, if any, are granted the lock at once.
pub fn release(ctx: &Context, args: &Args) -> Reply {
    super::settled(ctx, run_release(ctx, args))
}

fn run_release(ctx: &Context, args: &Args) -> Reply {
    if args.len() > 2 {
        ffi::redact(ctx, 2);
    }
    if args.len() != 3 {
        return Err(Error::WrongArity);
    }
    let token = args::token(args.get(2))?;

    let db = ffi::selected_db(ctx);
    let key = KeyRef::new(db, args.get(1));
    let name = args.string(1).ok_or(Error::WrongArity)?;
    let mut opened = super::open_served(ctx, db, &name, args.get(1))?;
    let expired = store::expire_holders(ctx, &mut opened)?;
    let (released, shared) = match opened.lock()? {
        Some(LockValue::Exclusive(lock)) if lock.holds(token) => {
            events::releasing(|| opened.delete());
            ffi::replicate_del(ctx, opened.name());
            watching::touched(key);
            (true, false)
        }
        Some(LockValue::Shared(_)) => {
            (store::drop_holder(ctx, &mut opened, token)?.is_some(), true)
        }
        _ => (false, false),
    };
    if released {
        ffi::notify(ctx, EVENT_RELEASE, opened.name());
        stats::RELEASES.bump();
    }
    if shared || expired > 0 {
        waiting::watch_holders(ctx, key, &opened);
    }
    if released || expired > 0 {
        drop(opened);
        waiting::handoff(ctx, key);
    }
    Ok(RedisValue::Integer(i64::from(released)))
}
