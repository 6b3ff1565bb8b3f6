//! `LOCK.RELEASE`: the holder lets go; the oldest waiters get the lock at once.

use redis_module::{Context, RedisValue};

use crate::commands::args;
use crate::ffi;
use crate::ffi::Reply;
use crate::ffi::command::Args;
use crate::keyspace::release;
use lock_core::error::Error;

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
    let name = args.string(1).ok_or(Error::WrongArity)?;
    let released = release::release(ctx, db, &name, args.get(1), token)?;
    Ok(RedisValue::Integer(i64::from(released)))
}
